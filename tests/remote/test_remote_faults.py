#!/usr/bin/python3
"""fs/remote through the fault proxy (tests/lib/faultproxy.py) in front of
nginx: every fault that clears is retried to exact bytes; one that does
not fails the requests, never with wrong bytes.

Transient (a few answers each, then the fault clears), 120 random ranges
of a 4 MiB file in flight at once, each lands exact and the retries and
errors are counted by kind:
  latency per answer and a bandwidth cap; 503 with Retry-After (the wait
  before the retry is the Retry-After); resets mid-body; truncated bodies
  (a clean close before Content-Length); answers of fewer bytes than asked
  (short_range: the rest is asked for again); a wrong Content-Range; a 200
  with the whole object to a range request; a stall shorter than the
  deadline (the stall limit cuts it, the retry succeeds).
A body longer than its Content-Range (extra_bytes: chunked, no
Content-Length, the excess in a chunk of its own or in the body's last),
on every answer: each range lands exact at its first try, the excess cut,
no retry and no error counted.
Persistent (until cleared), --timeout 3:
  a stall: every range fails with ETIMEDOUT within the bound; 503s and
  truncated bodies: "gave up after N tries", EIO (ETIMEDOUT where the
  deadline cut the last try short), no range delivered;
  the object replaced behind the proxy (another file, another ETag):
  ESTALE "object replaced". After clear() the same client reads every
  range exact again (recovery), the replaced object too once the proxy
  serves the original again.
"""
import os
import re

import remotelib as rl
from remotelib import FaultProxy, servers

servers.require_nginx()
TMP = rl.TMP
MiB = 1 << 20
SLOW = 60  # bound on one batch of ranges (the tests below take seconds)


def run(p, oid, data, ranges, name):
    r, got = rl.read_ranges(p, oid, ranges, name=name)
    return r, got


def transient(fp, p, oid, data, failures):
    ranges = rl.random_ranges(len(data), 120, seed=3, max_len=128 * 1024)
    cases = [
        ("latency+bandwidth", lambda: (fp.latency(0.02),
                                       fp.bandwidth(50e6)), None),
        ("503", lambda: fp.fail("503", count=6, retry_after=1),
         "throttled"),
        ("reset", lambda: fp.fail("reset", count=6), "reset"),
        ("truncate", lambda: fp.fail("truncate", count=6), "reset"),
        ("short_range", lambda: fp.fail("short_range", count=6),
         "bad_reply"),
        ("wrong_range", lambda: fp.fail("wrong_range", count=6),
         "bad_reply"),
        ("ignore_range", lambda: fp.fail("ignore_range", count=6),
         "bad_reply"),
        ("stall", lambda: fp.fail("stall", count=3, after=100), "timeout"),
    ]
    for name, arm, kind in cases:
        before = p.stats()
        arm()
        r, got = run(p, oid, data, ranges, name)
        fp.clear()
        after = p.stats()
        if r["failed"]:
            failures.append(f"{name}: {r['failed']} ranges failed: {r}")
            continue
        try:
            rl.check_exact(data, got, ranges)
        except AssertionError as e:
            failures.append(f"{name}: {e}")
        if kind:
            n = after["errors"][kind] - before["errors"][kind]
            retried = after["retries"] - before["retries"]
            if n < 1 or retried < n:
                failures.append(f"{name}: {n} {kind} errors, {retried} "
                                f"retries: {after}")


