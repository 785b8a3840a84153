"""Reading one batch file (safetensors) into numpy arrays or torch tensors.

A batch file is an 8-byte little-endian header length N, N bytes of JSON
(padded so the data starts page aligned), then each field's bytes
(README.md: the batch file). Here it is either mapped (mmap, private
copy-on-write: nothing is copied until you write to an array, and what you
write stays yours; ctypes calls mmap(2) so that no descriptor stays open
per mapping) or read into memory the arrays own.

A read opens the file (on a batchfs mount: on_fuse) with O_DIRECT and
reads it whole in one read sized to the file, into a page-aligned buffer: a batchfs mount serves such an
open with direct I/O in every serve mode (each read one request, replied
from the daemon's gathered buffer or straight from the archive), which is
its fastest path (loader/python/batchfs/README.md: reading a batch file).
Where O_DIRECT is refused (EINVAL: a file system without it, or a mount
that says no) or its read is (EINVAL: a file system that wants aligned
sizes), the file is opened and read again plainly.
"""
import ctypes
import errno
import json
import mmap
import os
import sys
import threading

import numpy as np

from ._paths import check_read_error

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


PAGE = mmap.PAGESIZE


# Buffers of this size or more start on a 2 MiB boundary, their whole 2 MiB
# pages advised MADV_HUGEPAGE (aligned).
HUGE = 2 << 20


