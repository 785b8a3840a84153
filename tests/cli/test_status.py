#!/usr/bin/python3
"""batchfs status lists the batchfs mounts of this machine, each as its
mount point (a space in it too) followed by its sources, serve mode, log
and daemon pid, the same as its dataset.json and stats say; more than
four sources end in "... and N more". Naming mount points lists only
those; a path that is not a batchfs mount exits 1 saying so. A mount
whose daemon was killed (-o allow_other: no auto_unmount, so the mount
stays, answering ENOTCONN) is listed as not connected with the command
that removes it, exit 1, and the other mounts are still listed. A mount
point may be named as any path to it (a symlink, a relative path).

Other batchfs mounts of the machine (other tests', some perhaps wedged)
are listed too when status lists all: only this test's own mounts are
looked at then, and the exact exit status is checked with this test's
mount points named."""
import json
import os
import signal
import subprocess

import numpy as np

import statuslib as sl  # puts tests/mount on the path
from statuslib import ml, blocks, field

ml.require_fuse()
TMP = ml.TMP
OWN = []  # this test's mount points


def status(*args):
    return sl.status(*args, own=OWN)


def shards(name, n):
    """n .npy shards of one field x: the sources a/x.npy b/x.npy ..."""
    paths = []
    for i in range(n):
        d = os.path.join(TMP, name, "s%d" % i)
        os.makedirs(d)
        np.save(os.path.join(d, "x.npy"), np.arange(10 * i, 10 * i + 10))
        paths.append(os.path.join(d, "x.npy"))
    return paths


def main():
    log = os.path.join(TMP, "a.log")
    _, a = ml.mount(shards("a", 2), os.path.join(TMP, "mnt a"),
                    "--serve", "cache", "--log-file", log)
    _, b = ml.mount(shards("b", 6), os.path.join(TMP, "mntb"))
    OWN.extend((a, b))

    p = status(a, b)
    assert p.returncode == 0, p
    listed = blocks(p.stdout)
    assert list(listed) == [a, b], p
    for mnt in (a, b):
        assert mnt in listed, (mnt, p.stdout)
        with open(os.path.join(mnt, "dataset.json")) as f:
            ds = json.load(f)
        lines = listed[mnt]
        assert field(lines, "serve mode") == [ds["serve_mode"]], lines
        assert field(lines, "log") == [ds["log"]], lines
        assert field(lines, "pid") == [str(ml.daemon_pid(mnt))], lines
        srcs = field(lines, "source")
        if len(ds["sources"]) <= 4:
            assert srcs == ds["sources"], (srcs, ds["sources"])
        else:
            assert srcs[:4] == ds["sources"][:4], srcs
            assert srcs[4] == "... and %d more (%s/dataset.json)" % (
                len(ds["sources"]) - 4, mnt), srcs
    assert field(listed[a], "serve mode") == ["cache"]
    assert field(listed[a], "log") == [log]
    p = status()                               # all: ours among them
    assert p.returncode in (0, 1), p          # 1: someone else's mount
    assert {m: blocks(p.stdout)[m] for m in (a, b)} == listed, p

    p = status(b)                              # only the one named
    assert p.returncode == 0 and list(blocks(p.stdout)) == [b], p
    # named through a symlink, relative, with ".." and a trailing slash
    os.symlink(b, os.path.join(TMP, "link-b"))
    os.makedirs(os.path.join(TMP, "d"))
    for arg in (os.path.join(TMP, "link-b"), "../link-b/", "../mntb/."):
        p = sl.status(arg, own=OWN, cwd=os.path.join(TMP, "d"))
        assert p.returncode == 0 and list(blocks(p.stdout)) == [b], p
    p = status(a, os.path.join(TMP, "a"))
    assert p.returncode == 1 and list(blocks(p.stdout)) == [a], p
    assert "%s is not a batchfs mount" % os.path.join(TMP, "a") in p.stderr

    # a dead mount: its daemon killed, the mount left behind
    _, c = ml.mount(shards("c", 1), os.path.join(TMP, "mntc"),
                    "-o", "allow_other")
    OWN.append(c)
    pid = ml.daemon_pid(c)
    os.kill(pid, signal.SIGKILL)
    assert ml.wait_pid_exit(pid)
    assert ml.is_mounted(c), "no dead mount to list"
    p = status(c)
    assert p.returncode == 1, p
    assert blocks(p.stdout) == {c: [
        "not connected: its daemon is gone; 'batchfs umount %s' removes "
        "the mount" % c]}, p.stdout
    p = status()
    assert p.returncode == 1, p
    listed = blocks(p.stdout)
    assert a in listed and b in listed and c in listed, p.stdout
    assert listed[c][0].startswith("not connected"), listed[c]
    assert ml.umount(c).returncode == 0 and not ml.is_mounted(c)
    for mnt in (a, b):
        assert ml.umount(mnt).returncode == 0
    OWN.clear()
    p = status(a)
    assert p.returncode == 1 and "is not a batchfs mount" in p.stderr, p
    print("ok")


try:
    main()
finally:
    # mountlib's cleanup does not see a mount point with a space (it
    # compares with /proc/mounts' escaped names): unmount them all here
    for name in ("mnt a", "mntb", "mntc"):
        subprocess.run(["fusermount3", "-uz", os.path.join(TMP, name)],
                       capture_output=True)
