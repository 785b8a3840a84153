"""batchfs_loader: Python binding (ctypes, no compiled extension) of
libbatchfs_loader -- batch files (safetensors, e.g. a batchfs mount's
epoch/N/) -> pinned host ring -> GPU, delivered in order as dicts of torch
tensors.

    from batchfs_loader import Loader
    with Loader("/mnt/data/epoch/0") as loader:         # CUDA when available
        for epoch in range(10):
            if epoch:
                loader.reopen("/mnt/data/epoch/%d" % epoch)  # same ring
            for batch in loader:                        # {"images": Tensor, ...}
                loss = model(batch["images"].float()).sum()

Memory rule: a batch, and every tensor in it, stays valid and unchanged for
as long as you hold it, also after the loader moved on or was closed.
 - copy=True (the default): the tensors own their memory. Each batch is
   cloned from the ring on the loader's stream and the ring slot is given
   back at once. Hold as many batches as you like (list(loader) works).
 - copy=False: zero-copy, the tensors view the ring. A slot returns to the
   ring when the last tensor (or view) of its batch is gone; holding as
   many batches as there are slots and asking for one more raises
   LoaderError(EBUSY) instead of overwriting one. close() frees the ring
   only once the last such batch is gone.

Stream rule (CUDA): every batch of an iteration is ready on one stream,
batch.stream: the stream= given to Loader, else torch's current stream
when the iteration starts (iter(), i.e. the for loop), whatever stream is
current when next() is called. Use a batch on that stream freely. To use
it on another stream s, call batch.use_on(s) first: s then waits for the
batch, and (copy=False) the slot goes back to the ring only after the work
queued on s by the time the batch is dropped; (copy=True) torch is told
through record_stream. torch's default stream is the legacy default stream
(NULL), which waits for and blocks every other blocking stream.

The shared library is found via $BATCHFS_LOADER_LIB, then where `make
install` put it, then the copy pip's wheel bundles (batchfs/ beside this
file: `pip install ./loader/python`), then build/ of the source tree this
file lives in, then the system library path.
"""

import collections
import ctypes
import ctypes.util
import errno
import gc
import logging
import os
import threading
import warnings

__all__ = ["Loader", "Batch", "LoaderError", "load_library"]

EOF = 1
MODE_AUTO, MODE_CPU, MODE_CUDA = 0, 1, 2
LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3
_PREFIX = "batchfs[loader]: "
_log = logging.getLogger("batchfs_loader")

_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


class _Opts(ctypes.Structure):
    _fields_ = [
        ("dir", ctypes.c_char_p),
        ("files", ctypes.POINTER(ctypes.c_char_p)),
        ("mode", ctypes.c_int),
        ("device", ctypes.c_int),
        ("slots", ctypes.c_uint),
        ("readers", ctypes.c_uint),
        ("chunk", ctypes.c_size_t),
        ("flags", ctypes.c_uint),
        ("log", _LOG_FN),
        ("log_arg", ctypes.c_void_p),
        ("log_level", ctypes.c_int),
    ]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char * 12),
        ("elem_size", ctypes.c_uint32),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.POINTER(ctypes.c_uint64)),
        ("nbytes", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("host", ctypes.c_void_p),
        ("dev", ctypes.c_uint64),
    ]


class _Batch(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
        ("ntensors", ctypes.c_uint32),
        ("tensors", ctypes.POINTER(_Tensor)),
        ("host", ctypes.c_void_p),
        ("dev", ctypes.c_uint64),
        ("slot", ctypes.c_uint32),
    ]


_STATS = ("batches", "bytes_read", "copies", "wait_ns", "ring_bytes",
          "pin_calls", "copy_cpu_ns", "direct_files")


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in _STATS]


class LoaderError(OSError):
    """A loader call failed; .errno is the errno, str() says why (the
    reason the library logged or latched)."""


_lib = None
_INSTALLED_LIB = None  # `make install` writes the installed library here
# pip's wheel (loader/python/pyproject.toml) bundles it in the package
_BUNDLED_LIB = os.path.join("batchfs", "libbatchfs_loader.so.0")


