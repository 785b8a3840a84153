#!/usr/bin/python3
"""`batchfs pack` against real torch and numpy.

npy files of every dtype torch and numpy share (plus big-endian and
Fortran-order npy, 0-size and multi-chunk inputs) -> `batchfs pack` ->
torch.load(weights_only=True)
gives the same dict (names in argument order, dtypes, shapes, values); the
archive has torch's layout (every record's data 64-byte aligned, ZIP64 end
records, version "3\\n", byteorder "little", real CRC-32s that zipfile
checks); `batchfs inspect --json` agrees with torch; `--demo N` is loadable
and deterministic; bad inputs are refused clearly (exit 1), bad usage
exits 2."""
import json
import os
import struct
import subprocess
import zipfile

import numpy as np
import torch

TMP = os.environ["BFS_TEST_TMP"]
BATCHFS = os.environ["BATCHFS"]


def bfs(*args):
    r = subprocess.run([BATCHFS] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert 0 <= r.returncode < 128, (args, r.returncode, r.stderr)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def arrays():
    rng = np.random.default_rng(5)
    n = 7
    out = [
        ("b", rng.integers(0, 2, (n, 3)).astype(np.bool_)),
        ("u8", rng.integers(0, 256, (n, 2, 2)).astype(np.uint8)),
        ("i8", rng.integers(-128, 128, (n,)).astype(np.int8)),
        ("i16", rng.integers(-2**15, 2**15, (n, 4)).astype(np.int16)),
        ("i32", rng.integers(-2**31, 2**31, (n, 1)).astype(np.int32)),
        ("i64", rng.integers(-2**63, 2**63 - 1, (n,), dtype=np.int64)),
        ("f16", rng.standard_normal((n, 3)).astype(np.float16)),
        ("f32", rng.standard_normal((n, 2, 3)).astype(np.float32)),
        ("f64", rng.standard_normal((n,)).astype(np.float64)),
        ("c64", (rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2))).astype(np.complex64)),
        ("c128", (rng.standard_normal((n,)) + 1j).astype(np.complex128)),
        ("be_i32", rng.integers(-2**31, 2**31, (n, 2)).astype(">i4")),
        ("be_f64", rng.standard_normal((n,)).astype(">f8")),
        ("be_c64", (rng.standard_normal((n,)) - 2j).astype(">c8")),
        ("empty", np.zeros((n, 0), dtype=np.float32)),
        ("fortran", np.asfortranarray(rng.standard_normal((n, 3, 2)).astype(np.float32))),
        ("be_fortran", np.asfortranarray(rng.integers(0, 99, (n, 4)).astype(">i2"))),
        # > 1 MiB: several copy chunks, with a ragged last chunk
        ("big", rng.integers(0, 256, (n, 3, 100003)).astype(np.uint8)),
    ]
    return out


def check_layout(path):
    """torch's layout: aligned data, ZIP64 end records, version/byteorder."""
    raw = open(path, "rb").read()
    assert raw[-22:-18] == b"PK\x05\x06", "classic EOCD at the end"
    assert raw[-42:-38] == b"PK\x06\x07", "ZIP64 locator before it"
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None  # every CRC-32 real and right
        stem = z.namelist()[0].split("/")[0]
        assert z.read(stem + "/version") == b"3\n"
        assert z.read(stem + "/byteorder") == b"little"
        assert z.namelist()[0] == stem + "/data.pkl"
        for i in z.infolist():
            assert i.compress_type == zipfile.ZIP_STORED
            n, m = struct.unpack("<HH", raw[i.header_offset + 26:i.header_offset + 30])
            assert (i.header_offset + 30 + n + m) % 64 == 0, i.filename
            extra = raw[i.header_offset + 30 + n:i.header_offset + 30 + n + m]
            assert extra[:2] == b"FB", (i.filename, extra[:4])
    return stem


