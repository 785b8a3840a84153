#!/usr/bin/python3
"""The Python API given the wrong path says which one it wants, with an
example that works:
- batchfs.Batches and batchfs.IterableDataset want a mount's root: given
  an epoch's directory, epoch/, a batch file, rank/R/ or rank/R/epoch/N
  of a mount of several ranks, the ValueError names the root and an
  example call (with the epoch= and rank= the path meant), and that call
  reads what the path held; a directory that is no mount (or holds a
  dataset.json of its own) is a ValueError, a missing one a
  FileNotFoundError, each naming the path and what to give instead;
- epoch=-1 is a ValueError, in the constructor, set_epoch(),
  load_state_dict() and read() (and batchfs.DataLoader.set_epoch());
- read_batch of a file that is no batch file (dataset.json, stats, the
  README, the archive, an empty file, a cut batch, a bad header) is a
  ValueError naming the file and saying it is not one; of a directory, a
  ValueError naming a batch file in it; a safetensors file of any other
  writer still reads;
- batchfs_loader.Loader wants an epoch's directory: given the mount's
  root, epoch/ or rank/R/, the LoaderError names one
  (root/epoch/0, root/rank/R/epoch/0), and that one opens."""
import json
import os
import re
import sys

import mountlib as ml

import numpy as np
import torch

import batchfs

ml.require_fuse()
# the built library (BATCHFS_LOADER_LIB), re-executed with the sanitizer
# runtimes preloaded under a SANITIZE= build
import loader_testlib  # noqa: E402,F401
import batchfs_loader  # noqa: E402

TMP = ml.TMP
N, B = 40, 4
failures = []


def raises(errtype, fn, *args, **kw):
    """The text of the errtype fn(*args, **kw) raises; a failure (and
    None) when it raises nothing or something else."""
    try:
        fn(*args, **kw)
    except errtype as e:
        return str(e)
    except Exception as e:       # noqa: BLE001 (the failure to report)
        failures.append("%s%r: %s instead of %s: %s" % (
            getattr(fn, "__qualname__", fn), args, type(e).__name__,
            errtype.__name__, e))
        return None
    failures.append("%s%r: no %s" % (getattr(fn, "__qualname__", fn), args,
                                     errtype.__name__))
    return None


def expect(errtype, words, fn, *args, **kw):
    """fn(...) raises errtype whose text holds every one of 'words'."""
    text = raises(errtype, fn, *args, **kw)
    if text is not None:
        missing = [w for w in words if w not in text]
        if missing:
            failures.append("%s%r: %r lacks %r" % (fn.__qualname__, args,
                                                    text, missing))
    return text


