#!/usr/bin/python3
"""One mount for several ranks: `--world-size W --ranks LIST` serves
rank/R/epoch/N/batch_K and rank/R/index/N/batch_K for each rank R of LIST,
and each rank's batches are exactly those of DataLoader + DistributedSampler
(num_replicas=W, rank=R, set_epoch(N) before epoch N), computed with real
torch:
- every configuration DistributedSampler allows: shuffle or not, drop_last
  or not (the dataset not divisible by W: padding or dropping), for the
  sampler (--sampler-drop-last) and DataLoader (--drop-last) alike or
  not (DDP's usual pair: the sampler pads, DataLoader drops), seeds,
  W > len(dataset) (padding wraps), LIST as all, a range, a list;
  served in turn by every serve mode;
- the namespace: `ls` of the root and of rank/, a rank not served is
  ENOENT, dataset.json names world_size, ranks and the paths, README the
  ranks;
- all ranks read at once from threads, with a budget that holds a few
  batches, and a slow rank that stops for a while: every byte exact, no
  read times out, the daemon alive;
- mount errors: --ranks without --world-size, a rank outside W, --rank
  with --ranks, no batch per rank;
- the Python package picks the rank: rank=R, else $RANK; no rank on a
  mount of several, a rank not served, a WORLD_SIZE other than the
  mount's, or a one-rank mount read as another rank are ValueErrors that
  say what to do."""
import json
import os
import sys
import threading

import mountlib as ml

import torch
from torch.utils.data import DataLoader, DistributedSampler

import batchfs

ml.require_fuse()
TMP = ml.TMP
N = 37
failures = []


