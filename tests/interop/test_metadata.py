#!/usr/bin/python3
"""Real torch.save datasets carry more than tensors (archives written by
real torch, read through real mounts):
- values that are not tensors (str, int, float, None, containers of
  those, numpy scalars and arrays, 0-dim tensors: a mean, a std) beside
  the tensors are skipped, with one warning line naming them; the tensors
  are served exactly as torch's DataLoader gives them; dataset.json gives
  the skipped values under "metadata" (key path -> JSON: a 0-dim tensor or
  a numpy scalar as its number, what JSON cannot hold as {"__type__": T});
- objects of globals outside the pickle allowlist (argparse.Namespace,
  datetime, pathlib.PosixPath, a class of the user's, os.system(...)) in
  the metadata are kept inert, never called: the archive is served (with
  --fields x,y too), the warning names the key and the global and says
  torch.load(weights_only=True) refuses the archive; --fields naming one
  is refused naming it;
- a nested dict of tensors gives dotted names ({"data": {"x": x}}:
  data.x); `--fields NAME[,NAME...]` selects fields, NAME naming a tensor
  (kept as named) or a dict of them (its tensors named within it:
  --fields train serves train.x as x), or a ragged pair; NAME=NEWNAME
  renames (a tuple archive's fields 0 and 1, as torchvision's MNIST
  saves them: --fields 0=image,1=label), for every kind of source;
- train and test dicts of different lengths: the mount says to pick one
  with --fields; --fields of a name that is not there, or two that give
  one name, are clear errors naming both;
- a list holding tensors is refused with advice."""
import argparse
import datetime
import json
import os
import pathlib
import sys

import mountlib as ml
from fixtures import DictDataset as Dict

import numpy as np
import torch
from torch.utils.data import DataLoader

ml.require_fuse()
TMP = ml.TMP
failures = []
N, B, SEED = 30, 4, 3


class Evil:
    """Pickles as os.system(...): what a hostile archive would hold."""

    def __init__(self, proof):
        self.proof = proof

    def __reduce__(self):
        return (os.system, ("touch " + self.proof,))


def torch_batches(fields):
    loader = DataLoader(Dict(fields), batch_size=B, shuffle=True,
                        generator=torch.Generator().manual_seed(SEED))
    return list(loader)


def save(name, obj):
    path = os.path.join(TMP, name + ".pt")
    torch.save(obj, path)
    return path


def served_equal(what, path, want, *opts):
    """Mount path (with opts); its epoch 0 equals torch's batches of the
    dict 'want'; returns (the mount's stderr, its dataset.json)."""
    p, mnt = ml.mount(path, None, "--batch-size", B, "--shuffle", "--seed",
                      SEED, *opts, check=False)
    if p.returncode != 0:
        failures.append("%s: mount failed: %s" % (what, p.stderr))
        return p.stderr, {}
    info = {}
    try:
        info = json.load(open(mnt + "/dataset.json"))
        names = sorted(f["name"] for f in info["fields"])
        assert names == sorted(want), (names, sorted(want))
        for k, ref in enumerate(torch_batches(want)):
            _, arrs = ml.read_batch("%s/epoch/0/batch_%d" % (mnt, k))
            for name, t in ref.items():
                assert (arrs[name] == ml.torch_np(t)).all(), (k, name)
        print("ok: %s" % what)
    except AssertionError as ex:
        failures.append("%s: %r" % (what, ex))
    finally:
        ml.umount(mnt)
    return p.stderr, info


def expect(what, cond, detail):
    if cond:
        print("ok: %s" % what)
    else:
        failures.append("%s: %s" % (what, detail))


def mount_fails(what, path, words, *opts):
    p, mnt = ml.mount(path, None, *opts, check=False)
    if p.returncode == 0:
        ml.umount(mnt)
        failures.append("%s: mounted" % what)
    elif not all(w in p.stderr for w in words):
        failures.append("%s: %r lacks %s" % (what, p.stderr, words))
    else:
        print("ok: %s: %s" % (what, p.stderr.strip().splitlines()[0]))


