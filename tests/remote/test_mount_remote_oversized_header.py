#!/usr/bin/python3
"""A remote source whose header declares a size past the reader's limit
is refused by that limit, with the file, the offset and the sizes, before
anything of the declared size is fetched.

Regression: the safetensors and .npy readers fetched the header their
first bytes declared before checking its length, so a safetensors file
of 10 GB declaring a 5 GB header (an .npy file declaring 4 GB) fetched
into the cache until --cache-gb 1 was full, and the mount failed with the
cache's error (bytes N-M: cannot be stored in the cache), not the
header's. nginx serves sparse files; each mount must fail saying:
"URL: offset 0 (8 for .npy): ... header of N bytes exceeds the limit of
M bytes", and the cache must hold less than a MiB on disk afterwards."""
import os
import struct

import mountremote as mr
from mountremote import ml, servers

ml.require_fuse()
servers.require_nginx()

TMP = ml.TMP
GB = 10 ** 9


def sparse(path, head, size):
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def cache_bytes(d):
    """Bytes the cache's files hold on disk (they are sparse: an object's
    file has its size from the start)."""
    return sum(os.stat(os.path.join(r, n)).st_blocks * 512
               for r, _, names in os.walk(d) for n in names)


def main():
    www = os.path.join(TMP, "www")
    os.makedirs(www)
    sparse(os.path.join(www, "big.safetensors"),
           struct.pack("<Q", 5 * GB) + b'{"x":', 10 * GB)
    sparse(os.path.join(www, "big.npy"),
           b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xfffffff0) + b"{}",
           8 * GB)
    failures = []
    cases = [("big.safetensors", "offset 0: ",
              "header of %d bytes exceeds the limit of 100000000 bytes"
              % (5 * GB)),
             ("big.npy", "offset 8: ",
              "npy header of %d bytes exceeds the limit of 65536 bytes"
              % 0xfffffff0)]
    with servers.Nginx(www) as ng:
        for name, where, why in cases:
            cache = os.path.join(TMP, "cache-" + name)
            p, _ = mr.mount(ng.url(name), "--batch-size", 2, "--cache-gb",
                            1, cache=cache, check=False)
            said = p.stderr.strip()
            if p.returncode != 1:
                failures.append("%s: exit %d: %s" % (name, p.returncode,
                                                      said))
            elif ng.url(name) + ": " + where not in said or why not in said:
                failures.append("%s: want '%s%s': %s" % (name, where, why,
                                                          said))
            elif cache_bytes(cache) >= 1 << 20:
                failures.append("%s: %d bytes in the cache" %
                                (name, cache_bytes(cache)))
            else:
                print("ok: %s: %s" % (name, said))
    return ml.finish(failures)


if __name__ == "__main__":
    raise SystemExit(main())
