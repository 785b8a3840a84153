"""Helpers for the real-mount tests (not a test itself).

Mounts with `batchfs mount` (which returns only once the filesystem is
ready: no sleeping), always unmounts at exit, kills leaked daemons, and
reads batch files as safetensors with json + numpy only.
"""
import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

import memcg  # (tests/lib)
# safetensors dtype -> numpy dtype (BF16 / F8 as raw bits): the package's
from batchfs import NP  # noqa: F401

BATCHFS = os.environ.get("BATCHFS") or os.path.abspath("build/batchfs")
TMP = os.environ.get("BFS_TEST_TMP") or "/tmp"

_mounts = []


def skip(reason):
    print("skip: " + reason)
    sys.exit(77)


def require_fuse():
    if not os.path.exists("/dev/fuse") or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        skip("/dev/fuse is not usable")
    if not shutil.which("fusermount3"):
        skip("fusermount3 is not installed")


def _real(mnt):
    """mnt with its parent's symlinks resolved, without a look at mnt
    itself (a mount that does not answer would hang a stat of it)."""
    mnt = os.path.abspath(mnt)
    return os.path.join(os.path.realpath(os.path.dirname(mnt)),
                        os.path.basename(mnt))


def is_mounted(mnt):
    mnt = _real(mnt)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def mount(sources, mnt=None, *opts, env=None, check=True, preexec_fn=None):
    """Run batchfs mount; returns (CompletedProcess, mountpoint).
    preexec_fn: run in the child before batchfs starts (its daemon
    inherits what it sets up, e.g. a cgroup)."""
    if isinstance(sources, str):
        sources = [sources]
    if mnt is None:
        mnt = os.path.join(TMP, "mnt%d" % len(_mounts))
    os.makedirs(mnt, exist_ok=True)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([BATCHFS, "mount", *map(str, opts), *sources, mnt],
                       capture_output=True, text=True, env=e,
                       preexec_fn=preexec_fn)
    if p.returncode == 0:
        _mounts.append(mnt)
    if check and p.returncode != 0:
        raise AssertionError("mount failed (%d): %s" % (p.returncode, p.stderr))
    return p, mnt


def daemon_pid(mnt):
    """The daemon's pid, from its stats file."""
    with open(os.path.join(mnt, "stats")) as f:
        for line in f:
            k, v = line.split()
            if k == "pid":
                return int(v)
    raise AssertionError("no pid in stats")


def stats(mnt):
    """The stats file as a dict: counters as ints, the rest (serve_mode,
    last_error_*: "-" when there was none) as strings."""
    with open(os.path.join(mnt, "stats")) as f:
        pairs = (line.split(None, 1) for line in f)
        return {k: int(v) if v.strip().isdigit() else v.strip()
                for k, v in pairs}


def sanitizer_of(pid):
    """"ASan" or "TSan" when process pid runs with that sanitizer's
    runtime, else None. Its RssAnon then holds the sanitizer's own state,
    not the daemon's allocations: TSan's grew ~170 KiB per epoch for 26
    epochs of test_mount_passthrough, then stayed flat (1300 -> 1332 KiB
    without it); ASan's quarantine of freed memory took test_mount_memory
    from 15 to 40 MB over 200 epochs (14.3 -> 19.6 -> 19.6 MB at epochs
    10, 100, 200 with quarantine_size_mb=0)."""
    with open("/proc/%d/maps" % pid) as f:
        maps = f.read()
    return "ASan" if "libasan" in maps else "TSan" if "libtsan" in maps \
        else None


_modes = None


def serve_modes():
    """Every --serve mode this machine can run, the default first:
    passthrough when the kernel offers it and we may register backing
    files (tried once on a tiny mount), then push, cache, direct.
    BATCHFS_TEST_SERVE_MODES (comma-separated) narrows the list."""
    global _modes
    if _modes is None:
        _modes = ["push", "cache", "direct"]
        if _passthrough_works():
            _modes.insert(0, "passthrough")
        want = os.environ.get("BATCHFS_TEST_SERVE_MODES")
        if want:
            _modes = [m for m in _modes if m in want.split(",")]
    return _modes


current_mode = None


def for_each_mode(fn, *args):
    """fn(mode, *args) for every mode of serve_modes(), saying which
    (current_mode names it for messages)."""
    global current_mode
    for mode in serve_modes():
        print("--- --serve %s" % mode)
        current_mode = mode
        fn(mode, *args)


_turn = 0


def next_mode():
    """The serve modes in turn, for tests with many mounts: each mode
    serves a share of them."""
    global _turn
    modes = serve_modes()
    _turn += 1
    return modes[(_turn - 1) % len(modes)]


def _passthrough_works():
    import torch
    path = os.path.join(TMP, "probe-passthrough.pt")
    torch.save({"x": torch.arange(4)}, path)
    p, mnt = mount(path, os.path.join(TMP, "probe-pt"), "--serve",
                   "passthrough", check=False)
    if p.returncode == 0:
        umount(mnt)
        return True
    print("passthrough not available here: " + p.stderr.strip())
    return False


