#!/usr/bin/python3
"""A fault-injecting HTTP proxy between a client and a server (nginx,
moto's S3 server), on 127.0.0.1, for tests of remote sources.

    with FaultProxy("http://127.0.0.1:8080") as p:
        url = p.url("/data.pt")          # the client reads through p
        p.latency(0.02)                  # every answer 20 ms late
        p.bandwidth(200e6)               # the link: 200 MB/s, shared
        p.fail("503", count=3, retry_after=1)
        p.fail("reset")                  # every answer until clear()
        p.clear()                        # no more faults
        p.replace("/data.pt", "/data2.pt")   # serve another object there

Faults (fail(kind, count=None, path=None, **params); count None = until
clear(); path = only requests for that path):
    "503"          503 Service Unavailable, Retry-After: retry_after (s)
    "status"       any status (code=...), an S3-style XML error body
    "reset"        the headers and half the body, then a TCP reset
    "truncate"     the headers and half the body, then a clean close
    "stall"        the headers and `after` body bytes (default half),
                   then nothing until clear() or stop() (at most
                   max_stall s, default 60), then a reset
    "short_range"  the Range asked of the server cut to its first half:
                   an honest 206 of fewer bytes than asked
    "wrong_range"  the bytes one before (or after) those asked for, with
                   their honest Content-Range: another range
    "ignore_range" the Range dropped: 200 and the whole object
    "open_range"   bytes=A-B asked of the server as bytes=A-: a 206 of
                   more than asked, to the object's end (s3rver 3.7.1
                   answered bytes=0-0 so)
    "ignore_conditions"  If-Match and If-Unmodified-Since dropped from
                   a request that has them: the server answers what it
                   holds now, as one that ignores them (s3rver 3.7.1
                   did)
    "drop_etag"    the ETag header removed from answers
    "gzip"         a 2xx answer's body gzipped and sent chunked with
                   Content-Encoding: gzip, its other headers (the
                   Content-Range too) as they were: a server or proxy
                   that ignores Accept-Encoding: identity
    "extra_bytes"  a 2xx answer's body sent chunked, without
                   Content-Length, with `extra` bytes (default 4096)
                   more than its Content-Range announced: their own
                   chunk, or with joined=True in the body's last one
Each injected fault is counted in injected[kind]; requests counts every
request, bytes every body byte sent, accept_encoding the requests by
their Accept-Encoding header ("" none).

SigV4 (verify_sigv4={"keys": {ACCESS: SECRET}, "region": "us-east-1",
"token": None}): every request must carry a valid AWS SigV4 Authorization
header for one of the keys (and the token, signed, when one is given),
else 403 with S3's error codes (InvalidAccessKeyId,
SignatureDoesNotMatch, AccessDenied). moto's S3 server itself takes any
key and any signature: servers.S3Server() puts this proxy in front of
it.

Also a program: faultproxy.py UPSTREAM [--port-file F] runs until SIGTERM;
POST /__fault__ with a JSON body {"op": "fail"|"clear"|"latency"|
"bandwidth"|"replace"|"stats", ...arguments} controls it from another
process.
"""
import datetime
import hashlib
import hmac
import http.client
import http.server
import json
import re
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

KINDS = ("503", "status", "reset", "truncate", "stall", "short_range",
         "wrong_range", "ignore_range", "open_range", "ignore_conditions",
         "drop_etag", "gzip", "extra_bytes")
IO_TIMEOUT = 30  # every socket operation of the proxy is bounded
CHUNK = 256 * 1024  # bytes of a body read from upstream, sent, paced
BURST = 0.002  # seconds the link's schedule may lag (see _pace)
HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
       "te", "trailer", "upgrade"}


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _uri_encode(s, slash=True):
    return urllib.parse.quote(s, safe="-_.~" + ("/" if slash else ""))


def canonical_query(query):
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{_uri_encode(k, False)}={_uri_encode(v, False)}"
                    for k, v in sorted(pairs))


