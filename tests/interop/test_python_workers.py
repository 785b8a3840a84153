#!/usr/bin/python3
"""Checkpoints with DataLoader workers (loader/python/batchfs/_torch.py),
over a real mount and real torch, against torch's DataLoader with the
same seed:
- batchfs.DataLoader, num_workers 0, 1, 2, 4, persistent workers or not
  (and 2 spawned workers): after a break mid-epoch its state_dict() and
  the dataset's are the batch after the last one the loop received; the
  same loader's next pass goes on from there; a fresh dataset and loader
  loaded from the saved state yield torch's batches from there to the end
  of the epoch, then the whole next epoch; set_epoch() inside the loop
  wins over the count;
- a plain torch DataLoader with workers: ds.state_dict() raises, naming
  batchfs.DataLoader, until set_epoch(); with num_workers=0 it is exact;
- set_epoch forgotten under a plain DataLoader with 2 workers (persistent
  or not): two whole passes are torch's epochs 0 and 1; a new pass after
  one broken off mid-epoch raises, naming set_epoch."""
import copy
import gc
import json
import os

import mountlib as ml
from fixtures import DictDataset as Dict

import torch
from torch.utils.data import DataLoader

import batchfs

N, B, SEED, EPOCHS = 203, 8, 11, 3     # 26 batches an epoch, the last of 3
BREAK = 7                               # not a multiple of 2 or 4 workers
TIMEOUT = 120                           # a worker silent this long: fail


def reference(fields):
    loader = DataLoader(Dict(fields), batch_size=B, shuffle=True,
                        generator=torch.Generator().manual_seed(SEED))
    return [[b for b in loader] for _ in range(EPOCHS)]


def expect(got, want, what):
    """The batches 'got' are torch's 'want', in order."""
    assert len(got) == len(want), (what, len(got), len(want))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.keys() == w.keys(), (what, k, g.keys())
        for name in w:
            assert torch.equal(g[name], w[name]), (what, "batch", k, name)


def take(loader, n):
    """The first n batches of a pass, then break."""
    got = []
    for batch in loader:
        got.append(batch)
        if len(got) == n:
            break
    return got


def raises(fn, words, what):
    """fn() raises RuntimeError with 'words' in its message."""
    try:
        fn()
    except RuntimeError as ex:
        assert words in str(ex), (what, str(ex))
        # torch's ExceptionWrapper.reraise leaves the failed iterator in a
        # reference cycle: collect it, so that its workers stop now and
        # not in a later forked worker (which cannot join them)
        gc.collect()
        return
    raise AssertionError("%s: no error" % what)


def worker_args(workers, persistent, context=None):
    if workers == 0:
        return {}
    return {"num_workers": workers, "persistent_workers": persistent,
            "timeout": TIMEOUT, "multiprocessing_context": context}


def loader_resumes(m, want, workers, persistent, context=None):
    what = "num_workers=%d persistent=%s %s" % (workers, persistent,
                                                context or "")
    print("--- batchfs.DataLoader " + what)
    kw = worker_args(workers, persistent, context)
    ds = batchfs.IterableDataset(m.path)
    loader = batchfs.DataLoader(ds, **kw)
    expect(take(loader, BREAK), want[0][:BREAK], what)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state == {"epoch": 0, "batch": BREAK}, (what, state)
    assert ds.state_dict() == state, (what, ds.state_dict())
    # the same loader goes on where the loop stopped (persistent workers:
    # the same processes, iterating again)
    expect(take(loader, 3), want[0][BREAK:BREAK + 3], what + " again")
    assert loader.state_dict() == {"epoch": 0, "batch": BREAK + 3}, what
    # a fresh dataset and loader from the checkpoint
    fresh = batchfs.DataLoader(batchfs.IterableDataset(m.path), **kw)
    fresh.load_state_dict(state)
    fresh.set_epoch(0)                    # the current epoch: keeps it
    expect(list(fresh), want[0][BREAK:], what + " resumed")
    assert fresh.state_dict() == {"epoch": 1, "batch": 0}, what
    expect(list(fresh), want[1], what + " next epoch")
    assert fresh.dataset.state_dict() == {"epoch": 2, "batch": 0}, what
    # set_epoch() inside the loop: theirs wins, as in Batches
    got = []
    for batch in fresh:
        got.append(batch)
        if len(got) == 2:
            fresh.dataset.set_epoch(0)
        if len(got) == 4:
            break
    expect(got, want[2][:4], what + " set_epoch in the loop")
    assert fresh.state_dict() == {"epoch": 0, "batch": 0}, what


