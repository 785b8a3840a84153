#!/usr/bin/python3
"""Ragged fields against real torch: every batch of a mount equals the
batch of the PyTorch DataLoader that dataset.json names, built with a
padding collate_fn (torch.nn.utils.rnn.pad_sequence(batch_first=True,
padding_value=V) per ragged field, lengths beside it; --pack: torch.cat and
the cumulative offsets), over 3 epochs, for the sequential, random (with
and without replacement, num_samples), subset, weighted and distributed
samplers (every rank), with and without drop_last. The dataset has a 1-D
int64 field (lengths 0..13, zeros included), a float32 field of [len, 4]
boxes, a float16 field padded with a non-zero value, and a fixed label;
it is sharded over an .npz and a safetensors file (each with its own
offsets). Padding to a MULTIPLE equals pad_sequence then padding the
length up. Every serving mode (the default, push, direct, cache) serves
the same bytes. File sizes are exact before anything is read (stat = bytes
read). Bad offsets are refused at mount, naming the field and the first
bad index."""
import json
import os
import subprocess

import mountlib as ml

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import (DataLoader, DistributedSampler,
                              RandomSampler, SubsetRandomSampler,
                              WeightedRandomSampler)

ml.require_fuse()
TMP = ml.TMP
N1, N2 = 29, 14  # samples per shard


def shard(n, seed):
    """{tensor name: array} of one shard: ragged tok, box, half + label."""
    rng = np.random.default_rng(seed)
    out = {"label": rng.integers(0, 1000, n).astype(np.int64)}
    for name, dt, row in (("tok", np.int64, ()), ("box", np.float32, (4,)),
                          ("half", np.float16, ())):
        lens = rng.integers(0, 14, n)
        lens[::7] = 0
        offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        vals = (rng.standard_normal((int(offs[-1]),) + row) * 50).astype(dt)
        out[name + ".values"] = vals
        out[name + ".offsets"] = offs
    return out