def load_library(path=None):
    """Load (once) and return libbatchfs_loader.so with typed functions:
    'path', else $BATCHFS_LOADER_LIB (a path to a file that is not there is
    an error, not a reason to take another), else the module's order."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    here = os.path.dirname(os.path.abspath(__file__))
    given = path or os.environ.get("BATCHFS_LOADER_LIB")
    if given and os.path.dirname(given) and not os.path.exists(given):
        raise OSError(errno.ENOENT, "%s: no such file: give the path of "
                      "libbatchfs_loader.so (build/ of a source tree after "
                      "make, PREFIX/lib after make install), or unset "
                      "BATCHFS_LOADER_LIB to use the installed one"
                      % ("load_library(%r)" % given if path
                         else "BATCHFS_LOADER_LIB=" + given))
    candidates = [given, _INSTALLED_LIB, os.path.join(here, _BUNDLED_LIB),
                  os.path.join(here, "..", "..", "build", "libbatchfs_loader.so"),
                  ctypes.util.find_library("batchfs_loader")]
    lib = None
    for c in candidates:
        if c and (os.path.exists(c) or not os.path.dirname(c)):
            lib = ctypes.CDLL(c)
            break
    if lib is None:
        raise OSError(errno.ENOENT, "libbatchfs_loader.so not found: not "
                      "installed (make install), not bundled with this "
                      "batchfs_loader.py (pip install ./loader/python), not "
                      "built beside it (make), not on the library path: "
                      "install batchfs from its source tree with make "
                      "install or pip install ./loader/python, or set "
                      "BATCHFS_LOADER_LIB to the library's path")
    P = ctypes.c_void_p
    lib.bfs_loader_open.argtypes = [ctypes.POINTER(P), ctypes.POINTER(_Opts)]
    lib.bfs_loader_reopen.argtypes = [P, ctypes.c_char_p,
                                      ctypes.POINTER(ctypes.c_char_p)]
    lib.bfs_loader_next.argtypes = [P, ctypes.POINTER(_Batch), P]
    lib.bfs_loader_release.argtypes = [P, ctypes.POINTER(_Batch), P]
    lib.bfs_loader_close.argtypes = [P]
    lib.bfs_loader_close.restype = None
    lib.bfs_loader_mode.argtypes = [P]
    lib.bfs_loader_count.argtypes = [P]
    lib.bfs_loader_count.restype = ctypes.c_uint64
    lib.bfs_loader_errmsg.argtypes = [P]
    lib.bfs_loader_errmsg.restype = ctypes.c_char_p
    lib.bfs_loader_strerror.argtypes = [ctypes.c_int]
    lib.bfs_loader_strerror.restype = ctypes.c_char_p
    lib.bfs_loader_stats.argtypes = [P, ctypes.POINTER(_Stats)]
    if path is None:
        _lib = lib
    return lib


def _torch_dtype(torch, code):
    """torch dtype of a safetensors code; None when this torch lacks it."""
    names = {
        "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16",
        "I32": "int32", "I64": "int64", "U16": "uint16", "U32": "uint32",
        "U64": "uint64", "F16": "float16", "BF16": "bfloat16",
        "F32": "float32", "F64": "float64", "C32": "complex32",
        "C64": "complex64", "C128": "complex128",
        "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
        "F8_E8M0": "float8_e8m0fnu",
    }
    n = names.get(code)
    return getattr(torch, n, None) if n else None


def _paths():
    """batchfs._paths (the package beside this file: what a mount looks
    like), or None when it cannot be imported."""
    try:
        from batchfs import _paths
        return _paths
    except ImportError:
        return None


def _watch(path, files):
    """A MountWatch (batchfs._paths) of the batchfs mount whose epoch
    directory is 'path' (or holds files[0]), or None: not in a mount, or
    no batchfs package."""
    paths = _paths()
    if path is None and files:
        path = os.path.dirname(os.fspath(files[0]))
    return paths.watch_epoch_dir(path) if paths and path else None


def _file_list(files):
    return (ctypes.c_char_p * (len(files) + 1))(
        *[os.fsencode(f) for f in files], None)


# -- devices: where tensors live and how streams are ordered ---------------

class _Host:
    """CPU mode: page-aligned host memory, no streams."""

    index = None

    def __init__(self, torch):
        self.torch, self.device = torch, torch.device("cpu")

    def stream(self, s):
        return None, None

    def tensor(self, ptr, n, keep):
        buf = (ctypes.c_uint8 * n).from_address(ptr)
        buf._keep = keep         # torch holds buf, buf holds the slot
        return self.torch.frombuffer(buf, dtype=self.torch.uint8)

    def clone(self, x, stream):
        return x.clone()

    def join(self, waiter, first):
        pass

    def keep(self, x, stream):
        pass

    def empty_cache(self):
        pass


class _CudaBytes:
    """Device bytes [ptr, ptr+n) seen through __cuda_array_interface__;
    torch keeps this object (and what it holds) alive with the tensor."""

    def __init__(self, ptr, n, keep):
        self._keep = keep
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "|u1", "data": (ptr, False),
            "version": 2, "strides": None}


class _TorchCuda:
    """CUDA mode through torch: device tensors, streams, the caching
    allocator."""

    def __init__(self, torch, index):
        self.torch, self.index = torch, index
        self.device = torch.device("cuda", index)

    def stream(self, s):
        """(stream, CUstream handle or None) of a stream= argument; None:
        torch's current stream now."""
        cuda = self.torch.cuda
        if s is None:
            s = cuda.current_stream(self.device)
        elif isinstance(s, int):
            s = cuda.ExternalStream(s, device=self.device)
        if s.device != self.device:
            raise ValueError("stream %r is not on %s" % (s, self.device))
        return s, (s.cuda_stream or None)

    def tensor(self, ptr, n, keep):
        with self.torch.cuda.device(self.device):
            return self.torch.as_tensor(_CudaBytes(ptr, n, keep),
                                        device=self.device)

    def clone(self, x, stream):
        with self.torch.cuda.stream(stream):
            return x.clone()

    def join(self, waiter, first):
        waiter.wait_stream(first)

    def keep(self, x, stream):
        x.record_stream(stream)

    def empty_cache(self):
        self.torch.cuda.empty_cache()