class Settings:
    """A class of the user's (pickled by reference: __main__.Settings)."""

    def __init__(self):
        self.lr = 0.1


def metadata_and_objects(x, y):
    """What people save beside their tensors: 0-dim tensors, objects of
    globals outside the allowlist, a numpy array, plain values."""
    args = argparse.Namespace(lr=0.1, epochs=3)
    path = save("people", {
        "x": x, "y": y, "mean": torch.tensor(0.5), "std": torch.tensor(0.25),
        "args": args, "when": datetime.datetime(2024, 1, 2, 3, 4, 5),
        "path": pathlib.PosixPath("/a"), "obj": Settings(),
        "arr": np.zeros(3), "classes": ["a", "b"], "n": 30,
        "np_mean": np.float64(0.125)})
    for opts in [(), ("--fields", "x,y")]:
        err, info = served_equal("what people save %s" % " ".join(opts),
                                 path, {"x": x, "y": y}, *opts)
        warn = [ln for ln in err.splitlines() if "not served" in ln]
        words = ["'mean' (a 0-dim tensor)","10 values",
                 "'args' (an object of global 'argparse Namespace')",
                 "'when' (an object of global 'datetime datetime')",
                 "'path' (an object of global 'pathlib PosixPath')",
                 "'arr' (a numpy array: save it with torch.from_numpy",
                 "'__main__ Settings'", "kept inert, never called",
                 "torch.load(weights_only=True) refuses this archive"]
        expect("the warning names the metadata and its globals",
               len(warn) == 1 and all(w in warn[0] for w in words),
               "%r lacks some of %s" % (err, words))
        meta = info.get("metadata")
        want = {"mean": 0.5, "std": 0.25, "classes": ["a", "b"], "n": 30,
                "np_mean": 0.125,
                "args": {"__type__": "argparse.Namespace"},
                "when": {"__type__": "datetime.datetime"},
                "path": {"__type__": "pathlib.PosixPath"},
                "obj": {"__type__": "__main__.Settings"},
                "arr": {"__type__": "numpy.ndarray"}}
        expect("dataset.json's metadata", meta == want,
               "%r != %r" % (meta, want))
    for name, words in [
            ("mean", ["'mean' is metadata here (a 0-dim tensor)",
                      "dataset.json gives its value"]),
            ("args", ["'args' is metadata here (an object of global "
                      "'argparse Namespace')"]),
            ("arr", ["'arr' is metadata here (a numpy array: save it with "
                     "torch.from_numpy(...)"])]:
        mount_fails("--fields %s" % name, path, words, "--fields", name)
    # the mean/std pattern alone: metadata, with the --fields hint of the
    # dim-0 check never reached
    path = save("meanstd", {"x": x, "y": y, "mean": torch.tensor(0.5),
                            "std": torch.tensor([0.25]).squeeze()})
    err, info = served_equal("0-dim tensors beside the fields", path,
                             {"x": x, "y": y})
    expect("0-dim tensors: their values in dataset.json",
           info.get("metadata") == {"mean": 0.5, "std": 0.25} and
           "'mean' (a 0-dim tensor), 'std' (a 0-dim tensor)" in err,
           (info.get("metadata"), err))
    # a 0-dim tensor alone: no sample dimension, nothing to serve
    mount_fails("only 0-dim tensors", save("scalars",
                                           {"mean": torch.tensor(0.5)}),
                ["holds no tensor with a sample dimension"])


