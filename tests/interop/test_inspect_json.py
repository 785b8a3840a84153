#!/usr/bin/python3
"""`batchfs inspect` against real torch and the safetensors rules.

- For every fixture archive, `inspect --json` equals what torch.load reports
  (tests/lib/fixtures.py writes <name>.json from torch); for every sharded
  dataset, `inspect --json shard...` equals the torch.cat of the shards.
- `--verify` passes on torch's archives, fails (exit 1, record named) on a
  flipped payload byte, and reports CRC 0 as "not computed" without failing.
- Batch files (safetensors written here with the stdlib, as the spec says)
  are described; malformed ones exit 1 naming the file and the offset.
- Bad input never exits >= 128; bad usage exits 2.
"""
import json
import os
import struct
import subprocess

import corrupt_zip
import fixtures

TMP = os.environ["BFS_TEST_TMP"]
BATCHFS = os.environ["BATCHFS"]


def run(*args):
    r = subprocess.run([BATCHFS, "inspect"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert 0 <= r.returncode < 128, (args, r.returncode, r.stderr)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def inspect_json(*paths):
    rc, out, err = run("--json", *paths)
    assert rc == 0, (paths, err)
    assert out.count("\n") == 1, out  # exactly one object, one line
    return json.loads(out)


def expect_fail(label, args, *needles):
    rc, out, err = run(*args)
    assert rc == 1, (label, rc, out, err)
    for n in needles:
        assert n in err, (label, n, err)
    print("ok refused %-26s %s" % (label, err.strip().splitlines()[0][:90]))


def fixtures_match_torch(fx, m):
    for name in m["single"]:
        want = json.load(open(os.path.join(fx, name + ".json")))
        got = inspect_json(os.path.join(fx, name + ".pt"))
        assert got == want, (name, got, want)
        # libzip's listing (names, sizes, CRCs) and CRC check agree with ours
        rc, out, err = run("--verify", os.path.join(fx, name + ".pt"))
        assert rc == 0 and "every CRC-32 verified" in out, (name, out, err)
        print("ok json %-20s %s" % (name, json.dumps(got)[:70]))
    for name, files in m["sharded"].items():
        sdir = os.path.join(fx, "shards")
        want = json.load(open(os.path.join(sdir, name + ".json")))
        del want["files"]
        got = inspect_json(*[os.path.join(sdir, f) for f in files])
        assert got == want, (name, got, want)
        print("ok json shards/%-13s %d samples" % (name, got["samples"]))
    for name in m["special"]:
        p = os.path.join(fx, "special", name + ".pt")
        want = json.load(open(os.path.join(fx, "special", name + ".json")))
        assert inspect_json(p) == want, name
    # Field names that need JSON escaping come back intact.
    import torch
    odd = os.path.join(TMP, "odd.pt")
    names = ['quote"d', "back\\slash", "tab\tnl\n", "ünï", "\x01ctl"]
    torch.save({n: torch.zeros(2, 1) for n in names}, odd)
    got = inspect_json(odd)
    assert [f["name"] for f in got["fields"]] == names, got


def verify(fx):
    p = os.path.join(fx, "dict.pt")
    rc, out, err = run("--verify", "-v", p)
    assert rc == 0 and "every CRC-32 verified" in out, (out, err)
    assert "dict/data/0" in out  # -v lists records
    # Flip one payload byte: libzip's CRC check must catch it.
    buf = open(p, "rb").read()
    rec = {r.name: r for r in corrupt_zip.records(buf)}["dict/data/0"]
    bad = os.path.join(TMP, "flipped.pt")
    flipped = bytearray(buf)
    flipped[rec.data_off] ^= 0xFF
    open(bad, "wb").write(flipped)
    rc, out, err = run("--verify", bad)
    assert rc == 1 and "dict/data/0" in err, (rc, out, err)
    # Without --verify the flipped file is fine (torch never checks CRCs).
    assert run(bad)[0] == 0
    # CRC 0 everywhere (torch >= 2.6 compute_crc32=False): not a failure.
    zero = os.path.join(TMP, "crc0.pt")
    open(zero, "wb").write(corrupt_zip.zero_crcs(buf))
    rc, out, err = run("--verify", zero)
    assert rc == 0 and "not computed" in out, (rc, out, err)
    print("ok verify: good passes, flipped byte fails, CRC 0 reported")


def safetensors(path, tensors, meta=None, pad_to=8, raw_header=None,
                extra=b""):
    """Write a safetensors file by the spec: tensors = [(name, code, shape,
    bytes)] laid out in order."""
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, code, shape, b in tensors:
        hdr[name] = {"dtype": code, "shape": shape,
                     "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = raw_header if raw_header is not None else json.dumps(hdr).encode()
    h += b" " * ((-len(h)) % pad_to)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data + extra)
    return path


def batch_files():
    good = safetensors(os.path.join(TMP, "b.safetensors"),
                       [("labels", "I64", [2], bytes(16)),
                        ("images", "U8", [2, 3], bytes(6)),
                        ("empty", "F32", [2, 0], b""),
                        ("scalar", "BF16", [], bytes(2))],
                       meta={"format": "batchfs/1", "epoch": "0"}, pad_to=4096)
    rc, out, err = run(good)
    assert rc == 0 and "images" in out and "epoch = 0" in out, (out, err)
    got = inspect_json(good)
    assert got["metadata"] == {"format": "batchfs/1", "epoch": "0"}, got
    assert [(f["name"], f["dtype"], f["shape"], f["data_offsets"])
            for f in got["fields"]] == [
        ("labels", "int64", [2], [0, 16]), ("images", "uint8", [2, 3], [16, 22]),
        ("empty", "float32", [2, 0], [22, 22]), ("scalar", "bfloat16", [], [22, 24])], got
    print("ok batch file header described")
    bad = os.path.join(TMP, "bad.safetensors")
    t = [("x", "F32", [2], bytes(8))]
    safetensors(bad, t, extra=b"!")
    expect_fail("trailing data", [bad], bad, "file holds")
    safetensors(bad, [("x", "F32", [3], bytes(8))])
    expect_fail("size mismatch", [bad], bad, "offset", "'x'")
    safetensors(bad, [("x", "F33", [2], bytes(8))])
    expect_fail("unknown dtype", [bad], "F33")
    safetensors(bad, t, raw_header=b'{"x": {"dtype": "F32", "shape": [2], '
                b'"data_offsets": [0, 8]}, "x": {"dtype": "F32", "shape": [0], '
                b'"data_offsets": [8, 8]}}')
    expect_fail("duplicate name", [bad], "duplicate")
    safetensors(bad, t, raw_header=b'{"x": {"dtype": "F32", "shape": [2], '
                b'"data_offsets": [4, 12]}}', extra=bytes(4))
    expect_fail("hole", [bad], "hole")
    safetensors(bad, t, raw_header=b'{"__metadata__": {"a": 1}, "x": {"dtype": '
                b'"F32", "shape": [2], "data_offsets": [0, 8]}}')
    expect_fail("non-string metadata", [bad], "strings")
    safetensors(bad, t, raw_header=b'{"x": {"dtype": "F32", "shape": [2.0], '
                b'"data_offsets": [0, 8]}}')
    expect_fail("float in shape", [bad], "integer")
    safetensors(bad, t, raw_header=b'{"x\xff": {"dtype": "F32", "shape": [2], '
                b'"data_offsets": [0, 8]}}')
    expect_fail("invalid utf-8", [bad], "UTF-8")
    with open(bad, "wb") as f:
        f.write(struct.pack("<Q", 1 << 40) + b"{}")
    expect_fail("huge header length", [bad], "offset 0")


def bad_archives_and_usage(fx):
    p = os.path.join(fx, "dict.pt")
    data = open(p, "rb").read()
    trunc = os.path.join(TMP, "trunc.pt")
    open(trunc, "wb").write(data[:len(data) // 2])
    expect_fail("truncated archive", [trunc], trunc)
    junk = os.path.join(TMP, "junk.bin")
    open(junk, "wb").write(b"hello world, not an archive")
    expect_fail("not an archive", [junk], junk, "offset 0")
    expect_fail("missing file", [os.path.join(TMP, "nope.pt")], "nope.pt")
    # Shards whose fields differ: named file and field.
    expect_fail("mismatched shards", [p, os.path.join(fx, "list.pt")],
                "list.pt")
    for args in (["--bogus", p], [], ["--json", p, os.path.join(TMP, "b.safetensors")]):
        rc, out, err = run(*args)
        assert rc == 2 and "usage:" in err and err.count("\n") > 1, (args, rc, err)
    rc, out, err = run("--help")
    assert rc == 0 and "--verify" in out and "--json" in out
    print("ok usage errors exit 2, --help documents options")


def main():
    fx = os.path.join(TMP, "fx")
    m = fixtures.write_all(fx)
    fixtures_match_torch(fx, m)
    verify(fx)
    batch_files()
    bad_archives_and_usage(fx)
    print("all inspect checks passed")


main()
