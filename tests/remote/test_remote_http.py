#!/usr/bin/python3
"""fs/remote against Debian's nginx on loopback (tests/lib/servers.py).

- open learns the size, the ETag and Last-Modified nginx sends, by one
  GET of bytes 0-0;
- 400 random ranges of an 8 MiB file (and its first byte, its last, the
  whole file), submitted at once with 48 in flight at most, land exact;
  more than one was in flight, never more than 48; the connections were
  reused (far fewer connections than requests); every range request was
  conditional on the pinned ETag (If-Match);
- a file replaced under an open object fails its reads with ESTALE
  ("object replaced"), never with the new bytes; without an ETag
  (dropped by the fault proxy) the condition is If-Unmodified-Since and a
  replaced file still fails with ESTALE;
- a missing file fails open with ENOENT; an empty file opens with size
  0; a range past the end is refused (EINVAL); a server that ignores
  Range fails open with EOPNOTSUPP; a name with a space, '+' and '%'
  percent-encoded by the caller is read;
- HTTPS (nginx with a self-signed certificate): ranges read exact when
  the certificate is trusted (ca_file); refused at once, not retried,
  when it is not ("certificate" in the message).
"""
import os

import remotelib as rl
from remotelib import FaultProxy, servers

servers.require_nginx()
TMP = rl.TMP
MiB = 1 << 20


