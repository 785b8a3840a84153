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
      whole-file read sizes, at 1 MiB with the epoch's directory listed
      ahead of the opens (as batchfs.Batches does: no LOOKUP per batch),
      plus `batchfs bench --read` (C; it lists and stats the files before
      its clock starts) at 1 MiB
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
BENCH_MODES (the serve modes (d) is measured in, comma-separated, from
passthrough, push, direct, cache, and pt-gather / pt-slices = passthrough
with its memfds written one way (BATCHFS_MEMFD_WRITE); default
"passthrough,push,direct,cache"), BENCH_ONLY (comma-separated words:
run only the parts whose names contain one; the parts are "small rows
modes", "small rows epochs", "small rows cold", "small rows ranks",
"small rows notfit", the same five of "large rows", "ragged rows" and
"latency": "small" runs every small-row part, "cold" the cold part of
both workloads; "small rows readers" the readers part, "small rows
compare" README's comparison; "small rows remote" and "large rows
remote", the remote part, run only when a word
names "remote": tools/bench/bench_remote.py says what they measure, and
their settings), BENCH_NOTFIT_MB (384: the memory cgroup of the notfit
part), BENCH_JSON (the results file, default tools/bench/results.json).

Besides printing them, it merges its results into the results file, one
entry per part measured ("small rows modes", ..., "ragged rows",
"latency"; the entries of parts not measured stay as they were), each
with the date, machine and load of its run and the ratios its figure
draws; `make bench` then runs tools/bench/figures.py, which draws them
as tools/bench/fig-<part>.png.