def aligned(size):
    """An uninitialised uint8 array of 'size' bytes starting on a page
    (direct I/O pins whole pages: an aligned buffer pins the fewest).

    From HUGE bytes on, an anonymous mapping starting on a 2 MiB
    boundary whose whole 2 MiB pages are advised MADV_HUGEPAGE (the tail
    stays in small pages: no memory is added), as the C loader's ring
    (loader/README.md): a batchfs mount's O_DIRECT read pins the
    buffer's pages and marks them dirty, page by page, in the reading
    thread; huge pages make that a few steps per read instead of one per
    4 KiB (tools/bench/RESULTS.md). The mapping goes when the last array
    viewing it does. Where the advice is refused (no transparent huge
    pages, a Python without madvise), the pages are small, as below."""
    if size >= HUGE:
        m = mmap.mmap(-1, -(-size // PAGE) * PAGE + HUGE,
                      mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = np.frombuffer(m, np.uint8)
        off = -raw.ctypes.data % HUGE
        try:
            m.madvise(mmap.MADV_HUGEPAGE, off, size // HUGE * HUGE)
        except (AttributeError, OSError, ValueError):
            pass
        return raw[off:off + size]
    raw = np.empty(size + PAGE, np.uint8)
    off = -raw.ctypes.data % PAGE
    return raw[off:off + size]


# Buffers let go (Buffers.__del__: a Batches() over one epoch ends, the
# next one's begins) are kept for the next Buffers of this process, up to
# SPARE_BYTES in all: without them every epoch's reader faults its memory
# in afresh (tools/bench/RESULTS.md).
SPARE_BYTES = 256 << 20
_spares = []
_spares_lock = threading.Lock()


def _spare(size):
    """A spare of 'size' bytes or more that nobody holds, taken off the
    spares; None when there is none."""
    with _spares_lock:
        for i, b in enumerate(_spares):
            if len(b) >= size and sys.getrefcount(b.base) == 2:
                return _spares.pop(i)
    return None


def _let_go(kept):
    """Buffers no longer kept by their Buffers, to the spares (those that
    fit under SPARE_BYTES: the largest first, which serve any size)."""
    with _spares_lock:
        room = SPARE_BYTES - sum(len(b) for b in _spares)
        for b in sorted(kept, key=len, reverse=True):
            if len(b) <= room:
                _spares.append(b)
                room -= len(b)


class Buffers:
    """Page-aligned buffers kept for reuse: a reader that reads batch
    after batch into fresh memory pays a page fault and a zeroed page per
    4 KiB of each (measured: 64 x 147-KiB rows, 5.3 -> 6.7 GB/s read
    from a mount into kept buffers). A buffer is handed out again only
    once nothing but this keeps its memory alive (its owner's reference
    count: every array or tensor viewing it holds one), so a batch stays
    valid and unchanged for as long as anyone holds any part of it.

    Threads may share one (Batches.read from many threads): a lock makes
    "nobody holds it" and the hand-out one step, else two threads could
    both see a buffer free and read two batches into it. A buffer is
    handed out as a view made under the lock (a reference to its memory,
    which a new buffer kept would otherwise lack until its batch's arrays
    view it). The allocation of a new buffer is outside the lock.

    It keeps 'keep' buffers (KEEP by default): Batches with N reader
    threads asks for KEEP + N, one per read in flight besides the
    batches the caller holds. When it goes, they go to the process's
    spares, where the next one finds them (SPARE_BYTES); a spare is
    handed out only once nobody holds it, as a kept one."""

    KEEP = 4

    def __init__(self, keep=KEEP):
        self.keep = max(1, int(keep))
        self._kept = []
        self._lock = threading.Lock()

    def __getstate__(self):
        """Pickled (a DataLoader worker started by spawn, or forkserver,
        gets its reader so): how many to keep, no more; the buffers and
        the lock are this process's own."""
        return {"keep": self.keep}

    def __setstate__(self, state):
        self.__init__(state.get("keep", self.KEEP))

    def __del__(self):
        try:
            _let_go(self.__dict__.get("_kept", ()))
        except Exception:  # the interpreter's end: the module is gone
            pass

    def __call__(self, size):
        """A page-aligned uint8 array of 'size' bytes nobody else uses."""
        with self._lock:
            for b in self._kept:
                if len(b) >= size and sys.getrefcount(b.base) == 2:
                    return b[:size]
        b = _spare(size)
        if b is None:
            b = aligned(size)
        out = b[:size]
        with self._lock:
            if len(self._kept) < self.keep:
                self._kept.append(b)
            else:  # keep the larger ones, which serve any size
                i = min(range(self.keep), key=lambda j: len(self._kept[j]))
                if len(self._kept[i]) < size and \
                        sys.getrefcount(self._kept[i].base) == 2:
                    self._kept[i] = b
        return out


def _open(path, direct):
    """(fd, opened with O_DIRECT, whether to ask for O_DIRECT next time):
    path opened read-only, with O_DIRECT when 'direct' and the file system
    takes it. EINVAL (or EOPNOTSUPP) says it never will: plainly from then
    on. EIO says not now: a batchfs mount whose kernel holds the batch
    open through passthrough for a plain open it saw first
    (fs/serve_passthrough.c); a batch that cannot be had at all fails
    the plain open too."""
    flags = os.O_RDONLY | os.O_CLOEXEC
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT), True, True
        except OSError as e:
            if e.errno == errno.EIO:
                return os.open(path, flags), False, True
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    return os.open(path, flags), False, False


FUSE_SUPER_MAGIC = 0x65735546


_LIBC = []


def _libc():
    """The C library through ctypes (loaded once; mmap typed for
    _Mapping)."""
    if not _LIBC:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int64]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _LIBC.append(libc)
    return _LIBC[0]


def on_fuse(path):
    """Whether path lives on a FUSE file system (a batchfs mount): only
    there is O_DIRECT asked for, since on a disk file system it would
    bypass the page cache (a hot file read from the disk again). statfs(2)
    through ctypes (os.statvfs has no f_type, the first field of struct
    statfs); False where it fails."""
    buf = ctypes.create_string_buffer(256)
    try:
        if _libc().statfs(os.fsencode(path), buf) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return ctypes.c_long.from_buffer(buf).value & 0xffffffff == \
        FUSE_SUPER_MAGIC


def read_file(path, direct=True, alloc=aligned):
    """(the file's bytes in a page-aligned array, whether to ask for
    O_DIRECT next time): one read sized to the file (more only when one
    comes back short), with O_DIRECT unless direct=False or it is refused
    (then plainly, from the start: _open; a read refused with EINVAL, as
    a file system that wants aligned sizes does, too). alloc(size): the
    buffer (a page-aligned uint8 array of that size nobody else uses)."""
    fd, now, direct = _open(path, direct)
    try:
        size = os.fstat(fd).st_size
        buf = alloc(size)
        got = 0
        while got < size:
            try:
                n = os.preadv(fd, [buf[got:]], got)
            except OSError as e:
                if not now or e.errno != errno.EINVAL:
                    raise
                os.close(fd)
                fd, now, direct = _open(path, False)
                got = 0
                continue
            if not n:
                raise OSError("%s: %d bytes, expected %d" % (path, got, size))
            got += n
    finally:
        os.close(fd)
    return buf, direct


class _Mapping:
    """A private mapping of a file, unmapped when the last array viewing
    it is gone. (mmap.mmap keeps a duplicate descriptor per mapping until
    Python 3.13: holding a thousand batches would hold a thousand open
    files.)"""

    def __init__(self, fd, size):
        libc = _libc()
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


def head_key(buf, n):
    """What identifies the layout of the batch file 'buf' whose header is
    n bytes: its size and its header without the leading __metadata__
    object (which names the batch: epoch, batch number), or None when the
    header does not start with one. Equal keys, equal tensors: the key
    holds every tensor entry."""
    hb = bytes(buf[8:8 + n])
    if not hb.startswith(b'{"__metadata__":{'):
        return None
    end = hb.find(b"}", 17)
    return None if end < 0 else (len(buf), n, hb[end:])


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


def load(path, zero_copy, direct=True, alloc=aligned):
    """(batch file 'path''s bytes as a numpy uint8 array, whether to ask
    for O_DIRECT next time): mapped (zero_copy; a file that cannot be,
    ENODEV or EINVAL, is read instead) or read (read_file, into
    alloc(size))."""
    if zero_copy:
        try:
            return _map(path), direct
        except OSError as e:
            # ENODEV: --serve direct (no mmap on libfuse 3.14);
            # EINVAL: an empty file (reading it says what is wrong)
            if e.errno not in (errno.ENODEV, errno.EINVAL):
                raise
    return read_file(path, direct, alloc)


def read_batch(path, device=None, zero_copy=True):
    """Batch file 'path' as {name: array}: numpy arrays (device=None) or
    torch tensors on 'device' ("cpu", "cuda", "cuda:1", a torch.device).

    zero_copy=True maps the file (mmap, copy-on-write): the arrays share
    the page cache and stay valid and unchanged for as long as you hold
    them. That needs a mount whose serve mode allows mmap (passthrough,
    push, cache; dataset.json's serve_mode); with zero_copy=False (and
    always for --serve direct) the file is read into memory the arrays
    own, with one O_DIRECT read sized to the file (read_file: a batchfs
    mount's fastest path; plainly where O_DIRECT is refused, and for a
    file that is not on a FUSE file system: a copy on disk is read
    through the page cache). A device
    other than the CPU always gets its own copy.

    A file that is not a batch file (safetensors) is a ValueError that
    says what is wrong with it; so is a directory (an epoch's: read
    'DIR/batch_0', or all of them with batchfs.Batches). A batch its
    mount could not serve (EIO, with a reason in stats: last_error) is a
    BatchReadError carrying that reason, as from Batches."""
    try:
        buf = load(path, zero_copy, on_fuse(path))[0]
    except IsADirectoryError:
        raise ValueError("%s is a directory: read_batch reads one batch "
                         "file, e.g. %s" % (path, os.path.join(
                             path, "batch_0"))) from None
    except OSError as err:
        check_read_error(err, path)
        raise
    return parse_batch(buf, device, path)


def parse_batch(buf, device, where, head=None, cache=None, header=None):
    """A batch file's bytes (a numpy uint8 array; the arrays view it) as
    read_batch returns them; 'where' names it in a ValueError. head: its
    header already parsed (JSON, n bytes), as (head, n); header: already
    checked too (read_header's answer). cache: a dict of headers parsed
    before (head_key: read_header's answer), so that the batches of one
    layout parse their JSON once (the metadata, which differs, is not
    returned)."""
    key = None
    if cache is not None and head is None and header is None and \
            len(buf) >= 8:
        key = head_key(buf, int.from_bytes(bytes(buf[:8]), "little"))
    try:
        if header is None and key is not None:
            header = cache.get(key)
        if header is None:
            header = read_header(buf) if head is None else \
                check_header(head[0], head[1], len(buf))
            if key is not None and len(cache) < 64:
                cache[key] = header
    except ValueError as e:
        raise ValueError("%s is not a batch file (safetensors: an 8-byte "
                         "header length, a JSON header, the data): %s"
                         % (where, e)) from None
    if device is None:
        return to_numpy(buf, header)
    import torch
    dev = torch.device(device)
    return to_torch(buf, None if dev.type == "cpu" else dev, header)