def main():
    root = os.path.join(TMP, "www")
    os.makedirs(root, exist_ok=True)
    data = os.urandom(8 * MiB)
    with open(os.path.join(root, "obj.bin"), "wb") as f:
        f.write(data)
    open(os.path.join(root, "empty.bin"), "wb").close()
    odd = b"odd name " * 1000
    with open(os.path.join(root, "a b+c%.bin"), "wb") as f:
        f.write(odd)
    failures = []
    with servers.Nginx(root) as ng, \
            rl.Probe("--timeout", 20, "--max-in-flight", 48) as p:
        o = p.open(ng.url("obj.bin"))
        st = os.stat(os.path.join(root, "obj.bin"))
        etag = '"%x-%x"' % (int(st.st_mtime), st.st_size)
        if (o["size"], o["etag"]) != (len(data), etag):
            failures.append(f"open: {o}, want size {len(data)} ETag {etag}")
        if not o["last_modified"].endswith(" GMT"):
            failures.append(f"open: no Last-Modified: {o}")
        if o["name"] != ng.url("obj.bin") or o["auth"] != "":
            failures.append(f"open: name/auth {o}")
        ranges = rl.random_ranges(len(data), 400, seed=1)
        r, got = rl.read_ranges(p, o["id"], ranges)
        if r["failed"]:
            failures.append(f"random ranges failed: {r}")
        rl.check_exact(data, got, ranges)
        log = [e for e in ng.wait_log(len(ranges) + 1)
               if e["uri"] == "/obj.bin"]
        if (log[0]["method"], log[0]["range"]) != ("GET", "bytes=0-0"):
            failures.append(f"open asked {log[0]}")
        log = log[1:]
        if len(log) != len(ranges):
            failures.append(f"{len(log)} requests for {len(ranges)} ranges")
        conns = {e["connection"] for e in log}
        if len(conns) > 60:
            failures.append(f"{len(conns)} connections for {len(log)} "
                            "requests: not reused")
        want_if = etag.replace('"', "\\x22")
        unconditional = [e for e in log if e["if_match"] != want_if]
        if unconditional:
            failures.append(f"requests without If-Match {etag}: "
                            f"{unconditional[:2]}")
        s = p.stats()
        if not 1 < s["in_flight_max"] <= 48:
            failures.append(f"in flight: {s['in_flight_max']} (1 < x <= 48)")
        if (s["requests"] != len(ranges) + 1 or s["retries"]
                or s["failed"] or s["in_flight"] or s["queued"]
                or s["bytes"] != sum(n for _, n in ranges) + 1):
            failures.append(f"stats: {s}")

        # Replaced under the open object: ESTALE, never new bytes.
        with open(os.path.join(root, "obj.bin.new"), "wb") as f:
            f.write(os.urandom(len(data)))
        os.utime(os.path.join(root, "obj.bin.new"),
                 (st.st_mtime + 10, st.st_mtime + 10))
        os.rename(os.path.join(root, "obj.bin.new"),
                  os.path.join(root, "obj.bin"))
        out = os.path.join(TMP, "stale.bin")
        if os.path.exists(out):
            os.unlink(out)
        r = p.cmd(f"read {o['id']} 1000 5000 {out}")
        if r["ok"] or r["errno"] != "ESTALE" or \
                "object replaced" not in r["msg"]:
            failures.append(f"replaced file read: {r}")
        if os.path.exists(out):
            failures.append("bytes of a replaced file were delivered")
        if p.stats()["errors"]["stale"] != 1:
            failures.append(f"stale not counted: {p.stats()}")

        # Missing, empty, past the end, odd names.
        r = p.open(ng.url("missing.bin"), ok=False)
        if r["ok"] or r["errno"] != "ENOENT" or "HTTP 404" not in r["msg"]:
            failures.append(f"missing file: {r}")
        e = p.open(ng.url("empty.bin"))
        if e["size"] != 0:
            failures.append(f"empty file: {e}")
        o2 = p.open(ng.url("obj.bin"))
        r = p.cmd(f"read {o2['id']} {len(data) - 10} 11 {out}")
        if r["ok"] or r["errno"] != "EINVAL":
            failures.append(f"a range past the end: {r}")
        a = p.open(ng.url("a b+c%.bin"))
        r = p.cmd(f"read {a['id']} 0 {len(odd)} {out}")
        with open(out, "rb") as f:
            if not r["ok"] or f.read() != odd:
                failures.append(f"odd name: {r}")

    # Through the fault proxy: no ETag (If-Unmodified-Since), and a
    # server that ignores Range.
    with open(os.path.join(root, "lm.bin"), "wb") as f:
        f.write(data[:MiB])
    with servers.Nginx(root) as ng, FaultProxy(ng.base_url) as fp, \
            rl.Probe("--timeout", 10) as p:
        fp.fail("drop_etag")
        o = p.open(fp.url("/lm.bin"))
        if o["etag"] != "" or not o["last_modified"]:
            failures.append(f"without ETag: {o}")
        out = os.path.join(TMP, "lm.out")
        r = p.cmd(f"read {o['id']} 0 1000 {out}")
        if not r["ok"]:
            failures.append(f"read without ETag: {r}")
        req = ng.wait_log(2)[-1]
        if req["if_unmodified_since"] != o["last_modified"]:
            failures.append(f"no If-Unmodified-Since: {req}")
        lm = os.path.join(root, "lm.bin")
        with open(lm, "wb") as f:
            f.write(data[MiB:2 * MiB])
        st = os.stat(lm)
        os.utime(lm, (st.st_mtime + 10, st.st_mtime + 10))
        r = p.cmd(f"read {o['id']} 0 1000 {out}")
        if r["ok"] or r["errno"] != "ESTALE":
            failures.append(f"replaced, without ETag: {r}")
        fp.clear()

        fp.fail("ignore_range")
        r = p.open(fp.url("/obj.bin"), ok=False)
        if r["ok"] or r["errno"] != "EOPNOTSUPP":
            failures.append(f"a server that ignores Range: {r}")

    with open(os.path.join(root, "obj.bin"), "rb") as f:
        data = f.read()  # replaced above
    with servers.Nginx(root, tls=True) as ng:
        with rl.Probe("--ca-file", ng.cert) as p:
            o = p.open(ng.url("obj.bin"))
            ranges = rl.random_ranges(len(data), 50, seed=2)
            r, got = rl.read_ranges(p, o["id"], ranges, name="tls")
            if r["failed"]:
                failures.append(f"HTTPS reads failed: {r}")
            else:
                rl.check_exact(data, got, ranges)
        with rl.Probe("--timeout", 20) as p:
            r = p.open(ng.url("obj.bin"), ok=False)
            if r["ok"] or r["errno"] != "EIO" or \
                    "certificate" not in r["msg"] or \
                    p.stats()["requests"] != 1:
                failures.append(f"an untrusted certificate: {r} "
                                f"{p.stats()}")
    rl.finish(failures)


if __name__ == "__main__":
    main()
