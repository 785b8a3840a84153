"""The Python binding (loader/python/batchfs_loader.py) with real torch, CPU
mode: batch files written here (safetensors, as batchfs serves them) come
back as dicts of tensors equal to the originals, for every dtype this torch
has (bf16 included); a batch handed out stays valid and unchanged for as
long as it is held (copies by default, list(loader) included; zero-copy
batches keep their ring slot, refuse to be overwritten and outlive the
loader); errors carry the library's reason; one loader serves several
epochs; an exception in a with block is not masked."""
import errno
import gc
import os

from loader_testlib import (CODES, TMP, check_equal, hold_every_slot, simple,
                            torch, write_batch, write_epoch)
from batchfs_loader import Loader, LoaderError  # noqa: E402


def make(rows, k):
    g = torch.Generator().manual_seed(k)
    return {
        "images": torch.randint(0, 256, (rows, 3, 5, 7), generator=g, dtype=torch.uint8),
        "labels": torch.randint(-9, 9, (rows,), generator=g, dtype=torch.int64),
        "x32": torch.randn(rows, 3, generator=g),
        "x64": torch.randn(rows, 2, generator=g, dtype=torch.float64),
        "half": torch.randn(rows, 4, generator=g).half(),
        "bf": torch.randn(rows, 5, generator=g).bfloat16(),
        "mask": torch.rand(rows, generator=g) > 0.5,
        "i8": torch.randint(-128, 127, (rows, 1), generator=g, dtype=torch.int8),
        "i16": torch.randint(-999, 999, (rows,), generator=g, dtype=torch.int16),
        "i32": torch.randint(-999, 999, (rows, 2), generator=g, dtype=torch.int32),
        "cplx": torch.randn(rows, 2, generator=g, dtype=torch.complex64),
        "empty": torch.zeros(rows, 0),
    }


def expect_error(err, words, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except LoaderError as e:
        assert e.errno == err, (e.errno, str(e))
        for w in words:
            assert w in str(e), (w, str(e))
        return e
    raise AssertionError("no LoaderError(%s) from %r" % (err, fn))


rows = [64, 64, 64, 64, 17]          # last batch partial
want = [make(r, k) for k, r in enumerate(rows)]
d = write_epoch("epoch0", want)

# every dtype, zero-copy: each batch compared before asking for the next
with Loader(d, device="cpu", slots=2, chunk=8192, copy=False) as L:
    assert not L.cuda and len(L) == len(rows)
    n = 0
    for k, batch in enumerate(L):
        assert batch.index == k and batch.stream is None
        check_equal(batch, want[k], "zero-copy batch %d" % k)
        n += 1
    assert n == len(rows)

# the default (copies): kept batches stay right after the loader moved on
# and closed; list() of a 20-batch epoch through 3 slots
many = [simple(8, k) for k in range(20)]
d20 = write_epoch("epoch20", many)
kept = list(Loader(d20, device="cpu"))
assert len(kept) == 20
for k, batch in enumerate(kept):
    check_equal(batch, many[k], "kept copied batch %d" % k)

# explicit file list, reversed
files = [os.path.join(d, "batch_%d" % k) for k in reversed(range(len(rows)))]
got = list(Loader(files=files, device="cpu"))
for i, batch in enumerate(got):
    check_equal(batch, want[len(rows) - 1 - i], "file list %d" % i)

# zero-copy: holding every slot refuses the next batch instead of
# overwriting one; dropping one lets iteration go on; views keep a slot too
with Loader(d20, device="cpu", slots=2, copy=False) as L:
    b0, b1 = hold_every_slot(L, 2)
    it = iter(L)
    label_view = b0["labels"][2:]
    check_equal(b0, many[0], "held batch 0")
    check_equal(b1, many[1], "held batch 1")
    del b0                    # the view still holds slot 0
    expect_error(errno.EBUSY, ["zero-copy"], next, it)
    assert torch.equal(label_view, many[0]["labels"][2:])
    del label_view
    b2 = next(it)
    check_equal(b2, many[2], "batch 2 after a release")
    del b1, b2
    for k, batch in enumerate(it, start=3):
        check_equal(batch, many[k], "zero-copy batch %d" % k)

# zero-copy batches outlive the with block (the ring is freed when the
# last one goes): no segfault, no change
with Loader(d20, device="cpu", slots=3, copy=False) as L:
    late = [next(iter(L)) for _ in range(3)]
gc.collect()
for k, batch in enumerate(late):
    check_equal(batch, many[k], "zero-copy batch %d after close" % k)
del late

# one loader, several epochs: reopen keeps the ring
with Loader(d20, device="cpu", slots=2) as L:
    for k, batch in enumerate(L):
        check_equal(batch, many[k], "epoch A batch %d" % k)
    L.reopen(d)
    for k, batch in enumerate(L):
        check_equal(batch, want[k], "epoch B batch %d" % k)
    L.reopen(files=files[:2])
    assert [b.index for b in L] == [0, 1]
    st = L.stats()
    assert st["batches"] == 27 and st["pin_calls"] == 0, st
    expect_error(errno.ENOENT, ["cannot reopen", "/nonexistent"],
                 L.reopen, "/nonexistent")

# errors say what the library logged, not just the errno
empty = os.path.join(TMP, "empty")
os.makedirs(empty, exist_ok=True)
expect_error(errno.ENOENT, [empty, "no batch files"], Loader, empty,
             device="cpu")
expect_error(errno.ENOENT, ["/nonexistent", "No such file"], Loader,
             "/nonexistent/epoch/0", device="cpu")
gap = os.path.join(TMP, "gap")
os.makedirs(gap, exist_ok=True)
write_batch(os.path.join(gap, "batch_1"), many[1], 1)
expect_error(errno.ENOENT, ["batch_0 is missing"], Loader, gap, device="cpu")

# an exception in the with block comes out as it was
try:
    with Loader(d, device="cpu") as L:
        next(iter(L))
        raise KeyError("user code")
except KeyError as e:
    assert e.args == ("user code",)

# a corrupt header: batch 0 arrives, batch 1 raises with the reason
with open(os.path.join(d, "batch_1"), "r+b") as f:
    f.seek(8)
    f.write(b"[")
with Loader(d, device="cpu") as L:
    it = iter(L)
    check_equal(next(it), want[0], "before the corrupt one")
    e = expect_error(errno.EBADMSG, ["batch_1", "header offset 8"], next, it)
print("ok: %d batches, %d fields, dtypes %s" % (
    len(rows), len(want[0]), sorted(CODES[t.dtype] for t in want[0].values())))
