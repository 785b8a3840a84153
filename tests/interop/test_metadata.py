#!/usr/bin/python3
"""Real torch.save datasets carry more than tensors (archives written by
real torch, read through real mounts):
- values that are not tensors (str, int, float, None, containers of
  those, numpy scalars) beside the tensors are skipped, with one warning
  line naming them; the tensors are served exactly as torch's DataLoader
  gives them;
- a nested dict of tensors gives dotted names ({"data": {"x": x}}:
  data.x); `--fields NAME[,NAME...]` selects fields, NAME naming a tensor
  (kept as named) or a dict of them (its tensors named within it:
  --fields train serves train.x as x), or a ragged pair;
- train and test dicts of different lengths: the mount says to pick one
  with --fields; --fields of a name that is not there, or two that give
  one name, are clear errors;
- a numpy array where a field would be: "field 'fn' is a numpy array:
  save it with torch.from_numpy(...)", and it is never unpickled (a
  pickle whose numpy global would run code if it were: same message);
- a list holding tensors is refused with advice;
- the pickle allowlist stays closed: os.system and friends are still
  refused by name, also nested in metadata."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib as ml  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from fixtures import DictDataset as Dict  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

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
    dict 'want'; returns the mount's stderr."""
    p, mnt = ml.mount(path, None, "--batch-size", B, "--shuffle", "--seed",
                      SEED, *opts, check=False)
    if p.returncode != 0:
        failures.append("%s: mount failed: %s" % (what, p.stderr))
        return p.stderr
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
    return p.stderr


def mount_fails(what, path, words, *opts):
    p, mnt = ml.mount(path, None, *opts, check=False)
    if p.returncode == 0:
        ml.umount(mnt)
        failures.append("%s: mounted" % what)
    elif not all(w in p.stderr for w in words):
        failures.append("%s: %r lacks %s" % (what, p.stderr, words))
    else:
        print("ok: %s: %s" % (what, p.stderr.strip().splitlines()[0]))


def main():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 3, generator=g)
    y = torch.randint(0, 5, (N,), generator=g)
    meta = {"name": "demo", "classes": ["a", "b"], "scale": 0.5,
            "nested": {"k": None, "t": (1, 2)}}
    # metadata beside the tensors: skipped, one warning naming them
    path = save("meta", {"x": x, "meta": meta, "n": N, "y": y,
                         "mean": np.float64(0.25), "note": None})
    err = served_equal("metadata skipped", path, {"x": x, "y": y})
    warn = [ln for ln in err.splitlines() if "not served" in ln]
    if len(warn) != 1 or not all(w in warn[0] for w in [
            "'meta' (a dict)", "'n' (an int)", "'mean' (a numpy scalar)",
            "'note' (None)", "4 values"]):
        failures.append("metadata warning: %r" % err)
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
                ["both be field 'x'"], "--fields", "train,test")
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
    # numpy arrays: named, with advice, never unpickled
    path = save("np", {"x": x, "fn": np.arange(N)})
    mount_fails("a numpy array", path,
                ["field 'fn' is a numpy array",
                 "torch.from_numpy(...)"])
    path = save("lst", {"x": [x[i] for i in range(N)], "y": y})
    mount_fails("a list of tensors", path,
                ["field 'x' is a list holding tensors", "torch.stack"])
    # the allowlist stays closed: a callable that would run code, where a
    # field would be or inside metadata, is refused by name, never run
    proof = os.path.join(TMP, "ran")
    for where, obj in [("as a field", {"x": x, "fn": Evil(proof)}),
                       ("in metadata", {"x": x, "meta": {"a": [Evil(proof)]}})]:
        mount_fails("os.system " + where, save("evil", obj),
                    ["refused global 'posix system'"])
    if os.path.exists(proof):
        failures.append("a pickled os.system ran")
    return ml.finish(failures)


sys.exit(main())