Besides the serve modes ("modes"), each workload measures: "readers", the
readers batchfs ships on a default mount (batchfs.Batches() with its
defaults, and with stream=False / stream=True; batchfs.DataLoader over an
IterableDataset, num_workers=0; the C loader in host mode, through its
library) against the bound of their work, numpy's gather x[idx] of the
same batches from the archive's mapping in this process (torch tensors
over the result, as Batches gives), and a DataLoader over the tensors in
memory (num_workers 0 and 2), in one run, alternated, with the daemon's
CPU microseconds per batch beside the gather's own; the same readers on a
mount that refuses O_DIRECT (BATCHFS_DEBUG_NO_DIRECT_OPEN: their fallback,
plain opens served by the mode, as before O_DIRECT chose the path), and
`cat`'s and numpy.memmap's ways in (readinto 1 MiB, mmap) on the default
mount; "compare", what a user compares (README's figure): Batches() with
its defaults against DataLoaders of 0, 4 and 8 workers over the tensors
in memory and over the archive file, warm and cold, beside the bound of
each (bench_compare says how); "epochs", the
first three epochs of a fresh mount (archive in the page cache), per epoch
GB/s, daemon CPU s/GB and page faults, with and without the read-in of the
archive at mount (BATCHFS_DEBUG_NO_WARM=1: the version before it); "cold",
`batchfs mount` + a shuffled epoch 0 with the page cache dropped first
(root: /proc/sys/vm/drop_caches; skipped for other users), beside `dd
bs=1M` of the archive, cold, again with and without the read-in; "ranks",
one mount (--world-size 8 --ranks all) read by 1, 2, 4 and 8 processes at
once, each batchfs.Batches() over its own rank, against that many times
one rank alone, warm and cold remote (nginx behind the remote part's link:
bench_ranks says how); "notfit" (root and a memory cgroup controller, else skipped), the
daemon and every reader in a BENCH_NOTFIT_MB memory cgroup, the page cache
dropped before each pass: a shuffled epoch through batchfs against random
reads of the same rows (`batchfs bench --rows`: pread from 16 and 64
threads, io_uring at depths 1 to 256) and a DataLoader whose Dataset
reads rows with pread (0, 2, 4 workers), each with what the disk and the
CPUs did meanwhile (the disk's busy share and queue, the CPUs' idle share).
Every load average printed comes with the share of CPU time the
hypervisor took (steal) since the previous one.

Besides GB/s, each mode reports the daemon's CPU seconds per GB served
(utime + stime of the daemon over the Python 1 MiB passes), mmap reads
(Python: mmap each batch file, copy it out) beside the same reads of plain
files of the same sizes on tmpfs (the page-cache baseline, (a') and
(a'')), the time from open() to the first 4 KiB of a batch that was
prefetched and of one that was not, open+close of a prefetched batch
beside open+close of the null FUSE server's file, and the second read of
a batch file held open beside the same read of a plain file on /dev/shm
(the read path alone, the batch's bytes already prepared). Everything it mounts, spawns or writes is
removed on exit, also on failure or Ctrl-C. Exit 1 if a measurement failed.
"""
import json
import mmap
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "loader", "python"))  # batchfs
import memcg  # noqa: E402  (memory cgroups, shared with the tests)
# The compare part runs DataLoaders of more workers than cores, as users do.
warnings.filterwarnings("ignore", message="This DataLoader will create")
import figures  # noqa: E402  (the ratios each part's figure draws)
BATCHFS = os.environ.get("BATCHFS", os.path.join(ROOT, "build", "batchfs"))
NULLFS = os.environ.get("NULLFS", os.path.join(ROOT, "build", "bench", "nullfs"))
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
REPS = max(1, int(os.environ.get("BENCH_REPS", "3")))
DL_SECONDS = float(os.environ.get("BENCH_DL_SECONDS", "6"))
MOUNT_OPTS = os.environ.get("BENCH_MOUNT_OPTS", "").split()
# Read modes compared: "default" = batchfs's default; others are extra
# `batchfs mount` options, comma-separated (BENCH_MODES="default").
MODES = [m.strip() for m in os.environ.get(
    "BENCH_MODES", "passthrough,push,direct,cache").split(",") if m.strip()]
# mode -> (mount options, environment of the daemon)
MODE_DEFS = {
    "passthrough": (["--serve", "passthrough"], {}),
    "pt-gather": (["--serve", "passthrough"],
                  {"BATCHFS_MEMFD_WRITE": "gather"}),
    "pt-slices": (["--serve", "passthrough"],
                  {"BATCHFS_MEMFD_WRITE": "slices"}),
    "push": (["--serve", "push"], {}),
    "direct": (["--serve", "direct"], {}),
    # direct without zero copy: the rows gathered and checked after the
    # copy (what closing zero copy's window on a source rewritten in
    # place costs: fs/README.md, a source that changes)
    "direct-copy": (["--serve", "direct"],
                    {"BATCHFS_DEBUG_NO_ZERO_COPY": "1"}),
    "cache": (["--serve", "cache"], {}),
    "default": ([], {}),
    # the default without the read-in of the archives at mount (what the
    # version before it did): the "before" of the epochs and cold parts
    "no-read-in": ([], {"BATCHFS_DEBUG_NO_WARM": "1"}),
}
ONLY = [w for w in os.environ.get("BENCH_ONLY", "").split(",") if w]
RESULTS_JSON = os.environ.get("BENCH_JSON") or os.path.join(HERE,
                                                            "results.json")
# What every part's "run" record holds of this run (filled by main).
RUN = {}
SEED = 7
MIB = 1 << 20
LATENCY_SAMPLES = 10**6
LATENCY_REPS = max(5, REPS)

RAGGED_SAMPLES = 40_000  # at scale 1: ~0.33 GB of tokens
RAGGED_BATCH = 64
RAGGED_LENGTHS = (16, 2048)

# The parts of each workload: "modes" (every serve mode beside the
# baselines), "readers" (the readers batchfs ships against the gather
# and DataLoader), "epochs" (first epoch against later ones), "cold" (a cold
# epoch against dd), "ranks" (one mount read by 1 to 8 ranks at once),
# "notfit" (the data in a memory cgroup too small for it, against random
# preads of its rows and a DataLoader reading them with pread).
PARTS = ("modes", "readers", "compare", "epochs", "cold", "ranks",
         "notfit")
NOTFIT_MB = int(os.environ.get("BENCH_NOTFIT_MB", "384"))

WORKLOADS = [
    # name, per-sample image shape, batch size, samples at scale 1
    ("small rows", (784,), 256, 1_400_000),
    ("large rows", (3, 224, 224), 64, 7_200),
]


class Failed(Exception):
    pass


class Skipped(Exception):
    """A part this machine or user cannot run (not a failure)."""


def log(msg):
    print(msg, flush=True)


def run(cmd, timeout=300, env=None):
    """Run a command, return stdout; raise Failed with its stderr."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout,
                       env=dict(os.environ, **env) if env else None)
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
    # Written back now, so no measurement shares the machine with the
    # writeback of a fresh 1 GB file (it once made a first epoch 0.6x).
    os.sync()
    return arch, how


def batch_buffer(batch, row):
    """A page-aligned buffer that holds any batch file of the workload
    (a header page, batch rows of 'row' bytes) and 1 MiB more."""
    return mmap.mmap(-1, 4096 + batch * row + MIB)


def open_close(path):
    """Seconds of os.open + os.close of path."""
    t0 = time.perf_counter()
    os.close(os.open(path, os.O_RDONLY))
    return time.perf_counter() - t0


def nullfs_read(work, size):
    """(c): GB/s of the null FUSE server at 1 MiB and 128 KiB reads, and
    the median open+close of its file ("open+close", seconds) and of files
    it serves that were never opened before ("open+close new")."""
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
                "128K": c_bench(["--bs", "128K", "--read", data]),
                "open+close": statistics.median(open_close(data)
                                                for _ in range(200)),
                # a file never opened before, as a batch file is: LOOKUP +
                # OPEN + RELEASE (the one above is looked up once)
                "open+close new": statistics.median(
                    open_close("%s.%d" % (data, k)) for k in range(200))}
    finally:
        work.stop(proc)
        work.unmount(mnt)


def mount_batchfs(work, arch, batch, mnt, mode="default", extra=(), env=None):
    opts, menv = MODE_DEFS[mode]
    env = dict(menv, **(env or {}))
    work.mounts.append(mnt)
    t0 = time.perf_counter()
    run([BATCHFS, "mount", "--batch-size", str(batch), "--shuffle",
         "--seed", str(SEED)] + MOUNT_OPTS + opts + list(extra) + [arch, mnt],
        timeout=120, env=env)
    return time.perf_counter() - t0


def daemon_stat(mnt):
    """(CPU seconds (user + system), minor faults, major faults) of the
    daemon of mnt so far."""
    with open(mnt + "/stats") as f:
        pid = int(f.readline().split()[1])
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return ((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
            int(fields[7]), int(fields[9]))


def daemon_cpu(mnt):
    """CPU seconds (user + system) the daemon of mnt has used so far."""
    return daemon_stat(mnt)[0]


def batch_paths(mnt, epoch, nbatches):
    return ["%s/epoch/%d/batch_%d" % (mnt, epoch, k) for k in range(nbatches)]


def read_files_mmap(paths, buf):
    """mmap each file, copy its bytes out (numpy.memmap's way in).
    Returns (payload bytes, seconds)."""
    payload = 0
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            buf[:size] = mm[:size]
            mm.close()
        payload += size - 4096
    return payload, time.perf_counter() - t0


def first_byte(p):
    """Seconds from open() to the first 4 KiB of file p."""
    t0 = time.perf_counter()
    fd = os.open(p, os.O_RDONLY)
    try:
        if len(os.read(fd, 4096)) != 4096:
            raise Failed("short first read of " + p)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def open_latency(mnt, nb):
    """(prefetched, cold) median open -> first 4 KiB times: a batch right
    after one just read, once the workers had time to prepare it, and a
    batch of a far epoch nobody asked for."""
    warm, cold = [], []
    for i in range(9):
        e = 200 + 3 * i
        ml_read(mnt, e, 0)
        time.sleep(0.3)  # the prefetch window is prepared meanwhile
        warm.append(first_byte("%s/epoch/%d/batch_1" % (mnt, e)))
        cold.append(first_byte("%s/epoch/%d/batch_%d" % (mnt, e + 1,
                                                         nb // 2)))
    return statistics.median(warm), statistics.median(cold)


def prefetched_open_close(mnt, e, n):
    """Median open+close of batches 1..n-1 of epoch e, each opened 10 ms
    after the one before it was read (so the workers prepared it)."""
    times = []
    ml_read(mnt, e, 0)
    for k in range(1, n):
        time.sleep(0.01)
        p = "%s/epoch/%d/batch_%d" % (mnt, e, k)
        times.append(open_close(p))
        ml_read(mnt, e, k)
    return statistics.median(times)


def reread(mnt, e, n, buf, plain):
    """(batchfs, plain) GB/s of the second read of a file held open: batch
    files of epoch e (their bytes prepared by the first read) and a plain
    file 'plain' of the same size: the read path alone."""
    got = {"batchfs": [], "plain": []}
    view = memoryview(buf)
    for k in range(n):
        fd = os.open("%s/epoch/%d/batch_%d" % (mnt, e, k), os.O_RDONLY)
        size = os.fstat(fd).st_size
        if k == 0:
            with open(plain, "wb") as f:
                f.write(os.urandom(size))
        for key, f in (("batchfs", fd), ("plain", os.open(plain, os.O_RDONLY))):
            for rep_ in range(2):
                t0, off = time.perf_counter(), 0
                while off < size:
                    off += os.preadv(f, [view[:min(MIB, size - off)]], off)
            got[key].append(size / (time.perf_counter() - t0) / 1e9)
            os.close(f)
    os.unlink(plain)
    return statistics.median(got["batchfs"]), statistics.median(got["plain"])


def ml_read(mnt, e, k):
    with open("%s/epoch/%d/batch_%d" % (mnt, e, k), "rb") as f:
        while f.read(MIB):
            pass


def read_epoch_py(mnt, epoch, nbatches, buf, chunk, listed=False):
    """Read every batch of 'epoch' the way a Python training loop would
    (open, readinto a reused buffer). Returns (payload bytes, seconds).
    listed: list the epoch's directory (os.scandir) 64 entries ahead of
    the batch opened, as batchfs.Batches does (an open then needs no
    LOOKUP)."""
    paths = batch_paths(mnt, epoch, nbatches)
    if listed:
        paths = listed_ahead("%s/epoch/%d" % (mnt, epoch), paths)
    return read_epoch_files(paths, buf, chunk)


def listed_ahead(d, paths, ahead=64):
    """paths, each yielded once d's listing is 'ahead' entries past it."""
    with os.scandir(d) as it:
        seen = 0
        for k, p in enumerate(paths):
            while seen is not None and seen <= k + ahead:
                seen = seen + 1 if next(it, None) is not None else None
            yield p


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
        buf = batch_buffer(batch, row)
        epoch = 1
        for label, chunk in (("py 1M", MIB), ("py 1M listed", MIB),
                             ("py 128K", 128 << 10), ("py whole", len(buf))):
            vals, cpu = [], []
            for _ in range(REPS):
                c0 = daemon_cpu(mnt)
                b, s = read_epoch_py(mnt, epoch, nb, buf, chunk,
                                     label.endswith("listed"))
                cpu.append((daemon_cpu(mnt) - c0) / (b / 1e9))
                if b != n * row:
                    raise Failed("epoch %d: %d payload bytes, want %d"
                                 % (epoch, b, n * row))
                vals.append(b / s / 1e9)
                epoch += 1
            res[label] = statistics.median(vals)
            if label == "py 1M":
                res["cpu s/GB"] = statistics.median(cpu)
        if not mode.startswith("direct"):  # direct I/O: no MAP_SHARED
            vals = []
            for _ in range(REPS):
                b, s = read_files_mmap(batch_paths(mnt, epoch, nb), buf)
                vals.append(b / s / 1e9)
                epoch += 1
            res["py mmap"] = statistics.median(vals)
        vals = []
        for _ in range(REPS):  # one file per epoch: stream/N
            vals.append(n * row / read_stream(mnt, epoch, nb) / 1e9)
            epoch += 1
        res["py stream"] = statistics.median(vals)
        res["open warm"], res["open cold"] = open_latency(mnt, nb)
        res["open+close"] = prefetched_open_close(mnt, epoch, min(nb, 200))
        epoch += 1
        res["reread"] = reread(mnt, epoch, min(nb, 20), buf,
                               "/dev/shm/bfs-bench-reread.%d" % os.getpid())
        epoch += 1
        vals = []
        for _ in range(REPS):  # C reader; its GB/s includes the headers
            _, secs = c_read(read_c("%s/epoch/%d" % (mnt, epoch)))
            vals.append(n * row / secs / 1e9)
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


def cpu_jiffies():
    """The machine's CPU time so far (/proc/stat's first line): user, nice,
    system, idle, iowait, irq, softirq, steal, in clock ticks."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def cpu_share(c0, c1, *fields):
    """Percent of the CPU time between cpu_jiffies() samples c0 and c1
    spent in the given fields (indices: 3 idle, 4 iowait, 7 steal)."""
    d = [b - a for a, b in zip(c0, c1)]
    return 100.0 * sum(d[i] for i in fields) / max(1, sum(d))


_LAST_CPU = [cpu_jiffies()]


def loadavg():
    """The load average, and the share of the CPU time the hypervisor
    took from this machine (steal) since the previous loadavg(): on a
    shared VM the passes that ran slow are those it stole from."""
    now = cpu_jiffies()
    steal = cpu_share(_LAST_CPU[0], now, 7)
    _LAST_CPU[0] = now
    return "load average %.2f %.2f %.2f, steal %.0f %%" % (
        os.getloadavg() + (steal,))


def block_device(path):
    """/sys's stat file of the whole disk holding 'path', or None (a
    file system on no block device: tmpfs, overlay)."""
    st = os.stat(path)
    sysdir = "/sys/dev/block/%d:%d" % (os.major(st.st_dev),
                                      os.minor(st.st_dev))
    if not os.path.exists(sysdir + "/stat"):
        return None
    if os.path.exists(sysdir + "/partition"):
        sysdir += "/.."
    return os.path.realpath(sysdir + "/stat")


class DeviceMeter:
    """What the disk holding a file and the CPUs did over a span: the
    disk's busy share (time with an I/O in flight), its average queue
    (I/Os in flight, averaged over the span) and the CPUs' idle share
    (idle + iowait). A busy disk with idle CPUs: the disk bounds it."""

    def __init__(self, path):
        self.stat = block_device(path)

    def sample(self):
        disk = None
        if self.stat:
            with open(self.stat) as f:
                w = [int(x) for x in f.read().split()]
            disk = (w[9], w[10])  # io_ticks, time_in_queue (ms)
        return time.monotonic(), cpu_jiffies(), disk

    def since(self, s0):
        """{"busy %", "queue", "cpu idle %"} from sample s0 to now (the
        disk's two are None without a block device)."""
        t1, c1, d1 = self.sample()
        t0, c0, d0 = s0
        ms = max(1e-6, (t1 - t0) * 1e3)
        out = {"cpu idle %": cpu_share(c0, c1, 3, 4),
               "busy %": None, "queue": None}
        if d0 and d1:
            out["busy %"] = 100.0 * (d1[0] - d0[0]) / ms
            out["queue"] = (d1[1] - d0[1]) / ms
        return out


def stats_value(mnt, name):
    with open(mnt + "/stats") as f:
        for line in f:
            w = line.split()
            if len(w) == 2 and w[0] == name:
                return int(w[1])
    return None


def bench_epochs(work, arch, batch, n, row):
    """Epochs 0, 1 and 2 of a fresh mount (archive in the page cache, the
    default serve mode), each read from Python (readinto 1 MiB), with and
    without the read-in at mount: per epoch GB/s and the daemon's CPU
    seconds per GB and page faults. A fresh mount per pass."""
    nb = (n + batch - 1) // batch
    mnt = work.mountpoint("epochs")
    buf = batch_buffer(batch, row)
    run(["dd", "if=" + arch, "of=/dev/null", "bs=1M"], timeout=600)  # cached
    res = {}
    for variant in ("default", "no-read-in"):
        per = [{"GB/s": [], "cpu s/GB": [], "minflt": [], "majflt": []}
               for _ in range(3)]
        for _ in range(REPS):
            mount_batchfs(work, arch, batch, mnt, variant)
            try:
                for e in range(3):
                    c0 = daemon_stat(mnt)
                    b, s = read_epoch_py(mnt, e, nb, buf, MIB)
                    c1 = daemon_stat(mnt)
                    if b != n * row:
                        raise Failed("epochs: epoch %d read %d payload "
                                     "bytes, want %d" % (e, b, n * row))
                    per[e]["GB/s"].append(b / s / 1e9)
                    per[e]["cpu s/GB"].append((c1[0] - c0[0]) / (b / 1e9))
                    per[e]["minflt"].append(c1[1] - c0[1])
                    per[e]["majflt"].append(c1[2] - c0[2])
            finally:
                work.unmount(mnt)
        res[variant] = [{k: statistics.median(v) for k, v in d.items()}
                        for d in per]
    log("\n  epochs of a fresh mount, archive in the page cache, Python "
        "readinto 1 MiB (median of %d; %s)" % (REPS, loadavg()))
    log("  %-24s %6s %8s %9s %10s %8s" % ("", "epoch", "GB/s", "CPU s/GB",
                                         "minor flt", "major"))
    for variant, per in res.items():
        for e, d in enumerate(per):
            log("  %-24s %6d %8.3f %9.3f %10d %8d"
                % (variant if e == 0 else "", e, d["GB/s"], d["cpu s/GB"],
                   d["minflt"], d["majflt"]))
        log("  %-24s first / third epoch: %.2fx  [target >= 0.9x %s]"
            % ("", per[0]["GB/s"] / per[2]["GB/s"],
               "MET" if per[0]["GB/s"] >= 0.9 * per[2]["GB/s"]
               else "MISSED"))
    return res


def drop_caches():
    """Empty the page cache (root only)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        raise Skipped("cannot drop the page cache (%s): the cold part needs "
                      "root" % e)


def bench_cold(work, arch, batch, n, row):
    """A cold shuffled epoch against `dd bs=1M` of the archive, cold: the
    page cache dropped before each, the epoch timed from `batchfs mount`
    (so the read-in at mount counts) to its last byte; with the read-in
    and without it (the version before it). Interleaved, median of REPS."""
    nb = (n + batch - 1) // batch
    mnt = work.mountpoint("cold")
    buf = batch_buffer(batch, row)
    size = os.path.getsize(arch)
    got = {"dd": [], "default": [], "no-read-in": [], "read in": []}
    for _ in range(REPS):
        drop_caches()
        t0 = time.perf_counter()
        run(["dd", "if=" + arch, "of=/dev/null", "bs=1M"], timeout=600)
        got["dd"].append(size / (time.perf_counter() - t0) / 1e9)
        for variant in ("default", "no-read-in"):
            drop_caches()
            t0 = time.perf_counter()
            mount_batchfs(work, arch, batch, mnt, variant)
            try:
                b, _ = read_epoch_py(mnt, 0, nb, buf, MIB)
                t = time.perf_counter() - t0
                if b != n * row:
                    raise Failed("cold: read %d payload bytes, want %d"
                                 % (b, n * row))
                got[variant].append(b / t / 1e9)
                if variant == "default":
                    got["read in"].append(stats_value(mnt, "readahead_bytes"))
            finally:
                work.unmount(mnt)
    res = {k: statistics.median(v) for k, v in got.items() if v}
    log("\n  cold: page cache dropped before each; archive %.3f GB "
        "(median of %d; %s)" % (size / 1e9, REPS, loadavg()))
    log("  %-52s %8.3f GB/s (archive bytes)" % ("dd bs=1M of the archive",
                                              res["dd"]))
    for variant in ("default", "no-read-in"):
        log("  %-52s %8.3f GB/s (payload), %.2fx dd%s"
            % ("mount + shuffled epoch 0, %s" % variant, res[variant],
               res[variant] / res["dd"],
               "  [target >= 0.8x %s]" % ("MET" if res[variant] >=
                                          0.8 * res["dd"] else "MISSED")
               if variant == "default" else ""))
    log("  %-52s %8.3f GB" % ("read in at mount (stats readahead_bytes)",
                              res.get("read in", 0) / 1e9))
    return res


def memory_cgroup(mb):
    """A fresh memory cgroup (v1 or v2) limited to mb MiB: its directory;
    Skipped when there is none or we may not make one."""
    try:
        return memcg.make(mb << 20, "batchfs-bench-%d" % os.getpid())
    except memcg.Unavailable as e:
        raise Skipped(str(e))
    except OSError as e:
        raise Skipped("cannot make a memory cgroup (%s): needs root" % e)


def archive_rows(arch, n, row):
    """File offsets of the images storage (n rows of row - 8 bytes) and
    the labels storage (n int64) of a bench archive: ZIP records, data at
    local header offset + 30 + name length + extra length."""
    import struct
    import zipfile
    found = {}
    with zipfile.ZipFile(arch) as z, open(arch, "rb") as f:
        for info in z.infolist():
            f.seek(info.header_offset)
            nlen, elen = struct.unpack("<HH", f.read(30)[26:30])
            found[info.file_size] = info.header_offset + 30 + nlen + elen
    return found[n * (row - 8)], found[n * 8]


# A DataLoader whose Dataset reads each sample's rows with pread (the best
# one can write for data that does not fit: no torch.load, no mapping;
# also the remote part's peers, over their mounts). argv: the archive, n,
# row, the images' and labels' offsets, batch, workers, a bound in seconds
# and, optionally, 0 to leave out fadvise(RANDOM) (default 1) and a count
# of epochs (default 1; each bounded, "epoch=E n=SAMPLES t=SECONDS done=D"
# printed for each, then the totals). An epoch whose next batch has not
# come a second past the bound (reads slower than that) ends the run:
# its samples are those its workers read by then.
DL_PREAD = r"""
import os, sys, threading, time, numpy as np, torch
import multiprocessing as mp
from torch.utils.data import DataLoader, Dataset, get_worker_info
arch, n, row, img, lab, batch, workers, secs = sys.argv[1:9]
n, row, img, lab, batch, workers = map(int, (n, row, img, lab, batch, workers))
secs = float(secs)
advise = sys.argv[9:10] != ["0"]
epochs = int(sys.argv[10]) if len(sys.argv) > 10 else 1
read = mp.Array("q", workers + 1, lock=False)  # samples read, per process
class Rows(Dataset):
    fd = None
    def __len__(self):
        return n
    def __getitem__(self, i):
        if self.fd is None:
            self.fd = os.open(arch, os.O_RDONLY)
            if advise:
                os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)
        x = np.frombuffer(os.pread(self.fd, row - 8, img + i * (row - 8)), np.uint8)
        y = int.from_bytes(os.pread(self.fd, 8, lab + 8 * i), "little")
        w = get_worker_info()
        read[w.id + 1 if w else 0] += 1
        return torch.from_numpy(x.copy()), y
dl = DataLoader(Rows(), batch_size=batch, shuffle=True, num_workers=workers,
                generator=torch.Generator().manual_seed(7))
lock = threading.Lock()
at = {"e": 0, "t0": time.perf_counter(), "read": 0, "seen": 0, "t": 0.0,
      "done": 1}
def end(e, k, te, d):
    if epochs > 1:
        print("epoch=%d n=%d t=%.3f done=%d" % (e, k, te, d), flush=True)
    at["seen"] += k
    at["t"] += te
    at["done"] &= d
def totals():
    print("samples=%d seconds=%.3f done=%d samples/s=%.1f"
          % (at["seen"], at["t"], at["done"], at["seen"] / at["t"]),
          flush=True)
    os._exit(0)  # workers blocked in a slow read must not hold the exit
def watchdog():
    while True:
        time.sleep(0.25)
        with lock:
            te = time.perf_counter() - at["t0"]
            if te > secs + 1:
                end(at["e"], sum(read) - at["read"], te, 0)
                totals()
threading.Thread(target=watchdog, daemon=True).start()
for e in range(epochs):
    with lock:
        at.update(e=e, t0=time.perf_counter(), read=sum(read))
    k, te, t0 = 0, 0.0, at["t0"]
    for x, _ in dl:
        k += x.shape[0]
        te = time.perf_counter() - t0
        if te > secs:
            with lock:  # the workers' shutdown after it is not timed
                at["t0"] = float("inf")
            break
    with lock:
        end(e, k, te, int(k == n))
        at["t0"] = float("inf")  # no epoch running
totals()
"""


def dl_pread(arch, n, row, img, lab, batch, workers, preexec_fn=None,
             hint=""):
    """Samples/s of DL_PREAD (a DataLoader whose Dataset preads each
    sample's rows from the archive file) with 'workers' workers, capped
    at DL_SECONDS, its process started with preexec_fn; NaN when it
    failed (logged, with 'hint' on what its exit status may mean)."""
    out = subprocess.run(
        [sys.executable, "-c", DL_PREAD, arch, str(n), str(row), str(img),
         str(lab), str(batch), str(workers), str(DL_SECONDS)],
        capture_output=True, text=True, preexec_fn=preexec_fn, timeout=600)
    m = re.search(r"samples/s=([\d.]+)", out.stdout)
    if not m:
        log("    DataLoader pread, %d workers failed (exit %d%s): %s"
            % (workers, out.returncode, hint, out.stderr.strip()[-200:]))
    return float(m.group(1)) if m else float("nan")


NOTFIT_DEPTHS = (1, 4, 16, 64, 256)  # the sweep's io_uring depths
# ... and those measured in every pass: 256 was the best for small rows,
# and 16 once the best for 147-KiB rows (a single sweep's figure, held
# against medians, until it was measured every pass too)
NOTFIT_EACH = (16, 64, 256)


def rows_rate(arch, opts, join, meter=None, dev=None, label=None):
    """Samples/s of `batchfs bench --rows` with opts, in the cgroup, the
    page cache dropped first; with a DeviceMeter, what the disk and the
    CPUs did meanwhile is appended to dev[label]."""
    drop_caches()
    s0 = meter.sample() if meter else None
    out = subprocess.run([BATCHFS, "bench"] + opts + ["--rows", arch],
                         capture_output=True, text=True, preexec_fn=join,
                         timeout=900)
    m = re.search(r"samples/s=([\d.]+)", out.stdout)
    if not m:
        raise Failed("bench --rows %s: %s%s" % (" ".join(opts), out.stdout,
                                                out.stderr))
    if meter:
        dev.setdefault(label, []).append(meter.since(s0))
    return float(m.group(1))


def bench_notfit(work, arch, batch, n, row):
    """Data that does not fit: everything in a memory cgroup of NOTFIT_MB
    MiB, the page cache dropped before each pass. batchfs (mount, then
    the C reader over a shuffled epoch 0; the default serve mode and
    --serve direct), against random reads of the same rows (`batchfs
    bench --rows`: pread from 16 and 64 threads, fadvise RANDOM; one
    io_uring keeping NOTFIT_EACH reads in flight) and a DataLoader whose
    Dataset preads rows (0, 2, 4 workers, capped at BENCH_DL_SECONDS).
    Samples/s, medians of REPS, interleaved; then once, the rest of the
    device's curve: io_uring at every depth of NOTFIT_DEPTHS (full
    epochs). The best of the random reads is what batchfs is held
    against. Beside each, medians of what the disk and the CPUs did
    meanwhile (DeviceMeter: the disk's busy share and average queue, the
    CPUs' idle share), the evidence of what bounds it."""
    if os.path.getsize(arch) < 2 * (NOTFIT_MB << 20):
        raise Skipped("the archive fits in a %d MiB cgroup (BENCH_SCALE)"
                      % NOTFIT_MB)
    cg = memory_cgroup(NOTFIT_MB)
    join = lambda: memcg.join(cg)
    img, lab = archive_rows(arch, n, row)
    mnt = work.mountpoint("notfit")
    got, dev = {}, {}
    meter = DeviceMeter(arch)
    log("\n  notfit: in a %d MiB memory cgroup, page cache dropped before "
        "each (median of %d; %s)" % (NOTFIT_MB, REPS, loadavg()))
    try:
        for _ in range(REPS):
            for t in (16, 64):
                k = "pread %d threads" % t
                got.setdefault(k, []).append(
                    rows_rate(arch, ["--threads", str(t)], join, meter, dev,
                              k))
            for d in NOTFIT_EACH:
                k = "io_uring depth %d" % d
                got.setdefault(k, []).append(
                    rows_rate(arch, ["--depth", str(d)], join, meter, dev, k))
            for label, opts in (("batchfs", []),
                                ("batchfs --serve direct",
                                 ["--serve", "direct"])):
                drop_caches()
                subprocess.run([BATCHFS, "mount", "--batch-size", str(batch),
                                "--shuffle", "--seed", str(SEED)] +
                               MOUNT_OPTS + opts + [arch, mnt], check=True,
                               capture_output=True, preexec_fn=join,
                               timeout=120)
                work.mounts.append(mnt)
                try:
                    s0 = meter.sample()
                    p = subprocess.Popen([BATCHFS, "bench", "--read",
                                          mnt + "/epoch/0"],
                                         stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True,
                                         preexec_fn=join)
                    b, secs = c_read(p)
                    dev.setdefault(label, []).append(meter.since(s0))
                    if b < n * row:
                        raise Failed("notfit: read %d bytes, want >= %d"
                                     % (b, n * row))
                    got.setdefault(label, []).append(n / secs)
                    got.setdefault(label + " reader", []).append(
                        stats_text(mnt, "reader"))
                finally:
                    work.unmount(mnt)
            for w in (0, 2, 4):
                drop_caches()
                got.setdefault("DataLoader pread, %d workers" % w, []).append(
                    dl_pread(arch, n, row, img, lab, batch, w, join,
                             "; -9: killed, the cgroup too small?"))
        log("  the device's curve, once (%s)" % loadavg())
        for d in NOTFIT_DEPTHS:
            if d not in NOTFIT_EACH:
                got["io_uring depth %d" % d] = [
                    rows_rate(arch, ["--depth", str(d)], join)]
    finally:
        memcg.remove(cg)
    readers = {k: got.pop(k + " reader")[-1]
               for k in ("batchfs", "batchfs --serve direct")}
    res = {k: statistics.median(v) for k, v in got.items()}
    res["device"] = {
        k: {m: (None if None in [x[m] for x in v] else
                statistics.median(x[m] for x in v))
            for m in ("busy %", "queue", "cpu idle %")}
        for k, v in dev.items()}
    for k, v in got.items():
        d = res["device"].get(k)
        log("  %-40s %10.0f samples/s  [%s]%s"
            % ("%s (reader %s)" % (k, readers[k]) if k in readers else k,
               res[k], " ".join("%.0f" % x for x in v),
               "" if not d else "  disk busy %s, queue %s, CPUs idle %.0f %%"
               % ("-" if d["busy %"] is None else "%.0f %%" % d["busy %"],
                  "-" if d["queue"] is None else "%.1f" % d["queue"],
                  d["cpu idle %"])))
    dls = [v for k, v in res.items() if k.startswith("DataLoader") and v == v]
    if not dls:
        raise Failed("notfit: no DataLoader pass succeeded")
    best_dl = max(dls)
    reads = {k: v for k, v in res.items()
             if k.startswith("pread") or k.startswith("io_uring")}
    best = max(reads, key=reads.get)
    res["best random read"] = reads[best]
    res["best random read is"] = best
    for k in ("batchfs", "batchfs --serve direct"):
        log("  %-40s %10.2fx  [target >= 0.9x: %s]"
            % ("%s / best random read (%s)" % (k, best),
               res[k] / reads[best],
               "MET" if res[k] >= 0.9 * reads[best] else "MISSED"))
    for t in (16, 64):
        log("  %-40s %10.2fx"
            % ("batchfs / pread %d threads" % t,
               res["batchfs"] / res["pread %d threads" % t]))
    log("  %-40s %10.2fx  [target >= 3x]"
        % ("batchfs / best DataLoader", res["batchfs"] / best_dl))
    log("  end: %s" % loadavg())
    res["reader"] = readers["batchfs"]
    return res


COMPARE_WORKERS = (0, 4, 8)


def bench_compare(work, arch, batch, n, row):
    """What a user compares: batchfs.Batches() (its defaults, on a default
    mount) against a DataLoader (shuffle=True, the workload's batch, 0, 4
    and 8 workers) over the archive's tensors in memory (torch.load, a
    TensorDataset) and over the archive file (a Dataset that preads each
    sample's rows: DL_PREAD), samples/s as payload GB/s; warm (the
    archive in the page cache, a fresh epoch each pass) and cold (the
    page cache dropped before each pass: batchfs from `batchfs mount` on;
    the in-memory DataLoader as torch.load of the cold archive plus an
    epoch at its warm rate; root only, else the cold half is left out).
    Beside them the bounds, drawn as lines: the page cache's read of the
    archive (warm) and `dd bs=1M` of it (cold). DataLoader passes are
    capped at BENCH_DL_SECONDS. Medians of REPS."""
    img, lab = archive_rows(arch, n, row)
    mnt = work.mountpoint("compare")
    res = {"warm": {}, "cold": {}}
    got = {"warm": {}, "cold": {}}

    def add(how, label, v):
        got[how].setdefault(label, []).append(v)

    res["warm bound"] = c_bench(["--pagecache", arch])
    mount_batchfs(work, arch, batch, mnt, "default")
    try:
        for rep in range(REPS):
            secs, _ = batches_epoch(mnt, rep)
            add("warm", "Batches()", n * row / secs / 1e9)
    finally:
        work.unmount(mnt)
    t0 = time.perf_counter()
    tensors = torch.load(arch)
    warm_load = time.perf_counter() - t0
    for w in COMPARE_WORKERS:
        add("warm", "DataLoader, in memory, %d workers" % w,
            bench_dataloader(tensors, batch, w) * row / 1e9)
    del tensors
    for rep in range(REPS):
        for w in COMPARE_WORKERS:
            add("warm", "DataLoader, from the file, %d workers" % w,
                dl_pread(arch, n, row, img, lab, batch, w) * row / 1e9)
    try:
        drop_caches()
    except Skipped as e:
        log("  compare: cold left out: %s" % e)
        got["cold"] = None
    size = os.path.getsize(arch)
    for rep in range(REPS if got["cold"] is not None else 0):
        drop_caches()
        t0 = time.perf_counter()
        run(["dd", "if=" + arch, "of=/dev/null", "bs=1M"], timeout=600)
        add("cold", "bound", size / (time.perf_counter() - t0) / 1e9)
        drop_caches()
        t0 = time.perf_counter()
        mount_batchfs(work, arch, batch, mnt, "default")
        try:
            batches_epoch(mnt, 0)
            add("cold", "Batches()", n * row / (time.perf_counter() - t0)
                / 1e9)
        finally:
            work.unmount(mnt)
        drop_caches()
        t0 = time.perf_counter()
        tensors = torch.load(arch)
        load = time.perf_counter() - t0
        del tensors
        for w in COMPARE_WORKERS:
            warm = statistics.median(
                got["warm"]["DataLoader, in memory, %d workers" % w])
            add("cold", "DataLoader, in memory, %d workers" % w,
                n * row / (load + n * row / (warm * 1e9)) / 1e9)
        for w in COMPARE_WORKERS:
            drop_caches()
            add("cold", "DataLoader, from the file, %d workers" % w,
                dl_pread(arch, n, row, img, lab, batch, w) * row / 1e9)
    for how in ("warm", "cold"):
        if got[how] is None:
            del res[how]
            continue
        res[how] = {k: statistics.median(v) for k, v in got[how].items()
                    if k != "bound"}
    if "cold" in res:
        res["cold bound"] = statistics.median(got["cold"]["bound"])
    res["torch.load warm s"] = warm_load
    log("\n  what a user compares: Batches() against DataLoaders, payload "
        "GB/s (median of %d; %s)" % (REPS, loadavg()))
    for how in ("warm", "cold"):
        if how not in res:
            continue
        log("  %s (bound: %s %.3f GB/s)"
            % (how, "page cache" if how == "warm" else "dd bs=1M, cold",
               res[how + " bound"]))
        for k, v in res[how].items():
            log("    %-44s %8.3f GB/s" % (k, v))
    return res


def stats_text(mnt, name):
    """The word value of line 'name' of mnt's stats."""
    with open(mnt + "/stats") as f:
        for line in f:
            k, v = line.split(None, 1)
            if k == name:
                return v.strip()
    return "?"


def read_c(path):
    """`batchfs bench --read path` as a child: Popen (stdout piped)."""
    return subprocess.Popen([BATCHFS, "bench", "--read", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def c_read(proc):
    """(bytes, seconds) a read_c child reports once it has finished."""
    out, err = proc.communicate(timeout=600)
    m = re.search(r"bytes=(\d+) seconds=([0-9.]+)", out)
    if proc.returncode or not m:
        raise Failed("batchfs bench --read: exit %d: %s"
                     % (proc.returncode, err.strip()[-300:]))
    return int(m.group(1)), float(m.group(2))


# One reader process of the "ranks" part: batchfs.Batches() over its own
# rank of a --ranks mount. argv: the mount, the rank, the epoch. It says
# "ready" once imported, starts at the line its parent sends, and prints
# the payload bytes it read, CLOCK_MONOTONIC at its end and the CPU
# seconds it used from the start on.
RANK_READER = r"""
import os, sys, time
mnt, rank, epoch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import torch, batchfs
print("ready", flush=True)
sys.stdin.readline()
nbytes, c0 = 0, time.process_time()
for b in batchfs.Batches(mnt, epoch=epoch, rank=rank, device="cpu"):
    for t in (b.values() if isinstance(b, dict) else b):
        nbytes += t.numel() * t.element_size()
print("%d %.6f %.6f" % (nbytes, time.monotonic(), time.process_time() - c0),
      flush=True)
"""
RANK_COUNTS = (1, 2, 4, 8)
RANKS_WORLD = max(RANK_COUNTS)


def rank_pass(mnt, epoch, r):
    """r reader processes at once (ranks 0..r-1 of mount mnt, each its
    rank's whole epoch 'epoch' through batchfs.Batches()), released
    together once imported: (GB/s of their payload together from the
    release to the last one's end, cores busy meanwhile: the readers'
    CPU seconds and the daemon's per second)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "loader", "python"))
    procs = [subprocess.Popen([sys.executable, "-c", RANK_READER, mnt,
                               str(k), str(epoch)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
             for k in range(r)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise Failed("ranks: a reader of %s did not start" % mnt)
        d0, t0 = daemon_cpu(mnt), time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        total, end, used = 0, t0, 0.0
        for k, p in enumerate(procs):
            out, _ = p.communicate(timeout=600)
            if p.returncode != 0 or not out.split():
                raise Failed("ranks: rank %d of %s, epoch %d: exit %d"
                             % (k, mnt, epoch, p.returncode))
            b, t, c = out.split()[:3]
            total, end = total + int(b), max(end, float(t))
            used += float(c)
        cores = (used + daemon_cpu(mnt) - d0) / (end - t0)
        return total / (end - t0) / 1e9, cores
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def bench_ranks(work, arch, batch, n, row):
    """One mount for many ranks: one mount of the archive with
    --world-size 8 --ranks all, read by R = 1, 2, 4, 8 processes at once,
    each batchfs.Batches() over its own rank (ranks 0..R-1), against R
    times one rank alone (the R = 1 pass of the same round). Warm: the
    archive local and in the page cache, a fresh epoch each pass, with
    the cores the readers and the daemon kept busy. Cold remote (when
    nginx is installed: tools/scripts/deps.sh bench): the archive on
    nginx behind the remote part's link (BENCH_REMOTE_LATENCY_MS,
    BENCH_REMOTE_MBPS), a fresh mount with an emptied --cache-dir each
    pass, epoch 0."""
    opts = ["--world-size", str(RANKS_WORLD), "--ranks", "all"]
    res = {"world size": RANKS_WORLD, "warm": {}, "cold remote": {}}
    mnt = work.mountpoint("ranks")
    got = {}
    mount_batchfs(work, arch, batch, mnt, "default", opts)
    try:
        e = 0
        for rep in range(REPS):
            for r in RANK_COUNTS:
                got.setdefault(r, []).append(rank_pass(mnt, e, r))
                e += 1
    finally:
        work.unmount(mnt)
    res["warm"] = rank_figures(got)
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        res["cold remote"] = {"skipped": "nginx is not installed "
                              "(tools/scripts/deps.sh bench)"}
    else:
        res["cold remote"] = ranks_cold(work, arch, batch, opts)
    log("\n  one mount, --world-size %d --ranks all: R processes at once, "
        "each Batches() over its own rank (median of %d; %s)"
        % (RANKS_WORLD, REPS, loadavg()))
    for how in ("warm", "cold remote"):
        f = res[how]
        if "skipped" in f:
            log("  %-12s skipped: %s" % (how, f["skipped"]))
            continue
        for r in RANK_COUNTS:
            x = f[str(r)]
            log("  %-12s R=%d %8.3f GB/s together, %.2fx R times one rank, "
                "%.2f cores busy" % (how, r, x["GB/s"], x["vs R x one"],
                                     x["cores"]))
    return res


def rank_figures(got):
    """{R: {"GB/s", "vs R x one", "cores"}} (medians over the rounds) of
    got {R: [(GB/s, cores) per round]}; a round's ratio is its R-rank
    figure over R times its own one-rank figure."""
    out = {}
    for r in RANK_COUNTS:
        rates = [g[0] for g in got[r]]
        ratios = [g[0] / (r * one[0]) for g, one in zip(got[r], got[1])]
        out[str(r)] = {"GB/s": statistics.median(rates),
                       "vs R x one": statistics.median(ratios),
                       "cores": statistics.median(g[1] for g in got[r])}
    return out


def ranks_cold(work, arch, batch, opts):
    """The cold remote passes of the ranks part (bench_ranks)."""
    import bench_remote
    www = work.path("ranks-www")
    os.makedirs(www, exist_ok=True)
    name = os.path.basename(arch)
    os.link(arch, os.path.join(www, name))
    srv = bench_remote.Servers(sys.modules[__name__], work, www)
    mnt = work.mountpoint("ranks-remote")
    cache = work.path("ranks-cache")
    got = {}
    try:
        for rep in range(REPS):
            for r in RANK_COUNTS:
                bench_remote.empty(cache)
                mount_batchfs(work, srv.url(name), batch, mnt, "default",
                              list(opts) + ["--cache-dir", cache])
                try:
                    got.setdefault(r, []).append(rank_pass(mnt, 0, r))
                finally:
                    work.unmount(mnt)
    finally:
        srv.close()
        os.unlink(os.path.join(www, name))
    return rank_figures(got)


def gather_rows(arch, n, row):
    """numpy views of a bench archive's rows in its mapping (images [n,
    row - 8] uint8, labels [n] int64), every page read once (resident)."""
    img, lab = archive_rows(arch, n, row)
    m = np.memmap(arch, np.uint8, "r")
    x = m[img:img + n * (row - 8)].reshape(n, row - 8)
    y = m[lab:lab + 8 * n].view(np.int64)
    x.sum(), y.sum()
    return x, y


def gather_epoch(x, y, batch, seed):
    """numpy's gather of a shuffled epoch in this process, each batch as
    torch tensors (what Batches yields): (seconds, CPU seconds)."""
    n = len(y)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(
        seed)).numpy()
    t0, c0 = time.perf_counter(), time.thread_time()
    for k in range(0, n, batch):
        idx = perm[k:k + batch]
        torch.from_numpy(x[idx]), torch.from_numpy(y[idx])
    return time.perf_counter() - t0, time.thread_time() - c0


def loader_epoch(d):
    """The C loader (libbatchfs_loader) in host (CPU) mode over epoch
    directory d, next/release until the end, from open to close:
    (seconds, batch files it opened with O_DIRECT)."""
    import ctypes
    sys.path.insert(0, os.path.join(ROOT, "loader", "python"))
    import batchfs_loader as bl
    lib = bl.load_library(os.path.join(ROOT, "build",
                                       "libbatchfs_loader.so"))
    o, L, b, st = bl._Opts(), ctypes.c_void_p(), bl._Batch(), bl._Stats()
    o.dir, o.mode = os.fsencode(d), bl.MODE_CPU
    t0 = time.perf_counter()
    rc = lib.bfs_loader_open(ctypes.byref(L), ctypes.byref(o))
    if rc < 0:
        raise Failed("loader open %s: %d" % (d, rc))
    while True:
        rc = lib.bfs_loader_next(L, ctypes.byref(b), None)
        if rc:
            break
        lib.bfs_loader_release(L, ctypes.byref(b), None)
    lib.bfs_loader_stats(L, ctypes.byref(st))
    msg = lib.bfs_loader_errmsg(L)
    lib.bfs_loader_close(L)
    if rc != bl.EOF:
        raise Failed("loader %s: %d %s" % (d, rc, msg))
    return time.perf_counter() - t0, st.direct_files


def batches_epoch(mnt, e, **kw):
    """Seconds of one epoch of batchfs.Batches(mnt, epoch=e, device="cpu",
    **kw) (torch tensors), and its batch count."""
    import batchfs
    t0, k = time.perf_counter(), 0
    for _ in batchfs.Batches(mnt, epoch=e, device="cpu", **kw):
        k += 1
    return time.perf_counter() - t0, k


def dataloader_epoch(mnt, e):
    """Seconds of one epoch of batchfs.DataLoader(IterableDataset(mnt,
    epoch=e)), num_workers=0."""
    import batchfs
    t0 = time.perf_counter()
    for _ in batchfs.DataLoader(batchfs.IterableDataset(mnt, epoch=e)):
        pass
    return time.perf_counter() - t0, None


# The readers part's contenders: label -> (mount, how one epoch is read).
# Batches() reads ahead with reader threads (half the online CPUs, 4 to
# 8); Batches(readers=1) is the one-at-a-time path beside it.
READERS = [
    ("Batches()", "default", lambda m, e: batches_epoch(m, e)),
    ("Batches(readers=1)", "default",
     lambda m, e: batches_epoch(m, e, readers=1)),
    ("Batches(stream=False)", "default",
     lambda m, e: batches_epoch(m, e, stream=False)),
    ("Batches(stream=True)", "default",
     lambda m, e: batches_epoch(m, e, stream=True)),
    ("DataLoader(IterableDataset)", "default", dataloader_epoch),
    ("C loader, host", "default",
     lambda m, e: loader_epoch("%s/epoch/%d" % (m, e))),
    ("Batches(stream=False), O_DIRECT refused", "refused",
     lambda m, e: batches_epoch(m, e, stream=False)),
    ("C loader, host, O_DIRECT refused", "refused",
     lambda m, e: loader_epoch("%s/epoch/%d" % (m, e))),
]


def bench_readers(work, arch, batch, n, row):
    """The readers batchfs ships, on a default mount, against numpy's
    gather of the same batches in this process and DataLoaders over the
    tensors in memory (and the null FUSE server's 1 MiB direct reads: what
    FUSE itself carries); each reader's daemon CPU per batch beside the
    gather's own; the readers' fallback (a mount that refuses O_DIRECT);
    cat's and numpy.memmap's ways into batch files of the default mount.
    Contenders alternated within each of REPS rounds, a fresh epoch each
    pass; GB/s of payload, medians."""
    nb = (n + batch - 1) // batch
    mnts = {"default": work.mountpoint("readers"),
            "refused": work.mountpoint("readers-refused")}
    mount_batchfs(work, arch, batch, mnts["default"])
    mount_batchfs(work, arch, batch, mnts["refused"],
                  extra=(), env={"BATCHFS_DEBUG_NO_DIRECT_OPEN": "1"})
    x, y = gather_rows(arch, n, row)
    buf = batch_buffer(batch, row)
    got, cpu, direct = {}, {}, {}
    epoch = {"default": 0, "refused": 0}
    try:
        for rep in range(REPS):
            secs, c = gather_epoch(x, y, batch, SEED + rep)
            got.setdefault("numpy gather", []).append(n * row / secs / 1e9)
            cpu.setdefault("numpy gather", []).append(c / nb * 1e6)
            for label, which, fn in READERS:
                mnt = mnts[which]
                c0 = daemon_cpu(mnt)
                secs, extra = fn(mnt, epoch[which])
                epoch[which] += 1
                got.setdefault(label, []).append(n * row / secs / 1e9)
                cpu.setdefault(label, []).append(
                    (daemon_cpu(mnt) - c0) / nb * 1e6)
                if label.startswith("C loader"):
                    direct[label] = extra
            for label, fn in (
                    ("readinto 1 MiB (cat's way)", lambda e: read_epoch_py(
                        mnts["default"], e, nb, buf, MIB)),
                    ("mmap (numpy.memmap's way)", lambda e: read_files_mmap(
                        batch_paths(mnts["default"], e, nb), buf))):
                b, secs = fn(epoch["default"])
                epoch["default"] += 1
                got.setdefault(label, []).append(b / secs / 1e9)
        stats = {w: stats_text(m, "direct_opens") for w, m in mnts.items()}
    finally:
        for m in mnts.values():
            work.unmount(m)
    tensors = torch.load(arch)
    dl = {"dl0": bench_dataloader(tensors, batch, 0) * row / 1e9,
          "dl2": bench_dataloader(tensors, batch, 2) * row / 1e9,
          # the transport alone: FUSE direct I/O of 1 MiB reads
          "nullfs": nullfs_read(work, n * row)["1M"]}
    del tensors
    res = {"GB/s": {k: statistics.median(v) for k, v in got.items()},
           "daemon us/batch": {k: statistics.median(v)
                               for k, v in cpu.items()},
           "runs": got, "direct_opens": stats, "loader direct": direct,
           **dl}
    print_readers(res, batch, row)
    return res


def print_readers(res, batch, row):
    """The readers part's table and ratios."""
    g, us = res["GB/s"], res["daemon us/batch"]
    best_dl = max(res["dl0"], res["dl2"])
    large = row > 100000
    log("\n  readers batchfs ships, default mount, torch tensors (median of "
        "%d, alternated; %s)" % (REPS, loadavg()))
    log("  %-44s %8s %11s %14s" % ("", "GB/s", "samples/s",
                                   "daemon us/batch"))
    for label, v in list(g.items()) + [
            ("DataLoader, tensors in RAM, 0 workers", res["dl0"]),
            ("DataLoader, tensors in RAM, 2 workers", res["dl2"]),
            ("null FUSE server, direct_io, 1 MiB reads", res["nullfs"])]:
        cost = us.get(label)
        log("  %-44s %8.3f %11s %14s"
            % (label, v, fmt_rate(v * 1e9 / row),
               "" if cost is None else "%.1f%s" % (
                   cost, " (its own)" if label == "numpy gather" else "")))
    log("  direct_opens: %s; C loader files opened O_DIRECT: %s"
        % (res["direct_opens"], res["loader direct"]))
    for label in ("Batches()", "C loader, host",
                  "DataLoader(IterableDataset)"):
        v = g[label]
        log("  %-44s %7.2fx" % ("%s / best DataLoader in RAM" % label,
                                v / best_dl))
        if large:
            if label != "C loader, host":
                c = g["C loader, host"]
                log("  %-44s %7.2fx  [target >= 0.9x %s]"
                    % ("%s / C loader, host" % label, v / c,
                       "MET" if v >= 0.9 * c else "MISSED"))
            continue
        log("  %-44s %7.2fx  [target >= 0.8x %s]"
            % ("%s / numpy gather" % label, v / g["numpy gather"],
               "MET" if v >= 0.8 * g["numpy gather"] else "MISSED"))


def plain_files(work, arch, batch, n, shape):
    """(a') and (a''): the Python readinto and mmap loops over plain files
    of the batch files' sizes on tmpfs (/dev/shm: page cache, no disk),
    one per batch of an epoch: the page-cache speed a mount aims at."""
    row = int(np.prod(shape)) + 8
    nb = (n + batch - 1) // batch
    d = tempfile.mkdtemp(prefix="bfs-bench-plain.", dir="/dev/shm")
    try:
        paths = []
        blob = os.urandom(4096 + batch * row)
        for k in range(nb):
            rows = min(batch, n - k * batch)
            p = os.path.join(d, "batch_%d" % k)
            with open(p, "wb") as f:
                f.write(blob[:4096 + rows * row])
            paths.append(p)
        buf = batch_buffer(batch, row)
        res = {}
        for label, fn in (("readinto 1M", lambda: read_epoch_files(
                paths, buf, MIB)), ("mmap", lambda: read_files_mmap(
                    paths, buf))):
            vals = []
            for _ in range(REPS):
                b, s = fn()
                vals.append(b / s / 1e9)
            res[label] = statistics.median(vals)
        return res
    finally:
        shutil.rmtree(d, ignore_errors=True)


def read_stream(mnt, epoch, nb):
    """Seconds to read stream/epoch (its nb batch files back to back)
    with 8 MiB readinto calls, checking its size against index/N/offsets;
    what the GB/s counts is the payload, as for the batch files."""
    buf = bytearray(8 << 20)
    mv = memoryview(buf)
    t0 = time.perf_counter()
    got = 0
    with open("%s/stream/%d" % (mnt, epoch), "rb", buffering=0) as f:
        while True:
            r = f.readinto(mv)
            if not r:
                break
            got += r
    secs = time.perf_counter() - t0
    with open("%s/index/%d/offsets" % (mnt, epoch), "rb") as f:
        f.seek(21 * nb)
        if int(f.read(20)) != got:
            raise Failed("stream/%d: %d bytes, offsets say otherwise"
                         % (epoch, got))
    return secs


def read_epoch_files(paths, buf, chunk):
    """read_epoch_py's loop over arbitrary files."""
    mv = memoryview(buf)
    payload = 0
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            got = 0
            while got < size:
                r = f.readinto(mv[got:min(size, got + chunk)])
                if not r:
                    raise Failed("short file " + p)
                got += r
        payload += size - 4096
    return payload, time.perf_counter() - t0


def dataloader_rate(ds, batch, workers, collate_fn=None):
    """Samples/s of a shuffled DataLoader pass over ds (capped at
    DL_SECONDS), median; batches are (x, ...) with x's dim 0 the samples."""
    vals = []
    for r in range(REPS):
        dl = DataLoader(ds, batch_size=batch, shuffle=True,
                        num_workers=workers, collate_fn=collate_fn,
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


def bench_dataloader(tensors, batch, workers):
    """Samples/s of a DataLoader pass over the archive's tensors."""
    return dataloader_rate(TensorDataset(tensors["images"], tensors["labels"]),
                           batch, workers)


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
    """The parts of one workload that BENCH_ONLY wants, each into
    results["<name> <part>"]; returns the failures (strings)."""
    n = max(batch * 8, int(round(n0 * SCALE)))
    row = int(np.prod(shape)) + 8
    epoch = n * row
    parts = [p for p in PARTS if wanted(name + " " + p)]
    log("\n== %s: images uint8 %s + labels int64, %d B/sample, batch %d, "
        "n=%d, epoch %.3f GB, %d batches (parts: %s; %s)"
        % (name, list(shape), row, batch, n, epoch / 1e9, -(-n // batch),
           ", ".join(parts), loadavg()))
    arch, how = make_archive(work, name.split()[0], shape, n)
    log("  archive: %s (%s, %.3f GB)" % (os.path.basename(arch), how,
                                        os.path.getsize(arch) / 1e9))
    size = {"n": n, "row": row, "batch": batch, "archive": how}
    errors = []
    try:
        if "modes" in parts:
            since = started()
            r = {}
            r["pagecache"] = c_bench(["--pagecache", arch])
            r["memcpy"] = c_bench(["--memcpy", str(epoch)])
            r["nullfs"] = nullfs_read(work, epoch)
            r["plain"] = plain_files(work, arch, batch, n, shape)
            tensors = torch.load(arch)
            r["batchfs"] = {}
            for mode in MODES:
                try:
                    r["batchfs"][mode] = bench_batchfs(work, arch, batch, n,
                                                       row, tensors, mode)
                except (Failed, OSError, subprocess.TimeoutExpired) as e:
                    r["batchfs"][mode] = {"error": str(e)}
                    errors.append("%s: %s" % (mode, e))
                    log("  batchfs (%s): FAILED: %s" % (mode, e))
            r["dl0"] = bench_dataloader(tensors, batch, 0) * row / 1e9
            r["dl2"] = bench_dataloader(tensors, batch, 2) * row / 1e9
            del tensors
            print_table(name, r, row)
            results[name + " modes"] = finished("modes", r, since,
                                                modes=",".join(MODES), **size)
        for part, fn in (("readers", bench_readers),
                         ("compare", bench_compare),
                         ("epochs", bench_epochs), ("cold", bench_cold),
                         ("ranks", bench_ranks), ("notfit", bench_notfit)):
            if part not in parts:
                continue
            since = started()
            try:
                results[name + " " + part] = finished(
                    part, fn(work, arch, batch, n, row), since, **size)
            except Skipped as e:
                log("  %s: skipped: %s" % (part, e))
            except (Failed, OSError, subprocess.TimeoutExpired) as e:
                errors.append("%s: %s" % (part, e))
                log("  %s: FAILED: %s" % (part, e))
    finally:
        os.unlink(arch)
    return errors


def print_table(name, r, row):
    """The modes part's table (r: its results) and ratios."""
    modes = r["batchfs"]
    lines = [
        ("(a) page cache read, 1 MiB reads (warm)", r["pagecache"]),
        ("(a') plain files on tmpfs: Python readinto 1 MiB",
         r["plain"]["readinto 1M"]),
        ("(a'') plain files on tmpfs: Python mmap", r["plain"]["mmap"]),
        ("(b) memcpy, 1 thread", r["memcpy"]),
        ("(c) null FUSE, direct_io, 1 MiB reads", r["nullfs"]["1M"]),
        ("    null FUSE, direct_io, 128 KiB reads", r["nullfs"]["128K"]),
    ]
    for i, (mode, bf) in enumerate(modes.items()):
        tag = "(d)" if i == 0 else "   "
        lines += [
            ("%s batchfs %s: Python readinto 1 MiB" % (tag, mode),
             bf.get("py 1M")),
            ("    batchfs %s: readinto 1 MiB, listed ahead" % mode,
             bf.get("py 1M listed")),
            ("    batchfs %s: Python readinto 128 KiB" % mode,
             bf.get("py 128K")),
            ("    batchfs %s: Python readinto whole file" % mode,
             bf.get("py whole")),
            ("    batchfs %s: Python mmap" % mode, bf.get("py mmap")),
            ("    batchfs %s: C read() 1 MiB" % mode, bf.get("C 1M")),
            ("    batchfs %s: stream/N, readinto 8 MiB" % mode,
             bf.get("py stream")),
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

    def ratio(label, d, den, target=None):
        mark = ""
        if d is None:
            log("  %-52s %8s" % (label, "n/a"))
            return
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
        pt = mode.startswith("p") and mode != "push"
        ratio("  (a') plain files, readinto", d, r["plain"]["readinto 1M"],
              ("target >= 0.9x", 0.9) if pt and large else None)
        ratio("  (a'') plain files, mmap (batchfs mmap)", bf.get("py mmap"),
              r["plain"]["mmap"],
              ("target >= 0.9x", 0.9) if pt and large else None)
        ratio("  (c) null FUSE", d, r["nullfs"]["1M"],
              ("target >= 2x", 2.0) if pt and large else None)
        ratio("  (a) page cache, C", d, r["pagecache"])
        ratio("  (b) memcpy", d, r["memcpy"])
        ratio("  best DataLoader (samples/s)", d, best_dl)
        ratio("  best DataLoader, directory listed ahead",
              bf.get("py 1M listed"), best_dl)
        ratio("  itself: 128 KiB / 1 MiB reads", bf["py 128K"], d)
        ratio("  stream/N vs (a') plain files, readinto",
              bf.get("py stream"), r["plain"]["readinto 1M"],
              ("target >= 0.8x", 0.8) if not large else None)
        ratio("  stream/N vs best DataLoader", bf.get("py stream"), best_dl,
              ("target >= 20x", 20.0) if not large else None)
        ratio("  stream/N vs its batch files (readinto 1 MiB)",
              bf.get("py stream"), d,
              ("target >= 1.0x", 1.0) if large else None)
        log("  %-52s %8.3f" % ("  daemon CPU s per GB served",
                               bf["cpu s/GB"]))
        log("  %-52s %8.2f ms prefetched, %.2f ms not"
            % ("  open() -> first 4 KiB", bf["open warm"] * 1e3,
               bf["open cold"] * 1e3))
        log("  %-52s %8.1f us (null FUSE: %.1f us a new file, %.1f us "
            "its one file again)"
            % ("  open+close of a prefetched batch",
               bf["open+close"] * 1e6, r["nullfs"]["open+close new"] * 1e6,
               r["nullfs"]["open+close"] * 1e6))
        log("  %-52s %7.2fx (%.2f vs %.2f GB/s)"
            % ("  second read of an open batch / of a plain file",
               bf["reread"][0] / bf["reread"][1], bf["reread"][0],
               bf["reread"][1]))
        log("    parity: " + bf["check"])
        log("    stats: " + " ".join(bf["stats"].split())[:700])


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


def ragged_workload(work, results):
    since = started()
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
    r["dl0"] = dataloader_rate(ds, RAGGED_BATCH, 0, pad_collate)
    r["dl2"] = dataloader_rate(ds, RAGGED_BATCH, 2, pad_collate)
    os.unlink(arch)
    results["ragged rows"] = finished("ragged rows", r, since)
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


def machine():
    """'2 CPUs, 24 GiB, Linux 6.18': what a figure says of the machine."""
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) << 10
    kernel = ".".join(os.uname().release.split(".")[:2])
    return "%d CPUs, %.0f GiB, Linux %s" % (os.cpu_count(), mem / (1 << 30),
                                           kernel)


def started():
    """The date and the load average (1 minute) as a part starts."""
    return time.strftime("%Y-%m-%d %H:%M"), round(os.getloadavg()[0], 2)


def finished(part, res, since, **size):
    """A part's results 'res' as the results file holds them: with "run"
    (RUN, the part's date and load at start and end, its workload's size)
    and "ratios" (figures.ratios: what its figure draws)."""
    date, load = since
    end = round(os.getloadavg()[0], 2)
    res = dict(res, run=dict(RUN, date=date, load=[load, end], **size))
    res["ratios"] = figures.ratios(part, res)
    return res


def save_results(path, results):
    """Merge this run's parts into the results file 'path': each part
    measured replaces its entry, the others keep theirs, so a BENCH_ONLY
    run updates only what it measured."""
    try:
        with open(path) as f:
            old = json.load(f)
        if not isinstance(old, dict):
            old = {}
    except (OSError, ValueError):
        old = {}
    old.update(results)
    with open(path + ".tmp", "w") as f:
        json.dump(old, f, indent=1, default=str)
        f.write("\n")
    os.replace(path + ".tmp", path)


def wanted(part):
    return not ONLY or any(w in part for w in ONLY)


def workload_wanted(name):
    return any(wanted(name + " " + p) for p in PARTS)


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
    results = {}
    RUN.update(machine=machine(), source=source_version(), scale=SCALE,
               reps=REPS, only=",".join(ONLY))
    ok = True
    log("batchfs bench: BENCH_SCALE=%g, median of %d passes, host %s, "
        "%d CPUs, work dir %s. Shared VM: expect +-30 %% run to run."
        % (SCALE, REPS, os.uname().nodename, os.cpu_count(), work.dir))
    log("source: %s; %s" % (RUN["source"], loadavg()))
    log("GB/s = payload bytes (images + labels) per second, 10^9 B/s.")
    try:
        for name, shape, batch, n0 in WORKLOADS:
            if not workload_wanted(name):
                continue
            if workload(work, name, shape, batch, n0, results):
                ok = False
        try:
            if wanted("ragged rows"):
                ragged_workload(work, results)
        except (Failed, OSError, subprocess.TimeoutExpired) as e:
            ok = False
            log("  ragged rows: FAILED: %s" % e)
        if any("remote" in w for w in ONLY):
            import bench_remote  # its servers and peers: only when asked
            try:
                if bench_remote.run(sys.modules[__name__], work, results):
                    ok = False
            except Skipped as e:
                log("\n== remote: skipped: %s" % e)
        if wanted("latency"):
            log("\n== time from `batchfs mount` to the first byte of batch 0, "
                "%d samples (median of %d)" % (LATENCY_SAMPLES, LATENCY_REPS))
            try:
                ran = [results[w[0] + " modes"]["batchfs"] for w in WORKLOADS
                       if w[0] + " modes" in results]
                if ran and not any("error" not in v for modes in ran
                                   for v in modes.values()):
                    raise Failed("skipped: batchfs mount failed above")
                since = started()
                m, f, t = bench_latency(work)
                results["latency"] = finished(
                    "latency", {"mount": m, "first_byte": f, "total": t},
                    since)
                log("  mount returned   %8.1f ms" % (m * 1e3))
                log("  first byte after %8.1f ms" % (f * 1e3))
                log("  total            %8.1f ms  [target <= 50 ms %s]"
                    % (t * 1e3, "MET" if t <= 0.05 else "MISSED"))
            except (Failed, OSError, subprocess.TimeoutExpired) as e:
                ok = False
                log("  FAILED: %s" % e)
    finally:
        work.close()
        log("\nend: %s" % loadavg())
    if results:
        save_results(RESULTS_JSON, results)
        log("results: %s (tools/bench/figures.py draws them)" % RESULTS_JSON)
    if not ok:
        log("\nbench: some batchfs measurements failed (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
