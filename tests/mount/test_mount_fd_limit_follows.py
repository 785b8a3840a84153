#!/usr/bin/python3
"""The bound on the batches a passthrough daemon holds in memfds follows
its descriptor limit when that limit is changed under it.

Regression: the pool computed the bound (stats: batch_fds_max, the soft
RLIMIT_NOFILE less a quarter of it, 256 at most) once at start, so after
`prlimit --pid PID --nofile=...` stats still showed the old bound and the
pool kept to it. Here the daemon starts with a soft limit of 64 and a
hard one of 128 (raised to 128 at start: bound 96); prlimit then sets
(100, 128): stats says 75; (128, 128) again: 96; and the batches read in
between come out right. Skipped where passthrough is not available."""
import os
import resource
import sys

import mountlib as ml

N, B = 400, 4
failures = []


def low_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 128))


def bound(soft):
    return soft - min(soft // 4, 256)


def main():
    ml.require_fuse()
    import torch
    if "passthrough" not in ml.serve_modes():
        ml.skip("passthrough is not available here")
    src = os.path.join(ml.TMP, "small.pt")
    torch.save({"x": torch.arange(N * 8, dtype=torch.int32).reshape(N, 8),
                "y": torch.arange(N)}, src)
    _, mnt = ml.mount(src, None, "--batch-size", B, "--serve",
                      "passthrough", preexec_fn=low_limit)
    try:
        pid = ml.daemon_pid(mnt)
        got = ml.stats(mnt)["batch_fds_max"]
        assert got == bound(128), "at start: %d, want %d" % (got,
                                                              bound(128))
        for soft, k in ((100, 3), (128, 7)):
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, 128))
            got = ml.stats(mnt)["batch_fds_max"]
            assert got == bound(soft), "after prlimit --nofile=%d:128: " \
                "batch_fds_max %d, want %d" % (soft, got, bound(soft))
            meta, a = ml.read_batch("%s/epoch/0/batch_%d" % (mnt, k))
            assert meta["batch"] == str(k), meta
            assert list(a["y"]) == list(range(k * B, (k + 1) * B)), a["y"]
        print("ok: batch_fds_max %d, %d, %d as the limit moved"
              % (bound(128), bound(100), bound(128)))
    except AssertionError as e:
        failures.append(str(e))
    finally:
        ml.umount(mnt)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
