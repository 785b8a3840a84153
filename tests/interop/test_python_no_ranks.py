#!/usr/bin/python3
"""A mount without ranks (no --world-size) serves the whole dataset. Read
by one of several ranks, as under torchrun (RANK, WORLD_SIZE > 1 in the
environment, as torchrun sets them), every rank would silently get every
batch; so batchfs.Batches, batchfs.IterableDataset, batchfs.DataLoader
and Mount.batches() raise a ValueError that names the mount options that
split the dataset (`--world-size W --ranks all`, `--world-size W --rank
R`, with W and R from the environment) and the way to say it is meant
(whole_dataset=True); so does rank= 1 or more. With whole_dataset=True
every rank reads every batch; WORLD_SIZE=1, no environment, rank=0, and a
mount of several ranks read under torchrun are as before."""
import os
import sys

import mountlib as ml

import torch

import batchfs

ml.require_fuse()
N, B = 22, 4
failures = []
TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}


class Env:
    """The environment of a process started by torchrun (or another)."""

    def __init__(self, env):
        self.env = env

    def __enter__(self):
        self.saved = {k: os.environ.pop(k, None)
                      for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        os.environ.update(self.env)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def expect_value_error(what, fn, words, env):
    with Env(env):
        try:
            fn()
            failures.append("%s %r: no ValueError" % (what, env))
            print("FAIL %s %r: no ValueError" % (what, env))
        except ValueError as ex:
            lacks = [w for w in words if w not in str(ex)]
            if lacks:
                failures.append("%s %r: %s lacks %s" % (what, env, ex,
                                                        lacks))
            print("%s %s %r: %s" % ("FAIL" if lacks else "ok  ", what, env,
                                    ex))


def values(batches):
    return [b["v"].tolist() for b in batches]


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def main():
    src = os.path.join(ml.TMP, "s.pt")
    torch.save({"v": torch.arange(N) * 3}, src)
    _, mnt = ml.mount(src, None, "--batch-size", B, "--shuffle", "--seed", 4)
    _, ranked = ml.mount(src, None, "--batch-size", B, "--world-size", 2,
                         "--ranks", "all", "--shuffle", "--seed", 4)
    try:
        whole = values(batchfs.Batches(mnt))
        check(sorted(v for b in whole for v in b) == list(range(0, 3 * N, 3)),
              "without ranks in the environment: the whole dataset")
        split = ["--world-size 2 --ranks all", "--world-size 2 --rank 1",
                 "whole_dataset=True", mnt]
        for what, fn in [
                ("Batches", lambda: batchfs.Batches(mnt)),
                ("IterableDataset", lambda: batchfs.IterableDataset(mnt)),
                ("DataLoader", lambda: batchfs.DataLoader(
                    batchfs.IterableDataset(mnt), num_workers=2)),
                ("Batches(stream=True)",
                 lambda: batchfs.Batches(mnt, stream=True))]:
            expect_value_error(what, fn, split, TORCHRUN)
        expect_value_error("Batches", lambda: batchfs.Batches(mnt),
                           ["one of 4 ranks", "--world-size 4 --ranks all",
                            "--world-size 4 --rank R"], {"WORLD_SIZE": "4"})
        expect_value_error("Batches(rank=3)",
                           lambda: batchfs.Batches(mnt, rank=3),
                           ["rank=3", "--world-size W --rank 3"], {})
        expect_value_error("IterableDataset(rank=1)",
                           lambda: batchfs.IterableDataset(mnt, rank=1),
                           ["rank=1", "--world-size 2 --rank 1"], TORCHRUN)

        with Env(TORCHRUN):
            b = batchfs.Batches(mnt, whole_dataset=True)
            check(b.rank is None and values(b) == whole,
                  "whole_dataset=True under torchrun: every batch")
            ds = batchfs.IterableDataset(mnt, whole_dataset=True)
            got = values(batchfs.DataLoader(ds, num_workers=2))
            check(got == whole,
                  "whole_dataset=True: IterableDataset + DataLoader with "
                  "workers, every batch")
            r1 = batchfs.Batches(ranked)
            check(r1.rank == 1 and "rank/1/" in r1.batch_path(0, 0),
                  "a mount of several ranks under torchrun: the rank's")
        for env in ({"WORLD_SIZE": "1", "RANK": "0"}, {}):
            with Env(env):
                check(values(batchfs.Batches(mnt)) == whole and
                      values(batchfs.Batches(mnt, rank=0)) == whole,
                      "%r: the whole dataset, as before" % env)
    finally:
        ml.umount(mnt)
        ml.umount(ranked)

    os.makedirs(os.path.join(ml.TMP, "py"), exist_ok=True)
    m = batchfs.mount(src, os.path.join(ml.TMP, "py"), batch_size=B)
    try:
        expect_value_error("Mount.batches", lambda: m.batches(),
                           split[:3] + [m.path], TORCHRUN)
        with Env(TORCHRUN):
            got = values(m.batches(whole_dataset=True))
            check(sorted(v for b in got for v in b) ==
                  list(range(0, 3 * N, 3)),
                  "Mount.batches(whole_dataset=True): the whole dataset")
    finally:
        m.umount()
    return ml.finish(failures)


sys.exit(main())
