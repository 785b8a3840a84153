"""The Python binding in CUDA mode, against the fake driver
(build/tests/fake/libcuda.so.1, given to the library as
$BATCHFS_LOADER_LIBCUDA). torch here has no GPU, so the test stands in for
torch.cuda with FakeCuda: streams are the fake's CUstreams, device tensors
are CPU tensors over the fake's "device" memory (host memory), and a clone
is a cuMemcpyDtoDAsync on the stream, so it runs in stream order like a
kernel. Clones are compared with the files only after the streams ran.

Pins down: batches are ready on the stream current when the iteration
started, also when next() is called under another stream (the prefetcher
pattern) and with a slow consumer and 2 slots; Batch.use_on(side) orders
the side stream and the release; batches stay valid as long as held
(copies by default, list() included; zero-copy batches refuse to be
overwritten and outlive close); CUDA out of memory at open is retried once
after torch's cache is emptied, and "auto" falls back to CPU saying why;
reopen keeps the ring (one pinning); a failing clone still gives the slot
back; nothing is left in the driver."""
import contextlib
import ctypes
import errno
import gc
import os
import sys
import warnings

from loader_testlib import (BUILD, check_equal, hold_every_slot, simple,
                            torch, write_epoch)

FAKE = os.path.join(BUILD, "tests", "fake", "libcuda.so.1")
if not os.path.exists(FAKE):
    print("skip: built without cuda.h (no fake driver)")
    sys.exit(77)
os.environ["BATCHFS_LOADER_LIBCUDA"] = FAKE
import batchfs_loader  # noqa: E402
from batchfs_loader import Loader, LoaderError  # noqa: E402

cu = ctypes.CDLL(FAKE)
P, U64 = ctypes.c_void_p, ctypes.c_uint64
for name, args in {
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(P), ctypes.c_int],
        "cuCtxPushCurrent_v2": [P],
        "cuStreamCreate": [ctypes.POINTER(P), ctypes.c_uint],
        "cuStreamDestroy_v2": [P],
        "cuStreamSynchronize": [P],
        "cuStreamWaitEvent": [P, P, ctypes.c_uint],
        "cuEventCreate": [ctypes.POINTER(P), ctypes.c_uint],
        "cuEventRecord": [P, P],
        "cuEventDestroy_v2": [P],
        "cuMemcpyDtoDAsync_v2": [U64, U64, ctypes.c_size_t, P],
        "fake_sleep": [P, ctypes.c_uint],
        "fake_config": [ctypes.c_uint],
        "fake_fail": [ctypes.c_char_p, ctypes.c_long, ctypes.c_int,
                      ctypes.c_long]}.items():
    getattr(cu, name).argtypes = args


class FakeStats(ctypes.Structure):   # struct fake_stats
    _fields_ = [(n, ctypes.c_long) for n in (
        "ctx_retained", "ctx_created", "streams", "events", "allocs",
        "registered", "register_calls", "unregister_calls", "copies",
        "register_after_copy", "checks", "check_failures", "modules",
        "launches", "spin_syncs", "blocking_syncs")] + [
        ("spin_ns", ctypes.c_longlong)] + [(n, ctypes.c_long) for n in (
            "implicit_deps", "injected", "capture_violations",
            "violations")] + [("last_violation", ctypes.c_char * 256)]


def stats():
    st = FakeStats()
    cu.fake_stats(ctypes.byref(st))
    return st


def ok(r):
    assert r == 0, "driver call failed: %d" % r


ctx = P()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
ok(cu.cuCtxPushCurrent_v2(ctx))


def new_stream():
    s = P()
    ok(cu.cuStreamCreate(ctypes.byref(s), 1))    # CU_STREAM_NON_BLOCKING
    return s.value


class FakeCuda:
    """torch.cuda as far as the binding uses it, over the fake driver."""
    index = 0
    device = torch.device("cpu")     # the fake's device memory is host

    def __init__(self):
        self.current = None          # the legacy default stream
        self.empty_cache_calls = 0
        self.fail_clone = False
        # torch's allocator reuses freed memory only in stream order; here
        # clone targets simply stay allocated (copies may still be queued)
        self.alive = []

    @contextlib.contextmanager
    def using(self, s):              # with torch.cuda.stream(s)
        old, self.current = self.current, s
        try:
            yield
        finally:
            self.current = old

    def stream(self, s):
        s = self.current if s is None else s
        return s, (s or None)

    def tensor(self, ptr, n, keep):
        buf = (ctypes.c_uint8 * n).from_address(ptr)
        buf._keep = keep
        return torch.frombuffer(buf, dtype=torch.uint8)

    def clone(self, x, stream):
        if self.fail_clone:
            raise RuntimeError("CUDA out of memory (FakeCuda)")
        out = torch.empty_like(x)
        self.alive.append(out)
        if x.numel():
            ok(cu.cuMemcpyDtoDAsync_v2(out.data_ptr(), x.data_ptr(),
                                       x.numel() * x.element_size(), stream))
        return out

    def join(self, waiter, first):
        e = P()
        ok(cu.cuEventCreate(ctypes.byref(e), 2))  # DISABLE_TIMING
        ok(cu.cuEventRecord(e, first))
        ok(cu.cuStreamWaitEvent(waiter, e, 0))
        ok(cu.cuEventDestroy_v2(e))

    def keep(self, x, stream):
        pass   # CPU tensors: not reused while referenced

    def empty_cache(self):
        self.empty_cache_calls += 1


fake = FakeCuda()
batchfs_loader._cuda_api = lambda torch_, index: fake

