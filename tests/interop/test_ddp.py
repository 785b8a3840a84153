#!/usr/bin/python3
"""A real DDP run from one multi-rank mount: torch.distributed with the
gloo backend, 2 processes started as torchrun starts them (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the environment), each reading
its rank's batches from one `--world-size 2 --ranks all` mount through
batchfs.IterableDataset (which takes the rank from the environment) and
batchfs.DataLoader with 2 workers. Two epochs of a small model:
- the weights equal, bit for bit, those of the same DDP training from
  DataLoader + DistributedSampler + set_epoch;
- a run killed (SIGKILL) mid-epoch 1 right after a checkpoint (model,
  optimizer, each rank's loader.state_dict()) and resumed from it in new
  processes ends with the same weights too;
- a mismatch between the environment's WORLD_SIZE and the mount's is a
  clear error."""
import os
import signal
import socket
import sys

import mountlib as ml
from fixtures import DictDataset as Dict

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

import batchfs

WORLD, B, SEED, EPOCHS, N = 2, 8, 11, 2, 203
KILL_AT = (1, 5)   # the checkpoint after batch 5 of epoch 1, then SIGKILL


def model_and_opt():
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 3)))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def step(model, opt, batch):
    loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
    opt.zero_grad()
    loss.backward()
    opt.step()


def reference(rank, data, out):
    fields = torch.load(data)
    model, opt = model_and_opt()
    sampler = DistributedSampler(Dict(fields), num_replicas=WORLD,
                                 rank=rank, shuffle=True, seed=SEED)
    loader = DataLoader(Dict(fields), batch_size=B, sampler=sampler,
                        num_workers=2)
    for e in range(EPOCHS):
        sampler.set_epoch(e)
        for batch in loader:
            step(model, opt, batch)
    return model


def from_mount(rank, mnt, out, kill=False, resume=None):
    model, opt = model_and_opt()
    ds = batchfs.IterableDataset(mnt)          # rank from $RANK
    assert ds.rank == rank, (ds.rank, rank)
    loader = batchfs.DataLoader(ds, num_workers=2)
    if resume:
        ck = torch.load(resume + ".model")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(torch.load("%s.loader%d" % (resume, rank)))
    while loader.state_dict()["epoch"] < EPOCHS:
        for batch in loader:
            step(model, opt, batch)
            state = loader.state_dict()
            if kill and (state["epoch"], state["batch"]) == \
                    (KILL_AT[0], KILL_AT[1] + 1):
                torch.save(state, "%s.loader%d" % (out, rank))
                if rank == 0:
                    torch.save({"model": model.state_dict(),
                                "opt": opt.state_dict()}, out + ".model")
                dist.barrier()    # both saved: now die, as a killed job
                os.kill(os.getpid(), signal.SIGKILL)
    return model


def run_rank(rank, port, how, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    dist.init_process_group("gloo")
    out = args[1]
    model = reference(rank, *args) if how == "reference" else \
        from_mount(rank, *args[:2], **(args[2] if len(args) > 2 else {}))
    if rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()], out)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(how, *args):
    mp.spawn(run_rank, args=(free_port(), how, args), nprocs=WORLD)


def main():
    ml.require_fuse()
    tmp = ml.TMP
    g = torch.Generator().manual_seed(7)
    data = os.path.join(tmp, "ddp.pt")
    torch.save({"x": torch.randn(N, 5, generator=g),
                "y": torch.randint(0, 3, (N,), generator=g)}, data)
    out = {k: os.path.join(tmp, k + ".w")
           for k in ["ref", "mount", "killed", "resumed"]}
    launch("reference", data, out["ref"])
    _, mnt = ml.mount(data, None, "--batch-size", B, "--world-size", WORLD,
                      "--ranks", "all", "--shuffle", "--seed", SEED,
                      "--epochs", EPOCHS + 1)
    failures = []
    try:
        launch("mount", mnt, out["mount"])
        try:
            launch("mount", mnt, out["killed"], {"kill": True})
            failures.append("the killed run was not killed")
        except mp.ProcessExitedException as ex:
            assert ex.exit_code == -signal.SIGKILL or \
                ex.signal_name == "SIGKILL", ex
        assert not os.path.exists(out["killed"]), "the killed run finished"
        launch("mount", mnt, out["resumed"], {"resume": out["killed"]})
        ref = torch.load(out["ref"])
        assert not torch.equal(ref[0], model_weights_at_start()), \
            "the model did not train"
        for name in ["mount", "resumed"]:
            got = torch.load(out[name])
            if not all(torch.equal(a, b) for a, b in zip(ref, got)):
                failures.append("%s: weights differ from DataLoader + "
                                "DistributedSampler's" % name)
            else:
                print("ok: %s weights equal DataLoader's, bit for bit"
                      % name)
        os.environ.update(RANK="1", WORLD_SIZE="4")
        try:
            batchfs.IterableDataset(mnt)
            failures.append("WORLD_SIZE 4 on a mount of 2: no error")
        except ValueError as ex:
            assert "WORLD_SIZE" in str(ex) and "2" in str(ex), ex
            print("ok: %s" % ex)
    finally:
        for k in ("RANK", "WORLD_SIZE"):
            os.environ.pop(k, None)
        assert ml.umount(mnt).returncode == 0
    return ml.finish(failures)


def model_weights_at_start():
    torch.manual_seed(0)
    return torch.nn.Linear(5, 16).weight.detach().clone()


if __name__ == "__main__":
    sys.exit(main())
