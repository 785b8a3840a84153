#!/usr/bin/python3
"""make bench: batchfs side by side with its baselines, in one run.

For each workload (small rows: 784-byte images + int64 label, batch 256;
large rows: 3x224x224 uint8 images + int64 label, batch 64; shuffled; each
epoch >= 1 GiB of payload at BENCH_SCALE=1) it measures, in this process
and its children:
  (a) page-cache read of the archive (warm)       `batchfs bench --pagecache`
  (b) single-thread memcpy of the epoch's bytes    `batchfs bench --memcpy`
  (c) the null FUSE server (direct_io, 1 MiB reads) build/bench/nullfs
  (d) batchfs: every batch of an epoch read from Python (open, readinto a
      reused page-aligned buffer, np.frombuffer), at 1 MiB, 128 KiB and
      whole-file read sizes, plus `batchfs bench --read` (C) at 1 MiB
  (e) torch DataLoader over the same archive (torch.load, TensorDataset,
      shuffle=True, num_workers 0 and 2; capped at BENCH_DL_SECONDS per pass)
and the time from `batchfs mount` to the first byte of batch 0 for 10^6
samples. A ragged workload (token sequences: int64, lengths uniform in
16..2048, batch 64, shuffled; an .npz of tokens.values + tokens.offsets
mounted directly) compares samples/s of every batch of an epoch read from
Python (default --pad, and --pack) with a DataLoader over the same arrays
whose collate_fn pads with torch.nn.utils.rnn.pad_sequence (num_workers 0
and 2), after checking batch 0 against it. GB/s counts payload bytes (10^9 B/s). Every figure is the median
of BENCH_REPS passes; the machine is shared and noisy (+-30 %).

Environment: BATCHFS, NULLFS (binaries), BENCH_SCALE (default 1),
BENCH_REPS (3), BENCH_DL_SECONDS (6), BENCH_TMP (a parent directory for the
work dir), BENCH_MOUNT_OPTS (extra `batchfs mount` options for every mount),
BENCH_MODES (the read modes (d) is measured in: "default,--direct-io"
= the default and with --direct-io), BENCH_ONLY (comma-separated words:
run only the parts whose names contain one: "small", "large", "ragged",
"latency"), BENCH_JSON
(also write the results there). Everything it mounts, spawns or writes is
removed on exit, also on failure or Ctrl-C. Exit 1 if a measurement failed.
"""
import json
import mmap
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BATCHFS = os.environ.get("BATCHFS", os.path.join(ROOT, "build", "batchfs"))
NULLFS = os.environ.get("NULLFS", os.path.join(ROOT, "build", "bench", "nullfs"))
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
REPS = max(1, int(os.environ.get("BENCH_REPS", "3")))
DL_SECONDS = float(os.environ.get("BENCH_DL_SECONDS", "6"))
MOUNT_OPTS = os.environ.get("BENCH_MOUNT_OPTS", "").split()
# Read modes compared: "default" = batchfs's default; others are extra
# `batchfs mount` options, comma-separated (BENCH_MODES="default").
MODES = [m.strip() for m in os.environ.get(
    "BENCH_MODES", "default,--direct-io").split(",") if m.strip()]
ONLY = [w for w in os.environ.get("BENCH_ONLY", "").split(",") if w]
SEED = 7
MIB = 1 << 20
LATENCY_SAMPLES = 10**6
LATENCY_REPS = max(5, REPS)

RAGGED_SAMPLES = 40_000  # at scale 1: ~0.33 GB of tokens
RAGGED_BATCH = 64
RAGGED_LENGTHS = (16, 2048)

WORKLOADS = [
    # name, per-sample image shape, batch size, samples at scale 1
    ("small rows", (784,), 256, 1_400_000),
    ("large rows", (3, 224, 224), 64, 7_200),
]


class Failed(Exception):
    pass


def log(msg):
    print(msg, flush=True)


