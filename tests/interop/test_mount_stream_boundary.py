#!/usr/bin/python3
"""Batch headers at the 4096 boundary: a field name whose length puts
batch 0's header (8 + JSON, epoch 0) at 4096 bytes exactly, so that a
two-digit batch or epoch number would spill it to the next page. The
numbers never move the data (it starts where 20-digit numbers would put
it), so, in every serve mode, over 26 batches and epochs 0, 10 and 11:
- every batch file of a layout without ragged fields has one size but the
  last, and its header names its real epoch and batch, padded with spaces;
- stream/N read whole (1 MiB reads, 4 KiB reads, random preads) is the
  batch files back to back, `ls -l` its size;
- index/N/offsets lists where each batch starts;
- batchfs.Batches(stream=True) yields the batches the files hold;
the same for a dataset with a ragged field (offsets measured) and for
rank 1 of a multi-rank mount (rank/1/...). Reads run one at a time under
mountlib.bounded: a wedged mount fails the test instead of hanging it."""
import json
import os
import random
import sys

import mountlib as ml

import numpy as np
import torch

import batchfs

ml.require_fuse()
TMP = ml.TMP
B = 4
N = 25 * B + 3    # 26 batches per epoch, the last of 3 samples (and 26
                  # per rank of 2 at batch size B / 2)
EPOCHS = (0, 10, 11)
failures = []


def read_all(path, chunk):
    out = bytearray()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(chunk)
        while True:
            n = f.readinto(buf)
            if not n:
                return bytes(out)
            out += buf[:n]


def json_len(batch):
    """The JSON of a batch file's header without its padding."""
    n = int.from_bytes(batch[:8], "little")
    return len(batch[8:8 + n].rstrip(b" "))


def write(path, name_len, ragged):
    """The dataset: x float32 [N, 3] and a label whose name has name_len
    characters; ragged: a field tok of lengths 0..5 too."""
    g = torch.Generator().manual_seed(1)
    d = {"x": torch.randn(N, 3, generator=g),
         "y" * name_len: torch.arange(N)}
    if ragged:
        lens = torch.randint(0, 6, (N,), generator=g)
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
        d["tok.values"] = torch.arange(int(offs[-1]), dtype=torch.int16)
        d["tok.offsets"] = offs
    torch.save(d, path)


def at_boundary(tag, ragged, opts, base):
    """A dataset whose batch 0 of epoch 0 has 8 + JSON = 4096 bytes of
    header (on a mount with 'opts'), found from the header a first name
    length gives: the name's length moves the JSON's one for one."""
    path = os.path.join(TMP, "edge-%s.pt" % tag)
    name_len = 40
    for _ in range(3):
        write(path, name_len, ragged)
        _, mnt = ml.mount(path, None, *opts)
        try:
            got = 8 + json_len(ml.read_file(mnt + "/%sepoch/0/batch_0"
                                            % base))
        finally:
            ml.umount(mnt)
        if got == 4096:
            return path
        name_len += 4096 - got
    raise AssertionError("no name length puts the header at 4096")


def check_epoch(mnt, base, e, fixed, rng):
    d = "%s/%sepoch/%d" % (mnt, base, e)
    nb = len(os.listdir(d))
    assert nb >= 20, nb
    files = [ml.read_file("%s/batch_%d" % (d, k)) for k in range(nb)]
    want = b"".join(files)
    path = "%s/%sstream/%d" % (mnt, base, e)
    assert os.stat(path).st_size == len(want), \
        (path, os.stat(path).st_size, len(want))
    assert read_all(path, 1 << 20) == want, (path, "1 MiB reads")
    assert read_all(path, 4096) == want, (path, "4 KiB reads")
    with open(path, "rb", buffering=0) as f:
        for _ in range(30):
            off = rng.randrange(len(want))
            n = rng.choice([1, 100, 4096, 9000, 1 << 20])
            assert os.pread(f.fileno(), n, off) == want[off:off + n], \
                (path, off, n)
    lines = open("%s/%sindex/%d/offsets" % (mnt, base, e)).read().split()
    starts = [0]
    for f in files:
        starts.append(starts[-1] + len(f))
    assert [int(x) for x in lines] == starts, (path, "index offsets")
    sizes = {len(f) for f in files[:-1]}
    if fixed:
        assert len(sizes) == 1, ("batch sizes of epoch %d" % e,
                                 sorted(sizes))
    for k, f in enumerate(files):
        n = int.from_bytes(f[:8], "little")
        meta = json.loads(f[8:8 + n])["__metadata__"]
        assert (meta["epoch"], meta["batch"]) == (str(e), str(k)), meta
        assert (8 + n) % 4096 == 0, (k, n)


def check_python(mnt, rank):
    for e in EPOCHS:
        files = list(batchfs.Batches(mnt, epoch=e, rank=rank))
        held = list(batchfs.Batches(mnt, epoch=e, rank=rank, stream=True))
        assert len(files) == len(held) >= 20, (len(files), len(held))
        for a, b in zip(files, held):
            assert a.keys() == b.keys()
            for k in a:
                assert np.array_equal(a[k], b[k]), (e, k)


def check(what, path, opts, base="", rank=None, fixed=True):
    def one(mode):
        _, mnt = ml.mount(path, None, "--serve", mode, *opts)
        rng = random.Random(7)
        try:
            steps = [lambda e=e: check_epoch(mnt, base, e, fixed, rng)
                     for e in EPOCHS]
            steps.append(lambda: check_python(mnt, rank))
            for step in steps:   # one reader at a time, each bounded
                err = ml.bounded(mnt, [step])[0]
                if err is not None:
                    raise err
            print("ok: %s (--serve %s)" % (what, mode))
        except AssertionError as ex:
            failures.append("%s (--serve %s): %r" % (what, mode, ex))
        finally:
            if ml.is_mounted(mnt):
                ml.umount(mnt)
    ml.for_each_mode(one)


def main():
    plain = ["--batch-size", B, "--shuffle", "--seed", 3]
    fixed = at_boundary("fixed", False, plain, "")
    check("fixed fields", fixed, plain)
    rag = ["--batch-size", B, "--shuffle", "--seed", 3, "--pad", "tok"]
    ragged = at_boundary("ragged", True, rag, "")
    check("a ragged field", ragged, rag, fixed=False)
    ranks = ["--batch-size", B // 2, "--world-size", 2, "--ranks", "all",
             "--shuffle", "--seed", 3, "--epochs", 12]
    many = at_boundary("ranks", False, ranks, "rank/1/")
    check("rank 1 of a multi-rank mount", many, ranks, base="rank/1/",
          rank=1)
    return ml.finish(failures)


sys.exit(main())
