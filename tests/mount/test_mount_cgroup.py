#!/usr/bin/python3
"""The read-in at mount respects the memory cgroup the daemon runs in.

An archive that fits in half the memory available is read in whole at
mount (stats readahead_bytes = its size). In a container the page cache
counts against the container's memory limit, so "available" is the
smaller of /proc/meminfo's MemAvailable and what the daemon's memory
cgroup leaves (limit - usage, v1 or v2): a 64 MB archive mounted in a
cgroup limited to 96 MiB is not read in (read ahead batch by batch
instead, with a log line saying why), its mapping is marked for random
access (MADV_RANDOM: a page fault reads that page, not the disk's
read-ahead window around it), it serves every batch all the same, and
it is read in, without that mark, when mounted outside it.

Needs root and a memory cgroup controller (v1 hierarchy, or v2 with
memory in the root's subtree_control); exit 77 otherwise, and after the
half outside the cgroup when the daemon runs under ThreadSanitizer (its
runtime alone outgrows 96 MiB: the daemon was killed there)."""
import json
import os
import subprocess

import mountlib as ml

LIMIT = 96 << 20
SAMPLES = 21000  # the demo's 3080-byte samples: 64.7 MB


def daemon_log(mnt):
    with open(mnt + "/dataset.json") as f:
        path = json.load(f)["log"]
    with open(path) as f:
        return f.read()


def random_access(pid, archive):
    """Whether the daemon's mapping of 'archive' has VM_RAND_READ ("rr"
    in /proc/PID/smaps' VmFlags)."""
    with open("/proc/%d/smaps" % pid) as f:
        mapping = None
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                mapping = line.split()[-1] if len(line.split()) > 5 else ""
            elif line.startswith("VmFlags:") and mapping == archive:
                return "rr" in line.split()[1:]
    raise AssertionError("%s is not mapped by %d" % (archive, pid))


def check_every_batch(mnt):
    nb = len(os.listdir(mnt + "/epoch/0"))
    got = sum(len(ml.read_file("%s/epoch/0/batch_%d" % (mnt, k)))
              for k in range(nb))
    assert got > SAMPLES * 3080, got


def main():
    ml.require_fuse()
    if os.geteuid() != 0:
        ml.skip("needs root (a memory cgroup of its own)")
    archive = os.path.join(ml.TMP, "demo.pt")
    subprocess.run([ml.BATCHFS, "pack", "--demo", str(SAMPLES), "-o",
                    archive], check=True, capture_output=True)
    size = os.path.getsize(archive)
    assert LIMIT // 2 < size < LIMIT, size
    opts = ("--batch-size", 256, "--shuffle", "--seed", 7, "--cache-mb", 8)
    _, mnt = ml.mount(archive, os.path.join(ml.TMP, "outside"), *opts)
    ml.wait_stats(mnt, lambda s: s["readahead_bytes"] == size)
    assert not random_access(ml.daemon_pid(mnt), archive)
    check_every_batch(mnt)
    sanitized = ml.sanitizer_of(ml.daemon_pid(mnt))
    assert ml.umount(mnt).returncode == 0
    if sanitized == "TSan":
        ml.skip("the read-in outside a cgroup checked; ThreadSanitizer's "
                "daemon needs more than the cgroup's 96 MiB (the plain and "
                "ASan passes run that half)")
    cg = ml.memory_cgroup(LIMIT)
    pid = None
    try:
        mnt = os.path.join(ml.TMP, "in-cgroup")
        _, mnt = ml.mount(archive, mnt, *opts, "-v",
                          preexec_fn=lambda: ml.join_cgroup(cg))
        pid = ml.daemon_pid(mnt)
        with open("/proc/%d/cgroup" % pid) as f:
            assert os.path.basename(cg) in f.read()
        check_every_batch(mnt)
        s = ml.stats(mnt)
        assert s["readahead_bytes"] == 0, s
        assert random_access(pid, archive)
        log = daemon_log(mnt)
        assert "do not fit in half the memory available" in log and \
            "memory cgroups included" in log, log[-2000:]
        assert ml.umount(mnt).returncode == 0
    finally:
        if ml.is_mounted(os.path.join(ml.TMP, "in-cgroup")):
            ml.umount(os.path.join(ml.TMP, "in-cgroup"))
        if pid:
            ml.wait_pid_exit(pid)  # a cgroup goes once it is empty
        ml.remove_cgroup(cg)
    print("ok")


main()
