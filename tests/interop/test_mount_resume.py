#!/usr/bin/python3
"""Elastic resume: a job that read part of epoch E on W ranks restarts on
W' ranks with `--world-size W' --resume-at E:S:W` and reads every sample of
epoch E exactly once, padding aside; the epochs after it are plain
DistributedSampler(W') epochs. Checked against real torch:
- the order engine (order_dump --resume-at) against the reference built
  from torch's own DistributedSampler: W's padded list, its first S
  positions read, the rest (without W's padding; cut under the sampler's
  drop_last) split by DistributedSampler(W') as a list, then batched by
  DataLoader; random configurations: shuffle or not, both drop_lasts, W
  and W' from 1 to 6, S anywhere from 0 to the end (uneven progress
  included: S need not be a whole number of batches);
- mounts, as the issue's check: a mount of W=4 ranks, k batches read per
  rank (S = 4 k B, or the whole list when k reaches its end); a mount of W'=3 ranks resuming at E:S:4; every sample
  of epoch E read exactly once between the two, the repeats being the
  padding DistributedSampler(3) adds to the rest; epoch E+1 equal to
  DistributedSampler(3); the namespace (ls, index/, stream/, offsets,
  dataset.json's "resume") saying the same, in every serve mode, also
  with a ragged field (--pad, --pack: batch files of many sizes, the
  stream's offsets measured per epoch);
- the Python package: each rank's Batches.state_dict() says where it is
  in the epoch's list; ranks that got unequally far resume where all
  were (batchfs.resume_state); load_state_dict() on a mount of another
  world size without the resume is a ValueError giving the mount command,
  and that command, run, resumes it: every rank's Batches and a
  batchfs.DataLoader with workers read the rest, then the next epoch;
- refusals: --resume-at without --world-size, a position past the epoch,
  an epoch past --epochs, malformed values."""
import json
import os
import random
import shlex
import subprocess

import mountlib as ml

import batchfs

import torch
from torch.utils.data import DataLoader, DistributedSampler

SRC = os.environ.get("BFS_SRC", os.getcwd())
BUILD = os.environ.get("BUILD", "build")
DUMP = os.path.join(SRC, BUILD, "tests", "bin", "order_dump")
TMP = ml.TMP
failures = []


def dist(n, world, rank, epoch, seed, shuffle, sdl):
    s = DistributedSampler(range(n), num_replicas=world, rank=rank,
                           shuffle=shuffle, seed=seed, drop_last=sdl)
    s.set_epoch(epoch)
    return list(s)


def batches(idx, batch, drop_last):
    return [b.tolist() for b in DataLoader(idx, batch_size=batch,
                                           drop_last=drop_last)]