def sigv4_signature(secret, method, raw_path, headers, signed, amz_date,
                    scope, payload_hash):
    """The SigV4 signature of a request (S3's rules: the path as sent,
    encoded once). headers: lower-case name -> value."""
    path, _, query = raw_path.partition("?")
    canon_headers = "".join(
        f"{h}:{' '.join(headers.get(h, '').strip().split())}\n"
        for h in signed)
    creq = "\n".join([method, path, canonical_query(query), canon_headers,
                      ";".join(signed), payload_hash])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                     hashlib.sha256(creq.encode()).hexdigest()])
    date, region, service, _ = scope.split("/")
    k = _hmac(("AWS4" + secret).encode(), date)
    k = _hmac(k, region)
    k = _hmac(k, service)
    k = _hmac(k, "aws4_request")
    return hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()


def sigv4_headers(method, url, access, secret, region, token=None,
                  body=b""):
    """Headers that sign a request (for tests that upload: PUT objects)."""
    u = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{now:%Y%m%d}/{region}/s3/aws4_request"
    h = {"host": u.netloc, "x-amz-date": amz_date,
         "x-amz-content-sha256": hashlib.sha256(body).hexdigest()}
    if token:
        h["x-amz-security-token"] = token
    signed = sorted(h)
    raw = u.path + ("?" + u.query if u.query else "")
    sig = sigv4_signature(secret, method, raw, h, signed, amz_date, scope,
                          h["x-amz-content-sha256"])
    h["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
                          f"SignedHeaders={';'.join(signed)}, "
                          f"Signature={sig}")
    return h


_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/,]+)/(\d{8})/([^/]+)/"
                   r"([^/]+)/aws4_request,\s*SignedHeaders=([^,]+),\s*"
                   r"Signature=([0-9a-f]{64})$")


def sigv4_check(cfg, method, raw_path, headers):
    """None when the request is signed right for cfg, else S3's error
    code."""
    auth = headers.get("authorization")
    if not auth:
        return "AccessDenied"
    m = _AUTH.match(auth)
    if not m:
        return "AuthorizationHeaderMalformed"
    access, date, region, service, signed, sig = m.groups()
    secret = cfg["keys"].get(access)
    if secret is None:
        return "InvalidAccessKeyId"
    signed = signed.split(";")
    if (region != cfg.get("region", "us-east-1") or service != "s3"
            or "host" not in signed or "x-amz-date" not in signed
            or not headers.get("x-amz-date", "").startswith(date)):
        return "AuthorizationHeaderMalformed"
    if cfg.get("token") and (
            headers.get("x-amz-security-token") != cfg["token"]
            or "x-amz-security-token" not in signed):
        return "InvalidToken"
    payload = headers.get("x-amz-content-sha256")
    if payload is None:
        return "MissingContentSHA256"  # what S3 answers without it
    want = sigv4_signature(secret, method, raw_path, headers, signed,
                           headers["x-amz-date"],
                           f"{date}/{region}/{service}/aws4_request",
                           payload)
    return None if hmac.compare_digest(want, sig) else "SignatureDoesNotMatch"


class _Fault:
    def __init__(self, kind, count, path, params):
        self.kind, self.count, self.path, self.params = (kind, count, path,
                                                         params)


