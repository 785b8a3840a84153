#!/usr/bin/python3
"""One batchfs.Batches read from many threads at once gives every thread
its own batch's bytes. Batches.read() reads into buffers it keeps for
reuse (_batchfile.Buffers): a buffer handed to two threads at once would
give one of them the other's batch. On a real mount, with the interpreter
switching threads as often as it can (sys.setswitchinterval(1e-6)), 8
threads call read() on one Batches, each batch's bytes checked at once and
again after the thread let the others run, against the batch files read
plainly; read_batch the same way (its own buffers: none shared). Bounded:
at most ROUNDS reads per thread and SECONDS in all."""
import os
import random
import sys
import threading
import time

import mountlib as ml

import numpy as np
import torch

import batchfs
from batchfs._batchfile import parse_batch

ml.require_fuse()
TMP = ml.TMP
N, BATCH, EPOCHS, THREADS = 240, 4, 2, 8
ROUNDS = int(os.environ.get("BFS_THREADS_ROUNDS", "6000"))
SECONDS = float(os.environ.get("BFS_THREADS_SECONDS", "40"))
failures = []


def as_bytes(batch):
    return {k: np.ascontiguousarray(v).tobytes() for k, v in batch.items()}


def want_of(mnt):
    """{(epoch, k): {name: bytes}} of every batch file, read plainly."""
    out = {}
    for e in range(EPOCHS):
        d = "%s/epoch/%d" % (mnt, e)
        for k in range(len(os.listdir(d))):
            out[e, k] = as_bytes(parse_batch(np.frombuffer(ml.read_file(
                "%s/batch_%d" % (d, k)), np.uint8).copy(), None, d))
    return out


def threads_read(mnt, want, read, name):
    """THREADS threads read random batches with read(e, k); (reads,
    wrong: a list of (epoch, batch, when) of batches whose bytes were
    not theirs)."""
    keys = sorted(want)
    wrong, counts = [], [0] * THREADS
    end = time.monotonic() + SECONDS

    def reader(i):
        rnd = random.Random(i)
        for _ in range(ROUNDS):
            if wrong or time.monotonic() > end:
                return
            e, k = rnd.choice(keys)
            b = read(e, k)
            if as_bytes(b) != want[e, k]:
                wrong.append((e, k, "at once"))
            time.sleep(0)        # let the others read on
            if as_bytes(b) != want[e, k]:
                wrong.append((e, k, "later"))
            counts[i] += 1
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        errs = ml.bounded(mnt, [lambda i=i: reader(i)
                                for i in range(THREADS)],
                          timeout=SECONDS + ml.LIVENESS_S)
    finally:
        sys.setswitchinterval(old)
    for err in errs:
        if err is not None:
            raise err
    print("%s: %d reads by %d threads, %d wrong" % (
        name, sum(counts), THREADS, len(wrong)))
    return sum(counts), wrong


def main():
    g = torch.Generator().manual_seed(5)
    path = os.path.join(TMP, "threads.pt")
    torch.save({"x": torch.randn(N, 7, generator=g),
                "y": torch.randperm(N, generator=g)}, path)
    _, mnt = ml.mount(path, None, "--batch-size", BATCH, "--shuffle",
                      "--seed", 2, "--epochs", EPOCHS)
    try:
        want = want_of(mnt)
        assert len({repr(sorted(w.items())) for w in want.values()}) == \
            len(want), "two batches with the same bytes"
        bs = batchfs.Batches(mnt, stream=False)
        n, wrong = threads_read(mnt, want, bs.read, "Batches.read")
        if wrong:
            failures.append("Batches.read from %d threads: %d of %d reads "
                            "gave another batch's bytes, e.g. %r"
                            % (THREADS, len(wrong), n, wrong[:3]))
        else:
            print("ok: Batches.read from %d threads, %d reads"
                  % (THREADS, n))
        n, wrong = threads_read(
            mnt, want, lambda e, k: batchfs.read_batch(
                "%s/epoch/%d/batch_%d" % (mnt, e, k)), "read_batch")
        if wrong:
            failures.append("read_batch from %d threads: %d of %d reads "
                            "gave another batch's bytes, e.g. %r"
                            % (THREADS, len(wrong), n, wrong[:3]))
        else:
            print("ok: read_batch from %d threads, %d reads" % (THREADS, n))
    except AssertionError as ex:
        failures.append(repr(ex))
    finally:
        if ml.is_mounted(mnt):
            ml.umount(mnt)
    return ml.finish(failures)


sys.exit(main())
