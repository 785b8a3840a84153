#!/usr/bin/python3
"""stream/N: epoch N's batch files back to back, one file per epoch.
Against real mounts and real torch:
- its bytes are exactly `cat epoch/N/batch_*` in batch order, and its
  `ls -l` size their sum, for every sampler (sequential, shuffled,
  RandomSampler with replacement, SubsetRandomSampler,
  WeightedRandomSampler, DistributedSampler on a one-rank and on a
  multi-rank mount: rank/R/stream/N), drop_last, ragged fields padded
  and packed, epochs 0..2, each configuration in another serve mode;
- index/N/offsets: line K is where batch K starts, the last line the
  stream's size (fixed width: line K at byte 21 K);
- reads at any offset and of any size (pread of random ranges, 4 KiB
  reads, 1 MiB readinto, cat) give the same bytes;
- split by its batch headers, the stream of epoch 1 is torch's
  DataLoader's epoch 1, batch for batch;
- read to its end through a budget of 1 MiB, the pool holds no more than
  its budget (each batch read to its end leaves it);
- batchfs.Batches(stream=True) yields the same batches as reading the
  batch files, whole epochs and resumed mid-epoch, on a one-rank and a
  multi-rank mount, and its batches stay valid while held."""
import json
import os
import random
import subprocess
import sys

import mountlib as ml

import numpy as np
import torch
from torch.utils.data import DataLoader

import batchfs

ml.require_fuse()
TMP = ml.TMP
N = 203
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


def split(stream):
    """The batch files a stream is made of, by their headers."""
    out, pos = [], 0
    while pos < len(stream):
        n = int.from_bytes(stream[pos:pos + 8], "little")
        head = json.loads(stream[pos + 8:pos + 8 + n])
        head.pop("__metadata__")
        end = max([v["data_offsets"][1] for v in head.values()] + [0])
        out.append(stream[pos:pos + 8 + n + end])
        pos += 8 + n + end
    return out


def check_epoch(mnt, base, e, rng):
    d = "%s/%sepoch/%d" % (mnt, base, e)
    nb = len(os.listdir(d))
    files = [ml.read_file("%s/batch_%d" % (d, k)) for k in range(nb)]
    want = b"".join(files)
    path = "%s/%sstream/%d" % (mnt, base, e)
    assert os.stat(path).st_size == len(want), (path, os.stat(path).st_size,
                                               len(want))
    got = read_all(path, 1 << 20)
    assert got == want, (path, "1 MiB readinto")
    if e == 0:
        assert read_all(path, 4096) == want, (path, "4 KiB reads")
        cat = subprocess.run(["cat", path], capture_output=True).stdout
        assert cat == want, (path, "cat")
    with open(path, "rb", buffering=0) as f:
        for _ in range(20):
            off = rng.randrange(len(want))
            n = rng.choice([1, 100, 4096, 70000, 1 << 20])
            assert os.pread(f.fileno(), n, off) == want[off:off + n], \
                (path, off, n)
    offs = open("%s/%sindex/%d/offsets" % (mnt, base, e)).read()
    lines = offs.split("\n")[:-1]
    assert all(len(ln) == 20 for ln in lines), "fixed width"
    starts = [0]
    for b in files:
        starts.append(starts[-1] + len(b))
    assert [int(x) for x in lines] == starts, (path, "offsets")
    assert split(got) == files, (path, "split by headers")


def check(what, src, *opts, ranks=None, epochs=3):
    mode = ml.next_mode()
    _, mnt = ml.mount(src, None, "--epochs", epochs, "--serve", mode, *opts)
    rng = random.Random(hash(what) & 0xffff)
    try:
        assert "stream" in os.listdir(mnt + ("/rank/%d" % ranks[0]
                                             if ranks else ""))
        for base in (["rank/%d/" % r for r in ranks] if ranks else [""]):
            for e in range(epochs):
                check_epoch(mnt, base, e, rng)
        print("ok: %s (--serve %s)" % (what, mode))
    except AssertionError as ex:
        failures.append("%s (--serve %s): %r" % (what, mode, ex))
    finally:
        assert ml.umount(mnt).returncode == 0


def against_torch(src, fields):
    """The stream of epoch 1, split by its headers, is torch's epoch 1."""
    class Dict(torch.utils.data.Dataset):
        def __len__(self):
            return N

        def __getitem__(self, i):
            return {k: v[i] for k, v in fields.items()}

    _, mnt = ml.mount(src, None, "--batch-size", 16, "--shuffle", "--seed",
                      5)
    try:
        got = split(read_all(mnt + "/stream/1", 1 << 20))
        ref = DataLoader(Dict(), batch_size=16, shuffle=True,
                         generator=torch.Generator().manual_seed(5))
        list(ref)          # epoch 0
        want = list(ref)   # epoch 1
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _, arrs = ml.parse_safetensors(g)
            for k, t in w.items():
                assert np.array_equal(arrs[k], ml.torch_np(t)), k
        print("ok: stream/1 split by its headers is torch's epoch 1")
    except AssertionError as ex:
        failures.append("against torch: %r" % ex)
    finally:
        ml.umount(mnt)