class FaultProxy:
    def __init__(self, upstream, verify_sigv4=None, max_stall=60):
        u = urllib.parse.urlsplit(upstream)
        assert u.scheme == "http", "the proxy speaks plain HTTP upstream"
        self.up_host, self.up_port = u.hostname, u.port or 80
        self.verify = verify_sigv4
        self.max_stall = max_stall
        self.lock = threading.Lock()
        self.faults = []           # lock
        self.rewrites = {}         # lock: path -> upstream path
        self._latency = 0.0        # lock
        self._rate = None          # lock: bytes/s
        self._link_free = 0.0      # lock: when the link is free again
        self.unstall = threading.Event()
        self.requests = 0          # lock
        self.bytes = 0             # lock
        self.injected = {k: 0 for k in KINDS}  # lock
        self.refused = {}          # lock: SigV4 error code -> count
        self.accept_encoding = {}  # lock: Accept-Encoding -> count
        self.server = None

    # ---- control ----
    def latency(self, seconds):
        with self.lock:
            self._latency = float(seconds)

    def bandwidth(self, bytes_per_s):
        with self.lock:
            self._rate = float(bytes_per_s) if bytes_per_s else None

    def fail(self, kind, count=None, path=None, **params):
        assert kind in KINDS, kind
        with self.lock:
            self.faults.append(_Fault(kind, count, path, params))
            if kind == "stall":
                self.unstall.clear()

    def clear(self):
        """No more faults, latency or cap; stalled answers end."""
        with self.lock:
            self.faults = []
            self._latency = 0.0
            self._rate = None
        self.unstall.set()

    def replace(self, path, upstream_path):
        """Requests for path go to upstream_path (None: back to path)."""
        with self.lock:
            if upstream_path is None:
                self.rewrites.pop(path, None)
            else:
                self.rewrites[path] = upstream_path

    def stats(self):
        with self.lock:
            return {"requests": self.requests, "bytes": self.bytes,
                    "injected": dict(self.injected),
                    "refused": dict(self.refused),
                    "accept_encoding": dict(self.accept_encoding)}

    def url(self, path):
        return self.base_url + path

    # ---- life ----
    def start(self):
        proxy = self

        class Handler(_Handler):
            pass
        Handler.proxy = proxy
        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.1},
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server:
            self.unstall.set()
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(IO_TIMEOUT)
            self.server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- used by the handler ----
    def _take(self, path, kinds):
        """The first fault of one of 'kinds' that applies to path (its
        count used up by one), or None."""
        with self.lock:
            for f in self.faults:
                if f.kind in kinds and f.path in (None, path):
                    if f.count is not None:
                        f.count -= 1
                        if f.count <= 0:
                            self.faults.remove(f)
                    self.injected[f.kind] += 1
                    return f
        return None

    def _send(self, wfile, data):
        """Send data at the capped rate (the link is shared)."""
        step = CHUNK
        for i in range(0, len(data), step):
            self._pace(len(data[i:i + step]))
            wfile.write(data[i:i + step])
            with self.lock:
                self.bytes += len(data[i:i + step])

    def _pace(self, n):
        """Wait until the shared link has carried n more bytes at the
        capped rate (none: at once). The link's schedule may lag now by
        at most BURST seconds: a sender that woke late (the scheduler,
        the GIL) catches up that much, as a real link's queue would, so
        the rate the cap says is the rate carried."""
        with self.lock:
            rate = self._rate
            if not rate:
                return
            now = time.monotonic()
            start = max(now - BURST, self._link_free)
            self._link_free = start + n / rate
            until = self._link_free
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _stream(self, wfile, r, n):
        """Send n body bytes of upstream response r as they arrive, at
        the capped rate: the first byte goes out before the last is
        read, as on a real link. Returns the bytes sent (fewer: upstream
        ended early)."""
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        sent = 0
        while sent < n:
            got = r.readinto(view[:min(CHUNK, n - sent)])
            if not got:
                break
            self._pace(got)
            wfile.write(view[:got])
            sent += got
            with self.lock:
                self.bytes += got
        return sent


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IO_TIMEOUT
    proxy = None  # set per server

    def log_message(self, *args):
        pass

    def handle(self):
        try:
            super().handle()
        except OSError:
            pass  # the client reset or closed the connection

    def do_GET(self):
        self._guarded()

    def do_HEAD(self):
        self._guarded()

    def do_PUT(self):
        self._guarded()

    def do_DELETE(self):
        self._guarded()

    def do_POST(self):
        if self.path.startswith("/__fault__"):
            return self._control()
        self._guarded()

    def _guarded(self):
        """A client that goes away mid-answer (it judged the answer
        bad, or timed out) ends the connection, quietly."""
        try:
            self._forward()
        except OSError:
            self.close_connection = True

    def _control(self):
        n = int(self.headers.get("content-length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        op = req.pop("op")
        p = self.proxy
        out = {}
        if op == "fail":
            p.fail(req.pop("kind"), **req)
        elif op == "clear":
            p.clear()
        elif op == "latency":
            p.latency(req["seconds"])
        elif op == "bandwidth":
            p.bandwidth(req.get("bytes_per_s"))
        elif op == "replace":
            p.replace(req["path"], req.get("upstream_path"))
        elif op == "stats":
            out = p.stats()
        body = json.dumps(out).encode()
        self._reply(200, {"Content-Type": "application/json"}, body)

    def _reply(self, status, headers, body):
        self.send_response_only(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _s3_error(self, status, code):
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                f'{code}</Code><Message>{code}</Message></Error>').encode()
        self._reply(status, {"Content-Type": "application/xml"}, body)

    def _reset(self):
        """Abort the connection with a TCP reset."""
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _upstream(self):
        c = getattr(self, "_up", None)
        if c is None:
            c = http.client.HTTPConnection(self.proxy.up_host,
                                           self.proxy.up_port,
                                           timeout=IO_TIMEOUT)
            self._up = c
        return c

    def _forward(self):
        p = self.proxy
        path = urllib.parse.urlsplit(self.path).path
        with p.lock:
            p.requests += 1
            latency = p._latency
            target = p.rewrites.get(path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        with p.lock:
            ae = headers.get("accept-encoding", "")
            p.accept_encoding[ae] = p.accept_encoding.get(ae, 0) + 1
        n = int(headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else None
        if p.verify:
            code = sigv4_check(p.verify, self.command, self.path, headers)
            if code:
                with p.lock:
                    p.refused[code] = p.refused.get(code, 0) + 1
                return self._s3_error(403 if code != "MissingContentSHA256"
                                      else 400, code)
        f = p._take(path, ("503", "status"))
        if f:
            if latency:
                time.sleep(latency)
            if f.kind == "503":
                self.send_response_only(503)
                self.send_header("Retry-After",
                                 str(f.params.get("retry_after", 1)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            return self._s3_error(f.params.get("code", 500),
                                  f.params.get("s3_code", "InternalError"))
        up_path = self.path
        if target:
            up_path = target + self.path[len(path):]
        fwd = {k: v for k, v in self.headers.items()
               if k.lower() not in HOP}
        rng = headers.get("range")
        if rng and p._take(path, ("ignore_range",)):
            fwd = {k: v for k, v in fwd.items() if k.lower() != "range"}
        elif rng and p._take(path, ("short_range",)):
            m = re.match(r"bytes=(\d+)-(\d+)$", rng)
            if m and int(m.group(2)) > int(m.group(1)):
                a, b = int(m.group(1)), int(m.group(2))
                _set_range(fwd, f"bytes={a}-{a + (b - a) // 2}")
        elif rng and p._take(path, ("wrong_range",)):
            m = re.match(r"bytes=(\d+)-(\d+)$", rng)
            if m:
                a, b = int(m.group(1)), int(m.group(2))
                d = -1 if a else 1
                _set_range(fwd, f"bytes={a + d}-{b + d}")
        elif rng and p._take(path, ("open_range",)):
            m = re.match(r"bytes=(\d+)-\d+$", rng)
            if m:
                _set_range(fwd, f"bytes={m.group(1)}-")
        if ("if-match" in headers or "if-unmodified-since" in headers) \
                and p._take(path, ("ignore_conditions",)):
            fwd = {k: v for k, v in fwd.items() if k.lower()
                   not in ("if-match", "if-unmodified-since")}
        try:
            c = self._upstream()
            c.request(self.command, up_path, body=body, headers=fwd)
            r = c.getresponse()
            length = r.getheader("content-length")
            # a body of known length is streamed; any other is read whole,
            # as is a HEAD's (none: read() ends the response, so the
            # upstream connection takes the next request)
            data = None if (length and length.isdigit() and int(length)
                            and self.command != "HEAD") else r.read()
        except (OSError, http.client.HTTPException):
            self._up = None
            return self._reply(502, {}, b"")
        n = len(data) if data is not None else int(length)
        if self.command == "HEAD":  # the object's length, no body
            n, head_length = 0, length or "0"
        if latency:
            time.sleep(latency)
        out = [(k, v) for k, v in r.getheaders() if k.lower() not in HOP
               and k.lower() != "content-length"]
        if p._take(path, ("drop_etag",)):
            out = [(k, v) for k, v in out if k.lower() != "etag"]
        if 200 <= r.status < 300 and n and self.command != "HEAD" and \
                p._take(path, ("gzip",)):
            return self._gzipped(r, data, out)
        if 200 <= r.status < 300 and n and self.command != "HEAD":
            f = p._take(path, ("extra_bytes",))
            if f:
                return self._extra(r, data, out, f.params)
        self.send_response_only(r.status, r.reason)
        for k, v in out:
            self.send_header(k, v)
        self.send_header("Content-Length", head_length
                         if self.command == "HEAD" else str(n))
        self.end_headers()
        if not n:
            self.wfile.flush()
            return
        f = p._take(path, ("reset", "truncate", "stall"))
        cut = n
        if f:
            cut = n // 2
            if f.kind == "stall":
                cut = min(n, f.params.get("after", cut))
        self._body(r, data, cut)
        self.wfile.flush()
        if not f:
            return
        if data is None:  # the rest of the upstream body is not read
            self._drop_upstream()
        if f.kind == "stall":
            p.unstall.wait(p.max_stall)
        if f.kind == "truncate":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_WR)
        else:
            self._reset()

    def _gzipped(self, r, data, headers):
        """The answer with its body gzipped, chunked (fault "gzip")."""
        import gzip
        try:
            data = r.read() if data is None else data
        except (OSError, http.client.HTTPException):
            self._drop_upstream()
            raise
        z = gzip.compress(data)
        self.send_response_only(r.status, r.reason)
        for k, v in headers:
            if k.lower() != "content-encoding":
                self.send_header(k, v)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunks([z[i:i + CHUNK] for i in range(0, len(z), CHUNK)])

    def _chunks(self, parts):
        """parts as the chunks of a chunked body, paced and counted."""
        for part in parts:
            self.proxy._pace(len(part))
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            with self.proxy.lock:
                self.proxy.bytes += len(part)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _extra(self, r, data, headers, params):
        """The answer's body and `extra` bytes more, chunked (fault
        "extra_bytes"): more than its Content-Range says."""
        try:
            data = r.read() if data is None else data
        except (OSError, http.client.HTTPException):
            self._drop_upstream()
            raise
        extra = b"\x5a" * params.get("extra", 4096)
        parts = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]
        if params.get("joined"):
            parts[-1] += extra
        else:
            parts.append(extra)
        self.send_response_only(r.status, r.reason)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunks(parts)

    def _body(self, r, data, n):
        """The first n body bytes: of data (read whole) or streamed from
        upstream response r. An upstream that ends early ends the
        connection (its Content-Length was promised)."""
        if data is not None:
            self.proxy._send(self.wfile, data[:n])
            return
        try:
            sent = self.proxy._stream(self.wfile, r, n)
        except (OSError, http.client.HTTPException):
            self._drop_upstream()
            raise
        if sent < n:
            self._drop_upstream()
            self.close_connection = True

    def _drop_upstream(self):
        c, self._up = getattr(self, "_up", None), None
        if c is not None:
            c.close()


def _set_range(headers, value):
    for k in list(headers):
        if k.lower() == "range":
            headers[k] = value


def main():
    import argparse
    import signal
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("upstream")
    ap.add_argument("--port-file")
    a = ap.parse_args()
    p = FaultProxy(a.upstream).start()
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(p.port))
        import os
        os.rename(a.port_file + ".tmp", a.port_file)
    print(p.base_url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(1):
        pass
    p.stop()


if __name__ == "__main__":
    main()
