#!/usr/bin/python3
"""tests/lib/faultproxy.py, the bench's link and the remote tests' proxy,
on one kept-alive client connection to nginx (so one upstream connection
of the proxy's): a HEAD, then a GET of the same object, then a GET of an
empty file, then a ranged GET, then HEAD again all answer as nginx does
(a HEAD's Content-Length the object's, no body; bodies byte-exact, the
large one streamed through the bandwidth cap); a response the proxy
did not read to its end (a HEAD's, an empty body's) must not leave the
upstream connection busy (a 502 for the next request)."""
import http.client
import os
import urllib.parse

import remotelib as rl
from remotelib import FaultProxy, servers

servers.require_nginx()
MiB = 1 << 20


def main():
    root = os.path.join(rl.TMP, "www")
    os.makedirs(root, exist_ok=True)
    data = os.urandom(3 * MiB + 5)
    with open(os.path.join(root, "obj.bin"), "wb") as f:
        f.write(data)
    open(os.path.join(root, "empty.bin"), "wb").close()
    with servers.Nginx(root) as ng, FaultProxy(ng.base_url) as p:
        p.bandwidth(1e9)
        u = urllib.parse.urlsplit(p.base_url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            for method, path, hdrs, status, body in (
                    ("HEAD", "/obj.bin", {}, 200, b""),
                    ("GET", "/obj.bin", {}, 200, data),
                    ("GET", "/empty.bin", {}, 200, b""),
                    ("HEAD", "/empty.bin", {}, 200, b""),
                    ("GET", "/obj.bin", {"Range": "bytes=10-1048585"}, 206,
                     data[10:1048586]),
                    ("HEAD", "/obj.bin", {}, 200, b"")):
                c.request(method, path, headers=hdrs)
                r = c.getresponse()
                got = r.read()
                assert r.status == status, (method, path, r.status)
                assert got == body, (method, path, len(got), len(body))
                want = len(data) if method == "HEAD" and path == "/obj.bin" \
                    else len(body)
                assert int(r.getheader("content-length")) == want, \
                    (method, path, r.getheader("content-length"), want)
        finally:
            c.close()
        assert p.requests == 6, p.requests
    print("ok")


main()