def _cuda_api(torch, index):
    """The CUDA device of device index 'index', or None when torch has no
    CUDA. (Tests put a device over the fake driver here.)"""
    if not torch.cuda.is_available():
        return None
    if index is None:
        index = torch.cuda.current_device()
    return _TorchCuda(torch, index)


# -- the C loader, shared by a Loader and its zero-copy batches ------------

class _Handle:
    """Owns the C loader. It is closed when the Loader is closed and no
    zero-copy batch holds a ring slot any more. Its log callback keeps the
    recent lines (for exception texts) and forwards them to logging."""

    def __init__(self, lib):
        self.lib, self.L = lib, ctypes.c_void_p()
        self.lines = collections.deque(maxlen=16)
        self.quiet = True     # while opening: keep, do not forward
        self.cb = _LOG_FN(self._on_log)
        self.mu = threading.Lock()
        self.held, self.closing = 0, False

    def _on_log(self, arg, level, line):
        text = line.decode(errors="replace")
        text = text[len(_PREFIX):] if text.startswith(_PREFIX) else text
        self.lines.append((level, text))
        if not self.quiet:
            _log.log({LOG_ERR: logging.ERROR, LOG_WARN: logging.WARNING,
                      LOG_INFO: logging.INFO}.get(level, logging.DEBUG),
                     "%s", text)

    def reason(self, rc, since=0):
        """Why call result rc: the last error line logged since line number
        'since' (or the last line), else the library's text of rc."""
        lines = list(self.lines)[since:]
        errs = [t for lv, t in lines if lv == LOG_ERR] or [t for _, t in lines]
        return errs[-1] if errs else self.lib.bfs_loader_strerror(rc).decode()

    def hold(self):
        with self.mu:
            self.held += 1

    def release(self, b, stream):
        rc = self.lib.bfs_loader_release(self.L, ctypes.byref(b), stream)
        with self.mu:
            self.held -= 1
            last = self.closing and self.held == 0
        if last:
            self._free()
        return rc

    def close(self):
        with self.mu:
            self.closing = True
            last = self.held == 0
        if last:
            self._free()

    def _free(self):
        if self.L.value:
            L, self.L = self.L, ctypes.c_void_p()
            self.lib.bfs_loader_close(L)


class _Slot:
    """A ring slot held by a zero-copy batch. Its tensors hold this object;
    when the last one goes, the slot is released on the iteration's stream,
    after the streams the batch was handed to (Batch.use_on)."""

    def __init__(self, h, dev, b, stream, handle):
        self.h, self.dev, self.b = h, dev, b
        self.stream, self.handle, self.others = stream, handle, []
        h.hold()

    def __del__(self):
        try:
            for s in self.others:
                self.dev.join(self.stream, s)
        except Exception:      # still release; the failure is logged
            _log.exception("batchfs loader: ordering the release")
        if self.h.release(self.b, self.handle) < 0:
            _log.error("batchfs loader: release of batch %d failed: %s",
                       self.b.index, self.h.lib.bfs_loader_errmsg(
                           self.h.L).decode(errors="replace"))


