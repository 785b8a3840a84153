#!/usr/bin/python3
"""Torch fixture archives shared by every batchfs test.

Usage:  /usr/bin/python3 tests/lib/fixtures.py OUTDIR
   or, with tests/lib on PYTHONPATH (tests/run.sh puts it there):
        import fixtures; fixtures.write_all(outdir)

Writes, with real torch.save (torch 1.13, deterministic: fixed seeds, and
torch.save stores no timestamps), into OUTDIR:

  <name>.pt     a torch.save archive, loadable by torch.load(weights_only=True)
  <name>.json   what torch reports for it, computed from torch.load:
                {"samples": N, "fields": [{"name", "dtype", "shape"}, ...]}
                (dtype = torch name without "torch.", shape incl. dim 0,
                fields in archive/pickle order)
  shards/<name>_<k>.pt + shards/<name>.json
                several archives that form ONE dataset (same fields,
                concatenated along dim 0); the .json describes the
                combined dataset and lists the files in "files" (in order).
  special/<name>.pt + .json
                archives torch 1.13 cannot load as-is but batchfs must read:
                big-endian data with a `byteorder` = "big" record (what an
                s390x torch >= 2.1 writes). Use load_fixture() to get the
                tensors they hold.
  manifest.json {"single": [...], "sharded": {...}, "special": [...]}

Every file is small (the whole set is well under 1 MB).

load_fixture(path) -> list of (name, tensor) as torch reports them
(torch.load with weights_only=True; for special/ files the true content).
describe(fields) -> the JSON dict above for a list of (name, tensor).
"""

import collections
import io
import json
import os
import sys
import zipfile

import torch

# The dtypes of the "dtypes" fixture: every dtype batchfs must carry.
DTYPES = [
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.bool,
    torch.complex64,
]