def run(cmd, timeout=300):
    """Run a command, return stdout; raise Failed with its stderr."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if p.returncode != 0:
        raise Failed("%s: exit %d: %s" % (" ".join(cmd[:3]), p.returncode,
                                          p.stderr.strip()[-400:]))
    return p.stdout


def c_bench(args):
    """Median GB/s over the lines `batchfs bench ARGS` prints."""
    out = run([BATCHFS, "bench", "--repeat", str(REPS)] + args)
    vals = [float(v) for v in re.findall(r"GB/s=([0-9.]+)", out)]
    if len(vals) != REPS:
        raise Failed("batchfs bench %s: unexpected output %r" % (args, out))
    return statistics.median(vals)


def mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Work:
    """Owns the temp dir, the mounts and the child processes."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="bfs-bench.",
                                    dir=os.environ.get("BENCH_TMP"))
        self.mounts = []
        self.procs = []

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def mountpoint(self, name):
        p = self.path(name)
        os.makedirs(p, exist_ok=True)
        return p

    def unmount(self, mnt):
        if mounted(mnt):
            subprocess.run([BATCHFS, "umount", mnt], capture_output=True,
                           timeout=30)
        if mounted(mnt):
            subprocess.run(["fusermount3", "-uz", mnt], capture_output=True,
                           timeout=30)
        if mnt in self.mounts:
            self.mounts.remove(mnt)

    def stop(self, proc):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc in self.procs:
            self.procs.remove(proc)

    def close(self):
        for p in list(self.procs):
            self.stop(p)
        for m in list(self.mounts):
            self.unmount(m)
        shutil.rmtree(self.dir, ignore_errors=True)


def make_archive(work, name, shape, n):
    """images uint8 [n, *shape] (random), labels int64 = arange(n), so a
    batch's labels are its sample indices. `batchfs pack` from .npy files;
    torch.save if pack is not available. Returns (path, how)."""
    rng = np.random.default_rng(SEED)
    row = int(np.prod(shape))
    images = rng.integers(0, 256, (n,) + shape, dtype=np.uint8)
    labels = np.arange(n, dtype=np.int64)
    arch = work.path(name + ".pt")
    inp, lab = work.path(name + "-images.npy"), work.path(name + "-labels.npy")
    np.save(inp, images)
    np.save(lab, labels)
    try:
        run([BATCHFS, "pack", "-o", arch, "images=" + inp, "labels=" + lab])
        how = "batchfs pack"
    except Failed as e:
        log("  (batchfs pack failed: %s; using torch.save)" % e)
        torch.save({"images": torch.from_numpy(images),
                    "labels": torch.from_numpy(labels)}, arch)
        how = "torch.save"
    os.unlink(inp)
    os.unlink(lab)
    return arch, how


def nullfs_read(work, size):
    """(c): GB/s of the null FUSE server at 1 MiB and 128 KiB reads."""
    mnt = work.mountpoint("nullfs")
    proc = subprocess.Popen([NULLFS, "--size", str(size), mnt],
                            stdout=subprocess.PIPE, text=True)
    work.procs.append(proc)
    work.mounts.append(mnt)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise Failed("nullfs did not start (exit %s)" % proc.wait())
        data = os.path.join(mnt, "data")
        return {"1M": c_bench(["--read", data]),
                "128K": c_bench(["--bs", "128K", "--read", data])}
    finally:
        work.stop(proc)
        work.unmount(mnt)


def mode_opts(mode):
    return [] if mode == "default" else mode.split()


def mount_batchfs(work, arch, batch, mnt, mode="default"):
    work.mounts.append(mnt)
    t0 = time.perf_counter()
    run([BATCHFS, "mount", "--batch-size", str(batch), "--shuffle",
         "--seed", str(SEED)] + MOUNT_OPTS + mode_opts(mode) + [arch, mnt],
        timeout=120)
    return time.perf_counter() - t0


