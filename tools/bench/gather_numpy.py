#!/usr/bin/python3
"""make bench-gather: the worker's gather against numpy's fancy indexing.

For rows of 8 B, 784 B (+ an int64 label, the small-rows workload), 3 KiB
and 147 KiB it writes an uncompressed .npz, then times, on one thread and
in CPU seconds of that thread, batches of uniformly random indices:
  batchfs  build/tests/bin/gather_bench (bfs_dataset_gather of every field into
           a reused buffer, what a pool worker does per batch; rows resident)
  numpy    x[idx] (and y[idx]) on np.load(mmap_mode="r") of the same arrays
           (the arrays are read once first, so their pages are resident)
and prints rows per CPU-second for both, their ratio, and the load average.
Each figure is the median of BENCH_REPS (3) runs of each side.

Environment: GATHER_BENCH (binary), BENCH_TMP (parent of the work dir),
BENCH_REPS, GATHER_MB (bytes of rows per array, default 512)."""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BENCH = os.environ.get("GATHER_BENCH",
                       os.path.join(ROOT, "build", "tests", "bin",
                                    "gather_bench"))
REPS = max(1, int(os.environ.get("BENCH_REPS", "3")))
MB = int(os.environ.get("GATHER_MB", "512"))
BATCH = 256

# name, bytes per row of x, with an int64 label y
CASES = [("8 B", 8, False), ("784 B + label", 784, True),
         ("3 KiB", 3072, False), ("147 KiB", 150528, False)]


def numpy_rate(path, batch, nbatches):
    """Median rows per CPU-second of x[idx] (and y[idx]) over REPS runs."""
    z = np.load(path, mmap_mode="r")
    arrs = [z[k] for k in sorted(z.files)]
    n = arrs[0].shape[0]
    for a in arrs:  # make every page resident, as gather_bench does
        a.sum()
    rng = np.random.default_rng(1)
    rates = []
    for _ in range(REPS):
        idxs = [rng.integers(0, n, batch) for _ in range(nbatches)]
        t0 = time.thread_time()
        for idx in idxs:
            for a in arrs:
                a[idx]
        rates.append(batch * nbatches / (time.thread_time() - t0))
    return statistics.median(rates)


def batchfs_rate(path, batch, nbatches):
    p = subprocess.run([BENCH, "-b", str(batch), "-n", str(nbatches), "-r",
                        str(REPS), path], capture_output=True, text=True)
    if p.returncode:
        sys.exit("gather_bench failed: %s" % p.stderr)
    m = re.search(r"^gather\s+([\d.]+) M rows/cpu-s", p.stdout, re.M)
    return float(m.group(1)) * 1e6


def main():
    if not os.path.exists(BENCH):
        sys.exit("%s not built (make build/tests/bin/gather_bench)" % BENCH)
    work = tempfile.mkdtemp(prefix="bfs-gather.",
                            dir=os.environ.get("BENCH_TMP"))
    try:
        print("gather vs numpy: batch %d, uniformly random rows, one thread, "
              "rows per CPU-second (median of %d); load %s" %
              (BATCH, REPS, " ".join("%.2f" % x for x in os.getloadavg())))
        print("%-14s %12s %12s %7s" % ("rows", "batchfs", "numpy", "ratio"))
        for name, rb, label in CASES:
            n = max(BATCH * 4, (MB << 20) // rb)
            path = os.path.join(work, "rows.npz")
            arrays = {"x": np.random.default_rng(0).integers(
                0, 256, (n, rb), dtype=np.uint8)}
            if rb == 8:
                arrays = {"x": arrays["x"].view(np.int64).reshape(n)}
            if label:
                arrays["y"] = np.arange(n, dtype=np.int64)
            np.savez(path, **arrays)
            del arrays
            # as many batches as make ~256 MiB of rows per run
            nb = max(16, (256 << 20) // (BATCH * rb))
            b = batchfs_rate(path, BATCH, nb)
            v = numpy_rate(path, BATCH, nb)
            print("%-14s %10.2f M %10.2f M %6.2fx" % (name, b / 1e6, v / 1e6,
                                                     b / v), flush=True)
            os.unlink(path)
        print("load after: %s" % " ".join("%.2f" % x
                                          for x in os.getloadavg()))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
