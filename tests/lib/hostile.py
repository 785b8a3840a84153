#!/usr/bin/python3
"""Hostile torch.save archives: geometry, resource bombs, wrong acceptances.

What torch.save can write is written by torch.save. The rest is an archive
whose data.pkl is written by Python's own pickler through torch's real
rebuild function and storage classes, so it is exactly what a crafted
torch.save file would hold and torch.load can be asked about it too:

  tensor(key, storage, numel, size, stride, offset=0)
                          -> a pickled _rebuild_tensor_v2 call over the
                             storage record 'data/<key>'
  archive(path, obj, storages, prefix="archive", extra=())
                          -> writes the archive (torch's record layout:
                             corrupt_zip.write_torch_layout); 'storages'
                             maps key -> bytes of its record; 'extra' are
                             more (name, bytes) records (or replacements of
                             the default ones: 'version', 'byteorder')
  torch_refuses(path)     -> the message torch.load gives, or None when it
                             loads the archive

CASES: name -> Case (see the class) for tests/interop/test_hostile_
archives.py.
"""

import collections
import os
import pickle

import torch

import corrupt_zip


class _Storage:
    """Pickled as torch's persistent id ('storage', T, key, 'cpu', numel)."""

    def __init__(self, key, storage_type, numel):
        self.key, self.type, self.numel = key, storage_type, numel


class _Tensor:
    """Pickled as torch._utils._rebuild_tensor_v2(storage, offset, size,
    stride, False, OrderedDict()), as torch.save writes a tensor."""

    def __init__(self, st, offset, size, stride):
        self.st, self.offset = st, offset
        self.size, self.stride = tuple(size), tuple(stride)

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2,
                (self.st, self.offset, self.size, self.stride, False,
                 collections.OrderedDict()))


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", obj.type, obj.key, "cpu", obj.numel)
        return None


def tensor(key, storage_type, numel, size, stride, offset=0):
    """A tensor over storage record data/<key> of 'numel' elements."""
    return _Tensor(_Storage(key, storage_type, numel), offset, size, stride)


def dumps(obj):
    import io
    f = io.BytesIO()
    _Pickler(f, protocol=2).dump(obj)
    return f.getvalue()


def archive(path, obj, storages, prefix="archive", extra=()):
    """Write a torch-layout archive holding 'obj' as data.pkl."""
    recs = collections.OrderedDict()
    recs["data.pkl"] = obj if isinstance(obj, bytes) else dumps(obj)
    for key, data in storages.items():
        recs["data/" + key] = data
    recs["version"] = b"3\n"
    for name, data in extra:
        recs[name] = data
    corrupt_zip.write_torch_layout(
        path, [(prefix + "/" + k, v) for k, v in recs.items()])
    return path


def torch_refuses(path):
    try:
        torch.load(path, weights_only=True)
    except Exception as ex:  # noqa: BLE001 - any refusal counts
        return "%s: %s" % (type(ex).__name__, str(ex).splitlines()[0])
    return None


# ---- the cases ----------------------------------------------------------

U8 = torch.ByteStorage
I64 = torch.LongStorage


def _stride0(size, stride, storage_numel=40, batch=None):
    def build(path):
        return archive(path, {"x": tensor("0", U8, storage_numel, size,
                                          stride)},
                       {"0": bytes(range(storage_numel))})
    return build


def _huge_rows(n, storage, elsize):
    """n fields of 2^62 elements of 'elsize' bytes per row (stride 0; one
    sample): torch loads them; the bytes per sample do not fit 63 bits."""
    def build(path):
        obj = collections.OrderedDict(
            ("f%d" % i, tensor(str(i), storage, 1, (1, 1 << 62), (1, 0)))
            for i in range(n))
        return archive(path, obj, {str(i): bytes(elsize) for i in range(n)})
    return build


def _huge_row(path):
    """A row of 4 TiB through stride 0: torch loads it; a batch cannot be
    held in memory, so the mount must refuse."""
    return archive(path, {"x": tensor("0", U8, 40, (40, 1 << 42), (1, 0))},
                   {"0": bytes(range(40))})


def _saved(make):
    """An archive written by torch.save itself (make() gives the object),
    for what torch can produce."""
    def build(path):
        torch.save(make(), path)
        return path
    return build


def _many_keys(n):
    """n keys all naming one tensor (memoized): a 20 MB pickle, a bomb of
    fields; torch.save writes it and torch loads it."""
    def make():
        t = torch.arange(4)
        return collections.OrderedDict(("k%07d" % i, t) for i in range(n))
    return _saved(make)


def _long_key(path):
    """A storage key of 200 bytes (valid: torch loads it)."""
    key = "9" * 200
    return archive(path, {"x": tensor(key, I64, 4, (4,), (1,))},
                   {key: (1234).to_bytes(8, "little") * 4,
                    key[:90]: bytes(32)})


def _byteorder_garbage(path):
    return archive(path, {"x": tensor("0", I64, 4, (4,), (1,))},
                   {"0": bytes(32)}, extra=[("byteorder", b"big\0garbage")])


_empty_dict = _saved(dict)
_no_tensors_list = _saved(list)
_top_int = _saved(lambda: 7)
_key_int = _saved(lambda: {0: torch.arange(4)})
_complex128 = _saved(lambda: {"z": torch.zeros(4, dtype=torch.complex128)})