# How long a test waits for a state before it calls it a hang: a bound on
# liveness, never a measurement, so generous enough for a sanitizer build
# on a machine whose cores are all busy.
LIVENESS_S = 60.0


def wait_for(ok, timeout=LIVENESS_S, every=0.02):
    """True once ok() holds, polled every 'every' seconds; False after
    timeout seconds."""
    end = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > end:
            return False
        time.sleep(every)
    return True


def wait_stats(mnt, ok, timeout=LIVENESS_S):
    """The stats once ok(stats) holds, polled: RELEASE is asynchronous
    (close() returns before the daemon hears of it). Fails after
    'timeout' seconds (a liveness bound, not a measurement)."""
    import time
    end = time.monotonic() + timeout
    while True:
        s = stats(mnt)
        if ok(s) or time.monotonic() > end:
            assert ok(s), s
            return s
        time.sleep(0.01)


def wait_blocked(pid, timeout=LIVENESS_S):
    """Until process pid sleeps waiting for a FUSE answer (its wchan is
    request_wait_answer); False after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/%d/wchan" % pid) as f:
            if "request_wait_answer" in f.read():
                return True
        time.sleep(0.01)
    return False


def finish(failures):
    """A test's exit status: 0, or 1 after listing its failures."""
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        return 1
    return 0


def wait_pid_exit(pid, timeout=LIVENESS_S):
    """Wait for a (non-child) process to exit, without polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        r, _, _ = select.select([fd], [], [], timeout)
        return bool(r)
    finally:
        os.close(fd)


def unmount_helpers(mnt):
    """pids of the fusermount3 --auto-unmount helpers watching mnt (each
    unmounts when the daemon's /dev/fuse descriptor dies)."""
    out = []
    want = os.path.realpath(mnt).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"fusermount3") and want in cmd:
            out.append(int(pid))
    return out


def umount(mnt):
    p = subprocess.run([BATCHFS, "umount", mnt], capture_output=True, text=True)
    if p.returncode:
        print("umount %s: %s" % (mnt, p.stderr))
    if mnt in _mounts and p.returncode == 0:
        _mounts.remove(mnt)
    return p