class Batch(dict):
    """One batch: name -> torch.Tensor, plus .index (its number in the
    epoch) and .stream (the CUDA stream it is ready on; None on CPU)."""

    def __init__(self, tensors, index, stream, dev, slot):
        super().__init__(tensors)
        self.index, self.stream = index, stream
        self._dev, self._slot = dev, slot

    def use_on(self, stream):
        """Hand the batch to another CUDA stream: 'stream' waits for the
        batch, and the batch's memory is kept until the work queued on
        'stream' by the time the batch is dropped is done. Returns self."""
        if self.stream is None:
            return self
        s, _ = self._dev.stream(stream)
        self._dev.join(s, self.stream)
        if self._slot is not None:
            self._slot.others.append(s)
        else:
            for t in self.values():
                self._dev.keep(t, s)
        return self


class Loader:
    """Iterate the batches of an epoch directory (batch_0, batch_1, ...) or
    of an explicit file list, in order, as Batch dicts name -> tensor.

    path: one epoch's directory, e.g. a mount's /mnt/data/epoch/0 (or
    /mnt/data/rank/R/epoch/0); given the mount's root or another of its
    directories, the LoaderError says which path it wants. When the
    mount the batches come from is gone (its daemon exited), the
    LoaderError names the mount and the daemon's log.

    device: "auto" (CUDA when torch has a GPU, else CPU), "cpu", "cuda" or
    "cuda:N". slots/readers/chunk: ring slots, reader threads, pread size
    (0 = the library's defaults: 3 slots, 8 for files of at most 2 MiB;
    half the online CPUs within 4..8 readers; 4 MiB). copy: see the module's
    memory rule. stream: the CUDA stream batches are delivered on (a
    torch.cuda.Stream or a CUstream handle); None = torch's current stream
    at the start of each iteration.
    """

    def __init__(self, path=None, files=None, device="auto", slots=0,
                 readers=0, chunk=0, copy=True, stream=None, lib=None):
        import torch
        self._torch, self._copy, self._stream_arg = torch, copy, stream
        self._iter = None        # (stream, handle) of the current iteration
        if (path is None) == (files is None):
            raise ValueError("give exactly one of path and files")
        o = _Opts()
        if path is not None:
            o.dir = os.fsencode(path)
        else:
            self._files = _file_list(files)
            o.files = self._files
        o.slots, o.readers, o.chunk = slots, readers, chunk
        self._where = path if path is not None else "file list"
        self._h = _Handle(load_library(lib))
        o.log = self._h.cb
        self._dev = self._open(o, str(device))
        self._h.quiet = False
        # The mount the batches come from, to name it when it goes away.
        self._mount = _watch(path, files)
        self.cuda = self._h.lib.bfs_loader_mode(self._h.L) == MODE_CUDA
        self.device = self._dev.device

    def _try(self, o, mode):
        o.mode = mode
        return self._h.lib.bfs_loader_open(ctypes.byref(self._h.L),
                                           ctypes.byref(o))

    def _open(self, o, dev):
        """Open in the mode 'dev' asks for; CUDA out of memory: once more
        after torch gave its cached blocks back; "auto": CPU if CUDA fails."""
        torch, host = self._torch, _Host(self._torch)
        if dev in ("auto", "cpu"):
            cuda = _cuda_api(torch, None) if dev == "auto" else None
        elif dev.startswith("cuda"):
            cuda = _cuda_api(torch, int(dev[5:]) if ":" in dev else None)
            if cuda is None:
                raise LoaderError(errno.ENODEV, "batchfs loader: %s "
                                  "requested, but torch has no CUDA" % dev)
        else:
            raise ValueError("device must be auto, cpu, cuda or cuda:N")
        if cuda is None:
            rc = self._try(o, MODE_CPU)
            if rc < 0:
                self._fail(rc, "")
            return host
        o.device = cuda.index
        rc = self._try(o, MODE_CUDA)
        if rc == -errno.ENOMEM:
            cuda.empty_cache()
            rc = self._try(o, MODE_CUDA)
        if rc == 0:
            return cuda
        if dev != "auto":
            self._fail(rc, "in CUDA mode")
        # the library falls back to CPU on a CUDA failure, says why at
        # INFO, and fails on anything else
        since = len(self._h.lines)
        rc = self._try(o, MODE_AUTO)
        if rc < 0:
            self._fail(rc, "")
        if self._h.lib.bfs_loader_mode(self._h.L) == MODE_CUDA:
            return cuda
        warnings.warn("batchfs loader: reading into host memory: %s"
                      % self._h.reason(0, since))
        return host

    def _fail(self, rc, how):
        why = self._h.reason(rc)
        paths = _paths()
        if rc == -errno.ENOENT and self._where != "file list" and paths:
            why = paths.epoch_dir_hint(self._where) or why
        raise LoaderError(-rc, "batchfs loader: cannot open %s%s: %s" % (
            self._where, " " + how if how else "", why))

    def _gone(self, rc, msg):
        """LoaderError(rc, msg), naming the mount and its daemon's log
        first when the mount the batches come from is gone."""
        mount = self._mount
        if mount is not None and mount.gone():
            msg = "batchfs loader: %s (%s)" % (
                _paths().gone_message(mount.path, mount.log), msg)
        return LoaderError(-rc, msg)

    # -- iteration ---------------------------------------------------------
    def __len__(self):
        return int(self._h.lib.bfs_loader_count(self._h.L))

    def __iter__(self):
        self._iter = self._dev.stream(self._stream_arg)
        return self

    def _raise(self, rc):
        msg = self._h.lib.bfs_loader_errmsg(self._h.L).decode(errors="replace")
        raise self._gone(rc, msg or self._h.reason(rc))

    def _next_raw(self, handle):
        b = _Batch()
        lib, L = self._h.lib, self._h.L
        rc = lib.bfs_loader_next(L, ctypes.byref(b), handle)
        if rc == -errno.EBUSY:
            gc.collect()         # a batch in a reference cycle may be free
            rc = lib.bfs_loader_next(L, ctypes.byref(b), handle)
        if rc == -errno.EBUSY:
            raise LoaderError(errno.EBUSY, "batchfs loader: every ring slot "
                              "is held by a zero-copy batch you still "
                              "reference; drop one, open with more slots=, "
                              "or use copy=True")
        if rc == EOF:
            raise StopIteration
        if rc < 0:
            self._raise(rc)
        return b

    def _tensor(self, t, keep):
        torch = self._torch
        code = t.dtype.decode()
        dt = _torch_dtype(torch, code)
        if dt is None:
            raise LoaderError(errno.ENOTSUP, "tensor %r: dtype %s is not "
                              "supported by this torch" % (t.name, code))
        shape = [t.shape[i] for i in range(t.ndim)]
        if t.nbytes == 0:
            return torch.empty(shape, dtype=dt, device=self.device)
        ptr = int(t.dev) if self.cuda else t.host
        raw = self._dev.tensor(ptr, int(t.nbytes), keep)
        return raw.view(dt).reshape(shape)

    def _tensors(self, b, keep):
        return {b.tensors[i].name.decode(): self._tensor(b.tensors[i], keep)
                for i in range(b.ntensors)}

    def __next__(self):
        if not self._h.L.value or self._h.closing:
            raise StopIteration
        if self._iter is None:
            self._iter = self._dev.stream(self._stream_arg)
        stream, handle = self._iter
        b = self._next_raw(handle)
        if not self._copy:
            slot = _Slot(self._h, self._dev, b, stream, handle)
            return Batch(self._tensors(b, slot), b.index, stream, self._dev,
                         slot)
        self._h.hold()
        try:
            out = {n: self._dev.clone(t, stream)
                   for n, t in self._tensors(b, None).items()}
        finally:                 # the clones are queued first
            rc = self._h.release(b, handle)
        if rc < 0:
            self._raise(rc)
        return Batch(out, b.index, stream, self._dev, None)

    def reopen(self, path=None, files=None):
        """Go on with another epoch's directory (or file list), keeping the
        ring (no new pinned or device memory). Every zero-copy batch must
        be gone; batches not yet delivered are dropped. The next iteration
        starts at its batch 0."""
        if (path is None) == (files is None):
            raise ValueError("give exactly one of path and files")
        lib, L = self._h.lib, self._h.L
        d = os.fsencode(path) if path is not None else None
        fl = _file_list(files) if files is not None else None
        since = len(self._h.lines)
        rc = lib.bfs_loader_reopen(L, d, fl)
        if rc == -errno.EBUSY:
            gc.collect()
            rc = lib.bfs_loader_reopen(L, d, fl)
        if rc < 0:
            raise self._gone(rc, "batchfs loader: cannot reopen on %s: %s"
                             % (path if path is not None else "file list",
                                self._h.reason(rc, since)))
        self._files, self._iter = fl, None
        self._mount = _watch(path, files)

    def stats(self):
        """The library's counters (batches, bytes_read, copies, wait_ns,
        ring_bytes, pin_calls, copy_cpu_ns) as a dict."""
        st = _Stats()
        self._h.lib.bfs_loader_stats(self._h.L, ctypes.byref(st))
        return {n: int(getattr(st, n)) for n in _STATS}

    # -- lifetime ----------------------------------------------------------
    def close(self):
        """Stop. The ring is freed now, or when the last zero-copy batch
        still held is dropped; batches already delivered stay valid."""
        self._h.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None:
            h.close()
