#!/usr/bin/python3
"""A multi-rank mount serves each rank what a one-rank mount of it does:
with the same dataset, seed, shuffle and other options, every file under
rank/R/ of a `--world-size 3 --ranks LIST` mount (epoch/N/batch_K,
index/N/batch_K, stream/N, index/N/offsets) is byte for byte the same
file of a `--world-size 3 --rank R` mount, for every R served and several
epochs: the first, middle ones and the last of each rank (where its
batches end and the next rank's begin, inside the mount). A batch header
names the rank's epoch ("epoch":"3" in rank/1/epoch/3), never a number of
the mount's own (a position, a lane). Checked with --epochs 5 and with
the default --epochs (1000), for fixed fields and for a ragged field
(--pad, --pad VALUE:MULTIPLE, --pack), in every serve mode, for
`--ranks all` and for `--ranks 2,0` (two ranks that are not the first
two: the second one served is rank 2), with and without --drop-last."""
import os
import sys

import mountlib as ml

import torch

ml.require_fuse()
TMP = ml.TMP
N = 50
WORLD = 3
failures = []


def dataset(ragged):
    g = torch.Generator().manual_seed(4)
    d = {"x": torch.randn(N, 5, generator=g), "y": torch.arange(N)}
    if ragged:
        lens = torch.randint(0, 7, (N,), generator=g)
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
        d["tok.values"] = torch.randn(int(offs[-1]), 2, generator=g)
        d["tok.offsets"] = offs
    path = os.path.join(TMP, "ranks-%s.pt" % ("ragged" if ragged else "fixed"))
    torch.save(d, path)
    return path


def files(mnt, base, epochs):
    """{relative name: bytes} of every file compared, under mnt/base."""
    out = {}
    for e in epochs:
        nb = len(os.listdir("%s/%sepoch/%d" % (mnt, base, e)))
        for k in range(nb):
            for kind in ("epoch", "index"):
                name = "%s/%d/batch_%d" % (kind, e, k)
                out[name] = ml.read_file("%s/%s%s" % (mnt, base, name))
        for name in ("stream/%d" % e, "index/%d/offsets" % e):
            out[name] = ml.read_file("%s/%s%s" % (mnt, base, name))
    return out


def compare(what, path, opts, epochs, mode, ranks="all"):
    common = ["--serve", mode, "--world-size", WORLD, "--batch-size", 4,
              "--shuffle", "--seed", 11] + opts
    served = (range(WORLD) if ranks == "all"
              else sorted(int(r) for r in ranks.split(",")))
    _, many = ml.mount(path, None, "--ranks", ranks, *common)
    try:
        assert sorted(os.listdir(many + "/rank")) == sorted(
            str(r) for r in served), os.listdir(many + "/rank")
        for r in served:
            _, one = ml.mount(path, None, "--rank", r, *common)
            try:
                got, want = {}, {}
                for mnt, fn in (
                        (many, lambda: got.update(
                            files(many, "rank/%d/" % r, epochs))),
                        (one, lambda: want.update(files(one, "", epochs)))):
                    err = ml.bounded(mnt, [fn])[0]  # one reader at a time
                    if err is not None:
                        raise err
                assert got.keys() == want.keys()
                bad = sorted(k for k in want if got[k] != want[k])
                assert not bad, ("rank %d differs from --rank %d" % (r, r),
                                 bad[:4], len(bad))
            finally:
                if ml.is_mounted(one):
                    ml.umount(one)
        print("ok: %s, --ranks %s %s (--serve %s)"
              % (what, ranks, " ".join(map(str, opts)) or "default --epochs",
                 mode))
    except AssertionError as ex:
        failures.append("%s --ranks %s %s (--serve %s): %r"
                        % (what, ranks, opts, mode, ex))
    finally:
        if ml.is_mounted(many):
            ml.umount(many)


def main():
    fixed, ragged = dataset(False), dataset(True)
    modes = ml.serve_modes()
    for what, path, extra in (("fixed fields", fixed, []),
                              ("a ragged field", ragged, ["--pad", "tok"]),
                              ("a ragged field", ragged,
                               ["--pad", "tok=-1:4"]),
                              ("a ragged field", ragged, ["--pack", "tok"])):
        for opts, epochs in ((["--epochs", 5], (0, 3, 4)),
                             ([], (0, 12, 999))):
            for mode in modes if opts else (modes[0], modes[-1]):
                compare(what, path, extra + opts, epochs, mode)
    for what, path, extra in (("fixed fields", fixed, []),
                              ("a ragged field", ragged, ["--pad", "tok"])):
        for mode in (modes[0], modes[-1]):
            compare(what, path, extra + ["--epochs", 3, "--drop-last"],
                    (0, 1, 2), mode, ranks="2,0")
    return ml.finish(failures)


sys.exit(main())
