"""Memory cgroups (v1 or v2, whichever the machine has) for the tests and
the benchmark: make one with a limit, move a process into it, count its
OOM kills, remove it. Making one needs root."""
import os
import time


class Unavailable(Exception):
    """This machine has no memory cgroup controller to use."""


def mounts():
    """(v1 memory hierarchy mount point or None, v2 mount point or None)."""
    v1 = v2 = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.split(" - ", 1)
            mnt, (fs, _, opts) = pre.split()[4], post.split()[:3]
            if fs == "cgroup" and "memory" in opts.split(","):
                v1 = v1 or mnt
            elif fs == "cgroup2":
                v2 = v2 or mnt
    return v1, v2


def make(limit, name):
    """A fresh memory cgroup 'name' limited to 'limit' bytes: its directory.
    Unavailable when there is no memory controller; OSError when it cannot
    be made (not root)."""
    v1, v2 = mounts()
    if v1:
        base, knob = v1, "memory.limit_in_bytes"
    elif v2:
        with open(os.path.join(v2, "cgroup.subtree_control")) as f:
            if "memory" not in f.read().split():
                raise Unavailable(
                    "cgroup v2 without the memory controller enabled")
        base, knob = v2, "memory.max"
    else:
        raise Unavailable("no memory cgroup controller")
    d = os.path.join(base, name)
    os.mkdir(d)
    with open(os.path.join(d, knob), "w") as f:
        f.write(str(limit))
    return d


def join(cg):
    """Move the calling process into cgroup 'cg' (a preexec_fn)."""
    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def remove(cg):
    """rmdir the cgroup: EBUSY for a moment after its last process exited
    (cleanup only: a few retries, and a message rather than an exception
    that would hide the failure being raised)."""
    for _ in range(40):
        try:
            os.rmdir(cg)
            return
        except OSError as e:
            err = e
            time.sleep(0.05)
    print("cannot remove %s: %s" % (cg, err))


def peak(cg):
    """The most memory cgroup 'cg' held at once, in bytes (v1
    memory.max_usage_in_bytes, v2 memory.peak); None when neither."""
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        try:
            with open(os.path.join(cg, name)) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError):
            pass
    return None


def oom_kills(cg):
    """Processes of memory cgroup 'cg' the kernel OOM-killed (v1
    memory.oom_control, v2 memory.events: "oom_kill N")."""
    for name in ("memory.oom_control", "memory.events"):
        try:
            with open(os.path.join(cg, name)) as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            pass
    return 0
