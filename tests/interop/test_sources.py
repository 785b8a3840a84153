#!/usr/bin/python3
"""Sources other than torch.save archives, against numpy's own loads.

For .npz files written by numpy.savez (also with the ZIP64 records numpy's
zipfile writes for large files, forced here by lowering its limit), a
directory of .npy files, a list of .npy files, .safetensors files, and
every mix of them as shards of one dataset: every dtype numpy and
safetensors share, C- and Fortran-order, little- and big-endian arrays.
Each mount's batches (sequential, then shuffled) equal the rows numpy
loads (np.load / the safetensors bytes), in C order, little-endian;
`inspect --json` gives the same fields and shapes.

Refused with a message naming the file (exit 1, nothing mounted): a
savez_compressed file (with advice to use numpy.savez), an npz member that
is not .npy, corrupt npz directories and member headers, corrupt
safetensors headers, truncated .npy data, object arrays, shards whose
fields differ."""
import json
import os
import struct
import subprocess
import zipfile

import mountlib as ml

import numpy as np

ml.require_fuse()
TMP = ml.TMP


def fields(n, seed):
    """name -> array: every dtype, several shapes, C/F order, byte order."""
    rng = np.random.default_rng(seed)
    out = {}
    for i, (dt, shape) in enumerate([
            ("bool", (3,)), ("uint8", (2, 3)), ("int8", ()), ("int16", (4,)),
            ("int32", (2, 2)), ("int64", ()), ("uint16", (3,)),
            ("uint32", ()), ("uint64", (2,)), ("float16", (5,)),
            ("float32", (3, 2, 2)), ("float64", (2,)), ("complex64", (2,))]):
        a = (rng.standard_normal((n,) + shape) * 100)
        if dt == "complex64":
            a = a + 1j * rng.standard_normal((n,) + shape)
        a = a.astype(dt)
        if i % 3 == 1 and a.ndim > 1:
            a = np.asfortranarray(a)
        if i % 4 == 2 and a.dtype.itemsize > 1:
            a = a.astype(a.dtype.newbyteorder(">"))
        out["f_" + dt] = a
    return out


def write_zip64_npz(path, arrays):
    """numpy.savez with zipfile's ZIP64 limit lowered: the ZIP64 central
    directory extras and end records numpy writes for files > 4 GiB."""
    old = zipfile.ZIP64_LIMIT
    zipfile.ZIP64_LIMIT = 64
    try:
        np.savez(path, **arrays)
    finally:
        zipfile.ZIP64_LIMIT = old
    raw = open(path, "rb").read()
    assert b"PK\x06\x06" in raw, "no ZIP64 end record written"


def sources():
    """(label, [paths], {name: array}) of every kind."""
    out = []
    d = fields(11, 1)
    p = os.path.join(TMP, "a.npz")
    np.savez(p, **d)
    out.append(("npz", [p], d))
    d = fields(9, 2)
    p = os.path.join(TMP, "z64.npz")
    write_zip64_npz(p, d)
    out.append(("npz zip64", [p], d))
    d = fields(7, 3)
    p = os.path.join(TMP, "dir")
    os.makedirs(p)
    for k, a in d.items():
        np.save(os.path.join(p, k + ".npy"), a)
    open(os.path.join(p, "README.txt"), "w").write("not an array\n")
    out.append(("npy directory", [p], d))
    d = fields(5, 4)
    paths = []
    for k, a in d.items():
        paths.append(os.path.join(TMP, "list", k + ".npy"))
        os.makedirs(os.path.dirname(paths[-1]), exist_ok=True)
        np.save(paths[-1], a)
    out.append(("npy list", paths, d))
    d = fields(6, 5)
    p = os.path.join(TMP, "s.safetensors")
    ml.write_safetensors(p, d)
    out.append(("safetensors", [p], d))
    return out


def check_mount(label, paths, want, bs):
    n = len(next(iter(want.values())))
    for shuffle in (False, True):
        opts = ["--batch-size", bs] + (["--shuffle", "--seed", 3] if shuffle else [])
        _, mnt = ml.mount(paths, None, *opts)
        info = json.load(open(mnt + "/dataset.json"))
        assert info["samples"] == n, (label, info["samples"])
        seen = 0
        for k in range(info["batches_per_epoch"]):
            path = "%s/epoch/0/batch_%d" % (mnt, k)
            size = os.stat(path).st_size
            buf = ml.read_file(path)
            assert size == len(buf), (label, k, size, len(buf))
            _, got = ml.parse_safetensors(buf)
            idx = ml.read_index("%s/index/0/batch_%d" % (mnt, k))
            seen += len(idx)
            assert set(got) == set(want), (label, set(got) ^ set(want))
            for name, a in want.items():
                ref = ml.le_c(a[idx])
                g = got[name].view(ref.dtype) if ref.dtype.kind == "c" else got[name]
                assert g.shape == ref.shape, (label, name, g.shape, ref.shape)
                assert g.tobytes() == ref.tobytes(), (label, name, shuffle, k)
        assert seen == n
        assert ml.umount(mnt).returncode == 0


