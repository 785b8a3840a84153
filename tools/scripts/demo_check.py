#!/usr/bin/python3
"""make demo's last word: check that epoch 0 of the mount is what the demo
says it is, and say which check ran.

Usage: demo_check.py MOUNT ARCHIVE BATCH_SIZE SEED

With torch: every batch of epoch 0 equals, byte for byte, the batch of
DataLoader(ds, batch_size=BATCH_SIZE, shuffle=True,
generator=torch.Generator().manual_seed(SEED)) over the archive's samples
(torch.load). Without torch (a fresh machine: make demo does not install
it) the order cannot be checked: every batch holds the archive's rows of
the samples its index file lists (the archive read with zipfile and
pickle, as numpy arrays), and the epoch's indices are each sample once.
Exit 0 and one line saying what was checked; exit 1 naming the first
batch and field that differ.
"""
import collections
import json
import os
import pickle
import sys
import zipfile

import numpy as np

# safetensors dtype -> numpy (README.md: the batch file): the table of the
# batchfs package of this source tree (it needs numpy only)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "loader", "python"))
from batchfs import NP  # noqa: E402

# torch storage class -> numpy dtype (the archives batchfs pack writes)
STORAGE = {"ByteStorage": "u1", "CharStorage": "i1", "ShortStorage": "<i2",
           "IntStorage": "<i4", "LongStorage": "<i8", "HalfStorage": "<f2",
           "FloatStorage": "<f4", "DoubleStorage": "<f8",
           "BoolStorage": "?", "BFloat16Storage": "<u2"}


def read_batch(path):
    """{name: numpy array} of a batch file, with json and numpy only."""
    with open(path, "rb", buffering=0) as f:
        buf = f.read()
    n = int.from_bytes(buf[:8], "little")
    head = json.loads(buf[8:8 + n])
    head.pop("__metadata__", None)
    return {name: np.frombuffer(buf, NP[t["dtype"]],
                                offset=8 + n + t["data_offsets"][0],
                                count=int(np.prod(t["shape"])))
            .reshape(t["shape"]) for name, t in head.items()}


class _TensorRefs(pickle.Unpickler):
    """A torch.save pickle read without torch: each tensor comes back as
    (storage class, storage key, offset, size, stride); nothing else is
    allowed."""

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, *rest: (
                storage[0], storage[1], offset, tuple(size), tuple(stride))
        if module == "torch" and name in STORAGE:
            return name
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise pickle.UnpicklingError("%s.%s is not a tensor" % (module, name))

    def persistent_load(self, pid):
        return pid[1], pid[2]     # ("storage", class, key, location, numel)


def archive_arrays(path):
    """{name: numpy array} of a torch.save archive of a dict of tensors."""
    with zipfile.ZipFile(path) as z:
        pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        base = pkl[:-len("data.pkl")]
        refs = _TensorRefs(z.open(pkl)).load()
        out = {}
        for name, (cls, key, offset, size, stride) in refs.items():
            dt = np.dtype(STORAGE[cls])
            data = np.frombuffer(z.read(base + "data/" + key), dt)
            out[name] = np.lib.stride_tricks.as_strided(
                data[offset:], size, [s * dt.itemsize for s in stride])
    return out


def batch_files(mnt):
    d = os.path.join(mnt, "epoch", "0")
    return [os.path.join(d, "batch_%d" % k) for k in range(len(os.listdir(d)))]


def differs(k, got, want):
    """None, or what differs between batch k and the expected arrays."""
    if sorted(got) != sorted(want):
        return "batch %d has fields %s, expected %s" % (k, sorted(got),
                                                        sorted(want))
    for name in sorted(want):
        w = np.ascontiguousarray(want[name])
        g = got[name]
        if g.shape != w.shape or g.tobytes() != w.tobytes():
            return "batch %d, field %r differs" % (k, name)
    return None


def with_torch(torch, mnt, archive, bs, seed):
    data = torch.load(archive)

    class Samples(torch.utils.data.Dataset):
        def __len__(self):
            return len(next(iter(data.values())))

        def __getitem__(self, i):
            return {k: v[i] for k, v in data.items()}

    call = ("DataLoader(ds, batch_size=%d, shuffle=True, generator="
            "torch.Generator().manual_seed(%d))" % (bs, seed))
    loader = torch.utils.data.DataLoader(
        Samples(), batch_size=bs, shuffle=True,
        generator=torch.Generator().manual_seed(seed))
    files = batch_files(mnt)
    if len(files) != len(loader):
        return 1, "epoch 0 has %d batches, %s has %d" % (
            len(files), call, len(loader))
    for k, (path, want) in enumerate(zip(files, loader)):
        bad = differs(k, read_batch(path),
                      {n: t.numpy() for n, t in want.items()})
        if bad:
            return 1, "%s: not %s's" % (bad, call)
    return 0, ("checked against torch %s: all %d batches of epoch 0 equal "
               "%s's, byte for byte" % (torch.__version__, len(files), call))


def without_torch(mnt, archive):
    arrays = archive_arrays(archive)
    n = len(next(iter(arrays.values())))
    files, seen = batch_files(mnt), []
    for k, path in enumerate(files):
        with open(os.path.join(mnt, "index", "0", "batch_%d" % k)) as f:
            idx = np.array([int(x) for x in f.read().split()])
        bad = differs(k, read_batch(path),
                      {name: a[idx] for name, a in arrays.items()})
        if bad:
            return 1, "%s from the archive's samples index/0/batch_%d " \
                "lists" % (bad, k)
        seen.append(idx)
    if not np.array_equal(np.sort(np.concatenate(seen)), np.arange(n)):
        return 1, "epoch 0 does not hold each of the %d samples once" % n
    return 0, ("torch is not installed, so DataLoader's order was not "
               "checked: each of the %d batches of epoch 0 holds the "
               "archive's samples its index file lists (archive read with "
               "zipfile + pickle), each sample once; install python3-torch "
               "to compare with DataLoader" % len(files))


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: demo_check.py MOUNT ARCHIVE BATCH_SIZE SEED")
    mnt, archive = sys.argv[1], sys.argv[2]
    bs, seed = int(sys.argv[3]), int(sys.argv[4])
    try:
        import torch
    except ImportError:
        torch = None
    rc, text = with_torch(torch, mnt, archive, bs, seed) if torch else \
        without_torch(mnt, archive)
    print(text if rc == 0 else "demo check FAILED: " + text)
    return rc


sys.exit(main())
