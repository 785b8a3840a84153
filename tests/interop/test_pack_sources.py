#!/usr/bin/python3
"""`batchfs pack` from .npz, safetensors and lists of arrays, in shards.

- --from-npz / --from-safetensors: torch.load(weights_only=True) of the
  archive gives every array of the input (Fortran-order and big-endian ones
  in C order, little-endian); a NAME.values + NAME.offsets pair stays one.
- NAME=@LIST.npz (np.savez(LIST, *arrays)): NAME.values = the arrays
  concatenated, NAME.offsets = 0 and their cumulative lengths; mounting
  the archive serves the list padded exactly as pad_sequence pads it.
- --shard-size: every shard is a torch.load-able dataset of at most SIZE
  bytes of data (ragged offsets start at 0 in each), named
  OUT-0000i-of-0000N.pt, and all shards mounted together give the same
  batches as the unsharded archive.
- A progress line ("batchfs pack: ... of ..., .../s, ETA") is drawn on
  stderr when it is a terminal (a pty here) and the input is large (the
  1 GB floor lowered by BATCHFS_DEBUG_PROGRESS_MIN), never into a pipe.
- Refused (exit 1, naming the file): inputs with different sample counts,
  --from-npz given a safetensors file, a list whose members differ in
  dtype, a 0-dim list member."""
import glob
import json
import os
import pty
import subprocess

import mountlib as ml

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

ml.require_fuse()
TMP = ml.TMP
BATCHFS = ml.BATCHFS


def pack(*args, env=None, check=True):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([BATCHFS, "pack"] + [str(a) for a in args],
                       capture_output=True, text=True, env=e)
    if check:
        assert r.returncode == 0, (args, r.stderr)
    return r


def inputs():
    rng = np.random.default_rng(9)
    n = 40
    lens = rng.integers(0, 9, n)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return n, {
        "img": rng.integers(0, 256, (n, 3, 4)).astype(np.uint8),
        "f": np.asfortranarray(rng.standard_normal((n, 5)).astype(np.float32)),
        "be": rng.integers(-999, 999, (n,)).astype(">i4"),
        "tok.values": rng.integers(0, 5000, int(offs[-1])).astype(np.int64),
        "tok.offsets": offs,
    }


def same(d, want):
    assert list(d) == list(want), (list(d), list(want))
    for k, a in want.items():
        assert d[k].numpy().tobytes() == ml.le_c(a).tobytes(), k


def from_files(n, want):
    npz = os.path.join(TMP, "in.npz")
    np.savez(npz, **want)
    out = os.path.join(TMP, "from_npz.pt")
    pack("-o", out, "--from-npz", npz)
    same(torch.load(out, weights_only=True), want)
    st = os.path.join(TMP, "in.safetensors")
    ml.write_safetensors(st, want)
    out = os.path.join(TMP, "from_st.pt")
    pack("-o", out, "--from-safetensors", st)
    same(torch.load(out, weights_only=True), want)
    print("ok --from-npz and --from-safetensors round-trip through torch.load")
    return npz


