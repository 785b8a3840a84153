#!/usr/bin/python3
"""A URL whose password holds an unencoded '/', '?' or '#' (its '@' then
comes after what a URL parser takes for the host and port) is refused at
mount, named with its userinfo masked, saying to percent-encode; no part
of the user or password is in the mount's stderr or log (-v, debug lines
too), nor in `batchfs inspect`'s message. The same password
percent-encoded is read (fs/remote, through the probe, from nginx, which
ignores it), named without it.

Cases: '/', '?' and '#' first in the password, https, and a password of
digits and '/' ("1/...": the host and port would be 127.0.0.1:1, the rest
a path).

/proc/PID/cmdline of the mount, read while it opens a source before
that URL (the fault proxy holds its answer back): the URL is there, no
part of its userinfo."""
import os
import subprocess
import sys
import time

import mountremote as mr
import remotelib as rl
from mountremote import FaultProxy, ml, servers

ml.require_fuse()
servers.require_nginx()
USER = "USERxq7"
PIECES = ["PWa1x", "PWb2x", "PWc3x", "PWd4x"]
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def cmdline(fp, bad, pieces):
    """The mount's /proc/PID/cmdline while it opens fp's slow object
    (before 'bad')."""
    fp.latency(3)
    mnt = os.path.join(mr.TMP, "cmdline-mnt")
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.Popen([ml.BATCHFS, "mount", "--cache-dir",
                          os.path.join(mr.TMP, "cmdline-cache"),
                          fp.url("/x.bin"), bad, mnt],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=mr.env_without_aws())
    try:
        time.sleep(1)
        with open("/proc/%d/cmdline" % p.pid, "rb") as f:
            shown = f.read().decode("latin-1")
    finally:
        out, err = p.communicate(timeout=120)
        fp.clear()
    found = [w for w in pieces if w in shown]
    check(p.returncode == 1 and "x.pt" in shown and not found,
          f"/proc/PID/cmdline shows the URL, no part of its userinfo "
          f"({p.returncode}: {shown!r}, {found})")


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "x.bin"), "wb") as f:
        f.write(os.urandom(4096))
    with servers.Nginx(root) as ng:
        host = ng.base_url.split("://", 1)[1]
        a, b, c, d = PIECES
        cases = [
            (f"http://{USER}:{a}/{b}?{c}#{d}@{host}/x.pt",
             [USER] + PIECES),
            (f"http://{USER}:{a}?{b}@{host}/x.pt", [USER, a, b]),
            (f"http://{USER}:{a}#{b}@{host}/x.pt", [USER, a, b]),
            (f"https://{USER}:{a}/{b}@{host}/x.pt", [USER, a, b]),
            (f"http://127.0.0.1:1/{b}@{host}/x.pt", [b]),
        ]
        for n, (url, pieces) in enumerate(cases):
            log = os.path.join(mr.TMP, f"userinfo{n}.log")
            scheme = url.split("://", 1)[0]
            p, _ = mr.mount(url, "-v", "--timeout", 2, "--log-file", log,
                            check=False)
            text = p.stdout + p.stderr
            if os.path.exists(log):
                with open(log) as f:
                    text += f.read()
            check(p.returncode == 1 and
                  f"{scheme}://***@{host}/x.pt: " in p.stderr and
                  "percent-encode" in p.stderr,
                  f"case {n}: refused, named masked ({p.returncode}: "
                  f"{p.stderr.strip()!r})")
            found = [w for w in pieces if w in text]
            check(not found, f"case {n}: no part of the userinfo in the "
                  f"mount's output or log ({found})")
            p = subprocess.run([ml.BATCHFS, "inspect", url],
                               capture_output=True, text=True, timeout=60)
            found = [w for w in pieces if w in p.stdout + p.stderr]
            check(p.returncode == 1 and not found,
                  f"case {n}: inspect fails, shows no part of the userinfo "
                  f"({p.returncode}: {p.stderr.strip()!r})")
        with FaultProxy(ng.base_url) as fp:
            cmdline(fp, cases[0][0], cases[0][1])
        # percent-encoded, the same password is fine
        url = f"http://{USER}:{a}%2F{b}%3F{c}%23{d}@{host}/x.bin"
        with rl.Probe("--timeout", 10) as pr:
            o = pr.open(url, ok=False)
            check(o.get("ok") and o.get("size") == 4096 and
                  o.get("name") == f"http://{host}/x.bin",
                  f"the password percent-encoded: read ({o})")
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
