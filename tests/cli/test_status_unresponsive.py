#!/usr/bin/python3
"""batchfs status ends, in about --timeout seconds, when a batchfs mount
does not answer, and lists the others as usual. A mount whose daemon is
stopped (SIGSTOP) and one whose daemon read the request and never answers
(tests/bin/fakebatchfs --hang: whoever asks waits in D state, SIGKILL
does not end it) are each listed as "not responding" with the FUSE
connection to abort and the `batchfs umount --lazy` that detaches it, the
stopped daemon with its pid and how to resume it; the exit status is 1;
the same with the mount point named (`batchfs status MNT`), and a path
into the stopped mount is said to be no batchfs mount. Nothing
status leaves behind keeps its output open: a caller that reads it to
its end (as here) gets it. `batchfs umount --lazy` of the stopped mount
ends too, and detaches it.

The abort line depends on the machine, and both forms are checked: where
fusectl is not mounted (a fresh machine) it starts with the `mount -t
fusectl ...` that makes the connection's directory appear; the test then
mounts fusectl itself (and unmounts it at the end if it did), and the
same status names the abort file alone. Nothing here assumes either state.

Every run of status is bounded (statuslib.status: a regression fails
instead of hanging); the daemon is resumed and the mounts removed in a
finally."""
import os
import signal
import subprocess
import time

import numpy as np

import statuslib as sl  # puts tests/mount on the path
from statuslib import ml

ml.require_fuse()
TMP = ml.TMP


def source(name):
    path = os.path.join(TMP, name + ".npy")
    np.save(path, np.arange(40))
    return path


def state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rpartition(")")[2].split()[0]


def wait_stopped(pid):
    end = time.monotonic() + ml.LIVENESS_S
    while state(pid) != "T":
        assert time.monotonic() < end, "pid %d never stopped" % pid
        time.sleep(0.01)


field = sl.field


def check_healthy(listed, mnt):
    lines = listed[mnt]
    assert field(lines, "source") == [os.path.join(TMP, "ok.npy")], lines
    assert field(lines, "pid") == [str(ml.daemon_pid(mnt))], lines


def fusectl_mounted():
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == ml.FUSECTL for line in f)


def check_not_responding(lines, mnt, secs, pid=None):
    """The lines of a mount that did not answer within 'secs' seconds."""
    conn = ml.fuse_connection(mnt)
    assert lines[0] == "not responding: no answer from its daemon within " \
        "%s s" % secs, lines
    if pid:
        assert field(lines, "pid") == [
            "%d, stopped: 'kill -s CONT %d' resumes it" % (pid, pid)], lines
    first = "" if fusectl_mounted() else \
        "mount -t fusectl none %s; " % ml.FUSECTL
    assert field(lines, "abort") == [
        "%secho 1 > %s/%d/abort (every request waiting on it fails)"
        % (first, ml.FUSECTL, conn)], lines
    assert field(lines, "unmount") == ["batchfs umount --lazy " + mnt], lines


def main(own, fakes, stop, ctl):
    _, ok = ml.mount(source("ok"), os.path.join(TMP, "ok"))
    _, st = ml.mount(source("st"), os.path.join(TMP, "stopped"))
    own += [ok, st]
    pid = ml.daemon_pid(st)
    os.kill(pid, signal.SIGSTOP)
    stop.append(pid)
    wait_stopped(pid)

    # all mounts, the default timeout (5 s)
    p = sl.status(own=own)
    assert p.returncode == 1, p
    listed = sl.blocks(p.stdout)
    check_healthy(listed, ok)
    check_not_responding(listed[st], st, 5, pid)
    # the stopped mount named, with the healthy one after it
    p = sl.status("--timeout", "1.5", st, ok, own=own)
    assert p.returncode == 1, p
    assert list(sl.blocks(p.stdout)) == [st, ok], p
    check_not_responding(sl.blocks(p.stdout)[st], st, 1.5, pid)
    check_healthy(sl.blocks(p.stdout), ok)
    p = sl.status("-t", "1", ok, own=own)
    assert p.returncode == 0 and list(sl.blocks(p.stdout)) == [ok], p
    # a path into it is no mount point: said without a look inside
    p = sl.status(os.path.join(st, "epoch"), own=own)
    assert p.returncode == 1 and p.stdout == "", p
    assert p.stderr == "batchfs status: %s/epoch is not a batchfs mount\n" \
        % st, p

    # a daemon that holds the request: the asking process stays in D
    # state after status has ended, and must not keep its output open
    hang = sl.FakeBatchfs(os.path.join(TMP, "hang"), b"{}", hang=True)
    fakes.append(hang)
    own.append(hang.mnt)
    p = sl.status("-t", "1", own=own)
    assert p.returncode == 1, p
    listed = sl.blocks(p.stdout)
    check_healthy(listed, ok)
    check_not_responding(listed[st], st, 1, pid)
    check_not_responding(listed[hang.mnt], hang.mnt, 1)
    p = sl.status("-t", "1", hang.mnt, own=[hang.mnt])
    assert p.returncode == 1 and list(sl.blocks(p.stdout)) == [hang.mnt], p
    check_not_responding(sl.blocks(p.stdout)[hang.mnt], hang.mnt, 1)

    # the other form of the abort line: fusectl mounted (by this test,
    # where it was not), and the request the fake daemon holds seen there
    if not fusectl_mounted():
        m = subprocess.run(["mount", "-t", "fusectl", "none", ml.FUSECTL],
                           capture_output=True, text=True,
                           timeout=ml.LIVENESS_S)
        assert m.returncode == 0, "cannot mount fusectl: %s" % m.stderr
        ctl.append(ml.FUSECTL)
    assert fusectl_mounted()
    p = sl.status("-t", "1", hang.mnt, st, own=own)
    assert p.returncode == 1, p
    check_not_responding(sl.blocks(p.stdout)[hang.mnt], hang.mnt, 1)
    check_not_responding(sl.blocks(p.stdout)[st], st, 1, pid)
    with open("%s/%d/waiting" % (ml.FUSECTL,
                                  ml.fuse_connection(hang.mnt))) as f:
        assert int(f.read()) > 0, "fakebatchfs holds no request"

    # what status advises for the stopped mount works while it is stopped
    p = subprocess.run([ml.BATCHFS, "umount", "--lazy", st],
                          capture_output=True, text=True,
                          timeout=ml.LIVENESS_S)
    assert p.returncode == 0 and not ml.is_mounted(st), p
    os.kill(pid, signal.SIGCONT)
    assert ml.wait_pid_exit(pid), "the detached daemon did not exit"
    print("ok")


own, fakes, stop, ctl = [], [], [], []
try:
    main(own, fakes, stop, ctl)
finally:
    for pid in stop:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    for fake in fakes:
        fake.close()
    for m in own:
        if ml.is_mounted(m) and ml.umount(m).returncode != 0:
            ml.abort_mount(m)
    for m in ctl:  # fusectl, where this test mounted it
        subprocess.run(["umount", m], capture_output=True,
                       timeout=ml.LIVENESS_S)
