"""The Python binding (loader/python/batchfs_loader.py) with real torch, CPU
mode: batch files written here (safetensors, as batchfs serves them) come
back as dicts of tensors equal to the originals, for every dtype this torch
has (bf16 included), with zero-copy and copy=True; a corrupt file raises
LoaderError with errno EBADMSG and the loader's message."""
import errno
import json
import os
import struct
import sys

try:
    import torch
except ImportError:
    print("skip: torch is not installed")
    sys.exit(77)

src = os.environ.get("BFS_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
build = os.environ.get("BUILD", "build")
lib = os.path.join(src, build, "libbatchfs_loader.so") if not os.path.isabs(build) \
    else os.path.join(build, "libbatchfs_loader.so")
if not os.path.exists(lib):
    print("FAIL: %s not built" % lib)
    sys.exit(1)
os.environ["BATCHFS_LOADER_LIB"] = lib


def preload_sanitizers():
    """A SANITIZE= build of the library can only be dlopen'ed by a python
    whose first libraries are the sanitizer runtimes: re-exec with them
    preloaded (python's own allocations are not ours to leak-check)."""
    if os.environ.get("BFS_SAN_PRELOADED"):
        return
    import subprocess
    deps = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    runtimes = [name for name in ("libasan.so", "libubsan.so", "libtsan.so")
                if name in deps]
    if not runtimes:
        return
    paths = [subprocess.run(["gcc", "-print-file-name=" + r], capture_output=True,
                            text=True).stdout.strip() for r in runtimes]
    env = dict(os.environ, BFS_SAN_PRELOADED="1", LD_PRELOAD=" ".join(paths))
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


preload_sanitizers()
sys.path.insert(0, os.path.join(src, "loader", "python"))
from batchfs_loader import Loader, LoaderError  # noqa: E402

CODES = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8",
         torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
         torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
         torch.float64: "F64", torch.complex64: "C64"}


def write_batch(path, tensors, k):
    """safetensors with the data at a multiple of 4096, fields by descending
    element size then name (DESIGN.md §2)."""
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header = {"__metadata__": {"format": "batchfs/1", "epoch": "0",
                               "batch": str(k)}}
    blobs, off = [], 0
    for n in order:
        t = tensors[n].contiguous()
        b = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[n] = {"dtype": CODES[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    js = json.dumps(header).encode()
    start = (8 + len(js) + 4095) // 4096 * 4096
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", start - 8) + js + b" " * (start - 8 - len(js)))
        for b in blobs:
            f.write(b)


def make(rows, k):
    g = torch.Generator().manual_seed(k)
    return {
        "images": torch.randint(0, 256, (rows, 3, 5, 7), generator=g, dtype=torch.uint8),
        "labels": torch.randint(-9, 9, (rows,), generator=g, dtype=torch.int64),
        "x32": torch.randn(rows, 3, generator=g),
        "x64": torch.randn(rows, 2, generator=g, dtype=torch.float64),
        "half": torch.randn(rows, 4, generator=g).half(),
        "bf": torch.randn(rows, 5, generator=g).bfloat16(),
        "mask": torch.rand(rows, generator=g) > 0.5,
        "i8": torch.randint(-128, 127, (rows, 1), generator=g, dtype=torch.int8),
        "i16": torch.randint(-999, 999, (rows,), generator=g, dtype=torch.int16),
        "i32": torch.randint(-999, 999, (rows, 2), generator=g, dtype=torch.int32),
        "cplx": torch.randn(rows, 2, generator=g, dtype=torch.complex64),
        "empty": torch.zeros(rows, 0),
    }


def check_equal(got, want, where):
    assert set(got) == set(want), (where, sorted(got), sorted(want))
    for n in want:
        assert got[n].dtype == want[n].dtype, (where, n, got[n].dtype)
        assert got[n].shape == want[n].shape, (where, n, got[n].shape)
        assert torch.equal(got[n], want[n]), (where, n)


tmp = os.environ.get("BFS_TEST_TMP", "/tmp")
d = os.path.join(tmp, "epoch0")
os.makedirs(d, exist_ok=True)
rows = [64, 64, 64, 64, 17]          # last batch partial
want = [make(r, k) for k, r in enumerate(rows)]
for k, t in enumerate(want):
    write_batch(os.path.join(d, "batch_%d" % k), t, k)

# zero-copy: each batch compared before asking for the next one
with Loader(d, device="cpu", slots=2, chunk=8192) as L:
    assert not L.cuda and len(L) == len(rows)
    n = 0
    for k, batch in enumerate(L):
        check_equal(batch, want[k], "zero-copy batch %d" % k)
        n += 1
    assert n == len(rows)

# copy=True: tensors stay valid after the loader moved on and closed
with Loader(d, device="cpu", copy=True, slots=2) as L:
    kept = list(L)
for k, batch in enumerate(kept):
    check_equal(batch, want[k], "copied batch %d" % k)

# explicit file list, reversed
files = [os.path.join(d, "batch_%d" % k) for k in reversed(range(len(rows)))]
got = list(Loader(files=files, device="cpu", copy=True))
for i, batch in enumerate(got):
    check_equal(batch, want[len(rows) - 1 - i], "file list %d" % i)

# a corrupt header: batch 0 arrives, batch 1 raises with the reason
with open(os.path.join(d, "batch_1"), "r+b") as f:
    f.seek(8)
    f.write(b"[")
with Loader(d, device="cpu") as L:
    it = iter(L)
    check_equal(next(it), want[0], "before the corrupt one")
    try:
        next(it)
        raise AssertionError("corrupt batch_1 was delivered")
    except LoaderError as e:
        assert e.errno == errno.EBADMSG, e
        assert "batch_1" in str(e) and "header offset 8" in str(e), str(e)
print("ok: %d batches, %d fields, dtypes %s" % (
    len(rows), len(want[0]), sorted(CODES[t.dtype] for t in want[0].values())))