def evil_objects(x):
    """os.system(...) beside the tensors: inert metadata, never run; in a
    tensor's rebuild: refused naming the field."""
    proof = os.path.join(TMP, "ran")
    for where, obj in [("as a field", {"x": x, "fn": Evil(proof)}),
                       ("in metadata", {"x": x, "meta": {"a": [Evil(proof)]}})]:
        path = save("evil", obj)
        err, info = served_equal("os.system " + where + " is inert", path,
                                 {"x": x})
        expect("os.system %s: the warning names the global" % where,
               "'posix system'" in err and
               "torch.load(weights_only=True) refuses this archive" in err,
               err)
        if where == "as a field":
            expect("os.system as a field: its type in dataset.json",
                   info.get("metadata", {}).get("fn") ==
                   {"__type__": "posix.system"}, info.get("metadata"))
            mount_fails("--fields fn (os.system)", path,
                        ["'fn' is metadata here (an object of global "
                         "'posix system')"], "--fields", "fn")
    expect("a pickled os.system never ran", not os.path.exists(proof),
           "it ran")


def tuples_and_renames(g):
    """A tuple archive (torchvision's processed MNIST) gives fields 0 and
    1; NAME=NEWNAME renames any field, of every kind of source."""
    data = torch.randint(0, 255, (N, 28, 28), dtype=torch.uint8,
                         generator=g)
    targets = torch.randint(0, 10, (N,), generator=g)
    path = save("mnist", (data, targets))
    served_equal("a tuple archive: fields 0 and 1", path,
                 {"0": data, "1": targets})
    served_equal("--fields 0=image,1=label", path,
                 {"image": data, "label": targets},
                 "--fields", "0=image,1=label")
    p, mnt = ml.mount(path, None, "--fields", "0=image,1=label",
                      "--batch-size", B, check=False)
    readme, arrs = p.stderr, {}
    if p.returncode == 0:
        readme = open(mnt + "/README").read()
        _, arrs = ml.read_batch(mnt + "/epoch/0/batch_0")
        ml.umount(mnt)
    expect("renamed fields in the batch header",
           sorted(arrs) == ["image", "label"], sorted(arrs))
    expect("renamed fields in the README",
           "Options: --fields 0=image,1=label --batch-size" in readme,
           readme[:300])
    mount_fails("--fields with a NEWNAME given twice", path,
                ["'0=image' and '1=image' would both be field 'image'"],
                "--fields", "0=image,1=image")
    mount_fails("--fields renaming a NAME that is not there", path,
                ["'2' (in 2=image) is no field", "its tensors: 0, 1"],
                "--fields", "2=image")
    mount_fails("--fields with a NEWNAME that is a field", path,
                ["'0=1' and '1' would both be field '1'"],
                "--fields", "0=1,1")
    # a dict prefix renamed keeps the names within it
    tx = torch.randn(N, 3, generator=g)
    nest = save("nest_rename", {"train": {"x": tx, "y": targets}})
    served_equal("--fields train=tr", nest, {"tr.x": tx, "tr.y": targets},
                 "--fields", "train=tr")
    # every kind of source
    a = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
    b = np.arange(N, dtype=np.int64)
    npz = os.path.join(TMP, "kinds.npz")
    np.savez(npz, a=a, b=b)
    st = os.path.join(TMP, "kinds.safetensors")
    ml.write_safetensors(st, {"a": a, "b": b})
    npy_dir = os.path.join(TMP, "kinds_dir")
    os.makedirs(npy_dir, exist_ok=True)
    np.save(os.path.join(npy_dir, "a.npy"), a)
    np.save(os.path.join(npy_dir, "b.npy"), b)
    np.save(os.path.join(npy_dir, "mean.npy"), np.float32(0.5))
    for kind, src in [("npz", npz), ("safetensors", st), ("npy dir", npy_dir)]:
        _, info = served_equal(
            "--fields a=image,b on %s" % kind, src,
            {"image": torch.from_numpy(a), "b": torch.from_numpy(b)},
            "--fields", "a=image,b")
    expect("a 0-dim .npy is metadata", info.get("metadata") == {"mean": 0.5},
           info.get("metadata"))


