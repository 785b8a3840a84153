#!/usr/bin/python3
"""An archive as people save it (real torch, real mounts): CIFAR's
{'data': N x 3 x 32 x 32 uint8, 'targets': N int64, 'classes': [...],
'mean': a tensor of 3 floats} is served. The sample count is the first
dimension shared by the most fields too large to be metadata, then by the
most fields (fs/README.md: the sample count);
a tensor of another first dimension (the mean) is metadata:
- mount serves data and targets, the batches equal torch's rows;
  dataset.json's "metadata" has classes and the mean's values; the
  warning names 'mean';
- inspect describes the same fields, and --fields as mount has it;
- --fields data,targets keeps the mean in dataset.json;
- statistics that outnumber the fields (a mean, std, min and max of 3
  beside data and targets) do not outvote them: only data is too large
  to be metadata;
- a tie (two fields of 100 samples and two of 50; one of 3 and one of 5)
  is refused by mount and inspect, naming the fields, their first
  dimensions and the --fields to give.
Every wait is bounded; a mount is unmounted whatever happens."""
import json
import os
import subprocess
import sys

import mountlib as ml

try:
    import torch
except ImportError:
    ml.skip("torch is not installed")

ml.require_fuse()
TMP = ml.TMP
N, B = 20, 4
WAIT = 120  # seconds any command may take
failures = []


def expect(what, cond, detail):
    if cond:
        print("ok: %s" % what)
    else:
        failures.append("%s: %s" % (what, detail))


def save(name, obj):
    path = os.path.join(TMP, name + ".pt")
    torch.save(obj, path)
    return path


def mount(path, *opts):
    """(returncode, stderr, dataset.json or {}, batches read or [])."""
    mnt = os.path.join(TMP, "mnt_rows")
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.run([ml.BATCHFS, "mount", "--batch-size", str(B),
                        *opts, path, mnt], capture_output=True, text=True,
                       timeout=WAIT)
    if p.returncode != 0:
        return p.returncode, p.stderr, {}, []
    ml._mounts.append(mnt)
    try:
        info = json.load(open(os.path.join(mnt, "dataset.json")))
        batches = [ml.read_batch("%s/epoch/0/batch_%d" % (mnt, k))[1]
                   for k in range(N // B)]
    finally:
        ml.umount(mnt)
    return 0, p.stderr, info, batches


def inspect(path, *opts):
    p = subprocess.run([ml.BATCHFS, "inspect", "--json", *opts, path],
                       capture_output=True, text=True, timeout=WAIT)
    return p.returncode, p.stderr, (json.loads(p.stdout)
                                    if p.returncode == 0 else {})


def served(what, path, data, targets, *opts):
    rc, err, info, batches = mount(path, *opts)
    if rc:
        failures.append("%s: mount failed: %s" % (what, err))
        return err, {}
    names = sorted(f["name"] for f in info["fields"])
    rows = all((b["data"] == data[k * B:(k + 1) * B].numpy()).all() and
               (b["targets"] == targets[k * B:(k + 1) * B].numpy()).all()
               for k, b in enumerate(batches))
    expect("%s: fields data, targets; the batches are the rows" % what,
           names == ["data", "targets"] and len(batches) == N // B and rows,
           (names, len(batches)))
    return err, info


def cifar(g):
    data = torch.randint(0, 255, (N, 3, 32, 32), dtype=torch.uint8,
                         generator=g)
    targets = torch.randint(0, 10, (N,), generator=g)
    classes = ["airplane", "automobile", "bird"]
    mean = torch.tensor([0.4914, 0.4822, 0.4465])
    path = save("cifar", {"data": data, "targets": targets,
                          "classes": classes, "mean": mean})
    for opts in [(), ("--fields", "data,targets")]:
        what = "cifar %s" % " ".join(opts)
        err, info = served(what, path, data, targets, *opts)
        meta = info.get("metadata", {})
        expect("%s: classes and the mean's values in dataset.json" % what,
               meta.get("classes") == classes and
               meta.get("mean") == mean.tolist(), meta)
        warn = [ln for ln in err.splitlines() if "not served" in ln]
        expect("%s: the warning names 'mean' and the sample count" % what,
               len(warn) == 1 and "'mean' (a float32 tensor [3])" in warn[0]
               and "not the %d samples" % N in warn[0], err)
        rc, err, desc = inspect(path, *opts)
        expect("inspect %s: fields data, targets of %d samples" % (opts, N),
               rc == 0 and desc.get("samples") == N and
               [f["name"] for f in desc["fields"]] == ["data", "targets"],
               (rc, err, desc))
    rc, err, desc = inspect(path, "--fields", "targets")
    expect("inspect --fields targets",
           rc == 0 and [f["name"] for f in desc["fields"]] == ["targets"],
           (rc, err, desc))
    # statistics outnumber the fields: 2 fields of N and 4 of 3; only N's
    # hold a tensor too large to be metadata, so N is the count
    stats = {"mean": mean, "std": torch.tensor([0.247, 0.243, 0.261]),
             "min": torch.zeros(3), "max": torch.ones(3)}
    path = save("cifar_stats", dict(data=data, targets=targets, **stats))
    _, info = served("mean, std, min and max", path, data, targets)
    meta = info.get("metadata", {})
    expect("mean, std, min and max: their values",
           meta == {k: t.tolist() for k, t in stats.items()}, meta)


def refused(what, path, words, *opts):
    rc, err, _, _ = mount(path, *opts)
    expect("mount refuses %s" % what,
           rc != 0 and all(w in err for w in words), (rc, err, words))
    rc, err, _ = inspect(path, *opts)
    expect("inspect refuses %s" % what,
           rc == 1 and all(w in err for w in words), (rc, err, words))


def ties(g):
    path = save("tie", {"train": {"x": torch.randn(100, 2, generator=g),
                                  "y": torch.zeros(100)},
                        "test": {"x": torch.randn(50, 2, generator=g),
                                 "y": torch.zeros(50)}})
    refused("two fields of 100 and two of 50", path,
            ["field 'train.x' has 100 samples", "field 'test.y' has 50",
             "--fields test, or --fields train"])
    rc, err, desc = inspect(path, "--fields", "train")
    expect("the --fields named serves one count",
           rc == 0 and desc.get("samples") == 100, (rc, err, desc))
    path = save("tie35", {"a": torch.zeros(3), "b": torch.zeros(5)})
    refused("one field of 3 and one of 5", path,
            ["field 'a' has 3 samples", "field 'b' has 5 samples",
             "--fields a, or --fields b"])


def main():
    g = torch.Generator().manual_seed(7)
    cifar(g)
    ties(g)
    return ml.finish(failures)


sys.exit(main())