def flat_memory(src):
    """A long stream read through a small budget: the pool stays in it."""
    _, mnt = ml.mount(src, None, "--batch-size", 2, "--cache-mb", 1,
                      "--prefetch", 4)
    try:
        size = os.stat(mnt + "/stream/0").st_size
        assert len(read_all(mnt + "/stream/0", 1 << 20)) == size
        s = ml.stats(mnt)
        assert s["cache_bytes"] <= s["cache_budget_bytes"], s
        assert s["read_timeouts"] == 0 and s["gather_errors"] == 0, s
        print("ok: %d MiB streamed through a 1 MiB budget (%d bytes held "
              "at the end)" % (size >> 20, s["cache_bytes"]))
    except AssertionError as ex:
        failures.append("flat memory: %r" % ex)
    finally:
        ml.umount(mnt)


def python_reads_streams(src, rag):
    """Batches(stream=True) == Batches(stream=False), batch for batch."""
    for what, path, opts, rank in [
            ("fixed", src, ["--batch-size", 16, "--shuffle", "--seed", 9],
             None),
            ("ragged", rag, ["--batch-size", 12, "--pack", "tok"], None),
            ("rank 1 of 2", src, ["--batch-size", 8, "--world-size", 2,
                                  "--ranks", "all", "--shuffle"], 1)]:
        _, mnt = ml.mount(path, None, *opts)
        try:
            for start in (0, 5):
                files = list(batchfs.Batches(mnt, epoch=1, start_batch=start,
                                             rank=rank))
                held = list(batchfs.Batches(mnt, epoch=1, start_batch=start,
                                            rank=rank, stream=True))
                assert len(files) == len(held), (len(files), len(held))
                for a, b in zip(files, held):
                    assert a.keys() == b.keys()
                    for k in a:
                        assert np.array_equal(a[k], b[k]), (start, k)
            b = batchfs.Batches(mnt, stream=True, device="cpu", rank=rank)
            n = sum(1 for _ in b) + sum(1 for _ in b)
            assert n == 2 * len(b) and b.epoch == 2, (n, b.epoch)
            print("ok: Batches(stream=True) on %s" % what)
        except AssertionError as ex:
            failures.append("Batches(stream=True) on %s: %r" % (what, ex))
        finally:
            ml.umount(mnt)


def main():
    g = torch.Generator().manual_seed(2)
    fields = {"x": torch.randn(N, 3, 7, generator=g),
              "y": torch.randint(0, 9, (N,), generator=g),
              "h": torch.randn(N, generator=g).to(torch.float16)}
    src = os.path.join(TMP, "s.pt")
    torch.save(fields, src)
    lens = torch.randint(0, 9, (N,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64),
                         lens.cumsum(0)])
    rag = os.path.join(TMP, "rag.pt")
    torch.save({"tok.values": torch.arange(int(offsets[-1]),
                                           dtype=torch.int32),
                "tok.offsets": offsets, "y": fields["y"]}, rag)
    sub = os.path.join(TMP, "subset.txt")
    open(sub, "w").write("\n".join(map(str, range(3, N, 4))) + "\n")
    w = os.path.join(TMP, "weights.txt")
    open(w, "w").write("\n".join(str((i % 5) + 0.5) for i in range(N)))
    check("sequential", src, "--batch-size", 16)
    check("shuffled, drop_last", src, "--batch-size", 16, "--shuffle",
          "--seed", 3, "--drop-last")
    check("RandomSampler with replacement", src, "--batch-size", 10,
          "--shuffle", "--replacement", "--num-samples", 57, "--seed", 4)
    check("SubsetRandomSampler", src, "--batch-size", 7, "--subset", sub,
          "--seed", 5)
    check("WeightedRandomSampler", src, "--batch-size", 9, "--weights", w,
          "--seed", 6)
    check("DistributedSampler, one rank", src, "--batch-size", 8,
          "--world-size", 3, "--rank", 2, "--shuffle", "--seed", 7)
    check("DistributedSampler, ranks 0-2 of 3 in one mount", src,
          "--batch-size", 8, "--world-size", 3, "--ranks", "all",
          "--shuffle", "--seed", 7, ranks=[0, 1, 2])
    check("ragged, padded", rag, "--batch-size", 12, "--shuffle", "--seed",
          8, "--pad", "tok=-1:4")
    check("ragged, packed", rag, "--batch-size", 12, "--shuffle", "--seed",
          8, "--pack", "tok")
    against_torch(src, fields)
    python_reads_streams(src, rag)
    big = os.path.join(TMP, "big.pt")
    torch.save({"x": torch.randn(2000, 1024, generator=g)}, big)
    flat_memory(big)
    return ml.finish(failures)


sys.exit(main())
