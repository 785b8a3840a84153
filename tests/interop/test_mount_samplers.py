#!/usr/bin/python3
"""The sampler options of `batchfs mount` reach the order engine: for
--num-samples/--replacement, --subset FILE, --weights FILE and
--world-size/--rank, --sampler-drop-last (DistributedSampler's drop_last,
apart from DataLoader's --drop-last: DDP's usual pair) and
--persistent-workers, the index files of 3 epochs equal the batches of the
PyTorch loader that dataset.json's "pytorch" line names, built and run with
real torch (DistributedSampler gets set_epoch(N) before epoch N; WORKERS
workers for persistent ones). The mount's README says when persistent
workers change the order."""
import json
import os

import mountlib as ml

import torch
from torch.utils.data import (DataLoader, DistributedSampler,
                              RandomSampler, SubsetRandomSampler,
                              WeightedRandomSampler)

ml.require_fuse()
TMP = ml.TMP
N = 37


class Idx(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return i


def check(opts, env, expect, epochs=3):
    path = os.path.join(TMP, "s.pt")
    _, mnt = ml.mount(path, None, "--epochs", epochs, *opts)
    info = json.load(open(mnt + "/dataset.json"))
    ns = dict(env, DataLoader=DataLoader, ds=Idx(), torch=torch,
              RandomSampler=RandomSampler, DistributedSampler=DistributedSampler,
              SubsetRandomSampler=SubsetRandomSampler,
              WeightedRandomSampler=WeightedRandomSampler)
    for piece in expect:
        assert piece in info["pytorch"], (piece, info["pytorch"])
    loader = eval(info["pytorch"], ns)
    assert len(os.listdir(mnt + "/epoch/0")) == len(loader), info["pytorch"]
    for e in range(epochs):
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(e)
        for k, ref in enumerate(loader):
            got = ml.read_index("%s/index/%d/batch_%d" % (mnt, e, k))
            assert got == ref.tolist(), (info["pytorch"], e, k, got, ref)
            _, arrs = ml.read_batch("%s/epoch/%d/batch_%d" % (mnt, e, k))
            assert arrs["v"].tolist() == [i * 3 for i in got]
    assert ml.umount(mnt).returncode == 0
    return info["pytorch"]


def main():
    torch.save({"v": torch.arange(N) * 3}, os.path.join(TMP, "s.pt"))
    subset = [5, 3, 30, 31, 0, 2, 9, 36, 11]
    sub_file = os.path.join(TMP, "subset.txt")
    open(sub_file, "w").write("\n".join(map(str, subset)) + "\n")
    w = [float((i * 7) % 5) for i in range(N)]
    w_file = os.path.join(TMP, "weights.txt")
    open(w_file, "w").write("\n".join(map(repr, w)) + "\n")
    env = {"indices": subset, "weights": w, "WORKERS": 2}
    seen = []
    seen.append(check(["--batch-size", 4, "--shuffle", "--seed", 11,
                       "--num-samples", 50], env,
                      ["RandomSampler(", "num_samples=50", "manual_seed(11)"]))
    seen.append(check(["--batch-size", 5, "--replacement", "--seed", 4,
                       "--drop-last"], env,
                      ["replacement=True", "manual_seed(4)", "drop_last=True"]))
    seen.append(check(["--batch-size", 4, "--subset", sub_file, "--seed", 8],
                      env, ["SubsetRandomSampler(", "manual_seed(8)"]))
    seen.append(check(["--batch-size", 6, "--weights", w_file, "--seed", 2,
                       "--num-samples", 40], env,
                      ["WeightedRandomSampler(", "num_samples=40"]))
    seen.append(check(["--batch-size", 6, "--weights", w_file, "--seed", 2],
                      env, ["num_samples=%d" % N]))
    for rank in range(3):
        seen.append(check(["--batch-size", 4, "--world-size", 3, "--rank",
                           rank, "--shuffle", "--seed", 5], env,
                          ["num_replicas=3", "rank=%d" % rank, "seed=5"]))
    seen.append(check(["--batch-size", 4, "--world-size", 2, "--rank", 1,
                       "--drop-last"], env,
                      ["shuffle=False", "seed=0", "drop_last=True"]))
    # DDP's usual pair: DistributedSampler(drop_last=False) pads 37 to 40
    # (10 per rank), DataLoader(drop_last=True) keeps 2 batches of 5; the
    # sampler's drop_last cuts to 36 (9 per rank: one batch, or 5 + 4)
    seen.append(check(["--batch-size", 5, "--world-size", 4, "--rank", 3,
                       "--shuffle", "--seed", 5, "--drop-last"], env,
                      ["batch_size=5, drop_last=True, sampler=",
                       "seed=5, drop_last=False)"]))
    seen.append(check(["--batch-size", 5, "--world-size", 4, "--rank", 1,
                       "--sampler-drop-last"], env,
                      ["batch_size=5, drop_last=False, sampler=",
                       "seed=0, drop_last=True)"]))
    # persistent workers: the base seed is drawn once (epochs 1+ differ
    # from a fresh iterator's); a sampler= form does not change
    pw = check(["--batch-size", 4, "--shuffle", "--seed", 7,
                "--persistent-workers"], env,
               ["shuffle=True", "manual_seed(7)",
                "num_workers=WORKERS, persistent_workers=True"])
    seen.append(pw)
    seen.append(check(["--batch-size", 4, "--shuffle", "--seed", 11,
                       "--num-samples", 50, "--persistent-workers"], env,
                      ["num_samples=50", "persistent_workers=True"]))
    readme = {}
    for opts in (["--shuffle", "--seed", 7], ["--shuffle", "--seed", 7,
                                              "--persistent-workers"],
                 ["--world-size", 2]):
        p, mnt = ml.mount(os.path.join(TMP, "s.pt"), None, "--batch-size",
                          4, *opts)
        readme[opts[-1]] = open(mnt + "/README").read()
        assert ml.umount(mnt).returncode == 0
    assert "mount with --persistent-workers for that loader" in \
        " ".join(readme[7].split()), readme[7]
    assert "persistent workers (any num_workers >= 1) draw the base seed " \
        "once" in " ".join(readme["--persistent-workers"].split())
    assert "persistent or not: this order does not depend on them" in \
        " ".join(readme[2].split()), readme[2]
    # no --seed: a random seed is picked and reported
    _, mnt = ml.mount(os.path.join(TMP, "s.pt"), None, "--subset", sub_file)
    info = json.load(open(mnt + "/dataset.json"))
    assert info["seed_source"] == "getrandom"
    assert "manual_seed(%d)" % info["seed"] in info["pytorch"]
    assert info["batch_size"] == 1
    assert ml.umount(mnt).returncode == 0
    # DistributedSampler without --seed uses torch's default seed 0
    _, mnt = ml.mount(os.path.join(TMP, "s.pt"), None, "--batch-size", 4,
                      "--world-size", 2, "--rank", 0, "--shuffle")
    info = json.load(open(mnt + "/dataset.json"))
    assert (info["seed_source"], info["seed"]) == ("default", 0), info
    assert info["batch_size"] == 4
    assert ml.umount(mnt).returncode == 0
    for s in seen:
        print(s)
    print("ok")


main()
