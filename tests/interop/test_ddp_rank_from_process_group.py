#!/usr/bin/python3
"""The rank comes from torch.distributed when a process group is
initialised, as DistributedSampler takes it: under mp.spawn with
init_process_group("gloo", rank=r, world_size=2) (no RANK or WORLD_SIZE in
the environment, or a RANK that says another rank), batchfs.Batches and
batchfs.IterableDataset read rank r of a `--world-size 2 --ranks all`
mount, and their batches (through batchfs.DataLoader with a worker too)
are those of DataLoader + DistributedSampler(rank=r) with set_epoch. The
process group's world size is checked as WORLD_SIZE is: a mount of
another world size, or one without ranks, is a ValueError that names
torch.distributed's world size and the options to mount with."""
import os
import socket
import sys

import mountlib as ml

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler

import batchfs

WORLD, B, SEED, N = 2, 4, 3, 37


class Idx(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return i


def reference(rank, epoch):
    sampler = DistributedSampler(Idx(), num_replicas=WORLD, rank=rank,
                                 shuffle=True, seed=SEED)
    sampler.set_epoch(epoch)
    return [b.tolist() for b in DataLoader(Idx(), batch_size=B,
                                           sampler=sampler)]


def expect_value_error(make, words):
    try:
        make()
    except ValueError as ex:
        for w in words:
            assert w in str(ex), (w, str(ex))
        return
    raise AssertionError("no ValueError, want one saying %s" % words)


def run_rank(rank, port, mnt, other_world, whole):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(k, None)
    if rank == 1:
        os.environ["RANK"] = "0"   # says another rank: the group's wins
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=WORLD)
    try:
        batches = batchfs.Batches(mnt)
        assert batches.rank == rank, (batches.rank, rank)
        got = [b["v"].tolist() for b in batches]
        want = reference(rank, 0)
        assert got == [[i * 3 for i in idx] for idx in want], (rank, got)
        ds = batchfs.IterableDataset(mnt)
        assert ds.rank == rank, (ds.rank, rank)
        loader = batchfs.DataLoader(ds, num_workers=1)
        for e in range(2):
            got = [b["v"].tolist() for b in loader]
            want = reference(rank, e)
            assert got == [[i * 3 for i in idx] for idx in want], (rank, e)
        expect_value_error(lambda: batchfs.Batches(other_world), [
            "world size 4", "torch.distributed.get_world_size()=2",
            "--world-size 2"])
        expect_value_error(lambda: batchfs.IterableDataset(whole), [
            "mounted without --world-size", "--world-size 2 --ranks all",
            "torch.distributed.get_rank()=%d" % rank])
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ml.require_fuse()
    path = os.path.join(ml.TMP, "v.pt")
    torch.save({"v": torch.arange(N) * 3}, path)
    _, mnt = ml.mount(path, None, "--batch-size", B, "--world-size", WORLD,
                      "--ranks", "all", "--shuffle", "--seed", SEED,
                      "--epochs", 3)
    _, four = ml.mount(path, None, "--batch-size", B, "--world-size", 4,
                       "--ranks", "all")
    _, whole = ml.mount(path, None, "--batch-size", B)
    failures = []
    try:
        mp.spawn(run_rank, args=(free_port(), mnt, four, whole),
                 nprocs=WORLD)
        print("ok: mp.spawn + init_process_group(rank=r): each rank read "
              "its own batches")
    except Exception as ex:  # noqa: BLE001 - a rank's failure, reported
        failures.append("mp.spawn ranks: %s" % ex)
    finally:
        for m in (mnt, four, whole):
            assert ml.umount(m).returncode == 0
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
