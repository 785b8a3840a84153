"""Reading one batch file (safetensors) into numpy arrays or torch tensors.

A batch file is an 8-byte little-endian header length N, N bytes of JSON
(padded so the data starts page aligned), then each field's bytes
(README.md: the batch file). Here it is either mapped (mmap, private
copy-on-write: nothing is copied until you write to an array, and what you
write stays yours; ctypes calls mmap(2) so that no descriptor stays open
per mapping) or read into memory the arrays own.
"""
import ctypes
import errno
import json
import mmap
import os

import numpy as np

# Every dtype a batchfs mount serves, as numpy reads it. numpy has no
# bfloat16 or float8: those come as their raw bits (uint16 / uint8); with
# torch (device=...) they are torch.bfloat16 / torch.float8_*.
# When you add a dtype to fs/dtype.c, also add it here and to README.md's
# numpy reader.
NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
      "I32": "<i4", "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4",
      "U16": "<u2", "U8": "u1", "BOOL": "?", "C64": "<c8", "F8_E4M3": "u1",
      "F8_E5M2": "u1"}

# safetensors dtype -> torch dtype name (None: numpy's dtype is torch's)
_TORCH = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
          "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32",
          "U64": "uint64"}


def _read_all(path):
    """The file's bytes in an array that owns them (one large read)."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        buf = np.empty(size, np.uint8)
        view, got = memoryview(buf), 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                raise OSError("%s: %d bytes, expected %d" % (path, got, size))
            got += n
    return buf


class _Mapping:
    """A private mapping of a file, unmapped when the last array viewing
    it is gone. (mmap.mmap keeps a duplicate descriptor per mapping until
    Python 3.13: holding a thousand batches would hold a thousand open
    files.)"""

    _libc = None

    def __init__(self, fd, size):
        libc = _Mapping._libc
        if libc is None:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int64]
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            _Mapping._libc = libc
        self.size, self.munmap = size, libc.munmap
        addr = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                         mmap.MAP_PRIVATE, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.addr = addr

    def __del__(self):
        self.munmap(self.addr, self.size)


def _map(path):
    """The file mapped privately (copy-on-write: reads share the page
    cache; a write to an array copies that page for this process only)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        m = _Mapping(fd, size)
    finally:
        os.close(fd)
    raw = (ctypes.c_uint8 * size).from_address(m.addr)
    raw._mapping = m        # the arrays hold raw, raw holds the mapping
    return np.frombuffer(raw, np.uint8)


def read_header(buf):
    """(metadata, {name: {"dtype", "shape", "data_offsets"}}, data start)
    of a batch file's bytes."""
    n = int.from_bytes(bytes(buf[:8]), "little")
    head = json.loads(bytes(buf[8:8 + n]))
    meta = head.pop("__metadata__", {})
    return meta, head, 8 + n


def to_numpy(buf):
    """{name: numpy array} viewing buf (no copy)."""
    _, head, base = read_header(buf)
    out = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        out[name] = buf[base + b:base + e].view(NP[t["dtype"]]).reshape(
            t["shape"])
    return out


def to_torch(buf, device=None):
    """{name: torch tensor} viewing buf (no copy on the CPU), moved to
    'device' when it is not the CPU."""
    import torch
    _, head, _ = read_header(buf)
    bits = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
    out = {}
    for name, a in to_numpy(buf).items():
        code = head[name]["dtype"]
        if code not in _TORCH:
            t = torch.from_numpy(a)
        else:  # numpy holds its bits: the same width, reinterpreted
            dt = getattr(torch, _TORCH[code], None)
            if dt is None:
                raise TypeError("field %r: dtype %s has no torch dtype in "
                                "torch %s; read it with device=None (numpy)"
                                % (name, code, torch.__version__))
            t = torch.from_numpy(a.view(bits[a.itemsize])).view(dt)
        out[name] = t if device is None else t.to(device)
    return out


def read_batch(path, device=None, zero_copy=True):
    """Batch file 'path' as {name: array}: numpy arrays (device=None) or
    torch tensors on 'device' ("cpu", "cuda", "cuda:1", a torch.device).

    zero_copy=True maps the file (mmap, copy-on-write): the arrays share
    the page cache and stay valid and unchanged for as long as you hold
    them. That needs a mount whose serve mode allows mmap (passthrough,
    push, cache; dataset.json's serve_mode); with zero_copy=False (and
    always for --serve direct) the file is read into memory the arrays
    own. A device other than the CPU always gets its own copy."""
    buf = None
    if zero_copy:
        try:
            buf = _map(path)
        except OSError as e:  # --serve direct: no mmap on libfuse 3.14
            if e.errno != errno.ENODEV:
                raise
    if buf is None:
        buf = _read_all(path)
    if device is None:
        return to_numpy(buf)
    import torch
    dev = torch.device(device)
    return to_torch(buf, None if dev.type == "cpu" else dev)
