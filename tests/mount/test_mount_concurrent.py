#!/usr/bin/python3
"""Concurrent readers never wedge a mount, and never get wrong bytes.

Found by a reviewer: stream/N readers at random offsets deadlocked the
daemon in push mode (every run, 2-4 threads) and in passthrough (1 run in
3): the daemon stored the pages after each stream READ into the page cache
from the FUSE thread that answered it, such a store waits for pages that
READs still in flight hold locked, and with every FUSE thread storing
nobody answered those READs (all of them in D state; stats, umount and
SIGKILL hung). Here, in every serve mode, with --fuse-threads 2:
- 4 threads pread stream/0 and stream/1 at random offsets and sizes (4 KiB
  to 1 MiB), each read compared with the batch files it spans;
- 4 ranks of one `--ranks all` mount read their streams at once through
  batchfs.Batches(stream=True), each batch compared with its batch file;
- (push) 6 threads open, read and mmap random batch files of 3 epochs
  through a page-cache budget of 4 batches, so the daemon stores and drops
  pages all the while; each batch checked against the samples its index
  file names;
- stats answers and `batchfs umount` returns afterwards.
Every wait is bounded (mountlib.bounded): a wedged mount has its FUSE
connection aborted and the test fails, it never hangs."""
import mmap
import os
import random
import subprocess
import sys

import mountlib as ml

import numpy as np
import torch

import batchfs

ml.require_fuse()
N, ROW, B = 6000, 64, 16
failures = []


def dataset():
    """x[i] is row i's own pattern, y[i] = i: any batch checks itself."""
    path = os.path.join(ml.TMP, "rows.pt")
    x = (torch.arange(N * ROW) * 7 + torch.arange(N * ROW) // ROW) % 251
    torch.save({"x": x.to(torch.uint8).reshape(N, ROW),
                "y": torch.arange(N)}, path)
    return path, x.to(torch.uint8).reshape(N, ROW).numpy()


def check_batch(buf, rows, what):
    meta, arrays = ml.parse_safetensors(buf)
    y = arrays["y"]
    assert (arrays["x"] == rows[y]).all(), (what, "rows unlike samples")
    return meta, y


def epoch_bytes(mnt, base, e):
    d = "%s/%sepoch/%d" % (mnt, base, e)
    return b"".join(ml.read_file("%s/batch_%d" % (d, k))
                    for k in range(len(os.listdir(d))))


def stream_readers(mode, src):
    _, mnt = ml.mount(src, None, "--batch-size", B, "--shuffle", "--seed",
                      5, "--epochs", 2, "--serve", mode, "--fuse-threads", 2)
    try:
        want = {e: epoch_bytes(mnt, "", e) for e in (0, 1)}

        def reader(i):
            def run():
                rng = random.Random(i)
                e = i % 2
                path = "%s/stream/%d" % (mnt, e)
                with open(path, "rb", buffering=0) as f:
                    for _ in range(150):
                        off = rng.randrange(len(want[e]))
                        n = rng.choice([4096, 65536, 1 << 20])
                        got = os.pread(f.fileno(), n, off)
                        assert got == want[e][off:off + n], \
                            (path, off, n, "wrong bytes")
            return run

        errs = ml.bounded(mnt, [reader(i) for i in range(4)])
        assert errs == [None] * 4, errs
        assert ml.stats(mnt)["serve_mode"] == mode
        print("ok: 4 stream readers at random offsets (--serve %s)" % mode)
    except AssertionError as e:
        failures.append("stream readers (--serve %s): %s" % (mode, e))
    finally:
        finish_mount(mnt)


def rank_streams(mode, src):
    _, mnt = ml.mount(src, None, "--batch-size", B, "--shuffle", "--seed",
                      9, "--epochs", 2, "--world-size", 4, "--ranks", "all",
                      "--serve", mode, "--fuse-threads", 2)
    try:
        def rank(r):
            def run():
                d = "%s/rank/%d/epoch/1" % (mnt, r)
                files = [ml.read_file("%s/batch_%d" % (d, k))
                         for k in range(len(os.listdir(d)))]
                it = batchfs.Batches(mnt, epoch=1, rank=r, stream=True)
                got = list(it)
                assert len(got) == len(files), (r, len(got), len(files))
                for k, (b, f) in enumerate(zip(got, files)):
                    _, arrays = ml.parse_safetensors(f)
                    for name, a in arrays.items():
                        assert np.array_equal(np.asarray(b[name]), a), \
                            ("rank", r, "batch", k, name)
            return run

        errs = ml.bounded(mnt, [rank(r) for r in range(4)])
        assert errs == [None] * 4, errs
        print("ok: 4 ranks' Batches(stream=True) at once (--serve %s)"
              % mode)
    except AssertionError as e:
        failures.append("rank streams (--serve %s): %s" % (mode, e))
    finally:
        finish_mount(mnt)


def push_storm(src, rows):
    """Batch files opened, read and mapped by many threads while the
    page-cache budget makes the daemon drop pushed batches constantly."""
    _, mnt = ml.mount(src, None, "--batch-size", B, "--shuffle", "--seed",
                      3, "--epochs", 3, "--serve", "push", "--fuse-threads",
                      2, "--page-cache-mb", 1)
    nb = len(os.listdir(mnt + "/epoch/0"))
    try:
        def worker(i):
            def run():
                rng = random.Random(100 + i)
                for _ in range(120):
                    e, k = rng.randrange(3), rng.randrange(nb)
                    path = "%s/epoch/%d/batch_%d" % (mnt, e, k)
                    if rng.random() < 0.3:
                        with open(path, "rb") as f:
                            with mmap.mmap(f.fileno(), 0,
                                           prot=mmap.PROT_READ) as m:
                                buf = bytes(m)
                    else:
                        buf = ml.read_file(path, rng.choice([4096, 1 << 20]))
                    meta, y = check_batch(buf, rows, path)
                    assert (meta["epoch"], meta["batch"]) == (str(e), str(k))
                    assert list(y) == ml.read_index(
                        "%s/index/%d/batch_%d" % (mnt, e, k)), path
            return run

        errs = ml.bounded(mnt, [worker(i) for i in range(6)])
        assert errs == [None] * 6, errs
        st = ml.stats(mnt)
        assert st["batches_pushed"] > 0 and st["page_cache_drops"] > 0, st
        print("ok: 6 threads of batch files through a 1 MiB page cache "
              "(--serve push: %d pushed, %d dropped)"
              % (st["batches_pushed"], st["page_cache_drops"]))
    except AssertionError as e:
        failures.append("push storm: %s" % e)
    finally:
        finish_mount(mnt)


def finish_mount(mnt):
    """Unmount (bounded); a mount that does not go is aborted."""
    if ml.is_mounted(mnt) and not umount_bounded(mnt):
        ml.abort_mount(mnt)


def umount_bounded(mnt):
    """batchfs umount within a liveness bound: False (and a failure) when
    it did not return or failed."""
    try:
        p = subprocess.run([ml.BATCHFS, "umount", mnt], capture_output=True,
                           text=True, timeout=ml.LIVENESS_S)
    except subprocess.TimeoutExpired:
        failures.append("%s: batchfs umount did not return" % mnt)
        return False
    if p.returncode:
        failures.append("%s: batchfs umount: %s" % (mnt, p.stderr))
        return False
    if mnt in ml._mounts:
        ml._mounts.remove(mnt)
    return True


def main():
    src, rows = dataset()
    for mode in ml.serve_modes():
        stream_readers(mode, src)
        rank_streams(mode, src)
    if "push" in ml.serve_modes():
        push_storm(src, rows)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