def read_epoch_py(mnt, epoch, nbatches, buf, chunk):
    """Read every batch of 'epoch' the way a Python training loop would.
    Returns (payload bytes, seconds)."""
    mv = memoryview(buf)
    payload = 0
    t0 = time.perf_counter()
    for k in range(nbatches):
        with open("%s/epoch/%d/batch_%d" % (mnt, epoch, k), "rb",
                  buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            got = 0
            while got < size:
                r = f.readinto(mv[got:min(size, got + chunk)])
                if not r:
                    raise Failed("short batch file epoch %d batch %d"
                                 % (epoch, k))
                got += r
        arr = np.frombuffer(buf, np.uint8, size - 4096, 4096)
        payload += arr.nbytes
    return payload, time.perf_counter() - t0


def parse_batch(blob):
    """safetensors bytes -> {field: np.ndarray}."""
    n = int.from_bytes(blob[:8], "little")
    head = json.loads(bytes(blob[8:8 + n]))
    start = 8 + n
    if start != 4096:
        raise Failed("batch data starts at %d, not 4096" % start)
    dt = {"U8": np.uint8, "I64": np.int64}
    out = {}
    for name, f in head.items():
        if name == "__metadata__":
            continue
        a, b = f["data_offsets"]
        out[name] = np.frombuffer(bytes(blob[start + a:start + b]),
                                  dt[f["dtype"]]).reshape(f["shape"])
    return out


def check_batch0(mnt, tensors, batch):
    """Epoch 0 batch 0 against DataLoader(shuffle=True, generator=seed)."""
    with open(mnt + "/epoch/0/batch_0", "rb") as f:
        got = parse_batch(f.read())
    dl = DataLoader(TensorDataset(tensors["labels"]), batch_size=batch,
                    shuffle=True,
                    generator=torch.Generator().manual_seed(SEED))
    want = next(iter(dl))[0].numpy()
    idx = got["labels"]
    if not np.array_equal(idx, want):
        return "MISMATCH: sample order differs from DataLoader"
    if not np.array_equal(got["images"], tensors["images"].numpy()[idx]):
        return "MISMATCH: image bytes differ from the archive rows"
    return "ok (batch 0 of epoch 0 == DataLoader's, bytes checked)"


def bench_batchfs(work, arch, batch, n, row, tensors, mode):
    nb = (n + batch - 1) // batch
    mnt = work.mountpoint("batchfs")
    res = {}
    mount_batchfs(work, arch, batch, mnt, mode)
    try:
        buf = mmap.mmap(-1, 4096 + batch * row + MIB)  # page aligned
        epoch = 1
        for label, chunk in (("py 1M", MIB), ("py 128K", 128 << 10),
                             ("py whole", len(buf))):
            vals = []
            for _ in range(REPS):
                b, s = read_epoch_py(mnt, epoch, nb, buf, chunk)
                if b != n * row:
                    raise Failed("epoch %d: %d payload bytes, want %d"
                                 % (epoch, b, n * row))
                vals.append(b / s / 1e9)
                epoch += 1
            res[label] = statistics.median(vals)
        vals = []
        for _ in range(REPS):  # C reader; its GB/s includes the headers
            out = run([BATCHFS, "bench", "--read", "%s/epoch/%d" % (mnt, epoch)])
            m = re.search(r"bytes=(\d+) seconds=([0-9.]+)", out)
            vals.append(n * row / float(m.group(2)) / 1e9)
            epoch += 1
        res["C 1M"] = statistics.median(vals)
        res["check"] = check_batch0(mnt, tensors, batch)
        try:
            with open(mnt + "/stats") as f:
                res["stats"] = f.read()
        except OSError as e:
            res["stats"] = "(no stats: %s)" % e
    finally:
        work.unmount(mnt)
    return res


def bench_dataloader(tensors, batch, workers):
    """Samples/s of a DataLoader pass (capped at DL_SECONDS), median."""
    ds = TensorDataset(tensors["images"], tensors["labels"])
    vals = []
    for r in range(REPS):
        dl = DataLoader(ds, batch_size=batch, shuffle=True,
                        num_workers=workers,
                        generator=torch.Generator().manual_seed(SEED + r))
        seen = 0
        t0 = time.perf_counter()
        for images, _ in dl:
            seen += images.shape[0]
            if time.perf_counter() - t0 > DL_SECONDS:
                break
        vals.append(seen / (time.perf_counter() - t0))
        del dl
    return statistics.median(vals)


def bench_latency(work):
    """batchfs mount -> first byte of epoch/0/batch_0, 10^6 samples."""
    arch, _ = make_archive(work, "latency", (784,), LATENCY_SAMPLES)
    mnt = work.mountpoint("latency")
    mounts, firsts = [], []
    try:
        for _ in range(LATENCY_REPS):
            m = mount_batchfs(work, arch, 256, mnt)
            t0 = time.perf_counter()
            fd = os.open(mnt + "/epoch/0/batch_0", os.O_RDONLY)
            try:
                if len(os.read(fd, 1)) != 1:
                    raise Failed("latency: empty batch_0")
            finally:
                os.close(fd)
            firsts.append(time.perf_counter() - t0)
            mounts.append(m)
            work.unmount(mnt)
    finally:
        work.unmount(mnt)
        os.unlink(arch)
    return statistics.median(mounts), statistics.median(firsts), \
        statistics.median(m + f for m, f in zip(mounts, firsts))


def fmt_rate(x):
    if x is None:
        return "n/a"
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return "%.2f%s" % (x / div, unit)
    return "%.0f" % x


def workload(work, name, shape, batch, n0, results):
    n = max(batch * 8, int(round(n0 * SCALE)))
    row = int(np.prod(shape)) + 8
    epoch = n * row
    log("\n== %s: images uint8 %s + labels int64, %d B/sample, batch %d, "
        "n=%d, epoch %.3f GB, %d batches" % (name, list(shape), row, batch, n,
                                             epoch / 1e9, -(-n // batch)))
    arch, how = make_archive(work, name.split()[0], shape, n)
    log("  archive: %s (%s, %.3f GB)" % (os.path.basename(arch), how,
                                        os.path.getsize(arch) / 1e9))
    r = {"n": n, "row": row, "batch": batch, "archive": how}
    r["pagecache"] = c_bench(["--pagecache", arch])
    r["memcpy"] = c_bench(["--memcpy", str(epoch)])
    r["nullfs"] = nullfs_read(work, epoch)
    tensors = torch.load(arch)
    r["batchfs"] = {}
    for mode in MODES:
        try:
            r["batchfs"][mode] = bench_batchfs(work, arch, batch, n, row,
                                               tensors, mode)
        except (Failed, OSError, subprocess.TimeoutExpired) as e:
            r["batchfs"][mode] = {"error": str(e)}
            log("  batchfs (%s): FAILED: %s" % (mode, e))
    r["dl0"] = bench_dataloader(tensors, batch, 0) * row / 1e9
    r["dl2"] = bench_dataloader(tensors, batch, 2) * row / 1e9
    del tensors
    os.unlink(arch)
    results[name] = r
    print_table(name, r)


def print_table(name, r):
    row = r["row"]
    modes = r["batchfs"]
    lines = [
        ("(a) page cache read, 1 MiB reads (warm)", r["pagecache"]),
        ("(b) memcpy, 1 thread", r["memcpy"]),
        ("(c) null FUSE, direct_io, 1 MiB reads", r["nullfs"]["1M"]),
        ("    null FUSE, direct_io, 128 KiB reads", r["nullfs"]["128K"]),
    ]
    for i, (mode, bf) in enumerate(modes.items()):
        tag = "(d)" if i == 0 else "   "
        lines += [
            ("%s batchfs %s: Python readinto 1 MiB" % (tag, mode),
             bf.get("py 1M")),
            ("    batchfs %s: Python readinto 128 KiB" % mode,
             bf.get("py 128K")),
            ("    batchfs %s: Python readinto whole file" % mode,
             bf.get("py whole")),
            ("    batchfs %s: C read() 1 MiB" % mode, bf.get("C 1M")),
        ]
    lines += [("(e) DataLoader num_workers=0", r["dl0"]),
              ("    DataLoader num_workers=2", r["dl2"])]
    log("\n  %-52s %8s %11s" % (name + " (median of %d)" % REPS, "GB/s",
                                "samples/s"))
    for label, g in lines:
        log("  %-52s %8s %11s" % (label, "n/a" if g is None else "%.3f" % g,
                                  fmt_rate(None if g is None
                                           else g * 1e9 / row)))
    best_dl = max(r["dl0"], r["dl2"])
    large = name.startswith("large")

    def ratio(label, d, den, target):
        mark = ""
        if target:
            mark = "  [%s %s]" % (target[0], "MET" if d / den >= target[1]
                                  else "MISSED")
        log("  %-52s %7.2fx%s" % (label, d / den, mark))
    for mode, bf in modes.items():
        log("\n  batchfs %s (Python readinto 1 MiB) vs:" % mode)
        d = bf.get("py 1M")
        if d is None:
            log("    not measured: " + bf.get("error", ""))
            continue
        ratio("  (c) null FUSE", d, r["nullfs"]["1M"],
              ("target >= 0.9x", 0.9) if large else None)
        ratio("  (a) page cache", d, r["pagecache"], None)
        ratio("  (b) memcpy", d, r["memcpy"], None)
        ratio("  best DataLoader (samples/s)", d, best_dl,
              ("target >= 2x", 2.0) if large else ("target >= 20x", 20.0))
        ratio("  itself: 128 KiB / 1 MiB reads", bf["py 128K"], d,
              ("G7 target >= 0.3x", 0.3))
        log("    parity: " + bf["check"])
        log("    stats: " + " ".join(bf["stats"].split())[:600])


class Tokens(torch.utils.data.Dataset):
    """Sample i: tokens[offsets[i]:offsets[i+1]] as a tensor."""

    def __init__(self, values, offsets):
        self.values = torch.from_numpy(values)
        self.offsets = offsets

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        return self.values[self.offsets[i]:self.offsets[i + 1]]


def pad_collate(batch):
    """The padding collate_fn batchfs's default --pad equals."""
    return (torch.nn.utils.rnn.pad_sequence(batch, batch_first=True),
            torch.tensor([len(x) for x in batch]))


def ragged_epoch(mnt, epoch, nb, buf):
    """Samples of every batch of an epoch, read with 1 MiB readinto."""
    mv = memoryview(buf)
    samples = 0
    t0 = time.perf_counter()
    for k in range(nb):
        with open("%s/epoch/%d/batch_%d" % (mnt, epoch, k), "rb",
                  buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            got = 0
            while got < size:
                r = f.readinto(mv[got:min(size, got + MIB)])
                if not r:
                    raise Failed("short ragged batch %d" % k)
                got += r
        n = int.from_bytes(buf[:8], "little")
        head = json.loads(bytes(buf[8:8 + n]))
        samples += head["tokens"]["shape"][0] if "tokens.lengths" in head \
            else head["tokens.offsets"]["shape"][0] - 1
    return samples, time.perf_counter() - t0


def ragged_dataloader(ds, workers):
    vals = []
    for r in range(REPS):
        dl = DataLoader(ds, batch_size=RAGGED_BATCH, shuffle=True,
                        num_workers=workers, collate_fn=pad_collate,
                        generator=torch.Generator().manual_seed(SEED + r))
        seen = 0
        t0 = time.perf_counter()
        for x, _ in dl:
            seen += x.shape[0]
            if time.perf_counter() - t0 > DL_SECONDS:
                break
        vals.append(seen / (time.perf_counter() - t0))
        del dl
    return statistics.median(vals)


def ragged_workload(work, results):
    n = max(RAGGED_BATCH * 8, int(round(RAGGED_SAMPLES * SCALE)))
    rng = np.random.default_rng(SEED)
    lens = rng.integers(RAGGED_LENGTHS[0], RAGGED_LENGTHS[1] + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int64)
    log("\n== ragged rows: tokens int64, lengths %d..%d (mean %.0f), batch "
        "%d, n=%d, %.3f GB of tokens" % (RAGGED_LENGTHS + (lens.mean(),
                                          RAGGED_BATCH, n, values.nbytes / 1e9)))
    arch = work.path("tokens.npz")
    np.savez(arch, **{"tokens.values": values, "tokens.offsets": offsets})
    ds = Tokens(values, offsets)
    nb = -(-n // RAGGED_BATCH)
    buf = mmap.mmap(-1, 4096 + RAGGED_BATCH * RAGGED_LENGTHS[1] * 8 + MIB)
    r = {"n": n}
    for label, opts in (("pad", []), ("pack", ["--pack", "tokens"])):
        mnt = work.mountpoint("ragged")
        work.mounts.append(mnt)
        run([BATCHFS, "mount", "--batch-size", str(RAGGED_BATCH),
             "--shuffle", "--seed", str(SEED)] + MOUNT_OPTS + opts +
            [arch, mnt], timeout=120)
        try:
            if label == "pad":
                with open(mnt + "/epoch/0/batch_0", "rb") as f:
                    got = f.read()
                dl = DataLoader(ds, batch_size=RAGGED_BATCH, shuffle=True,
                                collate_fn=pad_collate,
                                generator=torch.Generator().manual_seed(SEED))
                want = next(iter(dl))[0].numpy().tobytes()
                h = int.from_bytes(got[:8], "little")
                a, b = json.loads(got[8:8 + h])["tokens"]["data_offsets"]
                r["check"] = ("ok (batch 0 == DataLoader + pad_sequence)"
                              if got[8 + h + a:8 + h + b] == want
                              else "MISMATCH with DataLoader + pad_sequence")
            vals = []
            for e in range(1, REPS + 1):
                got, secs = ragged_epoch(mnt, e, nb, buf)
                if got != n:
                    raise Failed("ragged epoch %d: %d samples" % (e, got))
                vals.append(n / secs)
            r[label] = statistics.median(vals)
        finally:
            work.unmount(mnt)
    r["dl0"] = ragged_dataloader(ds, 0)
    r["dl2"] = ragged_dataloader(ds, 2)
    os.unlink(arch)
    results["ragged rows"] = r
    best = max(r["dl0"], r["dl2"])
    log("\n  %-52s %11s" % ("ragged rows (median of %d)" % REPS, "samples/s"))
    for label, v in (("batchfs --pad (default): Python readinto 1 MiB",
                      r["pad"]),
                     ("batchfs --pack tokens: Python readinto 1 MiB",
                      r["pack"]),
                     ("DataLoader + pad_sequence, num_workers=0", r["dl0"]),
                     ("DataLoader + pad_sequence, num_workers=2", r["dl2"])):
        log("  %-52s %11s" % (label, fmt_rate(v)))
    log("  %-52s %7.2fx" % ("batchfs --pad vs best DataLoader", r["pad"] / best))
    log("  %-52s %7.2fx" % ("batchfs --pack vs best DataLoader",
                            r["pack"] / best))
    log("    parity: " + r["check"])


def wanted(part):
    return not ONLY or any(w in part for w in ONLY)


def source_version():
    try:
        head = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip()
        dirty = run(["git", "-C", ROOT, "status", "--porcelain", "--",
                     "fs", "mount", "tools"]).strip()
        return head + (" + uncommitted changes" if dirty else "")
    except (Failed, OSError):
        return "unknown"


def main():
    global BATCHFS
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    for exe in (BATCHFS, NULLFS):
        if not os.access(exe, os.X_OK):
            sys.exit("bench: %s missing (run `make bench`)" % exe)
    work = Work()
    # Our own copy, so a concurrent `make` cannot swap it mid-run.
    shutil.copy2(BATCHFS, work.path("batchfs.bin"))
    BATCHFS = work.path("batchfs.bin")
    results = {"scale": SCALE, "reps": REPS}
    ok = True
    log("batchfs bench: BENCH_SCALE=%g, median of %d passes, host %s, "
        "%d CPUs, work dir %s. Shared VM: expect +-30 %% run to run."
        % (SCALE, REPS, os.uname().nodename, os.cpu_count(), work.dir))
    log("source: %s" % source_version())
    log("GB/s = payload bytes (images + labels) per second, 10^9 B/s.")
    try:
        for name, shape, batch, n0 in WORKLOADS:
            if not wanted(name):
                continue
            workload(work, name, shape, batch, n0, results)
            ok = ok and all("error" not in v
                            for v in results[name]["batchfs"].values())
        try:
            if wanted("ragged rows"):
                ragged_workload(work, results)
        except (Failed, OSError, subprocess.TimeoutExpired) as e:
            ok = False
            log("  ragged rows: FAILED: %s" % e)
        if wanted("latency"):
            log("\n== time from `batchfs mount` to the first byte of batch 0, "
                "%d samples (median of %d)" % (LATENCY_SAMPLES, LATENCY_REPS))
            try:
                ran = [w[0] for w in WORKLOADS if w[0] in results]
                if ran and not any("error" not in v for w in ran
                                   for v in results[w]["batchfs"].values()):
                    raise Failed("skipped: batchfs mount failed above")
                m, f, t = bench_latency(work)
                results["latency"] = {"mount": m, "first_byte": f, "total": t}
                log("  mount returned   %8.1f ms" % (m * 1e3))
                log("  first byte after %8.1f ms" % (f * 1e3))
                log("  total            %8.1f ms  [target <= 50 ms %s]"
                    % (t * 1e3, "MET" if t <= 0.05 else "MISSED"))
            except (Failed, OSError, subprocess.TimeoutExpired) as e:
                ok = False
                log("  FAILED: %s" % e)
    finally:
        work.close()
    if os.environ.get("BENCH_JSON"):
        with open(os.environ["BENCH_JSON"], "w") as f:
            json.dump(results, f, indent=1, default=str)
    if not ok:
        log("\nbench: some batchfs measurements failed (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
