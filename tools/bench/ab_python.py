#!/usr/bin/python3
"""Batches() against the C loader, over one mount, buffers in small pages
or in huge pages: the Python reader's cost per epoch.

usage: ab_python.py [--rounds N] [--rows N] [--row-bytes B] [--batch B]
                    [--dir DIR]

An archive of N rows of B bytes (torch.save, into DIR; default a
temporary directory, removed after) is mounted shuffled with the default
serve mode and read warm. Each round reads three epochs, a fresh one
each, in turn: Batches() (torch tensors, its default reader threads)
with its buffers in small pages (_batchfile.HUGE out of reach), the same
with its buffers of 2 MiB and more in huge pages (the default), and the
C loader in host mode. Each Batches() is one object kept over the rounds
(set_epoch), as a training loop keeps it, so its buffers are reused; the
C loader is opened per epoch (its ring is populated with huge pages at
open). Per contender: payload GB/s, and this process's user and system
CPU ms and minor faults per epoch; medians over the rounds (the first
round, which imports torch and fills the page cache, is left out), with
the load average, and Batches() against the C loader."""
import argparse
import ctypes
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "loader", "python"))

import batchfs  # noqa: E402
import batchfs_loader as bl  # noqa: E402
from batchfs import _batchfile  # noqa: E402

BIN = os.path.join(ROOT, "build", "batchfs")


def c_loader(lib, d):
    """Every batch of epoch directory d through the C loader, host mode."""
    o, L, b = bl._Opts(), ctypes.c_void_p(), bl._Batch()
    o.dir, o.mode = os.fsencode(d), bl.MODE_CPU
    rc = lib.bfs_loader_open(ctypes.byref(L), ctypes.byref(o))
    if rc < 0:
        raise RuntimeError("loader open %s: %d" % (d, rc))
    while lib.bfs_loader_next(L, ctypes.byref(b), None) == 0:
        lib.bfs_loader_release(L, ctypes.byref(b), None)
    lib.bfs_loader_close(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--row-bytes", type=int, default=150528)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dir")
    a = ap.parse_args()
    import torch
    work = a.dir or tempfile.mkdtemp(prefix="ab-python-")
    arch, mnt = os.path.join(work, "rows.pt"), os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    if not os.path.exists(arch):
        g = torch.Generator().manual_seed(1)
        torch.save({"x": torch.randint(0, 255, (a.rows, a.row_bytes),
                                       dtype=torch.uint8, generator=g),
                    "y": torch.arange(a.rows)}, arch)
    subprocess.run([BIN, "mount", arch, mnt, "--batch-size", str(a.batch),
                    "--shuffle", "--epochs", str(3 * a.rounds)], check=True,
                   stdout=subprocess.DEVNULL)
    lib = bl.load_library(os.path.join(ROOT, "build",
                                       "libbatchfs_loader.so"))
    huge = _batchfile.HUGE
    small_bs = batchfs.Batches(mnt, stream=False, device="cpu")
    huge_bs = batchfs.Batches(mnt, stream=False, device="cpu")
    names = ("Batches(), small pages", "Batches(), huge pages",
             "C loader, host")
    res = {n: [] for n in names}
    load0 = os.getloadavg()[0]
    try:
        e = 0
        for r in range(a.rounds):
            for n in names:
                d = "%s/epoch/%d" % (mnt, e)
                size = sum(os.path.getsize(os.path.join(d, f))
                           for f in os.listdir(d))
                r0, t = resource.getrusage(resource.RUSAGE_SELF), \
                    time.perf_counter()
                if n.startswith("C"):
                    c_loader(lib, d)
                else:
                    bs = small_bs if "small" in n else huge_bs
                    _batchfile.HUGE = huge if bs is huge_bs else 1 << 62
                    bs.set_epoch(e)
                    for _ in bs:
                        pass
                w = time.perf_counter() - t
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                if r:
                    res[n].append((size / w / 1e9,
                                   (r1.ru_utime - r0.ru_utime) * 1e3,
                                   (r1.ru_stime - r0.ru_stime) * 1e3,
                                   r1.ru_minflt - r0.ru_minflt))
                e += 1
    finally:
        _batchfile.HUGE = huge
        subprocess.run([BIN, "umount", mnt])
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    c = statistics.median(x[0] for x in res[names[2]])
    print("%d rows of %d bytes, batches of %d, %d rounds, load %.2f -> %.2f"
          % (a.rows, a.row_bytes, a.batch, a.rounds - 1, load0,
             os.getloadavg()[0]))
    for n in names:
        v = res[n]
        med = [statistics.median(x[i] for x in v) for i in range(4)]
        print("  %-24s %5.2f GB/s (%.2fx C loader)  user %6.1f ms  "
              "sys %6.1f ms  minflt %6d  per epoch" % (
                  n, med[0], med[0] / c, med[1], med[2], med[3]))
        print("  %-24s GB/s by round: %s" % (
            "", " ".join("%.2f" % x[0] for x in v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