def from_list(n):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((int(k), 2)).astype(np.float32)
              for k in rng.integers(0, 7, n)]
    lst = os.path.join(TMP, "boxes.npz")
    np.savez(lst, *arrays)
    lab = os.path.join(TMP, "lab.npy")
    np.save(lab, np.arange(n, dtype=np.int64))
    out = os.path.join(TMP, "list.pt")
    pack("-o", out, "boxes=@" + lst, "label=" + lab)
    d = torch.load(out, weights_only=True)
    assert list(d) == ["label", "boxes.values", "boxes.offsets"], list(d)
    assert d["boxes.values"].numpy().tobytes() == np.concatenate(arrays).tobytes()
    assert d["boxes.offsets"].tolist() == [0] + np.cumsum([len(a) for a in arrays]).tolist()
    _, mnt = ml.mount(out, None, "--batch-size", 6, "--pad", "boxes=-1")
    for k in range((n + 5) // 6):
        _, got = ml.read_batch("%s/epoch/0/batch_%d" % (mnt, k))
        xs = [torch.from_numpy(a) for a in arrays[6 * k:6 * k + 6]]
        want = pad_sequence(xs, batch_first=True, padding_value=-1.0)
        assert got["boxes"].tobytes() == want.numpy().tobytes(), k
        assert got["boxes.lengths"].tolist() == [len(x) for x in xs]
    assert ml.umount(mnt).returncode == 0
    print("ok NAME=@LIST.npz: values + offsets, served as pad_sequence pads")
    return lst, lab, arrays


def batches(paths, *opts):
    _, mnt = ml.mount(paths, None, *opts)
    info = json.load(open(mnt + "/dataset.json"))
    out = [ml.read_file("%s/epoch/1/batch_%d" % (mnt, k))
           for k in range(info["batches_per_epoch"])]
    assert ml.umount(mnt).returncode == 0
    return out


def shards(npz, lst, lab):
    whole = os.path.join(TMP, "whole.pt")
    pack("-o", whole, "--from-npz", npz, "boxes=@" + lst, "label=" + lab)
    size = 1024
    out = os.path.join(TMP, "sh", "part.pt")
    os.makedirs(os.path.dirname(out))
    r = pack("-o", out, "--shard-size", "1K", "--from-npz", npz,
             "boxes=@" + lst, "label=" + lab)
    parts = sorted(glob.glob(os.path.join(TMP, "sh", "part-*.pt")))
    assert len(parts) > 3, (parts, r.stdout)
    assert [os.path.basename(p) for p in parts] == \
        ["part-%05d-of-%05d.pt" % (i, len(parts)) for i in range(len(parts))]
    total = 0
    for p in parts:
        d = torch.load(p, weights_only=True)
        data = sum(t.numel() * t.element_size() for t in d.values())
        rows = len(d["label"])
        assert data <= size or rows == 1, (p, data)
        for f in ("tok", "boxes"):
            o = d[f + ".offsets"]
            assert o[0] == 0 and o[-1] == len(d[f + ".values"]) and len(o) == rows + 1
        total += rows
    assert total == len(torch.load(whole, weights_only=True)["label"])
    opts = ["--batch-size", 7, "--shuffle", "--seed", 4, "--pack", "tok"]
    assert batches(parts, *opts) == batches(whole, *opts)
    print("ok --shard-size 1K: %d shards of <= 1 KiB, mounted together == one archive"
          % len(parts))


def progress(npz):
    out = os.path.join(TMP, "progress.pt")
    env = dict(os.environ, BATCHFS_DEBUG_PROGRESS_MIN="0")
    pid, fd = pty.fork()
    if pid == 0:  # stderr (and stdout) is the pty
        os.execve(BATCHFS, [BATCHFS, "pack", "-o", out, "--from-npz", npz], env)
    got = b""
    while True:
        try:
            b = os.read(fd, 4096)
        except OSError:
            break
        if not b:
            break
        got += b
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, got
    text = got.decode()
    assert "\rbatchfs pack: " in text and " of " in text and "/s, ETA" in text, text
    r = pack("-o", out, "--from-npz", npz, env={"BATCHFS_DEBUG_PROGRESS_MIN": "0"})
    assert "ETA" not in r.stderr, r.stderr
    print("ok progress line on a terminal only: %r" % text.strip().split("\r")[-1][:70])


def refused(label, args, *needles):
    r = pack(*args, check=False)
    assert r.returncode == 1, (label, r.returncode, r.stderr)
    for s in needles:
        assert s in r.stderr, (label, s, r.stderr)
    print("ok refused %-16s %s" % (label, r.stderr.strip()[:100]))


def refusals(npz, lst, lab):
    out = os.path.join(TMP, "refused.pt")
    short = os.path.join(TMP, "short.npy")
    np.save(short, np.arange(3))
    refused("sample counts", ["-o", out, "--from-npz", npz, "s=" + short],
            short, "3 samples", "same first dimension")
    st = os.path.join(TMP, "in.safetensors")
    refused("wrong kind", ["-o", out, "--from-npz", st], st, "this is safetensors")
    bad = os.path.join(TMP, "mixed.npz")
    np.savez(bad, np.zeros((2, 2), np.float32), np.zeros((1, 2), np.float64))
    refused("list dtypes", ["-o", out, "x=@" + bad], "arr_1.npy", "differs")
    bad = os.path.join(TMP, "scalar.npz")
    np.savez(bad, np.zeros(2), np.float32(1))
    refused("list 0-dim", ["-o", out, "x=@" + bad], "arr_1.npy", "0-dim")
    assert not os.path.exists(out) and not os.path.exists(out + ".partial")
    r = pack("-o", out, "--shard-size", "12Q", "x=" + short, check=False)
    assert r.returncode == 2 and "usage:" in r.stderr, r.stderr


n, want = inputs()
npz = from_files(n, want)
lst, lab, arrays = from_list(n)
shards(npz, lst, lab)
progress(npz)
refusals(npz, lst, lab)
print("all pack source checks passed")