class Ragged(torch.utils.data.Dataset):
    """The samples as a torch Dataset: dict of tensors, ragged ones of
    their own length."""

    def __init__(self, shards):
        self.items = []
        for s in shards:
            for i in range(len(s["label"])):
                d = {"label": torch.tensor(s["label"][i])}
                for f in ("tok", "box", "half"):
                    o = s[f + ".offsets"]
                    d[f] = torch.from_numpy(s[f + ".values"][o[i]:o[i + 1]].copy())
                self.items.append(d)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(modes):
    """The padding collate_fn of these --pad/--pack modes: name ->
    ("pad", value, multiple) or ("pack",)."""
    def fn(batch):
        out = {"label": torch.stack([b["label"] for b in batch])}
        for f, m in modes.items():
            xs = [b[f] for b in batch]
            lens = torch.tensor([len(x) for x in xs], dtype=torch.int64)
            if m[0] == "pack":
                out[f] = torch.cat(xs)
                out[f + ".offsets"] = torch.cat(
                    [torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
                continue
            p = pad_sequence(xs, batch_first=True, padding_value=m[1])
            want = -(-p.shape[1] // m[2]) * m[2]
            if want > p.shape[1]:  # round the length up to the multiple
                extra = list(p.shape)
                extra[1] = want - p.shape[1]
                p = torch.cat([p, p.new_full(extra, m[1])], 1)
            out[f] = p
            out[f + ".lengths"] = lens
        return out
    return fn


MODES = {"tok": ("pad", 0.0, 1), "box": ("pad", -1.0, 8), "half": ("pad", 0.1, 1)}
OPTS = ["--pad", "box=-1:8", "--pad", "half=0.1"]


def check(paths, ds, opts, modes, epochs=3):
    _, mnt = ml.mount(paths, None, "--epochs", epochs, *opts)
    info = json.load(open(mnt + "/dataset.json"))
    ns = dict(DataLoader=DataLoader, ds=ds, torch=torch,
              RandomSampler=RandomSampler, DistributedSampler=DistributedSampler,
              SubsetRandomSampler=SubsetRandomSampler,
              WeightedRandomSampler=WeightedRandomSampler,
              indices=SUBSET, weights=WEIGHTS)
    src = info["pytorch"].replace("DataLoader(ds,", "DataLoader(ds, collate_fn=fn,", 1)
    ns["fn"] = collate(modes)
    loader = eval(src, ns)
    assert len(os.listdir(mnt + "/epoch/0")) == len(loader), src
    for e in range(epochs):
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(e)
        for k, ref in enumerate(loader):
            path = "%s/epoch/%d/batch_%d" % (mnt, e, k)
            size = os.stat(path).st_size  # before anything is read
            buf = ml.read_file(path)
            assert size == len(buf), (src, e, k, size, len(buf))
            _, got = ml.parse_safetensors(buf)
            assert set(got) == set(ref), (set(got), set(ref))
            for name, t in ref.items():
                want = ml.torch_np(t)
                assert got[name].shape == want.shape, \
                    (src, e, k, name, got[name].shape, want.shape)
                assert got[name].tobytes() == want.tobytes(), \
                    (src, opts, e, k, name)
    assert ml.umount(mnt).returncode == 0
    return info["pytorch"]


SUBSET = [40, 3, 11, 0, 2, 29, 30, 17, 8, 22, 41]
WEIGHTS = [float((i * 5) % 7) for i in range(N1 + N2)]


def main():
    a, b = shard(N1, 1), shard(N2, 2)
    pa = os.path.join(TMP, "a.npz")
    np.savez(pa, **a)
    pb = os.path.join(TMP, "b.safetensors")
    ml.write_safetensors(pb, b)
    paths = [pa, pb]
    ds = Ragged([a, b])
    sub = os.path.join(TMP, "subset.txt")
    open(sub, "w").write("\n".join(map(str, SUBSET)) + "\n")
    wf = os.path.join(TMP, "weights.txt")
    open(wf, "w").write("\n".join(map(repr, WEIGHTS)) + "\n")
    runs = [
        ["--batch-size", 5],
        ["--batch-size", 6, "--drop-last"],
        ["--batch-size", 4, "--shuffle", "--seed", 7],
        ["--batch-size", 8, "--shuffle", "--seed", 1, "--drop-last"],
        ["--batch-size", 3, "--shuffle", "--replacement", "--num-samples", 50, "--seed", 4],
        ["--batch-size", 4, "--subset", sub, "--seed", 9],
        ["--batch-size", 5, "--weights", wf, "--seed", 2],
    ] + [["--batch-size", 4, "--world-size", 3, "--rank", r, "--shuffle",
          "--seed", 5] for r in range(3)] + [
        ["--batch-size", 3, "--world-size", 2, "--rank", 1, "--drop-last"]]
    for opts in runs:
        print("ok", check(paths, ds, [str(x) for x in opts] + OPTS, MODES))
    packed = {"tok": ("pack",), "box": ("pad", 0.0, 1), "half": ("pack",)}
    print("ok --pack", check(paths, ds, ["--batch-size", 6, "--shuffle", "--seed", 3,
                                         "--pack", "tok", "--pack", "half"], packed))
    for mode in ("push", "direct", "cache"):
        print("ok --serve %s" % mode,
              check(paths, ds, ["--batch-size", 9, "--shuffle", "--seed", 2,
                                "--serve", mode, "--pack", "half"] + OPTS[:2],
                    {"tok": ("pad", 0.0, 1), "box": ("pad", -1.0, 8),
                     "half": ("pack",)}, epochs=2))
    print("ok --pad multiples",
          check(paths, ds, ["--batch-size", 7, "--pad", "tok=-5:16", "--pad", "box:3",
                            "--pad", "half=-0.5:2"],
                {"tok": ("pad", -5.0, 16), "box": ("pad", 0.0, 3),
                 "half": ("pad", -0.5, 2)}))
    # pad values of every float width as torch.new_full converts them
    for dt, v in ((np.float16, "0.1"), (np.float32, "1e-3"), (np.float64, "-2.5")):
        d = {"v.values": np.arange(6).astype(dt), "v.offsets": np.array([0, 1, 6])}
        p = os.path.join(TMP, "pv.npz")
        np.savez(p, **d)
        _, mnt = ml.mount(p, None, "--batch-size", 2, "--pad", "v=" + v)
        _, got = ml.read_batch(mnt + "/epoch/0/batch_0")
        ref = torch.zeros(1, dtype=torch.from_numpy(d["v.values"]).dtype).new_full((1,), float(v))
        assert got["v"][0, 1:].tobytes() == ref.numpy().tobytes() * 4, (dt, got["v"])
        assert ml.umount(mnt).returncode == 0
    print("ok pad values equal torch's new_full for float16/32/64")
    bad_offsets(a)


def refused(label, arrays, *needles):
    p = os.path.join(TMP, "bad.npz")
    np.savez(p, **arrays)
    mnt = os.path.join(TMP, "mnt_bad")
    os.makedirs(mnt, exist_ok=True)
    r = subprocess.run([ml.BATCHFS, "mount", p, mnt], capture_output=True, text=True)
    assert r.returncode == 1, (label, r.returncode, r.stderr)
    for s in needles:
        assert s in r.stderr, (label, s, r.stderr)
    assert not ml.is_mounted(mnt)
    print("ok refused %-22s %s" % (label, r.stderr.strip()[:120]))


def bad_offsets(a):
    def with_offsets(o):
        d = dict(a)
        d["tok.offsets"] = np.asarray(o)
        return d
    o = a["tok.offsets"].copy()
    o[9] = o[8] - 1
    refused("decreasing", with_offsets(o), "'tok'", "tok.offsets[9]", "must not decrease")
    o = a["tok.offsets"].copy()
    o[4] = o[-1] + 100
    refused("out of range", with_offsets(o), "tok.offsets[4]", "past the end of tok.values")
    o = a["tok.offsets"].copy()
    o[0] = 2
    refused("first not 0", with_offsets(o), "tok.offsets[0] is 2")
    refused("wrong length", with_offsets(a["tok.offsets"][:-1]),
            "tok.offsets has %d entries" % N1, "needs one more")
    d = dict(a)
    d["tok.values"] = np.concatenate([a["tok.values"], a["tok.values"][:1]])
    refused("last != total", d, "tok.offsets[%d]" % N1,
            "must equal the rows of tok.values")
    refused("int32 offsets", with_offsets(a["tok.offsets"].astype(np.int32)),
            "tok.offsets must be a 1-D int64 tensor", "int32")
    d = dict(a)
    d["tok"] = np.zeros(N1)
    refused("name clash", d, "tensor 'tok'", "would both be field 'tok'")


main()
print("all ragged checks passed")
