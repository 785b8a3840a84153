#!/usr/bin/python3
"""A mount of a remote source through the fault proxy (tests/lib/
faultproxy.py, in front of nginx): every batch is exact or fails with
EIO, never a wrong byte; the daemon stays up and serves the rest; a fault
that clears is recovered from.

Each case mounts the archive through the proxy with a cache of its own (so
rows are fetched while the fault is on) and compares every batch it reads
with a local mount of the same file:
  transient: latency per answer and a bandwidth cap; 503 with Retry-After;
    resets mid-body; truncated bodies: retried within --timeout, every
    batch of 2 epochs exact;
  a stall past --timeout (3 s): the batches read meanwhile fail with EIO
    (none is wrong), stats still answer; once the proxy is cleared, every
    batch of the epoch is exact again (the chunks that failed are fetched
    again);
  a cache bound of a quarter of the data (rows of 64 KiB, so that it
    holds a batch): batches exact; then the object replaced mid-epoch
    (nginx serves another file of the same size: another ETag), later
    batches needing bytes not in the cache: every batch is the old bytes
    or EIO, some EIO; one log line says the object was replaced;
    last_error says why; the daemon still serves index files."""
import os
import sys

import mountremote as mr
from mountremote import FaultProxy, ml, servers

ml.require_fuse()
servers.require_nginx()
try:
    import torch  # noqa: F401
except ImportError:
    ml.skip("torch is not installed")

N, ROW, B = 2400, 2500, 48
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def compare(rm, local, paths):
    """Batches of the remote mount against the local one's: counts of
    'exact', 'EIO', 'WRONG'."""
    got = mr.read_all(rm, paths)
    out = {"exact": 0, "EIO": 0, "WRONG": 0}
    for p in paths:
        out["EIO" if got[p] == "EIO" else
            "exact" if got[p] == local[p] else "WRONG"] += 1
    return out


def mount(fp, *opts):
    _, rm = mr.mount(fp.url("/data.pt"), "--batch-size", B, "--shuffle",
                     "--seed", 7, "--timeout", 3, *opts)
    return rm


def transient(fp, local, paths):
    cases = [
        ("latency and a bandwidth cap",
         lambda: (fp.latency(0.02), fp.bandwidth(8e6))),
        ("503 with Retry-After", lambda: fp.fail("503", count=6,
                                                  retry_after=1)),
        ("resets mid-body", lambda: fp.fail("reset", count=6)),
        ("truncated bodies", lambda: fp.fail("truncate", count=6)),
    ]
    for name, arm in cases:
        rm = mount(fp)
        arm()
        got = compare(rm, local, paths)
        fp.clear()
        s = ml.stats(rm)
        check(got["exact"] == len(paths),
              "%s: every batch of 2 epochs exact (%s)" % (name, got))
        check(s["remote_retries"] > 0 or name.startswith("latency"),
              "%s: the faults were retried (%d retries)"
              % (name, s["remote_retries"]))
        mr.unmount(rm)


def stall(fp, local, paths):
    rm = mount(fp)
    fp.fail("stall", after=100)
    some = paths[:4]
    got = compare(rm, local, some)
    check(got["WRONG"] == 0 and got["EIO"] > 0,
          "stall past --timeout: batches fail with EIO, none wrong (%s)"
          % got)
    s = ml.stats(rm)
    check(s["pid"] > 0 and "EIO" not in str(s["pid"]),
          "stall: the daemon still answers (stats)")
    fp.clear()
    got = compare(rm, local, paths[:len(paths) // 2])
    check(got["exact"] == len(paths) // 2,
          "stall cleared: every batch exact again (%s)" % got)
    mr.unmount(rm)


def replaced(fp, root):
    """Rows of 64 KiB, 4 a batch: a quarter of the data holds a batch."""
    path, keep = os.path.join(root, "big.pt"), os.path.join(mr.TMP, "big.pt")
    mr.write("torch", path, mr.arrays(96, 64 << 10, 3))
    mr.write("torch", keep, mr.arrays(96, 64 << 10, 3))
    size = os.path.getsize(path)
    log = os.path.join(mr.TMP, "replaced.log")
    _, lm = mr.mount(keep, "--batch-size", 4, "--shuffle", "--seed", 7)
    paths = mr.batch_paths(lm, 3)
    local = mr.read_all(lm, paths)
    _, rm = mr.mount(fp.url("/big.pt"), "--batch-size", 4, "--shuffle",
                     "--seed", 7, "--timeout", 3, "--cache-gb",
                     "%.6f" % (size / 4 / 1e9), "--log-file", log,
                     "--workers", 2)
    half = len(paths) // 6
    got = compare(rm, local, paths[:half])
    check(got["exact"] == half,
          "a cache of a quarter of the data: batches exact (%s)" % got)
    os.makedirs(os.path.join(root, "new"), exist_ok=True)
    new = os.path.join(root, "new", "big.pt")  # same stem, same size
    mr.write("torch", new, mr.arrays(96, 64 << 10, 99))
    check(os.path.getsize(new) == size, "replaced: same size")
    st = os.stat(path)  # nginx's ETag is its mtime (in s) and size
    os.utime(new, (st.st_atime + 10, st.st_mtime + 10))
    os.replace(new, path)
    got = compare(rm, local, paths[half:])
    check(got["WRONG"] == 0 and got["EIO"] > 0,
          "replaced mid-epoch: every batch the old bytes or EIO, some "
          "EIO (%s)" % got)
    with open(log) as f:
        lines = [x for x in f if "replaced since it was mounted" in x]
    check(len(lines) == 1 and "big.pt" in lines[0],
          "replaced: one log line names the object (%d)" % len(lines))
    s = ml.stats(rm)
    check("replaced since it was opened" in s["last_error"],
          "replaced: last_error says so (%s)" % s["last_error"])
    check(len(ml.read_index(os.path.join(rm, "index/5/batch_0"))) == 4,
          "replaced: the daemon still serves index files")
    mr.unmount(rm, lm)


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    mr.write("torch", os.path.join(root, "data.pt"), mr.arrays(N, ROW, 1))
    keep = os.path.join(mr.TMP, "data.pt")  # the local copy, kept
    mr.write("torch", keep, mr.arrays(N, ROW, 1))
    _, lm = mr.mount(keep, "--batch-size", B, "--shuffle", "--seed", 7)
    paths = mr.batch_paths(lm, 2)
    local = mr.read_all(lm, paths)
    with servers.Nginx(root) as ng, FaultProxy(ng.base_url) as fp:
        transient(fp, local, paths)
        stall(fp, local, paths)
        replaced(fp, root)
    mr.unmount(lm)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
