#!/usr/bin/python3
"""Where the cache holds a remote object and an epoch reads nearly every
chunk of it (small rows, shuffled), the read-ahead of batches past the
first few merges over wide gaps (fs/object: bfs_objects_far_gap): the
object comes in fewer, larger requests instead of one per row, while the
mount fetches structure only and every batch stays exact. Elsewhere the
gaps stay narrow (nginx's access log is the witness).

- Small rows (784 B), batch 16 (a batch's rows 2 MB apart on average:
  the narrow gap merges none of them, one request per chunk): after two
  epochs read, the object came in at most half as many requests as it
  has chunks (the chunks the first batches claimed split the wide runs),
  and every batch equals a local mount's.
- The same under a cache bound smaller than the object: no request of
  1 MiB or more (eviction: a gap fetched early could be evicted unused).
- Large rows (147 KiB) read by one rank of eight (an eighth of the chunks
  an epoch): no request larger than a few rows."""
import os
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
MiB = 1 << 20


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


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
    _, lm = mr.mount(keep, *opts)
    since = len(ng.log())
    _, rm = mr.mount(ng.url(name), *opts)
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
    mr.unmount(rm, lm)
    return name, size


def bounded(ng, name, size):
    limit = size // 3
    since = len(ng.log())
    _, rm = mr.mount(ng.url(name), "--batch-size", 16, "--shuffle",
                     "--cache-gb", "%.9f" % (limit / 1e9))
    mr.read_all(rm, ["epoch/0/batch_%d" % k for k in range(64)])
    mr.unmount(rm)
    got = sizes(ng, since)
    check(max(got, default=0) < MiB, "under a bound smaller than the "
          "object: no request of 1 MiB or more (largest %d)"
          % max(got, default=0))


def one_rank_of_large_rows(ng, root):
    name = "large.pt"
    mr.write("torch", os.path.join(root, name), mr.arrays(400, 150528, 5))
    since = len(ng.log())
    _, rm = mr.mount(ng.url(name), "--batch-size", 2, "--shuffle",
                     "--world-size", 8, "--rank", 0)
    mr.read_all(rm, ["epoch/0/batch_%d" % k for k in range(20)])
    mr.unmount(rm)
    got = sizes(ng, since)
    check(max(got, default=0) < 2 * MiB, "one rank of eight, large rows: "
          "no request wider than a few rows (largest %d)"
          % max(got, default=0))


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    with servers.Nginx(root) as ng:
        name, size = small_rows(ng, root)
        bounded(ng, name, size)
        one_rank_of_large_rows(ng, root)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
