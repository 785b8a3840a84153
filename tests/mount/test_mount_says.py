#!/usr/bin/python3
"""What `batchfs mount` says when it mounts:
- one line on stdout: the mountpoint, batches per epoch (per rank on a
  --ranks mount), the serve mode, the seed the order was drawn with (the
  random one it chose, "no seed" for an order that is not random) and
  the log file, all as dataset.json has them;
- a warning (stderr and the log) for each option that changes nothing
  with the sampler the options make: --seed without --shuffle (also for
  DistributedSampler) or beside --generator-state, --shuffle beside
  --subset or --weights, --replacement beside --weights, --torch-compat
  for a sequential order (not --torch-version: the torch at hand is no
  choice); none for options that matter; --cache-gb, --cache-dir and
  --s3-endpoint (options of remote sources) on a local source;
- a warning that a mountpoint that is not empty has its files hidden;
- a warning when --cache-mb holds fewer batches than --prefetch asks to
  prepare (none ahead: also without --prefetch);
- dataset.json names the sources by absolute path, also when they were
  given relative to the working directory."""
import json
import os
import subprocess

import mountlib as ml

import torch

ml.require_fuse()
TMP = ml.TMP
WARN = "batchfs mount: warning: "


def info(mnt):
    with open(os.path.join(mnt, "dataset.json")) as f:
        return json.load(f)


def mount_and_say(path, *opts, mnt=None):
    """Mount, return (stdout lines, warnings, dataset.json), unmounted."""
    p, mnt = ml.mount(path, mnt, *opts)
    out = p.stdout.splitlines()
    warnings = [line[len(WARN):] for line in p.stderr.splitlines()
                if line.startswith(WARN)]
    assert len(warnings) == len(p.stderr.splitlines()), p.stderr
    d = info(mnt)
    log = d["log"]
    assert ml.umount(mnt).returncode == 0
    return out, warnings, d, log


def one_line_says_what_was_mounted(path):
    mnt = os.path.join(TMP, "said")
    for opts, seed in [(["--batch-size", 7, "--shuffle", "--seed", 9],
                        "seed 9"),
                       (["--batch-size", 7, "--shuffle"], None),
                       (["--batch-size", 3], "no seed (not a random "
                        "order)"),
                       (["--world-size", 2, "--ranks", "all",
                         "--shuffle"],
                        "seed 0 (DistributedSampler's default)"),
                       (["--world-size", 2], "no seed")]:
        out, warnings, d, log = mount_and_say(path, *opts, mnt=mnt)
        assert len(out) == 1, out
        line = out[0]
        per = " per rank" if "--ranks" in opts else ""
        for want in ["mounted %s: " % mnt,
                     "%d batches per epoch%s" % (d["batches_per_epoch"],
                                                 per),
                     "serve mode %s" % d["serve_mode"],
                     seed or "seed %d (random" % d["seed"],
                     ", log %s" % log]:
            assert want in line, (opts, want, line)
        assert log.endswith(".log") and os.path.exists(log), log
        assert warnings == [], warnings


