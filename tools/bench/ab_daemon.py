#!/usr/bin/python3
"""Two or more batchfs binaries side by side: the daemon's CPU per batch.

usage: ab_daemon.py [--rounds N] [--readers R] [--dir DIR] BIN [BIN...]

For a change inside the daemon (a lock, a wake-up, a copy) whose effect is
a few percent of its CPU: each binary mounts the same archive (784-byte
rows in batches of 256, then 147-KiB rows in batches of 32; shuffled, the
default serve mode), and R reader threads of this process read epoch
after epoch (each thread a whole batch file at a time, plain read()s).
The binaries take turns within each round (the order reversed every other
round), each on its next epoch; the first round reads cold archives and
counts like the others. Per binary and row size: the daemon's CPU per
batch (its threads' run time, /proc/PID/task/*/schedstat), its voluntary
and involuntary context switches per batch, payload GB/s; medians over
the rounds, with the load average, and each binary's CPU against the
first's. Archives are written with torch.save into DIR (default: a
temporary directory, removed after)."""
import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch

SHAPES = (("784-byte rows", 400000, 784, 256),
          ("147-KiB rows", 8000, 150528, 32))


def archive(work, n, row):
    path = os.path.join(work, "rows-%d.pt" % row)
    if not os.path.exists(path):
        g = torch.Generator().manual_seed(1)
        torch.save({"x": torch.randint(0, 255, (n, row), dtype=torch.uint8,
                                       generator=g),
                    "y": torch.arange(n)}, path)
    return path


def daemon_counts(pid):
    """(run time ns, voluntary, involuntary context switches) of every
    thread of pid now."""
    ns = vcs = ics = 0
    for t in glob.glob("/proc/%d/task/*" % pid):
        try:
            with open(t + "/schedstat") as f:
                ns += int(f.read().split()[0])
            with open(t + "/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vcs += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        ics += int(line.split()[1])
        except OSError:     # a thread that ended meanwhile
            pass
    return ns, vcs, ics


def read_epoch(mnt, epoch, nb, readers):
    """Seconds to read every batch file of the epoch, 'readers' threads
    taking the next batch in turn."""
    left = iter(range(nb))
    lock = threading.Lock()
    failed = []

    def run():
        buf = bytearray(64 << 20)
        while True:
            with lock:
                k = next(left, None)
            if k is None:
                return
            try:
                fd = os.open("%s/epoch/%d/batch_%d" % (mnt, epoch, k),
                             os.O_RDONLY)
                while os.readv(fd, [buf]) > 0:
                    pass
                os.close(fd)
            except OSError as e:
                failed.append(e)
                return

    threads = [threading.Thread(target=run) for _ in range(readers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise SystemExit("%s epoch %d: %s" % (mnt, epoch, failed[0]))
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--dir")
    ap.add_argument("bins", nargs="+")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix="bfs-ab.")
    mounted = []
    try:
        for what, n, row, batch in SHAPES:
            arch = archive(work, n, row)
            nb = (n + batch - 1) // batch
            mnts = []
            for i, binary in enumerate(a.bins):
                mnt = os.path.join(work, "m%d-%d" % (row, i))
                os.makedirs(mnt, exist_ok=True)
                subprocess.run([binary, "mount", "--batch-size", str(batch),
                                "--shuffle", "--seed", "7", arch, mnt],
                               check=True, timeout=120,
                               stdout=subprocess.DEVNULL)
                mounted.append((binary, mnt))
                with open(mnt + "/stats") as f:
                    mnts.append((mnt, int(f.readline().split()[1])))
            got = [{"us": [], "vcs": [], "ics": [], "gbs": []}
                   for _ in a.bins]
            load0 = open("/proc/loadavg").read().split()[0]
            for r in range(a.rounds):
                order = range(len(a.bins))
                for i in (order if r % 2 == 0 else reversed(order)):
                    mnt, pid = mnts[i]
                    c0 = daemon_counts(pid)
                    secs = read_epoch(mnt, r, nb, a.readers)
                    c1 = daemon_counts(pid)
                    got[i]["us"].append((c1[0] - c0[0]) / nb / 1e3)
                    got[i]["vcs"].append((c1[1] - c0[1]) / nb)
                    got[i]["ics"].append((c1[2] - c0[2]) / nb)
                    got[i]["gbs"].append(n * row / secs / 1e9)
            load1 = open("/proc/loadavg").read().split()[0]
            print("%s, batches of %d (%d a epoch), %d readers, %d rounds, "
                  "load %s -> %s" % (what, batch, nb, a.readers, a.rounds,
                                     load0, load1))
            base = statistics.median(got[0]["us"])
            for binary, g in zip(a.bins, got):
                us = statistics.median(g["us"])
                print("  %-40s daemon %8.1f us/batch (%.3fx)  context "
                      "switches/batch %5.2f vol %5.2f invol  %6.3f GB/s"
                      % (binary[-40:], us, us / base,
                         statistics.median(g["vcs"]),
                         statistics.median(g["ics"]),
                         statistics.median(g["gbs"])))
                print("  %-40s   us/batch by round: %s" % (
                    "", " ".join("%.0f" % x for x in g["us"])))
            for binary, mnt in mounted:
                subprocess.run([binary, "umount", mnt], capture_output=True)
            mounted = []
    finally:
        for binary, mnt in mounted:
            subprocess.run([binary, "umount", mnt], capture_output=True)
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
