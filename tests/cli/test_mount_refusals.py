#!/usr/bin/python3
"""`batchfs mount` refusals point the right way (nothing is mounted, so
no FUSE is needed):
- --torch-compat with a torch version says which value covers it and
  what each value covers;
- a --rng-state or --generator-state file of the wrong size names the
  option, the file, its size and the 5056 bytes a state has;
- refusals name the option the user gave, never an internal name
  ("sampler 0", "order options", "subset indices", "generator state");
- an .npz written by np.savez(f, *arrays) (samples of different lengths)
  suggests `batchfs pack -o OUT.pt NAME=@FILE.npz`, and that command
  works: it packs the list as one ragged field."""
import json
import os
import re
import subprocess

import numpy as np
import torch

TMP = os.environ.get("BFS_TEST_TMP") or "/tmp"
BATCHFS = os.environ.get("BATCHFS") or os.path.abspath("build/batchfs")
INTERNAL = re.compile(r"sampler \d|order options|subset indices|"
                      r"generator state:|(^|: )weights:")


def run(*args):
    return subprocess.run([BATCHFS, *map(str, args)], capture_output=True,
                          text=True)


def refused(rc, opts, source, mnt):
    p = run("mount", *opts, source, mnt)
    assert p.returncode == rc, (opts, p.returncode, p.stderr)
    assert p.stdout == "", (opts, p.stdout)
    first = p.stderr.splitlines()[0]
    assert not INTERNAL.search(p.stderr), (opts, p.stderr)
    return first


def torch_compat_says_which_value(src, mnt):
    """--torch-compat takes a model; a torch version given there is
    refused naming --torch-version and the model that serves it."""
    all_ = ("1.13 is the order of torch 1.13 and 2.0, 2.1 that of 2.1 to "
            "2.6, 2.7 that of 2.7 and later")
    for arg, want in [("2.0", "use --torch-version 2.0, or --torch-compat "
                       "1.13"),
                      ("2.6.0", "use --torch-version 2.6.0, or "
                       "--torch-compat 2.1"),
                      ("2.8", "use --torch-version 2.8, or --torch-compat "
                       "2.7"),
                      ("3.1", "use --torch-version 3.1, or --torch-compat "
                       "2.7"),
                      ("1.12", "not 1.13, 2.1 or 2.7"),
                      ("latest", "not 1.13, 2.1 or 2.7")]:
        first = refused(2, ["--torch-compat", arg], src, mnt)
        assert first.startswith("batchfs mount: --torch-compat %s: %s"
                                % (arg, want)), first
        assert all_ in first, first
    for arg in ["1.12.1", "latest", "2", ""]:
        first = refused(2, ["--torch-version", arg], src, mnt)
        assert first.startswith("batchfs mount: --torch-version %s: not a "
                                "torch version" % arg), first


def state_files_of_the_wrong_size(src, mnt):
    g = torch.Generator().manual_seed(1)
    good = g.get_state().numpy().tobytes()
    assert len(good) == 5056
    for size in [2_000_000, 5057, 100, 0]:
        path = os.path.join(TMP, "state-%d" % size)
        with open(path, "wb") as f:
            f.write((good * (size // len(good) + 1))[:size])
        for opt in ["--rng-state", "--generator-state"]:
            first = refused(1, ["--shuffle", opt, path], src, mnt)
            assert first.startswith("batchfs mount: %s %s: %d bytes; "
                                    % (opt, path, size)), first
            assert "5056 bytes of torch.Generator.get_state() or " \
                "torch.get_rng_state()" in first, first


def refusals_name_the_option(src, mnt):
    state = os.path.join(TMP, "gen.state")
    open(state, "wb").write(
        torch.Generator().manual_seed(1).get_state().numpy().tobytes())
    subset = os.path.join(TMP, "subset.txt")
    open(subset, "w").write("1\n200\n")
    weights = os.path.join(TMP, "weights.txt")
    open(weights, "w").write("1\n2\n")
    empty = os.path.join(TMP, "empty.txt")
    open(empty, "w").close()
    for rc, opts, want in [
            (2, ["--generator-state", state],
             "--generator-state: the order is sequential"),
            (2, ["--world-size", 2, "--generator-state", state],
             "--generator-state: DistributedSampler (--world-size) draws "
             "from no given generator"),
            (2, ["--world-size", 2, "--rank", 5],
             "--rank 5: not below --world-size 2 (ranks are 0 .. 1)"),
            (2, ["--subset", subset],
             "--subset %s: index 200 at position 1 is outside the dataset "
             "(100 samples: 0 .. 99)" % subset),
            (2, ["--weights", weights],
             "--weights %s: 2 weights for a dataset of 100 samples" %
             weights),
            (2, ["--weights", empty],
             "--weights %s: WeightedRandomSampler needs num_samples >= 1"
             % empty),
            (2, ["--shuffle", "--num-samples", 2**63],
             "--num-samples: num_samples=%d is too large" % 2**63)]:
        first = refused(rc, opts, src, mnt)
        assert first.startswith("batchfs mount: " + want), (opts, first)


def list_npz_suggests_pack(mnt):
    lst = os.path.join(TMP, "lst.npz")
    np.savez(lst, *[np.arange(i + 1) for i in range(4)])
    p = run("mount", lst, mnt)
    assert p.returncode == 1, p
    hint = "`batchfs pack -o OUT.pt NAME=@%s`" % lst
    assert hint in p.stderr, p.stderr
    p = run("pack", "-o", os.path.join(TMP, "x.pt"), "--from-npz", lst)
    assert p.returncode == 1 and hint in p.stderr, p.stderr
    # the suggestion works as given
    out = os.path.join(TMP, "OUT.pt")
    cmd = hint.strip("`").split()[1:]
    cmd[cmd.index("OUT.pt")] = out
    p = run(*cmd)
    assert p.returncode == 0, p.stderr
    p = run("inspect", "--json", out)
    assert json.loads(p.stdout)["fields"] == [
        {"name": "NAME", "dtype": "int64", "shape": [4, None],
         "ragged": True, "values_rows": 10, "max_length": 4}], p.stdout
    # same lengths: nothing to suggest (it mounts as fields arr_0 ...)
    same = os.path.join(TMP, "same.npz")
    np.savez(same, np.zeros(3), np.ones(3))
    p = run("pack", "-o", os.path.join(TMP, "y.pt"), "--from-npz", same)
    assert p.returncode == 0 and "NAME=@" not in p.stderr, p.stderr


def main():
    src = os.path.join(TMP, "d.pt")
    torch.save({"x": torch.arange(200).reshape(100, 2)}, src)
    mnt = os.path.join(TMP, "never-mounted")
    os.makedirs(mnt)
    torch_compat_says_which_value(src, mnt)
    state_files_of_the_wrong_size(src, mnt)
    refusals_name_the_option(src, mnt)
    list_npz_suggests_pack(mnt)
    assert os.listdir(mnt) == []
    print("ok")


main()
