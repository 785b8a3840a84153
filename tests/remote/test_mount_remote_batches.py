#!/usr/bin/python3
"""A remote source (http:// from nginx on loopback) serves exactly the
batches of the same file mounted locally, and its mount reads only its
structure.

For torch archives, .npz files, safetensors files and .npy files (two
files, one shard), with fixed and ragged fields, alone, mixed with a local
shard, and over several ranks: every batch of 3 epochs of the remote
mount equals the local mount's, byte for byte. At mount, nginx sees a few
requests per object (its first byte, then the ranges of its structure:
ZIP end records and directory, local headers, data.pkl, headers), never
more than a few chunks of it, and no row: the bytes it sent at mount are a
small part of each file, and nothing more is fetched until a batch is
read. 0-dim tensors of a remote torch archive and .npz are metadata, their
values read at mount. In direct, push and cache modes too (no zero copy
from the mapping of an object not sealed: its rows are gathered while
held; a bound under twice its size keeps it from being sealed here,
test_mount_remote_cache checks zero copy once it is). mount.fuse3's
form (`batchfs URL MNT -o ...`, as an fstab line runs it) takes the
remote options as -o keys."""
import os
import subprocess
import sys
import time

import numpy as np

import mountremote as mr
from mountremote import ml, servers

ml.require_fuse()
servers.require_nginx()
try:
    import torch  # noqa: F401  (the torch archives)
except ImportError:
    ml.skip("torch is not installed")

EPOCHS = 3
CHUNK = 64 << 10
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def structure_only(ng, before, urls, sizes, what):
    """The requests nginx saw at mount (after 'before' of its log): a few
    per object, each a small range; no more while nobody reads."""
    log = ng.wait_log(before + 1)[before:]
    time.sleep(0.3)  # the read-ahead follows readers: none yet
    later = ng.log()[before:]
    sent = sum(e["bytes"] for e in log)
    check(len(later) == len(log),
          "%s: nothing fetched after the mount until a batch is read "
          "(%d requests, then %d)" % (what, len(log), len(later)))
    check(len(log) <= 4 * len(urls),
          "%s: a few requests per object at mount (%d for %d)"
          % (what, len(log), len(urls)))
    check(all(e["range"].startswith("bytes=") for e in log),
          "%s: only range requests" % what)
    check(sent <= 4 * CHUNK * len(urls) and sent < sum(sizes) / 2,
          "%s: mount read the structure, not the rows (%d of %d bytes)"
          % (what, sent, sum(sizes)))


