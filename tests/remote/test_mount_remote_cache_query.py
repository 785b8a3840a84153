#!/usr/bin/python3
"""The cache key holds the query string (hashed, never in clear), but
for the parameters that sign a presigned URL.

nginx serves /d.pt?f=A and /d.pt?f=B from two files of the same size
and mtime (so one ETag, nginx's being mtime-size), of different rows:

- a mount of ?f=A, then one of ?f=B with the same --cache-dir: each
  serves its own object's bytes (not the first one's from the cache);
- one mount of both as two shards: each shard its own bytes;
- ?f=A again, and ?f=A with presigning parameters (X-Amz-Signature,
  X-Amz-Date, ...: they sign the request, they do not name the object):
  served from the cache, nginx sends no row byte;
- the cache directory's file names and contents hold no query text."""
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

QA = "q7c0ffee5eed1"
QB = "q7c0ffee5eed2"
SIG = "5e1f5164a7e0fdeadbeefcafe0ddba11"
PRESIGN = ("&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDQUERYKEY"
           "%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date="
           "20260101T000000Z&X-Amz-Expires=600&X-Amz-SignedHeaders=host"
           "&X-Amz-Signature=" + SIG)
NEEDLES = [QA, QB, SIG, "f=q7", "X-Amz", "AKIDQUERYKEY"]
CONF = """        location = /d.pt {
            rewrite ^ /d-$arg_f.pt break;
        }
"""
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def cache_texts(cache):
    """(name, contents) of every file of the cache directory."""
    out = []
    for dirpath, _, files in os.walk(cache):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                out.append((name, f.read().decode("latin-1")))
    return out


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    keep = {}
    for q, seed in ((QA, 1), (QB, 2)):
        d = os.path.join(mr.TMP, q)
        os.makedirs(d, exist_ok=True)
        keep[q] = os.path.join(d, "d.pt")
        mr.write("torch", keep[q], mr.arrays(800, 2000, seed))
        shutil.copyfile(keep[q], os.path.join(root, "d-%s.pt" % q))
    a, b = (os.path.join(root, "d-%s.pt" % q) for q in (QA, QB))
    if os.path.getsize(a) != os.path.getsize(b):
        ml.skip("torch wrote two archives of different sizes")
    os.utime(b, ns=(os.stat(a).st_atime_ns, os.stat(a).st_mtime_ns))
    cache = os.path.join(mr.TMP, "query-cache")
    opts = ("--batch-size", 40, "--shuffle", "--seed", 3)
    with servers.Nginx(root, conf=CONF) as ng:
        url = {q: ng.url("d.pt") + "?f=" + q for q in (QA, QB)}
        tags = set()
        for q in (QA, QB):
            with _get(url[q]) as r:
                tags.add(r.headers.get("ETag"))
        check(len(tags) == 1, "nginx: one ETag for both objects (%s)"
              % sorted(tags))
        _, la = mr.mount(keep[QA], *opts)
        _, lb = mr.mount(keep[QB], *opts)
        _, ra = mr.mount(url[QA], *opts, cache=cache)
        bad = mr.same_batches(ra, la, 1)
        check(not bad, "?f=A: its own bytes (%d batches differ)" % len(bad))
        mr.unmount(ra)
        _, rb = mr.mount(url[QB], *opts, cache=cache)
        bad = mr.same_batches(rb, lb, 1)
        check(not bad, "?f=B after ?f=A, one cache directory: its own "
              "bytes (%d batches differ)" % len(bad))
        mr.unmount(rb)
        _, l2 = mr.mount([keep[QA], keep[QB]], *opts)
        _, r2 = mr.mount([url[QA], url[QB]], *opts, cache=cache)
        bad = mr.same_batches(r2, l2, 1)
        check(not bad, "?f=A and ?f=B as two shards of one mount: each "
              "its own bytes (%d batches differ)" % len(bad))
        mr.unmount(r2, l2)
        for what, u in (("?f=A again", url[QA]),
                        ("?f=A presigned", url[QA] + PRESIGN)):
            before = len(ng.log())
            _, ra = mr.mount(u, *opts, cache=cache)
            bad = mr.same_batches(ra, la, 1)
            mr.unmount(ra)
            later = ng.log()[before:]
            check(not bad and all(e["range"] == "bytes=0-0" for e in later),
                  "%s: exact (%d differ), from the cache (%s)"
                  % (what, len(bad),
                     [(e["range"], e["bytes"]) for e in later][:5]))
        mr.unmount(la, lb)
    texts = cache_texts(cache)
    found = sorted({(name, w) for name, text in texts for w in NEEDLES
                    if w in name or w in text})
    check(not found, "no query text in the cache directory's %d files "
          "(%s)" % (len(texts), found))
    return ml.finish(failures)


def _get(url):
    import urllib.request
    req = urllib.request.Request(url, headers={"Range": "bytes=0-0"})
    return urllib.request.urlopen(req, timeout=30)


if __name__ == "__main__":
    sys.exit(main())