def plain_loader_cannot_know(m, want):
    print("--- plain DataLoader: state_dict refused")
    ds = batchfs.IterableDataset(m.path)
    plain = DataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT)
    expect(take(plain, BREAK), want[0][:BREAK], "plain")
    raises(ds.state_dict, "batchfs.DataLoader", "plain state_dict")
    raises(lambda: list(batchfs.DataLoader(ds, num_workers=2)),
           "set_epoch", "batchfs.DataLoader after a plain one")
    ds.set_epoch(1)                       # the main process sets it again
    assert ds.state_dict() == {"epoch": 1, "batch": 0}, ds.state_dict()
    expect(list(plain), want[1], "plain after set_epoch")
    raises(ds.state_dict, "batchfs.DataLoader", "plain state_dict again")
    in_process = batchfs.IterableDataset(m.path)
    expect(take(DataLoader(in_process, batch_size=None), BREAK),
           want[0][:BREAK], "num_workers=0")
    assert in_process.state_dict() == {"epoch": 0, "batch": BREAK}
    twin = copy.deepcopy(in_process)      # a copy has a position of its own
    twin.set_epoch(2)
    assert in_process.state_dict() == {"epoch": 0, "batch": BREAK}
    try:
        batchfs.DataLoader(in_process, batch_size=B)
        raise AssertionError("batchfs.DataLoader took batch_size=%d" % B)
    except ValueError as ex:
        assert "--batch-size" in str(ex), ex


def forgotten_set_epoch(m, want, persistent):
    what = "forgotten set_epoch, persistent=%s" % persistent
    print("--- plain DataLoader, " + what)
    ds = batchfs.IterableDataset(m.path)
    plain = DataLoader(ds, batch_size=None, num_workers=2, timeout=TIMEOUT,
                       persistent_workers=persistent)
    expect(list(plain), want[0], what + ", pass 1")
    expect(list(plain), want[1], what + ", pass 2")
    expect(take(plain, BREAK), want[2][:BREAK], what + ", pass 3")
    raises(lambda: list(plain), "set_epoch", what + ", after a break")


def main():
    ml.require_fuse()
    g = torch.Generator().manual_seed(5)
    fields = {"i": torch.arange(N), "x": torch.randn(N, 3, generator=g)}
    path = os.path.join(ml.TMP, "workers.pt")
    torch.save(fields, path)
    want = reference(fields)
    mnt = os.path.join(ml.TMP, "workers")
    os.makedirs(mnt)
    with batchfs.mount(path, mnt, batch_size=B, shuffle=True, seed=SEED,
                       epochs=EPOCHS) as m:
        assert m.dataset["batches_per_epoch"] == len(want[0]) == 26
        for workers, persistent in [(0, False), (1, False), (1, True),
                                    (2, False), (2, True), (4, False),
                                    (4, True)]:
            loader_resumes(m, want, workers, persistent)
        loader_resumes(m, want, 2, True, "spawn")
        plain_loader_cannot_know(m, want)
        forgotten_set_epoch(m, want, False)
        forgotten_set_epoch(m, want, True)
    assert not ml.is_mounted(mnt)
    print("ok")


if __name__ == "__main__":   # spawned DataLoader workers import this file
    main()