many = [simple(1000, k) for k in range(8)]    # 16 KiB batches
d = write_epoch("e0", many)
main, side = new_stream(), new_stream()


def clone_batch(batch, s):
    return {n: fake.clone(t, s) for n, t in batch.items()}


def compare(clones, s, where):
    ok(cu.cuStreamSynchronize(s))
    assert len(clones) == len(many), (where, len(clones))
    for k, c in enumerate(clones):
        check_equal(c, many[k], "%s, batch %d" % (where, k))


def expect_clean():
    gc.collect()
    st = stats()
    assert st.violations == 0, st.last_violation
    for n in ("streams", "events", "allocs", "registered"):
        want = 2 if n == "streams" else 0          # main and side
        assert getattr(st, n) == want, (n, getattr(st, n))


# 1. the prefetcher pattern: next() under another stream; batches are
# ready on the iteration's stream (main). Slow copies (read before the copy
# lands), then a slow consumer with 2 slots (slot overwritten in use).
for copy_us, work_us, copy in ((2000, 0, False), (100, 2000, False),
                               (2000, 0, True), (100, 2000, True)):
    cu.fake_config(copy_us)
    clones = []
    with fake.using(main):
        L = Loader(d, device="cuda:0", slots=2, copy=copy)
        assert L.cuda
        it = iter(L)
    for _ in range(len(many)):
        with fake.using(side):
            batch = next(it)
        assert batch.stream == main
        cu.fake_sleep(main, work_us)
        clones.append(clone_batch(batch, main))
        del batch
    L.close()
    compare(clones, main, "prefetcher copy=%s %d us" % (copy, copy_us))
expect_clean()

# 2. handing batches to a side stream with use_on: the side stream waits
# for the batch, the slot is released after the side stream's work
cu.fake_config(100)
for copy in (False, True):
    clones = []
    with Loader(d, device="cuda:0", slots=2, copy=copy, stream=main) as L:
        for batch in L:
            batch.use_on(side)
            cu.fake_sleep(side, 2000)
            clones.append(clone_batch(batch, side))
            del batch
    compare(clones, side, "side stream copy=%s" % copy)
expect_clean()

# 3. batches stay valid as long as held: list() (copies), zero-copy
# batches refused beyond the slots and alive after close
with fake.using(main):
    kept = list(Loader(d, device="cuda:0"))
compare(kept, main, "list()")
del kept
with fake.using(main):
    L = Loader(d, device="cuda:0", slots=2, copy=False)
    held = hold_every_slot(L, 2)
    L.close()
    ok(cu.cuStreamSynchronize(main))
    assert stats().allocs == 1                   # the ring lives on
    for k, batch in enumerate(held):
        check_equal(batch, many[k], "zero-copy batch %d after close" % k)
    del batch, held
expect_clean()                                   # and goes with them

# 4. out of device memory at open: retried once after torch's cache is
# emptied; a second failure is reported with the driver's reason, or in
# "auto" falls back to CPU with a warning that says why
cu.fake_fail(b"cuMemAlloc", 1, 2, 1)             # CUDA_ERROR_OUT_OF_MEMORY
L = Loader(d, device="cuda:0")
assert L.cuda and fake.empty_cache_calls == 1
L.close()
cu.fake_fail(b"cuMemAlloc", 1, 2, 2)
try:
    Loader(d, device="cuda:0")
    raise AssertionError("opened without device memory")
except LoaderError as e:
    assert e.errno == errno.ENOMEM, e
    assert "cuMemAlloc" in str(e) and "OUT_OF_MEMORY" in str(e), str(e)
cu.fake_fail(b"cuMemAlloc", 1, 2, 3)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    L = Loader(d, device="auto")
assert not L.cuda
assert any("cuMemAlloc" in str(x.message) for x in w), [str(x.message) for x in w]
check_equal(next(iter(L)), many[0], "CPU fallback")
L.close()
expect_clean()

# 5. one loader, three epochs: one pinning, one device ring
d1 = write_epoch("e1", many[::-1])
r0 = stats().register_calls
with fake.using(main), Loader(d, device="cuda:0", slots=2) as L:
    for e, (dd, order) in enumerate(((d, many), (d1, many[::-1]),
                                     (d, many))):
        if e:
            L.reopen(dd)
        got = list(L)
        ok(cu.cuStreamSynchronize(main))
        for k, batch in enumerate(got):
            check_equal(batch, order[k], "epoch %d batch %d" % (e, k))
    assert L.stats()["pin_calls"] == 1
assert stats().register_calls == r0 + 1
expect_clean()

# 6. a clone that fails (torch out of memory) raises as it is and still
# gives the slot back: the next batch comes; closing leaves nothing
with fake.using(main), Loader(d, device="cuda:0", slots=2) as L:
    it = iter(L)
    for k in range(3):
        fake.fail_clone = True
        try:
            next(it)
            raise AssertionError("the clone did not fail")
        except RuntimeError as e:
            assert "FakeCuda" in str(e)
    fake.fail_clone = False
    b = next(it)
    ok(cu.cuStreamSynchronize(main))
    check_equal(b, many[3], "after failed clones")
expect_clean()

# 7. an exception in the with block comes out as it was, and the library's
# close still ran (nothing left in the driver)
try:
    with fake.using(main), Loader(d, device="cuda:0", copy=False) as L:
        b = next(iter(L))
        raise KeyError("user code")
except KeyError as e:
    assert e.args == ("user code",)
del b
expect_clean()
print("ok: streams, ownership, OOM retry, epochs, failures")
