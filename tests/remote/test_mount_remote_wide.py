#!/usr/bin/python3
"""Where the cache holds a remote object and an epoch reads nearly every
chunk of it (small rows, shuffled), the read-ahead of batches past the
first few merges over wide gaps (fs/remote/object: bfs_objects_far_gap): the
object comes in fewer, larger requests instead of one per row, while the
mount fetches structure only and every batch stays exact. Elsewhere the
gaps stay narrow.

- Small rows (784 B), batch 16 (a batch's rows 2 MB apart on average:
  the narrow gap merges none of them, one request per chunk): after two
  epochs read, the object came in at most half as many requests as it
  has chunks (nginx's access log; the chunks the first batches claimed
  split the wide runs), and every batch equals a local mount's. The
  daemon's log says so, once.
- The same object under a cache bound a third of its size (eviction: a
  gap fetched early could be evicted unused), and large rows (147 KiB)
  read by one rank of eight (an eighth of the chunks an epoch): narrow
  gaps (the log says nothing of wide ones), every batch read."""
import os
import sys

import mountremote as mr
from mountremote import ml, servers

ml.require_fuse()
servers.require_nginx()
try:
    import torch  # noqa: F401  (mr.write saves torch archives)
except ImportError:
    ml.skip("torch is not installed")

failures = []
WIDE = "merge over gaps of up to"


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def log_text(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def sizes(ng, since):
    """Byte counts of the ranged GETs nginx answered since entry 'since'."""
    return [e["bytes"] for e in ng.log()[since:]
            if e["range"] != "-" and e["bytes"] > 0]


def small_rows(ng, root):
    name = "small.pt"
    path = os.path.join(root, name)
    mr.write("torch", path, mr.arrays(40000, 784, 3))
    keep = os.path.join(mr.TMP, name)
    mr.write("torch", keep, mr.arrays(40000, 784, 3))
    size = os.path.getsize(path)
    opts = ("--batch-size", 16, "--shuffle", "--seed", 4)
    log = os.path.join(mr.TMP, "wide.log")
    _, lm = mr.mount(keep, *opts)
    since = len(ng.log())
    _, rm = mr.mount(ng.url(name), *opts, "--log-file", log)
    at_mount = sum(sizes(ng, since))
    check(at_mount < size // 20, "the mount fetched structure only (%d of "
          "%d bytes)" % (at_mount, size))
    bad = mr.same_batches(rm, lm, 2)
    check(not bad, "every batch of 2 epochs exact (%d differ)" % len(bad))
    got = sizes(ng, since)
    chunks = -(-size // (64 << 10))
    check(len(got) <= chunks // 2, "the object came in at most half as many "
          "requests as it has chunks (%d requests, %d chunks, the largest "
          "%d bytes)" % (len(got), chunks, max(got, default=0)))
    check(log_text(log).count(WIDE) == 1, "the log says so once")
    mr.unmount(rm, lm)
    return name, size


def narrow(ng, name, what, *opts, batches):
    """A mount of name with opts reads 'batches' batches of epoch 0, with
    narrow gaps."""
    log = os.path.join(mr.TMP, "narrow-%d.log" % len(ng.log()))
    _, rm = mr.mount(ng.url(name), *opts, "--log-file", log)
    got = mr.read_all(rm, ["epoch/0/batch_%d" % k for k in range(batches)])
    check(all(v != "EIO" for v in got.values()), "%s: every batch read"
          % what)
    check(WIDE not in log_text(log), "%s: narrow gaps" % what)
    mr.unmount(rm)


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    with servers.Nginx(root) as ng:
        name, size = small_rows(ng, root)
        narrow(ng, name, "a cache bound a third of the object",
               "--batch-size", 16, "--shuffle", "--cache-gb",
               "%.9f" % (size / 3 / 1e9), batches=64)
        large = "large.pt"
        mr.write("torch", os.path.join(root, large),
                 mr.arrays(400, 150528, 5))
        narrow(ng, large, "one rank of eight, large rows", "--batch-size",
               2, "--shuffle", "--world-size", 8, "--rank", 0, batches=20)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
