"""Helpers for the tests of fs/remote (not a test itself): the probe
program (build/tests/bin/remote_probe) run as a child, one JSON answer per
command, every command bounded."""
import atexit
import json
import os
import random
import select
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
import servers  # noqa: E402,F401  (tests/lib)
from faultproxy import FaultProxy  # noqa: E402,F401

BUILD = os.environ.get("BUILD", "build")
SRC = os.environ.get("BFS_SRC") or os.path.abspath(
    os.path.join(HERE, "..", ".."))
PROBE = os.path.join(SRC, BUILD, "tests", "bin", "remote_probe")
TMP = os.environ.get("BFS_TEST_TMP") or "/tmp"
WAIT = 120  # no command of these tests may take longer

_probes = []


@atexit.register
def _cleanup():
    for p in list(_probes):
        p.close()


class Probe:
    """remote_probe with options (--timeout, --stall, ...) and an
    environment; .cmd() sends one command and returns its answer."""

    def __init__(self, *opts, env=None, log=None):
        if not os.path.exists(PROBE):
            raise SystemExit(f"{PROBE} is missing: make check-build")
        args = [PROBE] + [str(o) for o in opts]
        if log:
            args += ["--log", log]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env if env is not None else clean_env(), text=True,
            bufsize=1)
        _probes.append(self)

    def cmd(self, line, timeout=WAIT):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            self.close()
            raise AssertionError(f"no answer to {line!r} in {timeout} s")
        out = self.proc.stdout.readline()
        if not out:
            raise AssertionError(f"the probe died at {line!r} "
                                 f"(exit {self.proc.wait(10)})")
        return json.loads(out)

    def open(self, url, ok=True):
        r = self.cmd("open " + url)
        if ok:
            assert r["ok"], r
        return r

    def stats(self):
        return self.cmd("stats")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        if self in _probes:
            _probes.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def clean_env(**extra):
    """The environment without AWS settings of the machine, HOME a
    directory of the test's own, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    home = os.path.join(TMP, "home")
    os.makedirs(home, exist_ok=True)
    env["HOME"] = home
    env.update(extra)
    return env


def random_ranges(size, n, seed, max_len=256 * 1024):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        off = rng.randrange(size)
        out.append((off, rng.randint(1, min(max_len, size - off))))
    out += [(0, 1), (size - 1, 1), (0, size)]  # the edges, the whole
    return out


def write_ranges(path, ranges):
    with open(path, "w") as f:
        for off, n in ranges:
            f.write(f"{off} {n}\n")


def read_ranges(probe, obj_id, ranges, name="out"):
    """Submit every range at once; returns (answer, bytes of the output
    file: each range's bytes at its offset where it succeeded, the
    marker byte 0xA5 elsewhere)."""
    rfile = os.path.join(TMP, name + ".ranges")
    out = os.path.join(TMP, name + ".bin")
    write_ranges(rfile, ranges)
    size = max(o + n for o, n in ranges)
    with open(out, "wb") as f:
        f.write(b"\xa5" * size)
    r = probe.cmd(f"reads {obj_id} {out} {rfile}")
    with open(out, "rb") as f:
        return r, f.read()


def check_exact(data, got, ranges):
    """Every range's bytes equal the object's."""
    bad = [(o, n) for o, n in ranges if got[o:o + n] != data[o:o + n]]
    assert not bad, f"{len(bad)} ranges differ, first {bad[:3]}"


def finish(failures):
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)
