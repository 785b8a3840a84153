#!/usr/bin/python3
"""The global-seed pattern, with real torch: torch.manual_seed(S) and a
DataLoader(shuffle=True) without generator= draw each epoch's order from
a seed taken from torch's global generator, which the training loop also
draws from (model init, dropout). --seed S alone does not reproduce it;
--shuffle --rng-state FILE, FILE = torch.get_rng_state() taken right
before an epoch, makes the mount's epoch 0 that epoch, and its later
epochs the loop's later ones when nothing else drew from the global
generator in between. The same for RandomSampler(num_samples=,
replacement=) without generator=, and for persistent workers
(--persistent-workers: the base seed is drawn once, before epoch 0, so
each later epoch draws only the sampler's seed). --rng-state needs
--shuffle and no --generator-state (usage errors)."""
import json
import os
import subprocess

import mountlib as ml

import torch
from torch.utils.data import DataLoader, RandomSampler

ml.require_fuse()
TMP = ml.TMP
N, B, S = 61, 8, 1234


def save_state(name):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(torch.get_rng_state().numpy().tobytes())
    return path


def indices(mnt, epoch):
    n = len(os.listdir("%s/epoch/%d" % (mnt, epoch)))
    return [ml.read_index("%s/index/%d/batch_%d" % (mnt, epoch, k))
            for k in range(n)]


def mount_epochs(path, opts, epochs):
    _, mnt = ml.mount(path, None, "--batch-size", B, *opts)
    got = [indices(mnt, e) for e in range(epochs)]
    info = json.load(open(mnt + "/dataset.json"))
    assert ml.umount(mnt).returncode == 0
    return got, info


def training_loop_with_dropout(path):
    """The usual script: the loop draws from the global generator between
    the epochs' orders (dropout), so each epoch needs its own state."""
    torch.manual_seed(S)
    model = torch.nn.Sequential(torch.nn.Linear(1, 4), torch.nn.Dropout(0.5))
    loader = DataLoader(list(range(N)), batch_size=B, shuffle=True)
    states, seen = [], []
    for e in range(3):
        states.append(save_state("state-%d.bin" % e))
        seen.append([])
        for batch in loader:
            seen[-1].append(batch.tolist())
            model(batch.float().unsqueeze(1)).sum()   # dropout draws
    by_seed, _ = mount_epochs(path, ["--shuffle", "--seed", S], 1)
    assert by_seed[0] != seen[0], "a seed alone reproduced the global pattern"
    for e in range(3):
        got, info = mount_epochs(path, ["--shuffle", "--rng-state",
                                        states[e]], 2)
        assert got[0] == seen[e], (e, got[0], seen[e])
        assert info["seed_source"] == "--rng-state", info
        assert "torch.set_rng_state(state)" in info["pytorch"], info
        if e < 2:  # dropout drew in between: epoch 1 of that mount differs
            assert got[1] != seen[e + 1]


def loop_without_other_draws(path, opts, make_loader):
    torch.manual_seed(S)
    state = save_state("quiet.bin")
    loader = make_loader()
    seen = [[b.tolist() for b in loader] for _ in range(3)]
    got, info = mount_epochs(path, ["--shuffle", "--rng-state", state, *opts],
                             3)
    assert got == seen, (opts, info["pytorch"])


def usage_errors(path, state):
    mnt = os.path.join(TMP, "usage")
    os.makedirs(mnt)
    for opts, first in [
            (["--rng-state", state], "--rng-state: needs --shuffle"),
            (["--shuffle", "--rng-state", state, "--generator-state", state],
             "--rng-state: cannot be combined with --generator-state"),
            (["--shuffle", "--rng-state", state, "--world-size", 2],
             "--rng-state: torch's global generator is modelled for")]:
        p = subprocess.run([ml.BATCHFS, "mount", *map(str, opts), path, mnt],
                           capture_output=True, text=True)
        assert p.returncode == 2, (opts, p)
        assert p.stderr.startswith("batchfs mount: " + first), p.stderr
        assert not ml.is_mounted(mnt)


def main():
    path = os.path.join(TMP, "g.pt")
    torch.save({"v": torch.arange(N)}, path)
    training_loop_with_dropout(path)
    data = list(range(N))
    loop_without_other_draws(path, [], lambda: DataLoader(
        data, batch_size=B, shuffle=True))
    loop_without_other_draws(path, ["--num-samples", 150], lambda: DataLoader(
        data, batch_size=B, sampler=RandomSampler(data, num_samples=150)))
    loop_without_other_draws(path, ["--replacement", "--drop-last"],
                             lambda: DataLoader(data, batch_size=B,
                                                drop_last=True,
                                                sampler=RandomSampler(
                                                    data, replacement=True)))
    workers = dict(num_workers=1, persistent_workers=True)
    loop_without_other_draws(path, ["--persistent-workers"], lambda:
                             DataLoader(data, batch_size=B, shuffle=True,
                                        **workers))
    loop_without_other_draws(path, ["--num-samples", 150,
                                    "--persistent-workers"],
                             lambda: DataLoader(
                                 data, batch_size=B, **workers,
                                 sampler=RandomSampler(data,
                                                       num_samples=150)))
    usage_errors(path, os.path.join(TMP, "quiet.bin"))
    print("ok")


main()