def options_without_effect_warn(path):
    n = 20
    subset = os.path.join(TMP, "subset.txt")
    weights = os.path.join(TMP, "weights.txt")
    state = os.path.join(TMP, "gen.state")
    open(subset, "w").write("3\n1\n4\n")
    open(weights, "w").write("1\n" * n)
    g = torch.Generator().manual_seed(5)
    open(state, "wb").write(g.get_state().numpy().tobytes())
    cases = [
        (["--seed", 3], ["--seed: no effect: the order is sequential"]),
        (["--world-size", 2, "--seed", 3],
         ["--seed: no effect: DistributedSampler without --shuffle"]),
        (["--shuffle", "--generator-state", state, "--seed", 3],
         ["--seed: no effect: the generator starts from the "
          "--generator-state file"]),
        (["--subset", subset, "--shuffle"], ["--shuffle: no effect: "
                                             "--subset"]),
        (["--weights", weights, "--replacement"],
         ["--replacement: no effect: WeightedRandomSampler"]),
        (["--torch-compat", "2.7"], ["--torch-compat: no effect"]),
        (["--cache-gb", "0.05"],
         ["--cache-gb: no effect: every source is local"]),
        (["--cache-dir", os.path.join(TMP, "cache")],
         ["--cache-dir: no effect: every source is local"]),
        (["--s3-endpoint", "http://127.0.0.1:9"],
         ["--s3-endpoint: no effect: no source is s3://"]),
        # the torch at hand (batchfs.mount() passes it): never warned of
        (["--torch-version", "2.13.0"], []),
        (["--shuffle", "--seed", 3], []),
        (["--world-size", 2, "--shuffle", "--seed", 3], []),
        (["--shuffle", "--replacement", "--torch-compat", "2.7"], []),
        (["--subset", subset, "--seed", 3], []),
    ]
    for opts, want in cases:
        _, warnings, _, log = mount_and_say(path, *opts)
        assert len(warnings) == len(want), (opts, warnings)
        for w, prefix in zip(warnings, want):
            assert w.startswith(prefix), (opts, w)
            assert w in open(log).read(), (opts, w, log)


def hidden_files_warn(path):
    mnt = os.path.join(TMP, "full")
    os.makedirs(mnt)
    open(os.path.join(mnt, "mine.txt"), "w").write("x")
    _, warnings, _, _ = mount_and_say(path, mnt=mnt)
    assert warnings == ["%s is not empty: its 1 entry is hidden while it "
                        "is mounted" % mnt], warnings
    assert os.listdir(mnt) == ["mine.txt"]


def small_budget_for_prefetch_warns():
    """Batches of 400 KiB (4 KiB header + 16 rows of 25 KiB): --cache-mb 1
    holds two. --prefetch 4 with --cache-mb 1 prefetches at most one
    ahead: a warning says so and how much would hold them; a budget that
    holds fewer than two prefetches nothing: the warning says that; the
    default --prefetch (not asked for) warns only then."""
    big = os.path.join(TMP, "big.pt")
    torch.save({"x": torch.zeros(64, 25 * 1024, dtype=torch.uint8)}, big)
    batch = 4096 + 16 * 25 * 1024
    for opts, want in [
            (["--cache-mb", 1, "--prefetch", 4],
             "--cache-mb 1 holds 2 batches of %d bytes: fewer than "
             "--prefetch 4 ahead of each of 1 reader are prepared (use "
             "--cache-mb 2 or more" % batch),
            (["--cache-mb", 1, "--prefetch", 1], None),
            (["--cache-mb", 1], None),
            (["--cache-mb", 1, "--batch-size", 48, "--prefetch", 2],
             "--cache-mb 1 holds not one batch of %d bytes: --prefetch 2 "
             "prefetches nothing (use --cache-mb 4 or more"
             % (4096 + 48 * 25 * 1024)),
            (["--cache-mb", 1, "--batch-size", 48], "--cache-mb 1 holds "
             "not one batch")]:
        opts = ["--batch-size", 16] + opts if "--batch-size" not in opts \
            else opts
        _, warnings, _, log = mount_and_say(big, *opts)
        if want is None:
            assert warnings == [], (opts, warnings)
        else:
            assert len(warnings) == 1 and warnings[0].startswith(want), \
                (opts, warnings)
            assert warnings[0] in open(log).read()


def sources_are_absolute(path):
    mnt = os.path.join(TMP, "rel")
    os.makedirs(mnt)
    p = subprocess.run([ml.BATCHFS, "mount", os.path.basename(path), "rel"],
                       cwd=os.path.dirname(path), capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    ml._mounts.append(mnt)
    assert info(mnt)["sources"] == [os.path.realpath(path)], info(mnt)
    assert ml.umount(mnt).returncode == 0


def main():
    path = os.path.join(TMP, "d.pt")
    torch.save({"x": torch.arange(40).reshape(20, 2)}, path)
    one_line_says_what_was_mounted(path)
    options_without_effect_warn(path)
    hidden_files_warn(path)
    small_budget_for_prefetch_warns()
    sources_are_absolute(path)
    print("ok")


main()
