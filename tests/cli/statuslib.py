"""Helpers for the tests of `batchfs status` (not a test itself): run it
with a bound, split its output into one block per mount, serve a
filesystem that calls itself batchfs (tests/bin/fakebatchfs)."""
import os
import select
import subprocess

import mountlib as ml

FAKEBATCHFS = os.path.join(os.environ.get("BFS_SRC", "."),
                           os.environ.get("BUILD", "build"), "tests", "bin",
                           "fakebatchfs")


class Result:
    """What a run of batchfs status did: returncode, stdout and stderr as
    text (bytes that are not UTF-8 kept as surrogates), raw (stdout's
    bytes)."""

    def __init__(self, returncode, raw, err):
        self.returncode = returncode
        self.raw = raw
        self.stdout = raw.decode("utf-8", "surrogateescape")
        self.stderr = err.decode("utf-8", "surrogateescape")

    def __repr__(self):
        return "exit %d\n%s%s" % (self.returncode, self.stdout, self.stderr)


def status(*args, own=(), cwd=None):
    """Run `batchfs status ARGS`, reading its stdout and stderr to their
    end. If that takes more than mountlib.LIVENESS_S (a liveness bound,
    not a measurement), batchfs status hangs: it is killed, the FUSE
    connections of this test's mounts 'own' are aborted (a process in D
    state on one of them then ends) and AssertionError says so."""
    p = subprocess.Popen([ml.BATCHFS, "status", *args], cwd=cwd,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=ml.LIVENESS_S)
    except subprocess.TimeoutExpired:
        p.kill()
        for mnt in own:
            ml.abort_mount(mnt)
        try:
            p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        raise AssertionError("batchfs status %s: no end after %.0f s"
                             % (" ".join(args), ml.LIVENESS_S))
    r = Result(p.returncode, out, err)
    print("$ batchfs status %s -> %r" % (
        " ".join(a if a.isprintable() else ascii(a) for a in args), r))
    return r


def blocks(out):
    """{mount point line: [its lines, the indent of two removed]}."""
    got, point = {}, None
    lines = out.split("\n")
    if lines[-1] == "":
        lines.pop()
    for line in lines:
        if line.startswith("  "):
            got[point].append(line[2:])
        else:
            point = line
            got[point] = []
    return got


def field(lines, label):
    """The values of the lines "LABEL VALUE" (LABEL in 11 columns) and of
    the unlabelled ones after them (the sources after the first)."""
    vals, inside = [], False
    for line in lines:
        name, value = line[:11].strip(), line[12:]
        inside = name == label or (inside and not name)
        if inside:
            vals.append(value)
    return vals


class FakeBatchfs:
    """tests/bin/fakebatchfs at 'mnt' serving the bytes 'dataset' and
    'stats' as dataset.json and stats; hang: it never answers an open."""

    def __init__(self, mnt, dataset, stats=b"pid 1\n", hang=False):
        if not os.path.exists(FAKEBATCHFS):
            raise AssertionError(FAKEBATCHFS + " is not built")
        tag = os.path.join(ml.TMP, "fake-%d" % id(self))
        for name, data in (("ds", dataset), ("stats", stats)):
            with open(tag + "." + name, "wb") as f:
                f.write(data)
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        self.proc = subprocess.Popen(
            [FAKEBATCHFS, *(["--hang"] if hang else []), tag + ".ds",
             tag + ".stats", mnt], stdout=subprocess.PIPE)
        ready, _, _ = select.select([self.proc.stdout], [], [],
                                    ml.LIVENESS_S)
        if not ready or self.proc.stdout.readline() != b"ready\n":
            self.close()
            raise AssertionError("fakebatchfs did not start at %r" % mnt)

    def close(self):
        """Stop it: its /dev/fuse closes, which fails what waits on it,
        and it unmounts."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        subprocess.run(["umount", "-l", self.mnt], capture_output=True)