class Idx(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return i


def reference(world, rank, batch, shuffle, drop_last, seed, epoch,
              sampler_drop_last=None):
    """The sample indices of each batch of 'epoch' for 'rank' (the
    sampler's drop_last: DataLoader's unless given)."""
    sampler = DistributedSampler(Idx(), num_replicas=world, rank=rank,
                                 shuffle=shuffle, seed=seed,
                                 drop_last=drop_last
                                 if sampler_drop_last is None
                                 else sampler_drop_last)
    sampler.set_epoch(epoch)
    loader = DataLoader(Idx(), batch_size=batch, sampler=sampler,
                        drop_last=drop_last)
    return [b.tolist() for b in loader]


def parse_ranks(arg, world):
    if arg == "all":
        return list(range(world))
    out = set()
    for part in arg.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return sorted(out)


def check(world, ranks_arg, batch, shuffle, drop_last, seed, epochs=3,
          sampler_drop_last=None):
    mode = ml.next_mode()
    sdl = drop_last if sampler_drop_last is None else sampler_drop_last
    opts = ["--batch-size", batch, "--world-size", world, "--ranks",
            ranks_arg, "--epochs", epochs, "--serve", mode]
    opts += ["--shuffle"] if shuffle else []
    opts += ["--drop-last"] if drop_last else []
    opts += ["--sampler-drop-last"] if sdl else []
    opts += ["--seed", seed] if seed is not None else []
    what = " ".join(map(str, opts))
    ranks = parse_ranks(ranks_arg, world)
    _, mnt = ml.mount(os.path.join(TMP, "s.pt"), None, *opts)
    try:
        info = json.load(open(mnt + "/dataset.json"))
        assert info["world_size"] == world and info["ranks"] == ranks, info
        assert info["rank_dirs"] is True, info
        assert info["batch_path"] == \
            "rank/{rank}/epoch/{epoch}/batch_{batch}", info
        assert sorted(os.listdir(mnt)) == \
            ["README", "dataset.json", "rank", "stats"], os.listdir(mnt)
        assert sorted(os.listdir(mnt + "/rank"), key=int) == \
            [str(r) for r in ranks]
        assert "rank R in rank/R/" in open(mnt + "/README").read()
        for r in set(range(world + 1)) - set(ranks):
            assert not os.path.exists("%s/rank/%d" % (mnt, r)), r
        for r in ranks:
            assert sorted(os.listdir("%s/rank/%d" % (mnt, r))) == \
                ["epoch", "index", "stream"]
            assert len(os.listdir("%s/rank/%d/epoch" % (mnt, r))) == epochs
            for e in range(epochs):
                want = reference(world, r, batch, shuffle, drop_last,
                                 seed or 0, e, sdl)
                d = "%s/rank/%d/epoch/%d" % (mnt, r, e)
                assert len(os.listdir(d)) == len(want), (r, e)
                assert len(want) == info["batches_per_epoch"]
                for k, idx in enumerate(want):
                    got = ml.read_index("%s/rank/%d/index/%d/batch_%d"
                                        % (mnt, r, e, k))
                    assert got == idx, (r, e, k, got, idx)
                    _, arrs = ml.read_batch("%s/batch_%d" % (d, k))
                    assert arrs["v"].tolist() == [i * 3 for i in idx], \
                        (r, e, k)
    except AssertionError as ex:
        failures.append("%s: %r" % (what, ex))
    finally:
        assert ml.umount(mnt).returncode == 0
    print("ok: %s" % what)


def all_at_once():
    """Every rank read from its own thread, two epochs each, through a
    budget of a few batches; rank 0 pauses after its first batch until
    the others are done (a slow rank), then reads on."""
    world, batch, epochs = 4, 2, 2
    torch.save({"v": torch.arange(N) * 3,
                "x": torch.arange(N * 16384, dtype=torch.float32)
                .reshape(N, 16384)},
                os.path.join(TMP, "big.pt"))
    # 128 KiB rows, batches of 256 KiB: a 1 MiB budget holds a few
    _, mnt = ml.mount(os.path.join(TMP, "big.pt"), None, "--batch-size",
                      batch, "--world-size", world, "--ranks", "all",
                      "--shuffle", "--seed", 3, "--epochs", epochs,
                      "--cache-mb", 1, "--prefetch", 2, "--workers", 2)
    others_done = threading.Event()
    errors = []

    def read_rank(r):
        try:
            for e in range(epochs):
                want = reference(world, r, batch, True, False, 3, e)
                for k, idx in enumerate(want):
                    if r == 0 and (e, k) == (0, 1):
                        others_done.wait(ml.LIVENESS_S)
                    _, arrs = ml.read_batch("%s/rank/%d/epoch/%d/batch_%d"
                                            % (mnt, r, e, k))
                    assert arrs["v"].tolist() == [i * 3 for i in idx], \
                        (r, e, k)
                    x = torch.arange(N * 16384, dtype=torch.float32) \
                        .reshape(N, 16384)[idx]
                    assert (arrs["x"] == x.numpy()).all(), (r, e, k)
        except Exception as ex:  # noqa: BLE001 - reported below
            errors.append("rank %d: %r" % (r, ex))

    threads = [threading.Thread(target=read_rank, args=(r,))
               for r in range(world)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    others_done.set()
    threads[0].join()
    s = ml.stats(mnt)
    assert ml.umount(mnt).returncode == 0
    if errors:
        failures.extend(errors)
    elif s["read_timeouts"] or s["gather_errors"] or \
            s["last_error"] != "-" or s.get("last_error_rank") != "-":
        failures.append("all at once: %r" % s)
    else:
        print("ok: 4 ranks at once through a 1 MiB budget (%d evictions)"
              % s["evictions"])


def mount_errors():
    src = os.path.join(TMP, "s.pt")
    mnt = os.path.join(TMP, "mnt-err")
    os.makedirs(mnt, exist_ok=True)
    for opts, words in [
            (["--ranks", "all"], "--ranks: needs --world-size"),
            (["--world-size", 4, "--ranks", "2-4"], "not within 0-3"),
            (["--world-size", 4, "--ranks", "1,x"], "not a list of ranks"),
            (["--world-size", 4, "--ranks", "3-1"], "runs backwards"),
            (["--world-size", 4, "--rank", 1, "--ranks", "all"],
             "not both"),
            (["--world-size", 40, "--ranks", "all", "--sampler-drop-last"],
             "0 batches per epoch"),
            (["--sampler-drop-last"], "needs --world-size")]:
        p = ml.mount(src, mnt, *opts, check=False)[0]
        out = p.stdout + p.stderr
        if p.returncode == 0 or words not in out:
            failures.append("%s: rc %d, %s" % (opts, p.returncode, out))
            if ml.is_mounted(mnt):
                ml.umount(mnt)
    print("ok: mount errors")


def expect_value_error(fn, words, env):
    saved = {k: os.environ.pop(k, None) for k in ("RANK", "WORLD_SIZE")}
    os.environ.update(env)
    try:
        fn()
        failures.append("no ValueError (%r, %s)" % (env, words))
    except ValueError as ex:
        if not all(w in str(ex) for w in words):
            failures.append("%r: %s lacks %s" % (env, ex, words))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def python_picks_rank():
    src = os.path.join(TMP, "s.pt")
    _, mnt = ml.mount(src, None, "--batch-size", 4, "--world-size", 4,
                      "--ranks", "1-3", "--shuffle", "--seed", 6)
    _, one = ml.mount(src, None, "--batch-size", 4, "--world-size", 4,
                      "--rank", 2, "--shuffle", "--seed", 6)
    try:
        for r in (1, 3):
            want = reference(4, r, 4, True, False, 6, 0)
            got = [b["v"].tolist() for b in batchfs.Batches(mnt, rank=r)]
            assert got == [[i * 3 for i in idx] for idx in want], r
        os.environ["RANK"] = "2"
        try:
            b = batchfs.Batches(mnt)
            assert b.rank == 2 and "rank/2/" in b.batch_path(0, 0)
            assert batchfs.Batches(one).rank == 2
        finally:
            del os.environ["RANK"]
        expect_value_error(lambda: batchfs.Batches(mnt),
                           ["ranks 1-3 of 4", "RANK"], {})
        expect_value_error(lambda: batchfs.Batches(mnt),
                           ["not rank 0", "--ranks all"], {"RANK": "0"})
        expect_value_error(lambda: batchfs.Batches(mnt, rank=0),
                           ["not rank 0"], {})
        expect_value_error(lambda: batchfs.Batches(mnt),
                           ["WORLD_SIZE=8", "--world-size 8"],
                           {"RANK": "1", "WORLD_SIZE": "8"})
        expect_value_error(lambda: batchfs.Batches(one),
                           ["rank 2 of 4, not rank 3", "--ranks all"],
                           {"RANK": "3"})
    except AssertionError as ex:
        failures.append("python: %r" % ex)
    finally:
        ml.umount(mnt)
        ml.umount(one)
    print("ok: the Python package picks the rank")


def main():
    torch.save({"v": torch.arange(N) * 3}, os.path.join(TMP, "s.pt"))
    check(2, "all", 4, True, False, 5)
    check(3, "all", 4, True, True, 1)
    check(3, "0-2", 4, True, False, None)   # DistributedSampler's seed 0
    check(4, "1-3", 5, False, False, None)
    check(4, "0,3", 5, False, True, None)
    # DDP's usual pair (the sampler pads, DataLoader drops) and its mirror
    check(4, "all", 5, True, True, 3, sampler_drop_last=False)
    check(4, "1-2", 2, False, False, None, sampler_drop_last=True)
    check(5, "0,2,4", 3, True, True, 9)
    check(8, "all", 2, True, False, 2)
    check(40, "0-1,38-39", 1, True, False, 4)   # N < W: padding wraps
    check(40, "36-39", 1, False, False, None)
    all_at_once()
    mount_errors()
    python_picks_rank()
    return ml.finish(failures)


sys.exit(main())