def extra_bytes(fp, p, oid, data, failures):
    ranges = rl.random_ranges(len(data), 40, seed=11, max_len=128 * 1024)
    for joined in (False, True):
        name = f"extra_bytes(joined={joined})"
        before, injected = p.stats(), fp.stats()["injected"]["extra_bytes"]
        fp.fail("extra_bytes", joined=joined)
        r, got = run(p, oid, data, ranges, name)
        fp.clear()
        after = p.stats()
        if fp.stats()["injected"]["extra_bytes"] - injected < len(ranges):
            failures.append(f"{name}: not injected: {fp.stats()}")
        if r["failed"]:
            failures.append(f"{name}: {r['failed']} ranges failed: {r}")
            continue
        try:
            rl.check_exact(data, got, ranges)
        except AssertionError as e:
            failures.append(f"{name}: {e}")
        if after["retries"] != before["retries"] or \
                after["errors"] != before["errors"]:
            failures.append(f"{name}: retried or counted as errors: "
                            f"{before} -> {after}")


def persistent(fp, ng, p, oid, data, failures):
    ranges = rl.random_ranges(len(data), 20, seed=5, max_len=64 * 1024)

    def expect_all(name, errnos, words):
        r, got = run(p, oid, data, ranges, name)
        if r["failed"] != len(ranges) or not set(r["errnos"]) <= errnos:
            failures.append(f"{name}: want all {errnos}: {r}")
        elif not all(w in r["msgs"][0] for w in words):
            failures.append(f"{name}: message {r['msgs'][0]!r}, "
                            f"want {words}")
        if got != b"\xa5" * len(got):
            failures.append(f"{name}: bytes delivered from failed ranges")

    def recovered(name):
        r, got = run(p, oid, data, ranges, name + "-recovered")
        if r["failed"]:
            failures.append(f"{name}: no recovery after clear: {r}")
        else:
            rl.check_exact(data, got, ranges)

    fp.fail("stall")
    expect_all("stall", {"ETIMEDOUT"}, ["gave up after", "timed out"])
    fp.clear()
    recovered("stall")

    fp.fail("503", retry_after=0)
    # (the try the deadline cuts short ends in ETIMEDOUT)
    expect_all("503", {"EIO", "ETIMEDOUT"}, ["gave up after"])
    fp.clear()
    recovered("503")

    fp.fail("truncate")
    expect_all("truncate", {"EIO", "ETIMEDOUT"}, ["gave up after"])
    fp.clear()
    recovered("truncate")

    fp.replace("/obj.bin", "/other.bin")
    expect_all("replaced", {"ESTALE"}, ["object replaced"])
    fp.replace("/obj.bin", None)
    recovered("replaced")


def main():
    root = os.path.join(TMP, "www")
    os.makedirs(root, exist_ok=True)
    data = os.urandom(4 * MiB)
    with open(os.path.join(root, "obj.bin"), "wb") as f:
        f.write(data)
    with open(os.path.join(root, "other.bin"), "wb") as f:
        f.write(os.urandom(len(data)))
    # nginx's ETag is mtime-size: the other object's must differ
    st = os.stat(os.path.join(root, "obj.bin"))
    os.utime(os.path.join(root, "other.bin"),
             (st.st_mtime + 10, st.st_mtime + 10))
    failures = []
    log = os.path.join(TMP, "probe.log")
    with servers.Nginx(root) as ng, FaultProxy(ng.base_url,
                                               max_stall=20) as fp:
        with rl.Probe("--timeout", 30, "--stall", 1, "--max-in-flight", 32,
                      log=log) as p:
            o = p.open(fp.url("/obj.bin"))
            transient(fp, p, o["id"], data, failures)
            extra_bytes(fp, p, o["id"], data, failures)
        # Retry-After: the wait before the retry of a 503 is its value.
        with open(log) as f:
            waits = [float(m.group(1)) for m in re.finditer(
                r"throttled \(HTTP 503\)\); again in ([0-9.]+) s",
                f.read())]
        if not waits or min(waits) < 1.0:
            failures.append(f"Retry-After: 1 not honoured: waits {waits}")
        with rl.Probe("--timeout", 3, "--stall", 1) as p:
            o = p.open(fp.url("/obj.bin"))
            persistent(fp, ng, p, o["id"], data, failures)
    rl.finish(failures)


if __name__ == "__main__":
    main()
