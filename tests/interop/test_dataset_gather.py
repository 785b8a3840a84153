#!/usr/bin/python3
"""fs/dataset against real torch: for every fixture (single archives,
sharded datasets, the big-endian special), gathering sample rows in a
shuffled order (with repeats) through tests/bin/gather gives exactly the
bytes of torch's t[i].contiguous() for each field, in field order."""
import os
import random
import subprocess

import fixtures
import torch

TMP = os.environ["BFS_TEST_TMP"]
GATHER = os.path.join(os.environ.get("BUILD", "build"), "tests", "bin", "gather")
if not os.path.isabs(GATHER):
    GATHER = os.path.join(os.environ["BFS_SRC"], GATHER)


def row_bytes(t, idx):
    rows = t.detach()[torch.tensor(idx, dtype=torch.int64)].contiguous()
    if rows.dtype == torch.bfloat16:
        rows = rows.view(torch.int16)
    return rows.numpy().tobytes()


def check(label, paths, fields, rng):
    n = fields[0][1].shape[0] if fields else 0
    idx = list(range(n)) + [rng.randrange(n) for _ in range(n // 2)] if n else []
    rng.shuffle(idx)
    ipath = os.path.join(TMP, "idx.txt")
    with open(ipath, "w") as f:
        f.write(" ".join(map(str, idx)))
    out = subprocess.run([GATHER, ipath] + paths, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    if out.returncode != 0:
        raise SystemExit("%s: gather failed: %s" % (label, out.stderr.decode()))
    got, pos = out.stdout, 0
    for name, t in fields:
        want = row_bytes(t, idx) if idx else b""
        if got[pos:pos + len(want)] != want:
            raise SystemExit("%s: field %s differs from torch for indices %s"
                             % (label, name, idx))
        pos += len(want)
    if pos != len(got):
        raise SystemExit("%s: %d extra bytes" % (label, len(got) - pos))
    print("ok %-28s %d fields, %d rows" % (label, len(fields), len(idx)))


def main():
    fx = os.path.join(TMP, "fx")
    m = fixtures.write_all(fx)
    rng = random.Random(1234)
    count = 0
    for name in m["single"]:
        p = os.path.join(fx, name + ".pt")
        check(name, [p], fixtures.load_fixture(p), rng)
        count += 1
    for name, files in m["sharded"].items():
        sdir = os.path.join(fx, "shards")
        check("shards/" + name, [os.path.join(sdir, f) for f in files],
              fixtures.load_shards(os.path.join(sdir, name + ".json")), rng)
        count += 1
    for name in m["special"]:
        p = os.path.join(fx, "special", name + ".pt")
        check("special/" + name, [p], fixtures.load_fixture(p), rng)
        count += 1
    # Out-of-range index: refused, not read.
    p = os.path.join(fx, "dict.pt")
    with open(os.path.join(TMP, "bad.txt"), "w") as f:
        f.write("10")
    r = subprocess.run([GATHER, os.path.join(TMP, "bad.txt"), p],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert r.returncode == 1 and b"out of range" in r.stderr, r.stderr
    print("%d datasets gathered bit-identical to torch" % count)


main()