def roundtrip():
    args, want = [], []
    for name, a in arrays():
        p = os.path.join(TMP, name + ".npy")
        np.save(p, a)
        args.append("%s=%s" % (name, p))
        want.append((name, a))
    out = os.path.join(TMP, "packed.pt")
    rc, o, e = bfs("pack", "-o", out, *args)
    assert rc == 0, e
    assert not os.path.exists(out + ".partial")
    assert check_layout(out) == "packed"
    d = torch.load(out, weights_only=True)
    assert list(d.keys()) == [n for n, _ in want], list(d.keys())
    for name, a in want:
        t = d[name]
        na = a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a
        assert t.numpy().dtype == na.dtype, (name, t.dtype, na.dtype)
        assert tuple(t.shape) == a.shape, name
        assert t.is_contiguous()
        assert np.array_equal(t.numpy(), na), name
        assert t.numpy().tobytes() == np.ascontiguousarray(na).tobytes(), name
    # inspect agrees with torch
    rc, o, e = bfs("inspect", "--json", out)
    assert rc == 0, e
    got = json.loads(o)
    assert got["samples"] == 7
    assert [(f["name"], f["dtype"], f["shape"]) for f in got["fields"]] == [
        (n, str(d[n].dtype)[6:], list(d[n].shape)) for n, _ in want], got
    rc, o, e = bfs("inspect", "--verify", out)
    assert rc == 0 and "every CRC-32 verified" in o, (o, e)
    print("ok %d dtypes/layouts round-trip through torch.load(weights_only=True)" % len(want))


def demo():
    # Same file name (the record prefix is the name) in two directories.
    a, b = os.path.join(TMP, "a", "demo.pt"), os.path.join(TMP, "b", "demo.pt")
    for p in (a, b):
        os.makedirs(os.path.dirname(p), exist_ok=True)
        rc, o, e = bfs("pack", "--demo", "300", "-o", p)
        assert rc == 0, e
    assert open(a, "rb").read() == open(b, "rb").read(), "demo is deterministic"
    check_layout(a)
    d = torch.load(a, weights_only=True)
    assert list(d) == ["images", "labels"]
    assert d["images"].dtype == torch.uint8 and tuple(d["images"].shape) == (300, 3, 32, 32)
    assert d["labels"].dtype == torch.int64 and tuple(d["labels"].shape) == (300,)
    assert 0 <= int(d["labels"].min()) and int(d["labels"].max()) <= 9
    assert len(set(d["labels"].tolist())) == 10
    assert d["images"].float().std() > 50  # not constant
    rc, o, e = bfs("pack", "--demo", "0", "-o", os.path.join(TMP, "demo0.pt"))
    assert rc == 0, e
    d0 = torch.load(os.path.join(TMP, "demo0.pt"), weights_only=True)
    assert tuple(d0["images"].shape) == (0, 3, 32, 32)
    print("ok --demo: loadable, deterministic")


def refusals():
    out = os.path.join(TMP, "refused.pt")
    cases = [
        ("scalar", np.float32(2), "0-dim"),
        ("object", np.array([1, "a"], dtype=object), "object"),
        ("u16", np.zeros(3, np.uint16), "uint16"),
        ("str", np.array(["ab", "c"]), "dtype"),
    ]
    for name, a, needle in cases:
        p = os.path.join(TMP, name + ".npy")
        np.save(p, a, allow_pickle=True)
        rc, o, e = bfs("pack", "-o", out, "x=" + p)
        assert rc == 1 and needle in e and p in e, (name, rc, e)
        assert not os.path.exists(out) and not os.path.exists(out + ".partial")
        print("ok refused %-8s %s" % (name, e.strip()[:90]))
    # truncated npy data
    p = os.path.join(TMP, "short.npy")
    np.save(p, np.zeros(100, np.float32))
    os.truncate(p, os.path.getsize(p) - 4)
    rc, o, e = bfs("pack", "-o", out, "x=" + p)
    assert rc == 1 and "short.npy" in e, e
    rc, o, e = bfs("pack", "-o", out, "x=" + os.path.join(TMP, "missing.npy"))
    assert rc == 1 and "missing.npy" in e
    good = os.path.join(TMP, "f32.npy")
    for args in (["-o", out], ["x=" + good], ["-o", out, "noequals"],
                 ["-o", out, "x=" + good, "x=" + good], ["--demo", "-3", "-o", out],
                 ["--demo", "3", "-o", out, "x=" + good], ["--bogus"]):
        rc, o, e = bfs("pack", *args)
        assert rc == 2 and "usage:" in e, (args, rc, e)
    rc, o, e = bfs("pack", "--help")
    assert rc == 0 and "--demo" in o
    print("ok bad inputs exit 1 naming the file, bad usage exits 2")


roundtrip()
demo()
refusals()
print("all pack checks passed")
