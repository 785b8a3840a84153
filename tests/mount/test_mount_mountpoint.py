#!/usr/bin/python3
"""Mountpoints and what the command line refuses before mounting:
mounting on a mountpoint that is already a mount is refused, naming what
is mounted there (/proc/mounts lists it once); a missing mountpoint "does
not exist"; `batchfs umount` of a directory that is not mounted says so
once (no fusermount3 retries, no unrelated holders), of another file
system refuses, of a dead mount (daemon killed, no auto_unmount) works;
a mapped batch file holds the mount (umount names the process), --lazy
detaches it and the daemon exits when the mapping goes;
a mount with 0 batches per epoch is refused with the reason; --num-samples
without --shuffle or --weights is a usage error."""
import os
import signal
import subprocess

import mountlib as ml

import torch

ml.require_fuse()
TMP = ml.TMP


def run(*args, cwd=None):
    return subprocess.run([ml.BATCHFS, *map(str, args)], capture_output=True,
                          text=True, cwd=cwd)


def mounted_times(mnt):
    mnt = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        return sum(line.split()[1] == mnt for line in f)


def second_mount_is_refused(path):
    _, mnt = ml.mount(path, os.path.join(TMP, "twice"))
    p, _ = ml.mount(path, mnt, check=False)
    assert p.returncode == 1, p
    assert "twice is already a mount point: a batchfs mount is there" \
        in p.stderr, p.stderr
    assert "batchfs umount" in p.stderr, p.stderr
    assert mounted_times(mnt) == 1, "a second daemon is stacked"
    assert ml.umount(mnt).returncode == 0
    assert not ml.is_mounted(mnt)


def other_file_systems_are_named(path):
    d = os.path.join(TMP, "tmpfs")
    os.makedirs(d)
    if subprocess.run(["mount", "-t", "tmpfs", "bfs-test-tmpfs", d],
                      capture_output=True).returncode:
        print("skip: cannot mount a tmpfs here")
        return
    try:
        p, _ = ml.mount(path, d, check=False)
        assert p.returncode == 1, p
        assert "already a mount point: tmpfs (bfs-test-tmpfs) is mounted " \
            "there" in p.stderr, p.stderr
        p = run("umount", d)
        assert p.returncode == 1, p
        assert "is not a batchfs mount (tmpfs from bfs-test-tmpfs" \
            in p.stderr, p.stderr
        assert mounted_times(d) == 1
    finally:
        subprocess.run(["umount", d])


def missing_mountpoint_does_not_exist(path):
    p = run("mount", path, os.path.join(TMP, "nowhere"))
    assert p.returncode == 1, p
    assert p.stderr.startswith("batchfs mount: %s does not exist" %
                               os.path.join(TMP, "nowhere")), p.stderr
    assert "mkdir" in p.stderr
    p = run("mount", path, path)
    assert p.returncode == 1 and "is not a directory" in p.stderr, p


def umount_of_what_is_not_mounted():
    d = os.path.join(TMP, "plain")
    os.makedirs(d)
    for arg, cwd in [(d, None), (".", d)]:
        p = run("umount", arg, cwd=cwd)
        assert p.returncode == 1, p
        assert p.stderr == "batchfs umount: %s is not mounted\n" % arg, \
            p.stderr
    p = run("umount", os.path.join(TMP, "nowhere"))
    assert p.returncode == 1 and "does not exist" in p.stderr, p


def umount_from_inside_works(path):
    """batchfs umount run from a directory inside the mount does not hold
    it itself (nor lists itself as a holder)."""
    _, mnt = ml.mount(path, os.path.join(TMP, "inside"))
    p = run("umount", "..", cwd=mnt + "/epoch")
    assert p.returncode == 0, p
    assert not ml.is_mounted(mnt)


def mapped_batches_hold_the_mount_until_lazy(path):
    """A process that maps a batch file holds the mount: umount names it
    and unmounts nothing; --lazy detaches at once, the mapping stays
    readable, and the daemon exits once it is gone."""
    import mmap
    _, mnt = ml.mount(path, os.path.join(TMP, "mapped"), "--batch-size", 5)
    pid = ml.daemon_pid(mnt)
    want = ml.read_file(mnt + "/epoch/0/batch_1")
    with open(mnt + "/epoch/0/batch_1", "rb") as f:
        m = mmap.mmap(f.fileno(), 0, mmap.MAP_PRIVATE, mmap.PROT_READ)
    p = run("umount", mnt)
    assert p.returncode == 1, p
    assert "pid %d (python3) maps 1 file region(s) under %s" % (
        os.getpid(), mnt) in p.stderr, p.stderr
    assert "batchfs umount --lazy" in p.stderr, p.stderr
    assert ml.is_mounted(mnt)
    p = run("umount", "--lazy", mnt)
    assert p.returncode == 0, p
    assert not ml.is_mounted(mnt)
    assert m[:] == want
    m.close()
    assert ml.wait_pid_exit(pid), "the daemon outlived the last mapping"


def dead_mount_is_refused_then_unmounted(path):
    # allow_other turns auto_unmount off: a killed daemon leaves a dead
    # mount (ENOTCONN) behind
    _, mnt = ml.mount(path, os.path.join(TMP, "dead"), "-o", "allow_other")
    pid = ml.daemon_pid(mnt)
    os.kill(pid, signal.SIGKILL)
    assert ml.wait_pid_exit(pid)
    assert ml.is_mounted(mnt)
    p, _ = ml.mount(path, mnt, check=False)
    assert p.returncode == 1 and "already a mount point" in p.stderr, p
    p = run("umount", mnt)
    assert p.returncode == 0, p
    assert not ml.is_mounted(mnt)


def zero_batches_are_refused(path):
    few = os.path.join(TMP, "few.pt")
    torch.save({"x": torch.arange(3)}, few)
    empty = os.path.join(TMP, "empty.pt")
    torch.save({"x": torch.zeros(0, 4)}, empty)
    mnt = os.path.join(TMP, "zero")
    os.makedirs(mnt)
    for src, opts, why in [
            (few, ["--batch-size", 4, "--drop-last"],
             "--drop-last drops the only, incomplete batch of 3 samples"),
            (empty, [], "0 samples in the dataset")]:
        p = run("mount", *opts, src, mnt)
        assert p.returncode == 1, p
        assert p.stderr.startswith(
            "batchfs mount: %s: 0 batches per epoch: " % src), p.stderr
        assert why in p.stderr, p.stderr
        assert not ml.is_mounted(mnt)


def num_samples_alone_is_a_usage_error(path):
    mnt = os.path.join(TMP, "ns")
    os.makedirs(mnt)
    p = run("mount", "--num-samples", 5, path, mnt)
    assert p.returncode == 2, p
    first = p.stderr.splitlines()[0]
    assert first.startswith("batchfs mount: --num-samples: needs --shuffle"), \
        first
    assert "usage: batchfs mount" in p.stderr
    assert not ml.is_mounted(mnt)


def main():
    path = os.path.join(TMP, "d.pt")
    torch.save({"x": torch.arange(40).reshape(20, 2)}, path)
    second_mount_is_refused(path)
    other_file_systems_are_named(path)
    missing_mountpoint_does_not_exist(path)
    umount_of_what_is_not_mounted()
    umount_from_inside_works(path)
    mapped_batches_hold_the_mount_until_lazy(path)
    dead_mount_is_refused_then_unmounted(path)
    zero_batches_are_refused(path)
    num_samples_alone_is_a_usage_error(path)
    print("ok")


main()
