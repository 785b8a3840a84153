#!/usr/bin/python3
"""When DataLoader workers pay for a batchfs mount: samples per second of
one epoch through each way of reading it from Python, with and without a
training step that leaves the CPU to the loader (a GPU step: here a
sleep), and with CPU work per batch that workers can take (an
augmentation: to float, normalise, flip half the images; a heavy one adds
a 5x5 blur, about 30 times the work), passed to DataLoader as collate_fn
(run by the workers), or applied in the loop where there is none.

Ways (each yields torch tensors, batch files of a warm mount):
  Batches          batchfs.Batches(mnt, device="cpu")
  workers=0        DataLoader(batchfs.IterableDataset(mnt), batch_size=None)
  workers=N        batchfs.DataLoader(IterableDataset(mnt), num_workers=N)
                   (N = 1, 2, 4), workers started for each epoch, as a loop
                   without persistent_workers does
  workers=2 pers.  the same with persistent_workers=True, timed from its
                   second epoch (no start-up)
Cases: no step (the loop only takes the batch), a sleep of S ms per
batch, each augmentation and the same sleep. The archive is in memory
(a warm mount).

The ways run in turn, rotated each repetition, BENCH_REPS (3) times; each
figure is the median, beside its ratio to Batches of the same step and the
load average before and after. Not part of make check.

Environment: BATCHFS (build/batchfs), BENCH_TMP (parent of the work dir),
BENCH_REPS, BENCH_SAMPLES (50000 CIFAR-sized samples), BENCH_STEP_MS (2)."""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "loader", "python"))
import batchfs  # noqa: E402

BATCHFS = os.environ.get("BATCHFS", os.path.join(ROOT, "build", "batchfs"))
REPS = max(1, int(os.environ.get("BENCH_REPS", "3")))
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "50000"))
STEP_MS = float(os.environ.get("BENCH_STEP_MS", "2"))
BATCH = 256


def augment(b):
    """CPU work on a batch: uint8 images to normalised float, half of
    them flipped left to right."""
    x = b["images"].float().div_(255).sub_(0.5).div_(0.25)
    flip = torch.rand(x.shape[0]) < 0.5
    x[flip] = x[flip].flip(3)
    return {"images": x, "labels": b["labels"]}


def heavy(b):
    """augment() and a 5x5 box blur of each channel."""
    b = augment(b)
    w = torch.full((3, 1, 5, 5), 1 / 25)
    b["images"] = torch.nn.functional.conv2d(b["images"], w, padding=2,
                                             groups=3)
    return b


def epoch_rate(make, step_s, aug, warm_epochs=0):
    """Samples/s of one epoch of the iterable make(aug) returns (after
    warm_epochs untimed ones, from the same iterable). The loop applies
    aug itself to a Batches' batches."""
    it = make(aug)
    in_loop = aug if isinstance(it, batchfs.Batches) else None
    for _ in range(warm_epochs):
        for _ in it:
            pass
    n, t = 0, time.perf_counter()
    for b in it:
        if in_loop:
            b = in_loop(b)
        n += b["images"].shape[0]
        if step_s:
            time.sleep(step_s)
    return n / (time.perf_counter() - t)


def ways(mnt):
    def loader(workers, aug, **kw):
        ds = batchfs.IterableDataset(mnt)
        if aug:
            kw["collate_fn"] = aug
        if workers == 0:
            return torch.utils.data.DataLoader(ds, batch_size=None, **kw)
        return batchfs.DataLoader(ds, num_workers=workers, **kw)
    return [("Batches", lambda aug: batchfs.Batches(mnt, device="cpu"), 0),
            ("workers=0", lambda aug: loader(0, aug), 0),
            ("workers=1", lambda aug: loader(1, aug), 0),
            ("workers=2", lambda aug: loader(2, aug), 0),
            ("workers=4", lambda aug: loader(4, aug), 0),
            ("workers=2 pers.",
             lambda aug: loader(2, aug, persistent_workers=True), 1)]


def main():
    work = tempfile.mkdtemp(dir=os.environ.get("BENCH_TMP"))
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)
    g = torch.Generator().manual_seed(0)
    torch.save({"images": torch.randint(0, 256, (SAMPLES, 3, 32, 32),
                                        dtype=torch.uint8, generator=g),
                "labels": torch.randint(0, 10, (SAMPLES,), generator=g)},
               os.path.join(work, "cifar.pt"))
    subprocess.run([BATCHFS, "mount", os.path.join(work, "cifar.pt"), mnt,
                    "--batch-size", str(BATCH), "--shuffle", "--seed", "7",
                    "--epochs", "10000"], check=True)
    load0 = open("/proc/loadavg").read().split()[0]
    rates = {}
    cases = [("no step", 0.0, None),
             ("sleep %g ms per batch" % STEP_MS, STEP_MS / 1000, None),
             ("augmentation + sleep %g ms per batch" % STEP_MS,
              STEP_MS / 1000, augment),
             ("heavy augmentation + sleep %g ms per batch" % STEP_MS,
              STEP_MS / 1000, heavy)]
    try:
        table = ways(mnt)
        for rep in range(REPS):
            for case, step, aug in cases:
                k = rep % len(table)
                for name, make, warm in table[k:] + table[:k]:
                    rates.setdefault((case, name), []).append(
                        epoch_rate(make, step, aug, warm))
    finally:
        subprocess.run([BATCHFS, "umount", mnt])
        shutil.rmtree(work, ignore_errors=True)
    load1 = open("/proc/loadavg").read().split()[0]
    print("%d samples (3x32x32 uint8 + label), batch %d, %d cores; "
          "median of %d; load %s -> %s"
          % (SAMPLES, BATCH, os.cpu_count(), REPS, load0, load1))
    for case, _, _ in cases:
        base = statistics.median(rates[(case, "Batches")])
        print(case)
        for name, _, _ in table:
            r = statistics.median(rates[(case, name)])
            print("  %-16s %8.0f samples/s  %.2fx Batches" %
                  (name, r, r / base))


if __name__ == "__main__":
    main()
