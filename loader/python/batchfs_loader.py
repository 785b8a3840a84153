"""batchfs_loader: Python binding (ctypes, no compiled extension) of
libbatchfs_loader — batch files (safetensors, e.g. a batchfs mount's
epoch/N/) -> pinned host ring -> GPU, delivered in order as dicts of torch
tensors.

    from batchfs_loader import Loader
    with Loader("/mnt/data/epoch/0") as batches:        # CUDA when available
        for batch in batches:                           # {"images": Tensor, ...}
            loss = model(batch["images"].float()).sum()

Memory rule: with copy=False (the default) the tensors of a batch view the
loader's ring and stay valid until the next batch is requested (or the
loader is closed). On CUDA the slot is released on the current stream, so
work you already queued on it is safe; keep a tensor longer only after
.clone(). copy=True returns tensors that own their memory.

The shared library is found via $BATCHFS_LOADER_LIB, then build/ of the
source tree this file lives in, then the system library path.
"""

import ctypes
import ctypes.util
import errno
import os

__all__ = ["Loader", "LoaderError", "load_library"]

EOF = 1
MODE_AUTO, MODE_CPU, MODE_CUDA = 0, 1, 2
FLAG_KEEP_HOST = 1

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


class LoaderError(OSError):
    """A loader call failed; .errno is the errno, str() the loader's message."""


_lib = None


def load_library(path=None):
    """Load (once) and return libbatchfs_loader.so with typed functions."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [path, os.environ.get("BATCHFS_LOADER_LIB"),
                  os.path.join(here, "..", "..", "build", "libbatchfs_loader.so"),
                  ctypes.util.find_library("batchfs_loader")]
    lib = None
    for c in candidates:
        if c and (os.path.exists(c) or not os.path.dirname(c)):
            lib = ctypes.CDLL(c)
            break
    if lib is None:
        raise OSError(errno.ENOENT, "libbatchfs_loader.so not found "
                      "(build it with make, or set BATCHFS_LOADER_LIB)")
    P = ctypes.c_void_p
    lib.bfs_loader_open.argtypes = [ctypes.POINTER(P), ctypes.POINTER(_Opts)]
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


class _CudaBytes:
    """Device bytes [ptr, ptr+n) seen through __cuda_array_interface__."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "|u1", "data": (ptr, False),
            "version": 2, "strides": None}


class Loader:
    """Iterate the batches of an epoch directory (batch_0, batch_1, ...) or
    of an explicit file list, in order, as dicts name -> torch.Tensor.

    device: "auto" (CUDA when torch and the driver have a GPU, else CPU),
    "cpu", "cuda" or "cuda:N". slots/readers/chunk: ring slots, reader
    threads, pread size (0 = library defaults 3 / 4 / 4 MiB).
    """

    def __init__(self, path=None, files=None, device="auto", slots=0,
                 readers=0, chunk=0, copy=False, lib=None):
        import torch
        self._torch = torch
        self._lib = load_library(lib)
        self._L = ctypes.c_void_p()
        self._held = None
        self._copy = copy
        o = _Opts()
        if (path is None) == (files is None):
            raise ValueError("give exactly one of path and files")
        if path is not None:
            o.dir = os.fsencode(path)
        else:
            self._files = (ctypes.c_char_p * (len(files) + 1))(
                *[os.fsencode(f) for f in files], None)
            o.files = self._files
        dev = str(device)
        if dev == "auto" and torch.cuda.is_available():
            o.mode, o.device = MODE_AUTO, torch.cuda.current_device()
        elif dev in ("auto", "cpu"):
            o.mode = MODE_CPU
        elif dev.startswith("cuda"):
            o.mode = MODE_CUDA
            o.device = (int(dev.split(":")[1]) if ":" in dev
                        else torch.cuda.current_device())
        else:
            raise ValueError("device must be auto, cpu, cuda or cuda:N")
        o.slots, o.readers, o.chunk = slots, readers, chunk
        rc = self._lib.bfs_loader_open(ctypes.byref(self._L), ctypes.byref(o))
        if rc < 0:
            raise LoaderError(-rc, "batchfs loader: open failed: %s" %
                              self._lib.bfs_loader_strerror(rc).decode())
        self.cuda = self._lib.bfs_loader_mode(self._L) == MODE_CUDA
        self.device = (torch.device("cuda", o.device) if self.cuda
                       else torch.device("cpu"))

    # -- iteration ---------------------------------------------------------
    def __len__(self):
        return int(self._lib.bfs_loader_count(self._L))

    def __iter__(self):
        return self

    def _stream(self):
        if not self.cuda:
            return None
        return self._torch.cuda.current_stream(self.device).cuda_stream or None

    def _release_held(self):
        if self._held is not None:
            b, self._held = self._held, None
            rc = self._lib.bfs_loader_release(self._L, ctypes.byref(b),
                                              self._stream())
            if rc < 0:
                self._raise(rc)

    def _raise(self, rc):
        msg = self._lib.bfs_loader_errmsg(self._L).decode(errors="replace")
        raise LoaderError(-rc, msg or
                          self._lib.bfs_loader_strerror(rc).decode())

    def _tensor(self, t):
        torch = self._torch
        code = t.dtype.decode()
        dt = _torch_dtype(torch, code)
        if dt is None:
            raise LoaderError(errno.ENOTSUP, "tensor %r: dtype %s is not "
                              "supported by this torch" % (t.name, code))
        shape = [t.shape[i] for i in range(t.ndim)]
        n = int(t.nbytes)
        if n == 0:
            return torch.empty(shape, dtype=dt, device=self.device)
        if self.cuda:
            raw = torch.as_tensor(_CudaBytes(int(t.dev), n),
                                  device=self.device)
        else:
            buf = (ctypes.c_uint8 * n).from_address(t.host)
            raw = torch.frombuffer(buf, dtype=torch.uint8)
        x = raw.view(dt).reshape(shape)
        return x.clone() if self._copy else x

    def __next__(self):
        if self._L is None or not self._L.value:
            raise StopIteration
        self._release_held()
        b = _Batch()
        with_stream = self._stream()
        rc = self._lib.bfs_loader_next(self._L, ctypes.byref(b), with_stream)
        if rc == EOF:
            raise StopIteration
        if rc < 0:
            self._raise(rc)
        self._held = b
        out = {}
        for i in range(b.ntensors):
            t = b.tensors[i]
            out[t.name.decode()] = self._tensor(t)
        if self._copy:
            self._release_held()   # clones are queued on the stream first
        return out

    # -- lifetime ----------------------------------------------------------
    def close(self):
        """Release and free everything; tensors not cloned become invalid."""
        if self._L is not None and self._L.value:
            if self.cuda:
                # batches in use on the stream must finish before the
                # device ring is freed
                self._torch.cuda.current_stream(self.device).synchronize()
            self._held = None
            self._lib.bfs_loader_close(self._L)
        self._L = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