def same_batch(a, b):
    return a.keys() == b.keys() and all(
        np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


def example_reads(text, want):
    """The example call at the end of 'text' (after "e.g. ") builds an
    object whose first batch is 'want'."""
    m = re.search(r"e\.g\. (batchfs\.(?:Batches|IterableDataset)\(.*\))$",
                  text or "")
    if not m:
        failures.append("no example call in %r" % text)
        return
    obj = eval(m.group(1), {"batchfs": batchfs})
    first = next(iter(obj))
    if not same_batch(first, want):
        failures.append("%s does not read what the path held" % m.group(1))


def mounts():
    path = os.path.join(TMP, "d.pt")
    torch.save({"x": torch.arange(N * 2).reshape(N, 2),
                "y": torch.arange(N)}, path)
    _, one = ml.mount(path, os.path.join(TMP, "one"), "--batch-size", B,
                      "--shuffle", "--seed", 5)
    _, ranks = ml.mount(path, os.path.join(TMP, "ranks"), "--batch-size", B,
                        "--shuffle", "--world-size", 2, "--ranks", "all")
    return path, one, ranks


def root_wanted(api, one, ranks):
    """api (Batches or IterableDataset) given paths inside a mount, or
    no mount's."""
    name = "batchfs." + api.__name__
    for path, root, example, first in [
            (one + "/epoch/3", one, "%s(%r, epoch=3)" % (name, one),
             one + "/epoch/3/batch_0"),
            (one + "/epoch", one, "%s(%r)" % (name, one),
             one + "/epoch/0/batch_0"),
            (one + "/epoch/2/batch_0", one, "%s(%r, epoch=2)" % (name, one),
             one + "/epoch/2/batch_0"),
            (ranks + "/rank/1", ranks, "%s(%r, rank=1)" % (name, ranks),
             ranks + "/rank/1/epoch/0/batch_0"),
            (ranks + "/rank/1/epoch/2", ranks,
             "%s(%r, epoch=2, rank=1)" % (name, ranks),
             ranks + "/rank/1/epoch/2/batch_0")]:
        text = expect(ValueError, [path, "inside the batchfs mount at " +
                                   root, "wants the mount's root", example],
                      api, path)
        if text is not None:
            example_reads(text, batchfs.read_batch(first))
    plain = os.path.join(TMP, "plain")
    os.makedirs(plain, exist_ok=True)
    expect(ValueError, [plain, "is not a batchfs mount",
                        name + "('/mnt/data')",
                        "batchfs mount data.pt /mnt/data"], api, plain)
    foreign = os.path.join(TMP, "foreign")
    os.makedirs(foreign, exist_ok=True)
    with open(foreign + "/dataset.json", "w") as f:
        json.dump({"name": "not batchfs's"}, f)
    expect(ValueError, [foreign, "is not a batchfs mount"], api, foreign)
    missing = os.path.join(TMP, "missing")
    expect(FileNotFoundError, [missing, "no such directory",
                               "batchfs mount"], api, missing)


def negative_epoch(one):
    expect(ValueError, ["epoch -1"], batchfs.Batches, one, epoch=-1)
    expect(ValueError, ["epoch -1"], batchfs.IterableDataset, one, epoch=-1)
    b = batchfs.Batches(one)
    expect(ValueError, ["epoch -1"], b.set_epoch, -1)
    expect(ValueError, ["epoch -1"], b.load_state_dict,
           {"epoch": -1, "batch": 0})
    expect(ValueError, ["epoch -1"], b.read, -1, 0)
    if b.state_dict() != {"epoch": 0, "batch": 0}:
        failures.append("a refused epoch moved the state: %r"
                        % b.state_dict())
    loader = batchfs.DataLoader(batchfs.IterableDataset(one))
    expect(ValueError, ["epoch -1"], loader.set_epoch, -1)


def not_batch_files(path, one):
    good = open(one + "/epoch/0/batch_0", "rb").read()
    n = int.from_bytes(good[:8], "little")
    cases = {"empty": b"", "cut": good[:8 + n + 5],
             "header": good[:8] + b"[" + good[9:],
             "offsets": good[:8] + good[8:8 + n].replace(
                 b'"data_offsets":[0,', b'"data_offsets":[9,') + good[8 + n:]}
    assert cases["offsets"] != good, "no data_offsets to spoil"
    files = [one + "/dataset.json", one + "/stats", one + "/README", path]
    for name, data in cases.items():
        files.append(os.path.join(TMP, name + ".st"))
        with open(files[-1], "wb") as f:
            f.write(data)
    for f in files:
        for dev in (None, "cpu"):
            for zc in (True, False):
                expect(ValueError, [f, "is not a batch file"],
                       batchfs.read_batch, f, device=dev, zero_copy=zc)
    expect(ValueError, [one + "/epoch/0", "is a directory",
                        one + "/epoch/0/batch_0"],
           batchfs.read_batch, one + "/epoch/0")
    other = os.path.join(TMP, "other.st")
    ml.write_safetensors(other, {"a": np.arange(6, dtype=np.int16)})
    got = batchfs.read_batch(other)
    assert np.array_equal(got["a"], np.arange(6)), got


def epoch_dir_wanted(one, ranks):
    for path, want in [(one, one + "/epoch/0"),
                       (one + "/epoch", one + "/epoch/0"),
                       (ranks, ranks + "/rank/0/epoch/0"),
                       (ranks + "/rank/1", ranks + "/rank/1/epoch/0")]:
        text = expect(batchfs_loader.LoaderError,
                      [path, "not an epoch's directory", repr(want)],
                      batchfs_loader.Loader, path, device="cpu")
        if text is not None:
            with batchfs_loader.Loader(want, device="cpu") as loader:
                assert len(loader) == len(os.listdir(want)), want


def main():
    path, one, ranks = mounts()
    for api in (batchfs.Batches, batchfs.IterableDataset):
        print("---", api.__name__)
        root_wanted(api, one, ranks)
    print("--- epoch=-1")
    negative_epoch(one)
    print("--- read_batch")
    not_batch_files(path, one)
    print("--- batchfs_loader.Loader")
    epoch_dir_wanted(one, ranks)
    return ml.finish(failures)


sys.exit(main())
