#!/usr/bin/python3
"""A remote source whose cache directory is on a small, full filesystem:
a tmpfs the test mounts itself (root; skipped where it cannot), smaller
than the object nginx serves.

- --cache-gb far above what the tmpfs holds: the writes that find it
  full (ENOSPC) evict and write again, so 2 epochs are served exact
  (compared with a local mount of the same data) and nginx sends at most
  twice the bytes the epochs read (not the same ranges again and again).
- No --cache-gb: the bound comes from the tmpfs's free space, the mount's
  line names it, a warning says the object exceeds it, and 2 epochs are
  served exact within the same 2x of bytes sent.
- A tmpfs already full before the mount (room for the archive's
  structure, not for a row): the batches are served exact all the same,
  from the bytes fetched, kept in memory while the gather reads them,
  within the same 2x of bytes sent; also without --cache-gb (then no
  warning says batches will fail)."""
import os
import subprocess
import sys

import mountremote as mr
from mountremote import ml, servers

ml.require_fuse()
servers.require_nginx()
try:
    import torch  # noqa: F401
except ImportError:
    ml.skip("torch is not installed")

failures = []
TMPFS_BYTES = 4 << 20
ROOM = 320 << 10  # the cache's files and the archive's structure
EPOCHS = 2
OPTS = ("--batch-size", 2, "--shuffle", "--seed", 7, "--workers", 2)


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def mount_tmpfs(where):
    """A tmpfs of TMPFS_BYTES at 'where', or skip (exit 77) saying why."""
    os.makedirs(where, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o",
                        "size=%d,mode=0700" % TMPFS_BYTES, "tmpfs", where],
                       capture_output=True, text=True, timeout=30)
    if p.returncode:
        ml.skip("cannot mount a tmpfs for the cache (%s)"
                % p.stderr.strip())


def unmount_tmpfs(where):
    subprocess.run(["umount", "-l", where], capture_output=True, timeout=30)


def fill(where, leave):
    """A file taking all but 'leave' bytes of the filesystem at 'where':
    its path."""
    sv = os.statvfs(where)
    path = os.path.join(where, "filler")
    with open(path, "wb") as f:
        f.write(b"\1" * max(0, sv.f_bavail * sv.f_frsize - leave))
    return path


def sent_since(ng, before):
    """Body bytes nginx sent since its log had 'before' lines."""
    return sum(e["bytes"] for e in ng.log()[before:])


