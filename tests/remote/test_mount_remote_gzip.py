#!/usr/bin/python3
"""A server (here the fault proxy in front of nginx) that answers a range
request gzipped (Content-Encoding: gzip, chunked, its Content-Range as
for the bytes themselves) although batchfs asks for the bytes as they
are (Accept-Encoding: identity, which every request carries): its body
is never taken as the object's bytes.

A mount of a URL with secrets (user:password, a presigned-style query),
its cache its own, reads 2 epochs while a few answers are gzipped: every
batch is exact or fails with EIO, never a wrong byte; a log line names
the object (without its secrets) and the Content-Encoding. Once the
proxy is cleared every batch is exact, in that mount and in a new mount
over the same cache directory (nothing of a gzipped answer was cached).
A mount while every answer is gzipped fails, its message naming the
Content-Encoding and no secret."""
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
PASSWORD = "pa55wordGZIPSECRET"
SIG = "secretsigGZIP0123456789"
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def secret_url(base, path):
    host = base.split("://", 1)[1]
    return "http://bob:%s@%s%s?X-Amz-Signature=%s" % (PASSWORD, host, path,
                                                       SIG)


def compare(rm, local, paths):
    got = mr.read_all(rm, paths)
    out = {"exact": 0, "EIO": 0, "WRONG": 0}
    for p in paths:
        out["EIO" if got[p] == "EIO" else
            "exact" if got[p] == local[p] else "WRONG"] += 1
    return out


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    mr.write("torch", os.path.join(root, "data.pt"), mr.arrays(N, ROW, 1))
    keep = os.path.join(mr.TMP, "data.pt")
    mr.write("torch", keep, mr.arrays(N, ROW, 1))
    _, lm = mr.mount(keep, "--batch-size", B, "--shuffle", "--seed", 7)
    paths = mr.batch_paths(lm, 2)
    local = mr.read_all(lm, paths)
    log = os.path.join(mr.TMP, "gzip.log")
    cache = os.path.join(mr.TMP, "gzip-cache")
    opts = ("--batch-size", B, "--shuffle", "--seed", 7, "--timeout", 3)
    with servers.Nginx(root) as ng, FaultProxy(ng.base_url) as fp:
        url = secret_url(fp.base_url, "/data.pt")
        _, rm = mr.mount(url, *opts, "--log-file", log, cache=cache)
        fp.fail("gzip", count=6)
        got = compare(rm, local, paths)
        gz = fp.stats()["injected"]["gzip"]
        check(got["WRONG"] == 0 and got["EIO"] + got["exact"] == len(paths),
              "gzipped answers: every batch exact or EIO, none wrong (%s; "
              "%d answers gzipped)" % (got, gz))
        check(gz > 0, "the proxy gzipped answers (%d)" % gz)
        ae = fp.stats()["accept_encoding"]
        check(list(ae) == ["identity"],
              "every request asks for Accept-Encoding: identity (%s)" % ae)
        fp.clear()
        got = compare(rm, local, paths)
        check(got["exact"] == len(paths),
              "cleared: every batch exact again (%s)" % got)
        with open(log) as f:
            text = f.read()
        lines = [x for x in text.splitlines()
                 if "Content-Encoding gzip" in x]
        check(lines and all("/data.pt" in x for x in lines),
              "a log line names the object and the Content-Encoding "
              "(%d lines%s)" % (len(lines), ": " + lines[0] if lines
                                else ""))
        check(PASSWORD not in text and SIG not in text,
              "no secret in the log")
        mr.unmount(rm)
        _, rm = mr.mount(url, *opts, cache=cache)
        got = compare(rm, local, paths)
        check(got["exact"] == len(paths),
              "a new mount over the same cache: every batch exact (%s)"
              % got)
        mr.unmount(rm)
        fp.fail("gzip")
        p, _ = mr.mount(url, *opts, check=False)
        fp.clear()
        check(p.returncode == 1 and "Content-Encoding gzip" in p.stderr and
              PASSWORD not in p.stderr and SIG not in p.stderr,
              "every answer gzipped: the mount fails, saying why (%d: %s)"
              % (p.returncode, p.stderr.strip()))
    mr.unmount(lm)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