def padded_list(n, world, epoch, seed, shuffle, sdl):
    """DistributedSampler(world)'s whole list: rank r takes r, r + W, ..."""
    per = [dist(n, world, r, epoch, seed, shuffle, sdl)
           for r in range(world)]
    return [per[i % world][i // world] for i in range(len(per[0]) * world)]


def rest_of(n, world, epoch, seed, shuffle, sdl, pos):
    """What the first 'pos' positions of the W-rank list leave: the list
    without its padding (cut to a multiple of W under drop_last)."""
    full = padded_list(n, world, epoch, seed, shuffle, sdl)
    return full[pos:min(len(full), n)]


def resumed(rest, world, rank, batch, drop_last, sdl):
    """The rest split by DistributedSampler(world) as a list, batched."""
    if not rest:
        return []
    pick = dist(len(rest), world, rank, 0, 0, False, sdl)
    return batches([rest[j] for j in pick], batch, drop_last)


def dump(args):
    out = subprocess.run([DUMP] + [str(a) for a in args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (args, out.stderr)
    epochs = []
    for line in out.stdout.splitlines():
        if line.startswith("epoch"):
            epochs.append([])
        else:
            epochs[-1].append([int(x) for x in line.split()])
    return epochs


def engine(cases):
    rng = random.Random(41)
    for _ in range(cases):
        n, w0, w1 = rng.randint(1, 60), rng.randint(1, 6), rng.randint(1, 6)
        sdl, dl = rng.random() < 0.4, rng.random() < 0.4
        shuffle, b = rng.random() < 0.7, rng.randint(1, 7)
        seed, e = rng.randint(0, 99), rng.randint(0, 2)
        whole = len(padded_list(n, w0, 0, 0, False, sdl))
        pos = rng.randint(0, whole)
        rest = rest_of(n, w0, e, seed, shuffle, sdl, pos)
        for r in range(w1):
            args = ["--n", n, "--epochs", e + 2, "--batch-size", b,
                    "--seed", seed, "--world-size", w1, "--rank", r,
                    "--resume-at", "%d:%d:%d" % (e, pos, w0)]
            args += ["--shuffle"] * shuffle + ["--drop-last"] * dl
            args += ["--sampler-drop-last"] * sdl
            got = dump(args)
            want = resumed(rest, w1, r, b, dl, sdl)
            after = batches(dist(n, w1, r, e + 1, seed, shuffle, sdl), b, dl)
            if got[e] != want or got[e + 1] != after:
                failures.append("order_dump %s: epoch %d %r, want %r; "
                                "next %r, want %r"
                                % (" ".join(map(str, args)), e, got[e],
                                   want, got[e + 1], after))
    print("ok: engine, %d configurations" % cases)


N, B, SEED = 53, 3, 5


def read_epoch(mnt, rank, epoch, upto=None):
    """Index lists of rank's batches of 'epoch' (the first 'upto'), each
    checked against its batch file's rows."""
    d = "%s/rank/%d" % (mnt, rank)
    names = sorted(os.listdir("%s/epoch/%d" % (d, epoch)),
                   key=lambda s: int(s[6:]))
    out = []
    for k in range(len(names) if upto is None else upto):
        idx = ml.read_index("%s/index/%d/batch_%d" % (d, epoch, k))
        _, arrs = ml.read_batch("%s/epoch/%d/batch_%d" % (d, epoch, k))
        assert arrs["v"].tolist() == [i * 7 for i in idx], (rank, epoch, k)
        out.append(idx)
    assert names == ["batch_%d" % k for k in range(len(names))], names
    return out


def stream_matches(mnt, rank, epoch):
    """stream/E is the epoch's batch files end to end, and index/E/offsets
    says where each starts."""
    d = "%s/rank/%d" % (mnt, rank)
    k, whole = 0, b""
    starts = []
    while os.path.exists("%s/epoch/%d/batch_%d" % (d, epoch, k)):
        starts.append(len(whole))
        whole += ml.read_file("%s/epoch/%d/batch_%d" % (d, epoch, k))
        k += 1
    starts.append(len(whole))
    assert ml.read_file("%s/stream/%d" % (d, epoch)) == whole, (rank, epoch)
    lines = open("%s/index/%d/offsets" % (d, epoch)).read().split()
    assert [int(x) for x in lines] == starts, (rank, epoch, lines, starts)


def mounts(epoch, k, shuffle, sdl, dl, src="r.pt", extra=()):
    """W=4 reads k batches per rank of 'epoch'; W'=3 resumes it."""
    mode = ml.next_mode()
    common = ["--batch-size", B, "--seed", SEED, "--epochs", epoch + 2,
              "--ranks", "all", "--serve", mode] + list(extra)
    common += ["--shuffle"] * shuffle + ["--drop-last"] * dl
    common += ["--sampler-drop-last"] * sdl
    what = "epoch %d k %d %s" % (epoch, k, " ".join(map(str, common)))
    src = os.path.join(TMP, src)
    seen = []
    _, mnt = ml.mount(src, None, "--world-size", 4, *common)
    try:
        for r in range(4):
            for idx in read_epoch(mnt, r, epoch, upto=k):
                seen += idx
    finally:
        assert ml.umount(mnt).returncode == 0
    # S: what every rank completed (a short last batch ends the list)
    pos = min(4 * k * B, len(padded_list(N, 4, epoch, SEED, shuffle, sdl)))
    said, mnt = ml.mount(src, None, "--world-size", 3, "--resume-at",
                         "%d:%d:4" % (epoch, pos), *common)
    try:
        info = json.load(open(mnt + "/dataset.json"))
        rest = rest_of(N, 4, epoch, SEED, shuffle, sdl, pos)
        line = "(epoch %d: %d, the rest after position %d of 4 ranks' " \
            "list)" % (epoch, info["resume"]["batches"], pos)
        assert line in said.stdout + said.stderr, (said.stdout, line)
        got_rest = []
        for r in range(3):
            got = read_epoch(mnt, r, epoch)
            want = resumed(rest, 3, r, B, dl, sdl)
            assert got == want, (r, got, want)
            assert info["resume"]["batches"] == len(want), info["resume"]
            got_rest += [i for b in got for i in b]
            stream_matches(mnt, r, epoch)
            nxt = read_epoch(mnt, r, epoch + 1)
            assert nxt == batches(dist(N, 3, r, epoch + 1, SEED, shuffle,
                                       sdl), B, dl), (r, nxt)
            assert len(nxt) == info["batches_per_epoch"], info
        assert info["resume"]["epoch"] == epoch, info["resume"]
        assert info["resume"]["samples_left"] == len(rest), info["resume"]
        # every sample of the epoch once: what W read, then the rest; the
        # repeats are the padding DistributedSampler(3) adds from the
        # rest's head, and (sampler drop_last) only its cut tail is unread
        pad = [rest[j % len(rest)] for j in
               range(len(rest), len(dist(len(rest), 3, 0, 0, 0, False, sdl))
                     * 3)] if rest and not sdl else []
        if not dl:
            once = sorted(seen + got_rest)
            listed = sorted(padded_list(N, 4, epoch, SEED, shuffle, sdl)
                            [:min(pos, N)] + rest + pad)
            assert once == listed, (once, listed)
            if not sdl:
                assert sorted(set(once)) == list(range(N)), once
                assert len(once) - N == len(pad) + max(0, pos - N), once
        assert "--resume-at %d:%d:4" % (epoch, pos) in \
            open(mnt + "/README").read()
    except AssertionError as ex:
        failures.append("%s: %r" % (what, ex))
    finally:
        assert ml.umount(mnt).returncode == 0
    print("ok: %s" % what)


def python_resume():
    """Batches' states on W=4 (rank 2 one batch further), the resume
    command load_state_dict() gives on a plain W'=3 mount, run."""
    epoch, k = 1, 2
    src = os.path.join(TMP, "r.pt")
    common = ["--batch-size", B, "--seed", SEED, "--epochs", 3, "--ranks",
              "all", "--shuffle"]
    states, seen = [], []
    _, mnt = ml.mount(src, None, "--world-size", 4, *common)
    try:
        for r in range(4):
            b = batchfs.Batches(mnt, epoch=epoch, rank=r)
            it = iter(b)
            for _ in range(k + (r == 2)):
                seen.append((r, next(it)["v"].tolist()))
            it.close()   # a pass broken off: its stream closed
            states.append(b.state_dict())
    finally:
        assert ml.umount(mnt).returncode == 0
    state = batchfs.resume_state(states)
    pos = 4 * k * B
    assert state["epoch"] == epoch and state["samples_seen"] == pos, state
    assert state["list_world_size"] == 4 and state["resume_at"] is None
    assert states[2]["samples_seen"] == 4 * (k + 1) * B, states[2]
    _, mnt = ml.mount(src, None, "--world-size", 3, *common)
    try:
        b = batchfs.Batches(mnt, rank=0)
        try:
            b.load_state_dict(state)
            raise AssertionError("loaded a W=4 state on a W'=3 mount")
        except ValueError as ex:
            msg = str(ex)
        assert "--resume-at %d:%d:4" % (epoch, pos) in msg, msg
        cmd = shlex.split(msg.splitlines()[-1])
    finally:
        assert ml.umount(mnt).returncode == 0
    assert cmd[:2] == ["batchfs", "mount"], cmd
    new = os.path.join(TMP, "resumed")
    os.makedirs(new, exist_ok=True)
    cmd = [ml.BATCHFS] + cmd[1:]
    cmd[cmd.index(mnt)] = new
    subprocess.run(cmd, check=True, timeout=120)
    try:
        rest = rest_of(N, 4, epoch, SEED, True, False, pos)
        got_rest = []
        for r in range(3):
            b = batchfs.Batches(new, rank=r)
            b.load_state_dict(state)
            assert b.state_dict()["epoch"] == epoch and len(b) == \
                len(resumed(rest, 3, r, B, False, False)), b.state_dict()
            got = [x["v"].tolist() for x in b]
            want = resumed(rest, 3, r, B, False, False)
            assert got == [[i * 7 for i in w] for w in want], (r, got)
            got_rest += [i // 7 for g in got for i in g]
            nxt = [x["v"].tolist() for x in b]   # the next epoch: plain
            assert nxt == [[i * 7 for i in w] for w in batches(
                dist(N, 3, r, epoch + 1, SEED, True, False), B, False)], r
        ds = batchfs.IterableDataset(new, rank=1)
        ds.load_state_dict(state)
        loader = batchfs.DataLoader(ds, num_workers=2)
        got = [x["v"].tolist() for x in loader]
        want = resumed(rest, 3, 1, B, False, False)
        assert got == [[i * 7 for i in w] for w in want], got
        assert loader.state_dict()["epoch"] == epoch + 1, loader.state_dict()
        # every sample once (rank 2's extra batch is read again)
        before = [i // 7 for r in range(4)
                  for v in [v for q, v in seen if q == r][:k] for i in v]
        pad = [rest[j % len(rest)] for j in
               range(len(rest), -(-len(rest) // 3) * 3)]
        assert sorted(before + got_rest) == sorted(list(range(N)) + pad)
    finally:
        assert ml.umount(new).returncode == 0
    print("ok: Batches, resume_state, the command load_state_dict() gives")


def refused(opts, says):
    out = subprocess.run([ml.BATCHFS, "mount", os.path.join(TMP, "r.pt"),
                          os.path.join(TMP, "never")] + [str(o) for o in
                                                          opts],
                         capture_output=True, text=True, timeout=60)
    if out.returncode == 0 or says not in out.stderr:
        failures.append("%s: exit %d, %r (want %r)"
                        % (opts, out.returncode, out.stderr, says))
    print("ok: refused %s" % " ".join(map(str, opts)))


def main():
    ml.require_fuse()
    if not os.access(DUMP, os.X_OK):
        ml.skip("%s not built" % DUMP)
    engine(120)
    torch.save({"v": torch.arange(N) * 7,
                "x": torch.arange(N * 5, dtype=torch.float32)
                .reshape(N, 5)}, os.path.join(TMP, "r.pt"))
    lens = torch.arange(N) % 6          # a ragged field: batch sizes vary
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
    torch.save({"v": torch.arange(N) * 7,
                "tok.values": torch.arange(int(offs[-1]) * 2,
                                           dtype=torch.float32)
                .reshape(-1, 2), "tok.offsets": offs},
               os.path.join(TMP, "ragged.pt"))
    os.makedirs(os.path.join(TMP, "never"), exist_ok=True)
    for epoch, k, shuffle, sdl, dl in [(0, 2, True, False, False),
                                       (1, 1, True, True, False),
                                       (1, 3, False, False, True),
                                       (0, 0, True, False, False),
                                       (2, 5, True, False, False)]:
        mounts(epoch, k, shuffle, sdl, dl)
    mounts(1, 2, True, False, False, "ragged.pt", ["--pad", "tok"])
    mounts(1, 3, True, True, True, "ragged.pt", ["--pack", "tok"])
    python_resume()
    refused(["--resume-at", "0:8"], "--resume-at")
    refused(["--world-size", 3, "--resume-at", "0:99:4"], "past the end")
    refused(["--world-size", 3, "--epochs", 2, "--resume-at", "2:0"],
            "past the mount's 2 epochs")
    for bad in ["1", "1:", ":3", "1:2:0", "1:2:3:4", "a:1", "1:-2"]:
        refused(["--world-size", 3, "--resume-at", bad],
                "--resume-at: not EPOCH:POSITION")
    ml.finish(failures)


main()