class DictDataset(torch.utils.data.Dataset):
    """A dict of tensors as a Dataset of dict samples: how a mount sees an
    archive of fields, for the DataLoader the tests compare a mount with
    (default_collate stacks each field)."""

    def __init__(self, fields):
        self.fields = fields

    def __len__(self):
        return len(next(iter(self.fields.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.fields.items()}


def dtype_name(dt):
    """torch.float32 -> "float32" (the names batchfs reports)."""
    return str(dt)[len("torch."):]


def _rand(shape, dtype, gen):
    """Deterministic content of any dtype, with both signs where possible."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_complex:
        re = torch.randn(shape, generator=gen)
        im = torch.randn(shape, generator=gen)
        return torch.complex(re, im).to(dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 100).to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=gen).to(dtype)
    info = torch.iinfo(dtype)
    lo = max(info.min, -(2 ** 31))
    hi = min(info.max, 2 ** 31 - 1)
    t = torch.randint(lo, hi, shape, generator=gen, dtype=torch.int64)
    if dtype == torch.int64:  # exercise the high bytes too
        t = t * (2 ** 31) + torch.randint(0, 2 ** 31, shape, generator=gen)
    return t.to(dtype)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _single_fixtures():
    """name -> object to torch.save (each built from its own seed)."""
    fx = collections.OrderedDict()
    g = _gen(1)
    fx["dict"] = {"images": _rand((10, 3, 4, 4), torch.uint8, g),
                  "labels": _rand((10,), torch.int64, g)}
    g = _gen(2)
    fx["ordereddict"] = collections.OrderedDict(
        [("zeta", _rand((8, 5), torch.float32, g)),
         ("alpha", _rand((8,), torch.int32, g))])
    g = _gen(3)
    fx["list"] = [_rand((6, 3), torch.float32, g), _rand((6,), torch.int16, g),
                  _rand((6, 2, 2), torch.float64, g)]
    g = _gen(4)
    fx["tuple"] = (_rand((7, 2), torch.int32, g), _rand((7,), torch.float64, g))
    g = _gen(5)
    fx["tensor"] = _rand((9, 4), torch.float32, g)

    # Views sharing one storage: a base, column slices, a strided slice and
    # row ranges of a bigger storage with a non-zero storage offset.
    g = _gen(6)
    base = _rand((10, 6), torch.float32, g)
    big = _rand((25, 3), torch.int64, g)
    fx["views"] = {"base": base, "left": base[:, :3], "right": base[:, 3:],
                   "every_other": base[:, ::2], "last_col": base[:, 5],
                   "head": big[0:10], "tail": big[15:25], "mid_t": big[5:15, 1:]}

    # Non-contiguous: transposed, permuted, sliced with steps, dim-0 stride.
    g = _gen(7)
    fx["noncontig"] = {
        "transposed": _rand((5, 12), torch.float32, g).t(),
        "permuted": _rand((4, 12, 3), torch.int16, g).permute(1, 2, 0),
        "stepped": _rand((12, 8), torch.float64, g)[:, 1:7:2],
        "row_step": _rand((24, 3), torch.int32, g)[::2],
        "expanded_col": _rand((12, 1), torch.uint8, g)[:, 0:1],
        "sliced_inner": _rand((12, 2, 5), torch.bfloat16, g)[:, :, 1:4],
    }

    g = _gen(8)
    fx["zerosize"] = {"empty_rows": torch.zeros((5, 0), dtype=torch.float32),
                      "empty_mid": torch.zeros((5, 0, 3), dtype=torch.int64),
                      "labels": _rand((5,), torch.int64, g)}
    fx["nosamples"] = {"x": torch.zeros((0, 3), dtype=torch.float32),
                       "y": torch.zeros((0,), dtype=torch.int64)}

    g = _gen(9)
    fx["dtypes"] = collections.OrderedDict(
        (dtype_name(dt), _rand((6, 2), dt, g)) for dt in DTYPES)

    g = _gen(10)
    fx["param"] = {"weight": torch.nn.Parameter(_rand((4, 3), torch.float32, g)),
                   "frozen": torch.nn.Parameter(_rand((4,), torch.float32, g),
                                                requires_grad=False),
                   "plain": _rand((4, 2), torch.float32, g)}

    # Many records (> 10 storages: key order 0,1,10,11,2,... in the zip).
    g = _gen(11)
    fx["many"] = collections.OrderedDict(
        ("f%02d" % i, _rand((3, i % 4 + 1), DTYPES[i % len(DTYPES)], g))
        for i in range(14))
    return fx


def _sharded_fixtures():
    """name -> list of objects, one archive each, same fields."""
    out = collections.OrderedDict()
    g = _gen(20)
    out["cifar"] = [{"images": _rand((n, 3, 4, 4), torch.uint8, g),
                     "labels": _rand((n,), torch.int64, g)} for n in (5, 0, 7, 3)]
    g = _gen(21)
    base = _rand((12, 4), torch.float32, g)
    # Shards may differ in layout (one contiguous, one a transposed view).
    out["mixed_layout"] = [
        {"x": base[:6], "y": _rand((6,), torch.int32, g)},
        {"x": _rand((4, 6), torch.float32, g).t(), "y": _rand((6,), torch.int32, g)},
    ]
    return out


def _fields_of(obj):
    """(name, tensor) list in the order batchfs reports fields."""
    if isinstance(obj, torch.Tensor):
        return [("0", obj)]
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items()]
    return [(str(i), v) for i, v in enumerate(obj)]


def describe(fields):
    """The JSON dict torch reports for a list of (name, tensor)."""
    fields = list(fields)
    n = fields[0][1].shape[0] if fields else 0
    return {"samples": int(n),
            "fields": [{"name": name, "dtype": dtype_name(t.dtype),
                        "shape": [int(s) for s in t.shape]} for name, t in fields]}


def _combine(parts):
    """describe() of several shards concatenated along dim 0."""
    d = describe(parts[0])
    total = sum(int(p[0][1].shape[0]) if p else 0 for p in parts)
    d["samples"] = total
    for f in d["fields"]:
        f["shape"][0] = total
    return d


def _load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def _bigendian_copy(src, dst):
    """Rewrite torch archive 'src' as a big-endian saver would: every storage
    byte-swapped per element (complex: per half) and a `byteorder` record
    saying "big". Written with Python's zipfile (stored, real CRCs, no torch
    alignment). 'src' must hold tensors with distinct storages, so that
    storage key i (torch 1.13 numbers keys in pickling order) is field i."""
    import numpy as np
    fields = _fields_of(_load(src))
    with zipfile.ZipFile(src) as zin:
        names = zin.namelist()
        prefix = names[0].split("/")[0]
        with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED) as zout:
            for name in names:
                data = zin.read(name)
                rel = name[len(prefix) + 1:]
                if rel.startswith("data/"):
                    t = fields[int(rel[len("data/"):])][1]
                    unit = t.element_size() // (2 if t.dtype.is_complex else 1)
                    if unit > 1:
                        data = np.frombuffer(data, dtype="<u%d" % unit).byteswap().tobytes()
                zout.writestr(zipfile.ZipInfo(name), data)
            zout.writestr(zipfile.ZipInfo(prefix + "/byteorder"), b"big")
    return fields


def _special(outdir):
    """Write special/; returns name -> fields (the true content)."""
    sdir = os.path.join(outdir, "special")
    os.makedirs(sdir, exist_ok=True)
    out = collections.OrderedDict()
    g = _gen(30)
    # One dtype per storage so swap units are unambiguous per record.
    obj = collections.OrderedDict(
        [("f32", _rand((6, 3), torch.float32, g)),
         ("i64", _rand((6,), torch.int64, g)),
         ("i16t", _rand((2, 6), torch.int16, g).t()),
         ("c64", _rand((6, 2), torch.complex64, g)),
         ("f16", _rand((6,), torch.float16, g)),
         ("u8", _rand((6, 4), torch.uint8, g))])
    import tempfile
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = os.path.join(tmpd, "bigendian.pt")  # record prefix "bigendian"
        torch.save(obj, tmp)
        fields = _bigendian_copy(tmp, os.path.join(sdir, "bigendian.pt"))
    _write_json(os.path.join(sdir, "bigendian.json"), describe(fields))
    out["bigendian"] = fields
    return out


_SPECIAL_CONTENT = {}


def write_all(outdir):
    """Write every fixture into 'outdir' (created if needed); returns the
    manifest dict (also written as manifest.json)."""
    os.makedirs(outdir, exist_ok=True)
    manifest = {"single": [], "sharded": {}, "special": []}
    for name, obj in _single_fixtures().items():
        path = os.path.join(outdir, name + ".pt")
        torch.save(obj, path)
        fields = _fields_of(_load(path))
        _write_json(os.path.join(outdir, name + ".json"), describe(fields))
        manifest["single"].append(name)
    sdir = os.path.join(outdir, "shards")
    os.makedirs(sdir, exist_ok=True)
    for name, objs in _sharded_fixtures().items():
        files, parts = [], []
        for k, obj in enumerate(objs):
            fn = "%s_%d.pt" % (name, k)
            torch.save(obj, os.path.join(sdir, fn))
            parts.append(_fields_of(_load(os.path.join(sdir, fn))))
            files.append(fn)
        d = _combine(parts)
        d["files"] = files
        _write_json(os.path.join(sdir, name + ".json"), d)
        manifest["sharded"][name] = files
    for name, fields in _special(outdir).items():
        _SPECIAL_CONTENT[os.path.abspath(os.path.join(outdir, "special", name + ".pt"))] = fields
        manifest["special"].append(name)
    _write_json(os.path.join(outdir, "manifest.json"), manifest)
    return manifest


def load_fixture(path):
    """(name, tensor) list of the archive at 'path' as torch reports it.
    For a special/ fixture written by this process, the true content;
    for one written earlier, its content is recomputed deterministically."""
    ap = os.path.abspath(path)
    if os.path.basename(os.path.dirname(ap)) == "special":
        if ap not in _SPECIAL_CONTENT:
            import tempfile
            with tempfile.TemporaryDirectory() as d:
                for name, fields in _special(d).items():
                    _SPECIAL_CONTENT[os.path.join(os.path.dirname(ap), name + ".pt")] = fields
        return _SPECIAL_CONTENT[ap]
    return _fields_of(_load(path))


def load_shards(json_path):
    """For shards/<name>.json: (name, tensor) list of the combined dataset
    (torch.cat of the shards along dim 0)."""
    with open(json_path) as f:
        d = json.load(f)
    sdir = os.path.dirname(json_path)
    parts = [load_fixture(os.path.join(sdir, fn)) for fn in d["files"]]
    return [(name, torch.cat([p[i][1] for p in parts], 0))
            for i, (name, _) in enumerate(parts[0])]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("usage: fixtures.py OUTDIR\n")
        sys.exit(2)
    m = write_all(sys.argv[1])
    print("wrote %d single, %d sharded, %d special fixtures to %s"
          % (len(m["single"]), len(m["sharded"]), len(m["special"]), sys.argv[1]))