def epochs_exact(ng, url, lm, cache, *opts):
    """Mount url with the cache directory 'cache', read EPOCHS epochs:
    (mount's CompletedProcess, batches that differ from lm's, bytes sent
    by nginx for the mount and its reads, the mount's stats)."""
    before = len(ng.log())
    p, rm = mr.mount(url, *OPTS, *opts, cache=cache)
    bad = mr.same_batches(rm, lm, EPOCHS)
    s = ml.stats(rm)
    mr.unmount(rm)
    # gone, and its cache files closed: the tmpfs's space is what the next
    # case finds free (a daemon still exiting would free it later)
    if not ml.wait_pid_exit(s["pid"]):
        raise AssertionError("the daemon of %s still runs %d s after its "
                             "unmount" % (rm, ml.LIVENESS_S))
    sent = sent_since(ng, before)
    print("  sent %d bytes, %d fetches, %d failed, %d evictions, limit %d, "
          "%d bytes served from memory"
          % (sent, s["remote_fetches"], s["remote_fetch_failures"],
             s["remote_cache_evictions"], s["remote_cache_limit"],
             s.get("remote_memory_bytes", 0)))
    return p, bad, sent, s


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    # 48 rows of 256 KiB: 12 MiB, three times the tmpfs
    arrs = mr.arrays(48, 256 << 10, 11)
    path = os.path.join(root, "big.pt")
    mr.write("torch", path, arrs)
    keep = os.path.join(mr.TMP, "big.pt")
    mr.write("torch", keep, arrs)
    size = os.path.getsize(path)
    tmpfs = os.path.join(mr.TMP, "tmpfs")
    mount_tmpfs(tmpfs)
    try:
        with servers.Nginx(root) as ng:
            _, lm = mr.mount(keep, *OPTS)
            url = ng.url("big.pt")
            # a bound the disk cannot hold: full, evicted, written again
            cache = os.path.join(tmpfs, "bounded")
            _, bad, sent, _ = epochs_exact(ng, url, lm, cache,
                                           "--cache-gb", 1)
            check(not bad, "--cache-gb above the disk: %d epochs exact "
                  "(%d batches differ)" % (EPOCHS, len(bad)))
            check(sent <= 2 * EPOCHS * size,
                  "--cache-gb above the disk: %d bytes sent for %d epochs "
                  "of a %d-byte object (at most twice what they read)"
                  % (sent, EPOCHS, size))
            subprocess.run(["rm", "-rf", cache], timeout=60)
            # no --cache-gb: the bound from the free space, said
            cache = os.path.join(tmpfs, "default")
            p, bad, sent, s = epochs_exact(ng, url, lm, cache)
            line = p.stdout.strip()
            bound = "cache %s (at most %.3g MB, 4/5 of its filesystem's " \
                "free space" % (cache, s["remote_cache_limit"] / 1e6)
            check(bound in line and
                  s["remote_cache_limit"] <= TMPFS_BYTES * 4 // 5,
                  "the mount's line names the bound from the free space "
                  "(%s)" % line)
            check("exceed the cache's bound" in p.stderr and
                  "%.3g MB" % (size / 1e6) in p.stderr,
                  "a warning says the object exceeds the bound (%s)"
                  % p.stderr.strip())
            check(not bad, "no --cache-gb: %d epochs exact (%d batches "
                  "differ)" % (EPOCHS, len(bad)))
            check(sent <= 2 * EPOCHS * size,
                  "no --cache-gb: %d bytes sent for %d epochs of a "
                  "%d-byte object (at most twice what they read)"
                  % (sent, EPOCHS, size))
            subprocess.run(["rm", "-rf", cache], timeout=60)
            # full before the mount: room for the structure, not a row
            filler = fill(tmpfs, ROOM)
            cache = os.path.join(tmpfs, "full")
            _, bad, sent, s = epochs_exact(ng, url, lm, cache,
                                           "--cache-gb", 1)
            check(not bad, "a disk full before the mount: %d epochs exact "
                  "(%d batches differ)" % (EPOCHS, len(bad)))
            check(s.get("remote_memory_bytes", 0) > 0,
                  "a disk full before the mount: rows served from memory "
                  "(%d bytes)" % s.get("remote_memory_bytes", 0))
            check(sent <= 2 * EPOCHS * size,
                  "a disk full before the mount: %d bytes sent for %d "
                  "epochs of a %d-byte object (at most twice what they "
                  "read)" % (sent, EPOCHS, size))
            subprocess.run(["rm", "-rf", cache], timeout=60)
            # the same without --cache-gb: a bound of what little is free
            cache = os.path.join(tmpfs, "full-default")
            p, bad, sent, s = epochs_exact(ng, url, lm, cache)
            check(not bad and s.get("remote_memory_bytes", 0) > 0 and
                  "may not hold" not in p.stderr,
                  "a disk full before the mount, no --cache-gb: %d epochs "
                  "exact, from memory, no EIO foretold (%d differ; %s)"
                  % (EPOCHS, len(bad), p.stderr.strip()))
            check(sent <= 2 * EPOCHS * size,
                  "a disk full before the mount, no --cache-gb: %d bytes "
                  "sent for %d epochs of a %d-byte object" % (sent, EPOCHS,
                                                              size))
            os.unlink(filler)
            mr.unmount(lm)
    finally:
        ml._cleanup()
        unmount_tmpfs(tmpfs)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