def _version(v):
    def build(path):
        return archive(path, {"x": tensor("0", I64, 4, (4,), (1,))},
                       {"0": bytes(32)}, extra=[("version", v)])
    return build


def _torchscript(path):
    """What torch.jit.save writes: code/ records, deflated."""
    m = torch.jit.script(torch.nn.Linear(2, 2))
    torch.jit.save(m, path)
    return path


def _empty_zip(path):
    with open(path, "wb") as f:
        f.write(b"PK\x05\x06" + bytes(18))
    return path


def _eocd_count(path):
    """A valid archive whose classic end record says 2 entries on this disk
    but 3 in total (the ZIP64 record agrees with the real count)."""
    archive(path, {"x": tensor("0", I64, 4, (4,), (1,))}, {"0": bytes(32)})
    buf = bytearray(open(path, "rb").read())
    eocd = buf.rindex(b"PK\x05\x06")
    buf[eocd + 8] = (buf[eocd + 8] - 1) & 0xFF
    open(path, "wb").write(bytes(buf))
    return path


class _System:
    """Pickled as os.system('false'): what a payload that runs code holds
    (it would run in a plain pickle.load; batchfs never calls it)."""

    def __reduce__(self):
        return (os.system, ("false",))


def _global_in_tensor(path):
    """A tensor whose size tuple is made by os.system(...): the tensor's
    rebuild relies on a global outside the allowlist."""
    return archive(path, {"x": tensor("0", I64, 4, (_System(),), (1,))},
                   {"0": bytes(32)})


def _samples(n):
    """n samples of one int64 (stride 0 over one element): torch loads
    it; more than batchfs can order or list."""
    def build(path):
        return archive(path, {"x": tensor("0", I64, 1, (n,), (0,))},
                       {"0": bytes(8)})
    return build


class Case(collections.namedtuple(
        "Case", "build refused_by reason torch mount_opts")):
    """refused_by: "inspect" (inspect and mount refuse), "mount" (only the
    mount), None (accepted: served exactly as torch loads it). reason: a
    substring of the refusal. torch: "refuses" / "loads" (checked against
    the torch installed) or None (depends on torch's version)."""


_B8 = ("--batch-size", "8")
CASES = collections.OrderedDict([
    ("row_wraps_to_4", Case(_stride0((40, (1 << 62) + 1), (1, 0)),
                            "inspect", "numel: integer multiplication "
                            "overflow", "refuses", _B8)),
    ("batch_wraps_to_0", Case(_stride0((40, 1 << 59), (1, 0)), "inspect",
                              "numel", "refuses", _B8)),
    ("simplify_overflow", Case(_stride0((40, 1 << 32, (1 << 32) + 8),
                                        (1, 0, 0)), "inspect", "numel",
                               "refuses", _B8)),
    ("row_of_2_63", Case(_huge_rows(2, torch.ShortStorage, 2), "inspect",
                         "bytes per sample", None, _B8)),
    ("sum_of_rows_wraps", Case(_huge_rows(3, U8, 1), "mount",
                               "bytes per sample add up", "loads", _B8)),
    ("row_of_4_tib", Case(_huge_row, "mount", "--cache-mb", "loads",
                          ("--batch-size", "64"))),
    ("samples_2_40", Case(_samples(1 << 40), "mount",
                          "use --batch-size 17 or more", "loads", ())),
    ("samples_2_40_shuffled", Case(_samples(1 << 40), "mount",
                                   "of memory", "loads",
                                   ("--batch-size", "256", "--shuffle",
                                    "--seed", "1"))),
    ("million_keys", Case(_many_keys(1000000), "inspect",
                          "holds 1000000 items: more than the 4096 fields",
                          "loads", ())),
    ("long_storage_key", Case(_long_key, None, None, "loads", _B8)),
    ("byteorder_garbage", Case(_byteorder_garbage, "inspect",
                               "byteorder record 'big\\x00garbage'", None,
                               ())),
    ("empty_dict", Case(_empty_dict, "inspect", "holds no tensors",
                        "loads", ())),
    ("empty_list", Case(_no_tensors_list, "inspect", "holds no tensors",
                        "loads", ())),
    ("top_level_int", Case(_top_int, "inspect",
                           "top-level object is an int", "loads", ())),
    ("dict_key_int", Case(_key_int, "inspect",
                          "top-level dict key 0 is an int, not a string",
                          "loads", ())),
    ("complex128", Case(_complex128, "mount", "field 'z' is complex128",
                        "loads", ())),
    ("version_99", Case(_version(b"99\n"), "inspect",
                        "version record '99'", "refuses", ())),
    ("torchscript", Case(_torchscript, "inspect", "a TorchScript archive",
                         None, ())),
    ("empty_zip", Case(_empty_zip, "inspect", "an empty ZIP archive",
                       "refuses", ())),
    ("eocd_count", Case(_eocd_count, "inspect",
                        "2 records on this disk but 3 in total", None, ())),
    ("os_system_in_tensor", Case(_global_in_tensor, "inspect",
                                 "refused global 'posix system' in field "
                                 "'x' (a tensor rebuilt with it",
                                 "refuses", ())),
])
