"""Helpers of the Python loader tests (test_loader_python*.py): torch or a
skip, the built library (re-executing the test with the sanitizer runtimes
preloaded under a SANITIZE= build), batch files written as batchfs serves
them, and comparisons. The binding (loader/python) comes from PYTHONPATH,
as tests/run.sh sets it."""
import errno
import json
import os
import struct
import subprocess
import sys

try:
    import torch
except ImportError:
    print("skip: torch is not installed")
    sys.exit(77)

SRC = os.environ.get("BFS_SRC",
                     os.path.join(os.path.dirname(__file__), "..", ".."))
_build = os.environ.get("BUILD", "build")
BUILD = _build if os.path.isabs(_build) else os.path.join(SRC, _build)
LIB = os.path.join(BUILD, "libbatchfs_loader.so")
TMP = os.environ.get("BFS_TEST_TMP", "/tmp")


def _preload_sanitizers():
    """A SANITIZE= build of the library can only be dlopen'ed by a python
    whose first libraries are the sanitizer runtimes: re-exec with them
    preloaded (python's own allocations are not ours to leak-check)."""
    if os.environ.get("BFS_SAN_PRELOADED"):
        return
    deps = subprocess.run(["ldd", LIB], capture_output=True, text=True).stdout
    runtimes = [name for name in ("libasan.so", "libubsan.so", "libtsan.so")
                if name in deps]
    if not runtimes:
        return
    paths = [subprocess.run(["gcc", "-print-file-name=" + r],
                            capture_output=True, text=True).stdout.strip()
             for r in runtimes]
    env = dict(os.environ, BFS_SAN_PRELOADED="1", LD_PRELOAD=" ".join(paths))
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


if not os.path.exists(LIB):
    print("FAIL: %s not built" % LIB)
    sys.exit(1)
os.environ["BATCHFS_LOADER_LIB"] = LIB
_preload_sanitizers()

CODES = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8",
         torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
         torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
         torch.float64: "F64", torch.complex64: "C64"}


def write_batch(path, tensors, k):
    """safetensors with the data at a multiple of 4096, fields by
    descending element size then name (as batchfs writes them)."""
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


def simple(rows, k):
    """A small batch: images and labels (labels k*1000 + row)."""
    g = torch.Generator().manual_seed(k)
    return {"images": torch.randint(0, 256, (rows, 3, 4, 4), generator=g,
                                    dtype=torch.uint8),
            "labels": torch.arange(rows, dtype=torch.int64) + 1000 * k}


def write_epoch(name, batches):
    """Directory TMP/name with batch_K files of 'batches' (dicts)."""
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    for k, t in enumerate(batches):
        write_batch(os.path.join(d, "batch_%d" % k), t, k)
    return d


def hold_every_slot(loader, slots):
    """next() 'slots' zero-copy batches and return them; one more must be
    refused (LoaderError EBUSY, saying what to do) instead of overwriting
    a held one."""
    from batchfs_loader import LoaderError
    it = iter(loader)
    held = [next(it) for _ in range(slots)]
    try:
        next(it)
    except LoaderError as e:
        assert e.errno == errno.EBUSY and "copy=True" in str(e), str(e)
        return held
    raise AssertionError("batch %d delivered with %d slots held"
                         % (slots, slots))


def check_equal(got, want, where):
    assert set(got) == set(want), (where, sorted(got), sorted(want))
    for n in want:
        g = got[n].cpu()
        assert g.dtype == want[n].dtype, (where, n, g.dtype)
        assert g.shape == want[n].shape, (where, n, g.shape)
        assert torch.equal(g, want[n]), (where, n)
