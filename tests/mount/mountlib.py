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

import numpy as np

BATCHFS = os.environ.get("BATCHFS") or os.path.abspath("build/batchfs")
TMP = os.environ.get("BFS_TEST_TMP") or "/tmp"

# safetensors dtype -> numpy dtype (BF16 / F8 as raw bits)
NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
      "I32": "<i4", "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4",
      "U16": "<u2", "U8": "u1", "BOOL": "?", "C64": "<c8", "F8_E4M3": "u1",
      "F8_E5M2": "u1"}

# Every value of `batchfs mount --serve`: tests that must hold in each
# mode loop over this list (one place to extend when a mode is added).
SERVE_MODES = ["push", "cache", "direct"]

_mounts = []


def skip(reason):
    print("skip: " + reason)
    sys.exit(77)


def require_fuse():
    if not os.path.exists("/dev/fuse") or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        skip("/dev/fuse is not usable")
    if not shutil.which("fusermount3"):
        skip("fusermount3 is not installed")


def is_mounted(mnt):
    mnt = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def mount(sources, mnt=None, *opts, env=None, check=True):
    """Run batchfs mount; returns (CompletedProcess, mountpoint)."""
    if isinstance(sources, str):
        sources = [sources]
    if mnt is None:
        mnt = os.path.join(TMP, "mnt%d" % len(_mounts))
    os.makedirs(mnt, exist_ok=True)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([BATCHFS, "mount", *map(str, opts), *sources, mnt],
                       capture_output=True, text=True, env=e)
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
    with open(os.path.join(mnt, "stats")) as f:
        return {k: int(v) for k, v in (line.split() for line in f)}


def wait_pid_exit(pid, timeout=10.0):
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


def _cleanup():
    for mnt in list(_mounts):
        if is_mounted(mnt):
            try:
                pid = daemon_pid(mnt)
            except Exception:
                pid = None
            subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


atexit.register(_cleanup)


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
