#!/usr/bin/python3
"""How a mount reads its rows (dataset.json: reader_why) is said whole.

Regression: the reason was built in buffers of 200 bytes, the remote
cache's directory cut to its first 60 bytes (a local shard's reason to
80), so a cache directory of a longer path was cut short, and at a byte
count that may fall inside a UTF-8 character. Here a remote source (and a
local shard beside it) is mounted with a cache directory of about 300
bytes whose name holds multi-byte characters ("données-é..."):
reader_why names the whole directory and the local files' part, is valid
UTF-8 (dataset.json is read as JSON), and mentions no cut ("...")."""
import os
import shutil
import sys

import mountremote as mr
from mountremote import ml, servers

ml.require_fuse()
servers.require_nginx()
try:
    import torch  # noqa: F401
except ImportError:
    ml.skip("torch is not installed")


def main():
    failures = []
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root)
    mr.write("torch", os.path.join(root, "a.pt"), mr.arrays(64, 256, 1))
    local = os.path.join(mr.TMP, "b.pt")
    mr.write("torch", local, mr.arrays(64, 256, 2))
    cache = os.path.join(mr.TMP, "données-é" * 20, "cache")
    with servers.Nginx(root) as ng:
        _, mnt = mr.mount([ng.url("a.pt"), local], "--batch-size", 4,
                          cache=cache)
        try:
            why = mr.info(mnt)["reader_why"]
            if "into the cache %s (" % cache not in why:
                failures.append("the cache directory is not said whole: "
                                "%r" % why)
            if "; local files: " not in why or "..." in why:
                failures.append("the local files' part is cut: %r" % why)
            if not failures:
                print("ok: reader_why of %d bytes: %s"
                      % (len(why.encode()), why))
        finally:
            mr.unmount(mnt)
    shutil.rmtree(cache, ignore_errors=True)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
