#!/usr/bin/python3
"""The batchfs Python package (loader/python/batchfs), imported from the
build tree, over real mounts and real torch:
- batchfs.mount() mounts and (as a context manager) unmounts, passes
  options (files given as values too), and raises MountError with the
  command's message;
- Batches yields PyTorch's batches as numpy arrays or torch tensors, for
  every dtype and serve mode: in memory of their own by default, with
  zero_copy=True views of the batch file's mapping where the serve mode
  allows mmap (owned memory under --serve direct); a batch held stays
  valid and unchanged, also after the mount is gone;
- len(), re-iteration (the next epoch), state_dict()/load_state_dict()
  mid-epoch, set_epoch(), start_batch;
- IterableDataset in DataLoader(ds, batch_size=None), with and without
  workers;
- a tiny model trained 2 epochs from the mount (Batches and
  IterableDataset) and from DataLoader with the same seed ends with
  bit-identical weights."""
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
import mountlib as ml  # noqa: E402
from fixtures import DictDataset as Dict  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import batchfs  # noqa: E402

ml.require_fuse()
TMP = ml.TMP
N, B, SEED = 45, 8, 11


def reference(fields, epochs, batch_size=B, seed=SEED):
    loader = DataLoader(Dict(fields), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    return [[b for b in loader] for _ in range(epochs)]


def same(got, want):
    """got (numpy or torch) equals the torch batch 'want', dtype and all."""
    assert got.keys() == want.keys(), (got.keys(), want.keys())
    for k, w in want.items():
        g = got[k]
        if isinstance(g, np.ndarray):
            assert g.dtype == ml.torch_np(w).dtype, (k, g.dtype, w.dtype)
            assert np.array_equal(g, ml.torch_np(w)), k
        else:
            assert g.dtype == w.dtype and torch.equal(g, w), k


def mapping_of(a):
    """The _Mapping an array views, or None (memory of its own)."""
    while a is not None:
        m = getattr(a, "_mapping", None)
        if m is not None:
            return m
        a = getattr(a, "base", None)
        if isinstance(a, memoryview):
            a = a.obj
    return None


def all_dtypes():
    g = torch.Generator().manual_seed(3)
    return {
        "u8": torch.randint(0, 256, (N, 3, 2), generator=g,
                            dtype=torch.uint8),
        "i8": torch.randint(-128, 128, (N,), generator=g, dtype=torch.int8),
        "i16": torch.randint(-999, 999, (N, 2), generator=g,
                             dtype=torch.int16),
        "i32": torch.randint(-999, 999, (N,), generator=g, dtype=torch.int32),
        "i64": torch.arange(N),
        "f16": torch.randn(N, 3, generator=g).half(),
        "bf16": torch.randn(N, 2, generator=g).bfloat16(),
        "f32": torch.randn(N, 4, generator=g),
        "f64": torch.randn(N, generator=g, dtype=torch.float64),
        "bool": torch.rand(N, 2, generator=g) > 0.5,
        "c64": torch.randn(N, 2, generator=g, dtype=torch.complex64),
    }


def every_dtype_and_mode(path, fields):
    want = reference(fields, 2)
    for mode in ml.serve_modes():
        print("--- --serve %s" % mode)
        mnt = mountpoint("m-" + mode)
        with batchfs.mount(path, mnt, batch_size=B, shuffle=True, seed=SEED,
                           serve=mode) as m:
            assert m.dataset["serve_mode"] == mode
            held = list(m.batches(zero_copy=True))  # numpy, epoch 0
            owned = list(m.batches())             # read into memory
            cpu = m.batches(epoch=1, device="cpu")
            assert len(cpu) == len(want[1])
            for got, w in zip(cpu, want[1]):
                same(got, w)
            for got, o, w in zip(held, owned, want[0]):
                same(got, w)
                same(o, w)
                views = mapping_of(got["f32"]) is not None
                assert views == (mode != "direct"), (mode, views)
                assert mapping_of(o["f32"]) is None, mode
            held[0]["f32"][0, 0] = 1e9            # copy-on-write: ours only
            owned[0]["f32"][0, 0] = 1e9
            assert batchfs.read_batch(m.path + "/epoch/0/batch_0")["f32"][
                0, 0] != 1e9
        assert not ml.is_mounted(mnt)
        held[0]["f32"][0, 0] = want[0][0]["f32"][0, 0]
        for got, w in zip(held, want[0]):         # valid after the mount
            same(got, w)
        del held


def mountpoint(name):
    path = os.path.join(TMP, name)
    os.makedirs(path)
    return path


def batches_state(path, fields, stream):
    """Epochs, resuming, set_epoch, from the epoch's stream file or from
    the batch files (stream=False: listed ahead, each opened)."""
    want = reference(fields, 6)
    with batchfs.mount(path, mountpoint("state%d" % stream), batch_size=B,
                       shuffle=True, seed=SEED, epochs=6) as m:
        b = batchfs.Batches(m, device="cpu", stream=stream)
        assert b.stream == stream
        assert len(b) == len(want[0]) == m.dataset["batches_per_epoch"]
        for e in range(2):                        # re-iterable: next epoch
            assert b.epoch == e
            got = list(b)
            assert len(got) == len(want[e])
            for g, w in zip(got, want[e]):
                same(g, w)
        # listed ahead (READDIRPLUS): no batch opened from 0 was looked up;
        # from the stream, no batch file was opened at all
        assert m.stats()["batch_lookups"] == 0, m.stats()
        assert stream is False or m.stats()["batches_opened"] == 0
        for k, g in enumerate(b):                 # epoch 2, stop at 3
            if k == 3:
                break
        state = b.state_dict()
        assert state == {"epoch": 2, "batch": 4}, state
        r = batchfs.Batches(m.path, device="cpu")
        r.load_state_dict(json.loads(json.dumps(state)))
        r.set_epoch(2)                            # keeps the resumed place
        rest = list(r)
        assert len(rest) == len(want[2]) - 4
        for g, w in zip(rest, want[2][4:]):
            same(g, w)
        assert r.state_dict() == {"epoch": 3, "batch": 0}
        r.set_epoch(5)
        for g, w in zip(r, want[5]):
            same(g, w)
        s = batchfs.Batches(m.path, epoch=4, start_batch=2, stream=stream)
        n0 = m.stats()["batch_lookups"]
        got = list(s)
        assert len(got) == len(want[4]) - 2
        for g, w in zip(got, want[4][2:]):
            same(g, w)
        # resumed mid-epoch: not listed, each name looked up (or none:
        # the stream from where index/4/offsets says batch 2 starts)
        assert m.stats()["batch_lookups"] == n0 + (0 if stream else
                                                   len(want[4]) - 2)
        late = batchfs.Batches(m.path, epoch=6)
        try:
            list(late)
            raise AssertionError("iterated past --epochs")
        except ValueError as ex:
            assert "epochs 0..5" in str(ex), ex


def iterable_dataset(path, fields):
    want = reference(fields, 2)
    with batchfs.mount(path, mountpoint("ids"), batch_size=B,
                       shuffle=True, seed=SEED) as m:
        ds = batchfs.IterableDataset(m.path)
        loader = DataLoader(ds, batch_size=None)
        assert len(loader) == len(want[0])
        for e in range(2):
            got = list(loader)
            assert len(got) == len(want[e])
            for g, w in zip(got, want[e]):
                same(g, w)
        ds = batchfs.IterableDataset(m.path)
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        for e in range(2):
            ds.set_epoch(e)
            got = list(loader)
            assert len(got) == len(want[e]), (e, len(got))
            for g, w in zip(got, want[e]):
                same(g, w)


def train(batches, epochs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(epochs):
        for batch in batches:
            loss = torch.nn.functional.cross_entropy(model(batch["x"]),
                                                     batch["y"])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return [p.detach().clone() for p in model.parameters()]


def training_equals_dataloader():
    g = torch.Generator().manual_seed(7)
    n = 203
    fields = {"x": torch.randn(n, 5, generator=g),
              "y": torch.randint(0, 3, (n,), generator=g)}
    path = os.path.join(TMP, "train.pt")
    torch.save(fields, path)
    ref = train(DataLoader(Dict(fields), batch_size=16, shuffle=True,
                           generator=torch.Generator().manual_seed(SEED)), 2)
    with batchfs.mount(path, mountpoint("train"), batch_size=16,
                       shuffle=True, seed=SEED) as m:
        direct = train(batchfs.Batches(m, device="cpu"), 2)
        loader = train(DataLoader(batchfs.IterableDataset(m),
                                  batch_size=None), 2)
    for a, b, c in zip(ref, direct, loader):
        assert torch.equal(a, b) and torch.equal(a, c), "weights differ"
    assert not torch.equal(ref[0], train([], 0)[0]), "the model did not train"


def mount_options_and_errors(path):
    mnt = mountpoint("opts")
    subset = [3, 1, 4, 15, 9, 2, 6]
    with batchfs.mount([path], mnt, batch_size=3, subset=subset,
                       seed=2) as m:
        assert m.dataset["sampler"] == "subset_random"
        got = sorted(i for b in m.batches() for i in b["i64"].tolist())
        assert got == sorted(subset), got
        assert m.log.endswith(".log") and os.path.exists(m.log), m.log
        assert m.stats()["last_error"] == "-"
    torch.manual_seed(4)
    state = torch.get_rng_state()
    with batchfs.mount(path, mnt, batch_size=B, shuffle=True,
                       rng_state=state) as m:
        assert m.dataset["seed_source"] == "--rng-state"
        first = next(iter(m.batches(device="cpu")))
    torch.set_rng_state(state)
    loader = DataLoader(Dict({"i64": torch.arange(N)}), batch_size=B,
                        shuffle=True)
    assert torch.equal(first["i64"], next(iter(loader))["i64"])
    for kw, code, words in [({"batch_size": 0}, 2, "--batch-size"),
                            ({"frobnicate": 1}, 2, "--frobnicate")]:
        try:
            batchfs.mount(path, mnt, **kw)
            raise AssertionError("mounted with %r" % kw)
        except batchfs.MountError as ex:
            assert ex.returncode == code and words in str(ex), (kw, ex)
            assert "usage: batchfs mount" in ex.stderr
    try:
        batchfs.mount(path, os.path.join(TMP, "nowhere"))
        raise AssertionError("mounted on a missing directory")
    except batchfs.MountError as ex:
        assert ex.returncode == 1 and "does not exist" in str(ex), ex
    assert not ml.is_mounted(mnt)
    assert batchfs.Loader.__module__ == "batchfs_loader"


def read_batch_of_every_served_dtype():
    """A batch file with every dtype fs/dtype.c serves (written here):
    numpy gets all (BF16 and F8 as raw bits), torch what it has."""
    with open(os.path.join(HERE, "..", "..", "fs", "dtype.c")) as f:
        codes = re.findall(r'\[BFS_DT_\w+\] = \{"\w+", "(\w+)"', f.read())
    assert set(codes) == set(batchfs.NP), (codes, sorted(batchfs.NP))
    head, blobs, off = {}, [], 0
    for i, code in enumerate(sorted(codes)):
        a = (np.arange(6) * 7 + i).astype(batchfs.NP[code]).reshape(2, 3)
        head[code] = {"dtype": code, "shape": [2, 3],
                      "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    text = json.dumps(head).encode()
    path = os.path.join(TMP, "all.st")
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    for zc in (True, False):
        got = batchfs.read_batch(path, zero_copy=zc)
        for i, code in enumerate(sorted(codes)):
            want = (np.arange(6) * 7 + i).astype(batchfs.NP[code])
            assert np.array_equal(got[code].reshape(-1), want), code
    t = batchfs.read_batch(path, device="cpu", zero_copy=False) \
        if all(hasattr(torch, n) for n in ("uint16", "float8_e4m3fn")) \
        else None
    if t is None:
        try:
            batchfs.read_batch(path, device="cpu")
            raise AssertionError("torch %s read U16" % torch.__version__)
        except TypeError as ex:
            assert "read it with device=None" in str(ex), ex


def main():
    assert batchfs.find_batchfs() == os.path.realpath(ml.BATCHFS)
    fields = all_dtypes()
    path = os.path.join(TMP, "all.pt")
    torch.save(fields, path)
    read_batch_of_every_served_dtype()
    mount_options_and_errors(path)
    every_dtype_and_mode(path, fields)
    batches_state(path, fields, stream=True)
    batches_state(path, fields, stream=False)
    iterable_dataset(path, fields)
    training_equals_dataloader()
    print("ok")


main()