def main():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 3, generator=g)
    y = torch.randint(0, 5, (N,), generator=g)
    meta = {"name": "demo", "classes": ["a", "b"], "scale": 0.5,
            "nested": {"k": None, "t": (1, 2)}}
    # metadata beside the tensors: skipped, one warning naming them
    path = save("meta", {"x": x, "meta": meta, "n": N, "y": y,
                         "mean": np.float64(0.25), "note": None})
    err, info = served_equal("metadata skipped", path, {"x": x, "y": y})
    warn = [ln for ln in err.splitlines() if "not served" in ln]
    if len(warn) != 1 or not all(w in warn[0] for w in [
            "'meta' (a dict)", "'n' (an int)", "'mean' (a numpy scalar)",
            "'note' (None)", "4 values"]):
        failures.append("metadata warning: %r" % err)
    want = {"meta": {"name": "demo", "classes": ["a", "b"], "scale": 0.5,
                     "nested": {"k": None, "t": [1, 2]}},
            "n": N, "mean": 0.25, "note": None}
    expect("metadata in dataset.json", info.get("metadata") == want,
           "%r != %r" % (info.get("metadata"), want))
    # nested dicts: dotted names, and --fields
    path = save("nest", {"data": {"x": x, "y": y}, "info": "v1"})
    served_equal("nested dict as data.x, data.y", path,
                 {"data.x": x, "data.y": y})
    served_equal("--fields data", path, {"x": x, "y": y}, "--fields", "data")
    served_equal("--fields data.y", path, {"data.y": y}, "--fields",
                 "data.y")
    tx, ty = torch.randn(7, 3, generator=g), torch.randint(0, 5, (7,))
    path = save("traintest", {"train": {"x": x, "y": y},
                              "test": {"x": tx, "y": ty}})
    mount_fails("train and test together", path,
                ["has 7 samples", "--fields train"])
    served_equal("--fields train", path, {"x": x, "y": y}, "--fields",
                 "train")
    served_equal("--fields test", path, {"x": tx, "y": ty}, "--fields",
                 "test")
    mount_fails("--fields of nothing", path,
                ["--fields: 'valid' is no field", "train.x"], "--fields",
                "valid")
    mount_fails("--fields giving one name twice", path,
                ["'train' and 'test' would both be field 'x'"], "--fields",
                "train,test")
    # a ragged pair in a dict, selected by its name
    vals = torch.arange(50, dtype=torch.int32)
    offs = torch.tensor([0] + sorted(torch.randint(0, 50, (N - 1,),
                                                   generator=g).tolist())
                        + [50], dtype=torch.int64)
    path = save("ragged", {"tok": {"values": vals, "offsets": offs},
                           "y": y})
    p, mnt = ml.mount(path, None, "--fields", "tok", "--batch-size", B)
    names = sorted(f["name"] for f in json.load(
        open(mnt + "/dataset.json"))["fields"])
    ml.umount(mnt)
    if names != ["tok", "tok.lengths"]:
        failures.append("--fields tok (ragged): %s" % names)
    else:
        print("ok: --fields tok selects the ragged pair tok.values + "
              "tok.offsets")
    p, mnt = ml.mount(path, None, "--fields", "tok=t,y", "--batch-size", B,
                      check=False)
    names = p.stderr
    if p.returncode == 0:
        names = sorted(f["name"] for f in json.load(
            open(mnt + "/dataset.json"))["fields"])
        ml.umount(mnt)
    expect("--fields tok=t renames the ragged pair",
           names == ["t", "t.lengths", "y"], names)
    # a numpy array beside the tensors: metadata, never unpickled
    path = save("np", {"x": x, "fn": np.arange(N)})
    err, _ = served_equal("a numpy array is metadata", path, {"x": x})
    expect("a numpy array: named with advice",
           "'fn' (a numpy array: save it with torch.from_numpy(...)" in err,
           err)
    path = save("lst", {"x": [x[i] for i in range(N)], "y": y})
    mount_fails("a list of tensors", path,
                ["field 'x' is a list holding tensors", "torch.stack"])
    metadata_and_objects(x, y)
    evil_objects(x)
    tuples_and_renames(g)
    return ml.finish(failures)


sys.exit(main())
