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
# The one table in Python: the tests (tests/mount/mountlib.py) and
# tools/scripts/demo_check.py import it. When you add a dtype to
# fs/dtype.c, also add it here and to README.md's numpy reader (a mount's
# README renders its table from fs/dtype.c).
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
        if hasattr(self, "addr"):    # not when mmap failed
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
    of a batch file's bytes (any safetensors file of dtypes NP has). Bytes
    that are not one are a ValueError saying what is wrong, checked before
    anything is viewed: the header length, the JSON, each tensor's dtype,
    shape and offsets against the data's size."""
    size = len(buf)
    if size < 8:
        raise ValueError("%d bytes, fewer than the 8 of a header length"
                         % size)
    n = int.from_bytes(bytes(buf[:8]), "little")
    if n > size - 8:
        raise ValueError("its first 8 bytes say a %d-byte header follows; "
                         "the file has %d bytes" % (n, size))
    try:
        head = json.loads(bytes(buf[8:8 + n]))
    except ValueError:           # JSONDecodeError, UnicodeDecodeError
        raise ValueError("its header (bytes 8 to %d) is not JSON"
                         % (8 + n)) from None
    return check_header(head, n, size)


def check_header(head, n, size):
    """read_header's checks of a parsed header 'head' (n bytes of JSON) of
    a batch file of 'size' bytes, and its result."""
    if not isinstance(head, dict):
        raise ValueError("its header is not a JSON object")
    meta = head.pop("__metadata__", {})
    data = size - 8 - n
    for name, t in head.items():
        try:
            code, shape = t["dtype"], [int(d) for d in t["shape"]]
            b, e = (int(x) for x in t["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("tensor %r: %.80r is not a safetensors entry "
                             "(dtype, shape, data_offsets)"
                             % (name, t)) from None
        if code not in NP:
            raise ValueError("tensor %r: dtype %r is none batchfs serves"
                             % (name, code))
        want = int(np.prod(shape, dtype=np.int64)) * \
            np.dtype(NP[code]).itemsize
        if min(shape, default=0) < 0 or not 0 <= b <= e <= data or \
                e - b != want:
            raise ValueError("tensor %r: data_offsets [%d, %d] for shape "
                             "%s of %s, in %d bytes of data"
                             % (name, b, e, shape, code, data))
    return meta, head, 8 + n


def to_numpy(buf, header=None):
    """{name: numpy array} viewing buf (no copy). header: read_header(buf)
    when the caller has it."""
    _, head, base = header or read_header(buf)
    out = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        out[name] = buf[base + b:base + e].view(NP[t["dtype"]]).reshape(
            t["shape"])
    return out


def to_torch(buf, device=None, header=None):
    """{name: torch tensor} viewing buf (no copy on the CPU), moved to
    'device' when it is not the CPU."""
    import torch
    header = header or read_header(buf)
    head = header[1]
    bits = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
    out = {}
    for name, a in to_numpy(buf, header).items():
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
    own. A device other than the CPU always gets its own copy.

    A file that is not a batch file (safetensors) is a ValueError that
    says what is wrong with it; so is a directory (an epoch's: read
    'DIR/batch_0', or all of them with batchfs.Batches)."""
    buf = None
    try:
        if zero_copy:
            try:
                buf = _map(path)
            except OSError as e:
                # ENODEV: --serve direct (no mmap on libfuse 3.14);
                # EINVAL: an empty file (reading it says what is wrong)
                if e.errno not in (errno.ENODEV, errno.EINVAL):
                    raise
        if buf is None:
            buf = _read_all(path)
    except IsADirectoryError:
        raise ValueError("%s is a directory: read_batch reads one batch "
                         "file, e.g. %s" % (path, os.path.join(
                             path, "batch_0"))) from None
    return parse_batch(buf, device, path)


def parse_batch(buf, device, where, head=None):
    """A batch file's bytes (a numpy uint8 array; the arrays view it) as
    read_batch returns them; 'where' names it in a ValueError. head: its
    header already parsed (JSON, n bytes), as (head, n)."""
    try:
        header = read_header(buf) if head is None else \
            check_header(head[0], head[1], len(buf))
    except ValueError as e:
        raise ValueError("%s is not a batch file (safetensors: an 8-byte "
                         "header length, a JSON header, the data): %s"
                         % (where, e)) from None
    if device is None:
        return to_numpy(buf, header)
    import torch
    dev = torch.device(device)
    return to_torch(buf, None if dev.type == "cpu" else dev, header)