def case(ng, what, remote, local, sizes, *opts):
    """Mount remote and local sources alike; compare EPOCHS epochs."""
    before = len(ng.log())
    _, rm = mr.mount(remote, *opts)
    structure_only(ng, before, [u for u in remote if "://" in u], sizes,
                   what)
    _, lm = mr.mount(local, *opts)
    bad = mr.same_batches(rm, lm, EPOCHS)
    check(not bad, "%s: every batch of %d epochs equals the local mount's "
          "(%d differ%s)" % (what, EPOCHS, len(bad),
                             ": " + bad[0] if bad else ""))
    s = ml.stats(rm)
    check(s["reader"] == "remote" and s["remote_fetches"] > 0
          and s["gather_errors"] == 0,
          "%s: rows fetched, no error (stats)" % what)
    mr.unmount(rm, lm)


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    opts = ("--batch-size", 64, "--shuffle", "--seed", 5)
    with servers.Nginx(root) as ng:
        for kind in ("torch", "npz", "safetensors", "npy"):
            for shape in ("fixed", "ragged"):
                arrs = mr.arrays(1500, 1500, 1) if shape == "fixed" \
                    else mr.ragged(1500, 2)
                name = "%s-%s%s" % (kind, shape,
                                    {"torch": ".pt", "npz": ".npz",
                                     "safetensors": ".safetensors",
                                     "npy": ""}[kind])
                files = mr.write(kind, os.path.join(root, name), arrs)
                urls = [ng.url(os.path.relpath(f, root)) for f in files]
                sizes = [os.path.getsize(f) for f in files]
                case(ng, "%s %s" % (kind, shape), urls, files, sizes,
                     *opts)
        # direct mode: rows of 8 KiB would be replied from the mapping
        # (zero copy) were they local; remote ones are gathered, held,
        # while their object is not sealed (a bound under twice its size)
        big = os.path.join(root, "big.pt")
        mr.write("torch", big, mr.arrays(300, 8192, 4))
        gb = "%.6f" % (os.path.getsize(big) * 1.5 / 1e9)
        for mode in ("direct", "push", "cache"):
            _, rm = mr.mount(ng.url("big.pt"), *opts, "--serve", mode,
                             "--cache-gb", gb)
            _, lm = mr.mount(big, *opts, "--serve", mode)
            bad = mr.same_batches(rm, lm, 2)
            if mode == "direct":
                check(ml.stats(lm)["batches_zero_copy"] > 0,
                      "--serve direct: the local mount replies rows from "
                      "its mapping (zero copy)")
            s = ml.stats(rm)
            check(not bad and s["batches_zero_copy"] == 0 and
                  s["remote_sealed"] == 0,
                  "--serve %s: batches exact, none replied from the "
                  "remote mapping (%d differ, %d zero copy, %d sealed)"
                  % (mode, len(bad), s["batches_zero_copy"],
                     s["remote_sealed"]))
            mr.unmount(rm, lm)
        # mount.fuse3's form (fstab): every option in -o, a remote shard
        # as source=, the cache's options as keys
        cache = os.path.join(mr.TMP, "fstab-cache")
        mnt = os.path.join(mr.TMP, "fstab-mnt")
        os.makedirs(mnt, exist_ok=True)
        p = subprocess.run(
            [ml.BATCHFS, ng.url("torch-fixed.pt"), mnt, "-o",
             "batch_size=64,shuffle,seed=5,cache_dir=%s,cache_gb=0.5,"
             "s3_endpoint=http://127.0.0.1:1,nofail" % cache],
            capture_output=True, text=True, env=mr.env_without_aws(),
            timeout=300)
        check(p.returncode == 0, "-o cache_dir=,cache_gb=,s3_endpoint=: "
              "mounted (%s)" % p.stderr.strip())
        if p.returncode == 0:
            ml._mounts.append(mnt)
            _, lm = mr.mount(os.path.join(root, "torch-fixed.pt"), *opts)
            bad = mr.same_batches(mnt, lm, 1)
            d = mr.info(mnt)
            check(not bad and d["cache"] == {"dir": cache,
                                            "limit_bytes": 500000000},
                  "-o form: batches exact, the cache as asked (%s)"
                  % d["cache"])
            mr.unmount(mnt, lm)
        # 0-dim tensors: metadata, their element read at mount
        import torch
        torch.save({"x": torch.arange(4000).view(1000, 4),
                    "mean": torch.tensor(0.25)}, os.path.join(root, "m.pt"))
        with open(os.path.join(root, "m.npz"), "wb") as f:
            np.savez(f, x=np.arange(4000).reshape(1000, 4),
                     std=np.float64(1.5))
        for name, key, want in (("m.pt", "mean", 0.25),
                                ("m.npz", "std", 1.5)):
            _, rm = mr.mount(ng.url(name), "--batch-size", 10)
            got = mr.info(rm)["metadata"].get(key)
            check(got == want, "%s: a 0-dim tensor's value at mount "
                  "(%s: %s)" % (name, key, got))
            mr.unmount(rm)
        # shards: one remote, one local, then a remote one again
        shards = []
        for i in range(3):
            path = os.path.join(root, "shard%d.pt" % i)
            mr.write("torch", path, mr.arrays(700, 1000, 10 + i))
            shards.append(path)
        remote = [ng.url("shard0.pt"), shards[1], ng.url("shard2.pt")]
        case(ng, "local and remote shards mixed", remote, shards,
             [os.path.getsize(shards[0]), os.path.getsize(shards[2])],
             *opts)
        # several ranks in one mount
        case(ng, "ranks 0-2 of 3", [ng.url("shard0.pt")], [shards[0]],
             [os.path.getsize(shards[0])], "--batch-size", 32,
             "--shuffle", "--world-size", 3, "--ranks", "0-2")
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