def fuse_connection(mnt):
    """The number of the FUSE connection mounted at mnt (its device's
    minor, from /proc/self/mountinfo: nothing on the mount is touched, so
    it answers for a mount that does not), or None when mnt is not a FUSE
    mount."""
    mnt = _real(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            if parts[4] == mnt and parts[sep + 1].startswith("fuse"):
                return int(parts[2].split(":")[1])
    return None


FUSECTL = "/sys/fs/fuse/connections"


def abort_mount(mnt):
    """Abort the FUSE connection of the mount at mnt (fusectl: every
    request waiting on its daemon fails with ENOTCONN, threads in D state
    included) and unmount it lazily: what a test does with its own mount
    once it stopped answering. True if a connection was aborted."""
    conn = fuse_connection(mnt)
    if conn is None:
        return False
    if not os.path.isdir(os.path.join(FUSECTL, str(conn))):
        subprocess.run(["mount", "-t", "fusectl", "none", FUSECTL],
                       capture_output=True)
    try:
        with open(os.path.join(FUSECTL, str(conn), "abort"), "w") as f:
            f.write("1")
        aborted = True
    except OSError as e:
        print("cannot abort FUSE connection %d of %s: %s" % (conn, mnt, e))
        aborted = False
    subprocess.run(["umount", "-l", mnt], capture_output=True)
    return aborted


def bounded(mnt, fns, timeout=LIVENESS_S):
    """Run each of fns (callables) in a thread of its own and wait for all
    of them at most 'timeout' seconds in all (a liveness bound, not a
    measurement). Returns the list of their exceptions (None for each that
    returned). If any is still running at the bound, the mount at mnt is
    wedged: its FUSE connection is aborted (the threads then return with
    errors) and it is unmounted lazily, and AssertionError says so: a
    test never waits forever on its own mount."""
    import threading
    errs = [None] * len(fns)

    def run(i):
        try:
            fns[i]()
        except BaseException as e:  # noqa: B902 (reported to the caller)
            errs[i] = e

    ts = [threading.Thread(target=run, args=(i,), daemon=True)
          for i in range(len(fns))]
    for t in ts:
        t.start()
    end = time.monotonic() + timeout
    for t in ts:
        t.join(max(0.0, end - time.monotonic()))
    stuck = sum(t.is_alive() for t in ts)
    if stuck:
        abort_mount(mnt)
        for t in ts:
            t.join(10)
        raise AssertionError("%s: %d of %d readers still waiting after "
                             "%.0f s: the mount is wedged (connection "
                             "aborted)" % (mnt, stuck, len(fns), timeout))
    return errs


def _daemon_pid_bounded(mnt):
    """daemon_pid(mnt) read by a child with a time bound: None when the
    mount does not answer (then its connection is aborted)."""
    try:
        p = subprocess.run(["cat", os.path.join(mnt, "stats")],
                           capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        abort_mount(mnt)
        return None
    for line in p.stdout.splitlines():
        k, _, v = line.partition(" ")
        if k == "pid":
            return int(v)
    return None


def _cleanup():
    for mnt in list(_mounts):
        if is_mounted(mnt):
            pid = _daemon_pid_bounded(mnt)
            subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


atexit.register(_cleanup)


_cgroups = 0


def memory_cgroup(limit):
    """A fresh memory cgroup limited to 'limit' bytes: its directory.
    Skips the test (77) when there is no memory controller."""
    global _cgroups
    _cgroups += 1
    try:
        return memcg.make(limit, "batchfs-test-%d-%d" % (os.getpid(),
                                                         _cgroups))
    except memcg.Unavailable as e:
        skip(str(e))


join_cgroup = memcg.join
remove_cgroup = memcg.remove
cgroup_oom_kills = memcg.oom_kills


BUILD_DIR = os.environ.get("BUILD", "build")
FAULTFS = os.path.join(os.environ.get("BFS_SRC", "."), BUILD_DIR, "tests",
                       "bin", "faultfs")


class FaultFS:
    """faultfs serving a copy of 'src' at <dir>/ff/archive.pt."""

    def __init__(self, src, tag):
        self.dir = os.path.join(TMP, "ff-" + tag)
        os.makedirs(self.dir + "/ff", exist_ok=True)
        self.backing = self.dir + "/backing.pt"
        shutil.copyfile(src, self.backing)
        self.proc = subprocess.Popen([FAULTFS, self.backing, self.dir + "/ff"],
                                     stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise AssertionError("faultfs did not start")
        self.archive = self.dir + "/ff/archive.pt"

    def ctl(self, cmd):
        with open(self.dir + "/ff/ctl", "w") as f:
            f.write(cmd)

    def stats(self):
        with open(self.dir + "/ff/stats") as f:
            return {k: int(v) for k, v in (ln.split() for ln in f)}

    def close(self):
        self.ctl("clear")
        subprocess.run(["fusermount3", "-u", self.dir + "/ff"])
        self.proc.wait(timeout=30)


# numpy dtype name -> safetensors code (what numpy and safetensors share)
ST_CODES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16",
            "int32": "I32", "int64": "I64", "uint16": "U16", "uint32": "U32",
            "uint64": "U64", "float16": "F16", "float32": "F32",
            "float64": "F64", "complex64": "C64"}


def le_c(a):
    """An array as a batch holds it: C order, little-endian."""
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a


def write_safetensors(path, arrays, pad_to=8):
    """A safetensors file as the reference writer makes it: {name: numpy
    array} in order, C order, little-endian, the JSON header padded with
    spaces to a multiple of pad_to."""
    hdr, data = {}, b""
    for k, a in arrays.items():
        a = le_c(a)
        hdr[k] = {"dtype": ST_CODES[a.dtype.name], "shape": list(a.shape),
                  "data_offsets": [len(data), len(data) + a.nbytes]}
        data += a.tobytes()
    h = json.dumps(hdr).encode()
    h += b" " * ((-len(h)) % pad_to)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + data)


def parse_safetensors(buf):
    """bytes -> (metadata, {name: numpy array}); checks the file is valid
    safetensors: header JSON, offsets tiling the data with no holes, exact
    file size."""
    n = int.from_bytes(buf[:8], "little")
    assert buf[8:9] == b"{", "header must start with '{'"
    head = json.loads(buf[8:8 + n])
    assert (8 + n) % 4096 == 0, "data must start page aligned"
    meta = head.pop("__metadata__")
    spans = sorted(tuple(v["data_offsets"]) for v in head.values())
    pos = 0
    for b, e in spans:
        assert b == pos, "hole or overlap in data_offsets"
        pos = e
    assert 8 + n + pos == len(buf), "file size != 8 + N + data"
    out = {}
    for name, v in head.items():
        b, e = v["data_offsets"]
        a = np.frombuffer(buf, NP[v["dtype"]], offset=8 + n + b,
                          count=int(np.prod(v["shape"])))
        assert a.nbytes == e - b
        out[name] = a.reshape(v["shape"])
    return meta, out


def read_file(path, chunk=1 << 20):
    with open(path, "rb", buffering=0) as f:
        parts = []
        while True:
            b = f.read(chunk)
            if not b:
                break
            parts.append(b)
    return b"".join(parts)


def read_batch(path):
    return parse_safetensors(read_file(path))


def read_index(path):
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def torch_np(t):
    """A torch tensor as numpy, bf16 as its raw uint16 bits."""
    import torch
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view("<u2")
    return t.contiguous().numpy()


def read_fails_with_eio(path):
    """Reading 'path' whole fails with EIO (a batch that cannot be had)."""
    import errno
    try:
        read_file(path)
    except OSError as ex:
        assert ex.errno == errno.EIO, ex
        return
    raise AssertionError("reading %s did not fail" % path)