def inspect_json(paths):
    r = subprocess.run([ml.BATCHFS, "inspect", "--json"] + paths,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def every_kind():
    got = sources()
    for label, paths, want in got:
        check_mount(label, paths, want, 4)
        j = inspect_json(paths)
        n = len(next(iter(want.values())))
        assert j["samples"] == n
        assert {f["name"]: f["shape"] for f in j["fields"]} == \
            {k: [n] + list(a.shape[1:]) for k, a in want.items()}, label
        print("ok %-14s %d samples, %d fields == numpy" % (label, n, len(want)))
    # every kind as shards of one dataset, in two orders
    paths = [p for _, ps, _ in got for p in ps]
    cat = {k: np.concatenate([ml.le_c(w[k]) for _, _, w in got])
           for k in got[0][2]}
    check_mount("mixed", paths, cat, 6)
    rev = [p for _, ps, _ in reversed(got) for p in ps]
    cat = {k: np.concatenate([ml.le_c(w[k]) for _, _, w in reversed(got)])
           for k in got[0][2]}
    check_mount("mixed reversed", rev, cat, 5)
    print("ok %d shards of 5 kinds are one dataset" % len(got))
    # two .npy shards on one command line: a name seen again starts a shard
    a = os.path.join(TMP, "l1")
    b = os.path.join(TMP, "l2")
    for d, n in ((a, 3), (b, 4)):
        os.makedirs(d)
        np.save(os.path.join(d, "x.npy"), np.arange(n, dtype=np.int32))
        np.save(os.path.join(d, "y.npy"), np.arange(n, dtype=np.float64) / 2)
    check_mount("npy runs", [a + "/x.npy", a + "/y.npy", b + "/y.npy", b + "/x.npy"],
                {"x": np.concatenate([np.arange(3), np.arange(4)]).astype(np.int32),
                 "y": np.concatenate([np.arange(3), np.arange(4)]) / 2}, 2)
    print("ok a run of .npy files is one shard; a repeated name starts the next")


def refused(label, paths, *needles):
    mnt = os.path.join(TMP, "refused")
    os.makedirs(mnt, exist_ok=True)
    for cmd in (["inspect"], ["mount"]):
        r = subprocess.run([ml.BATCHFS] + cmd + paths + ([mnt] if cmd == ["mount"] else []),
                           capture_output=True, text=True)
        assert r.returncode == 1, (label, cmd, r.returncode, r.stderr)
        for s in needles:
            assert s in r.stderr, (label, cmd, s, r.stderr)
    assert not ml.is_mounted(mnt)
    print("ok refused %-26s %s" % (label, r.stderr.strip()[:110]))


def refusals():
    d = {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "y": np.arange(3)}
    p = os.path.join(TMP, "c.npz")
    np.savez_compressed(p, **d)
    refused("savez_compressed", [p], p, "compressed", "numpy.savez instead")
    p = os.path.join(TMP, "other.npz")
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("x.npy", open(os.path.join(TMP, "list", "f_int16.npy"), "rb").read())
        z.writestr("notes.txt", "hello")
    refused("npz member not .npy", [p], p, "'notes.txt' is not a .npy array")
    good = os.path.join(TMP, "good.npz")
    np.savez(good, **d)
    raw = bytearray(open(good, "rb").read())
    p = os.path.join(TMP, "trunc.npz")
    open(p, "wb").write(raw[:len(raw) - 30])
    refused("truncated npz", [p], p, "end of central directory")
    bad = bytearray(raw)
    cd = bad.rfind(b"PK\x01\x02")
    bad[cd + 3] = 9
    p = os.path.join(TMP, "badcd.npz")
    open(p, "wb").write(bad)
    refused("npz central directory", [p], p, "signature")
    bad = bytearray(raw)
    i = bad.find(b"\x93NUMPY")
    bad[i + 6] = 9  # npy version 9
    p = os.path.join(TMP, "badhdr.npz")
    open(p, "wb").write(bad)
    refused("npz member header", [p], p + ":x.npy", "unsupported .npy version 9")
    bad = bytearray(raw)
    i = bad.find(b"'descr'")
    bad[i + 10:i + 12] = b"U3"
    p = os.path.join(TMP, "strdtype.npz")
    open(p, "wb").write(bad)
    refused("npz string dtype", [p], p + ":x.npy", "dtype")
    p = os.path.join(TMP, "short.npy")
    np.save(p, np.zeros(10, np.float32))
    os.truncate(p, os.path.getsize(p) - 4)
    refused("truncated .npy", [p], p, "data holds 36 bytes")
    p = os.path.join(TMP, "obj.npy")
    np.save(p, np.array([1, "a"], dtype=object), allow_pickle=True)
    refused("object .npy", [p], p, "object")
    s = os.path.join(TMP, "bad.safetensors")
    ml.write_safetensors(s, d)
    raw = bytearray(open(s, "rb").read())
    open(s, "wb").write(raw + b"!")
    refused("safetensors size", [s], s, "file holds")
    h = json.dumps({"e": {"dtype": "F8_E8M0", "shape": [3],
                          "data_offsets": [0, 3]}}).encode()
    open(s, "wb").write(struct.pack("<Q", len(h)) + h + b"abc")
    refused("safetensors dtype", [s], s, "tensor 'e'", "F8_E8M0")
    open(s, "wb").write(struct.pack("<Q", 1 << 40) + b"{}")
    refused("safetensors length", [s], s, "offset 0")
    n = int.from_bytes(raw[:8], "little")
    open(s, "wb").write(raw[:8] + b"{" + b"x" * (n - 1) + raw[8 + n:])
    refused("safetensors json", [s], s, "offset")
    other = os.path.join(TMP, "other.safetensors")
    ml.write_safetensors(other, {"x": d["x"]})
    refused("shards differ", [good, other], other, "'y'")


every_kind()
refusals()
print("all source checks passed")
