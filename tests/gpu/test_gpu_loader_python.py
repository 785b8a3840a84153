"""Real GPU: the Python binding with torch's CUDA (the real-GPU version of
tests/loader/test_loader_python_fake.py). With 2 slots and a slow consumer
(torch.cuda._sleep) every batch is cloned where the consumer reads it and
compared with its file only after torch.cuda.synchronize(): in the
prefetcher pattern (next() under a side stream, use on the main stream),
on the iteration's own stream, and handed to a side stream with
Batch.use_on; zero-copy batches beyond the slots are refused and the held
ones stay intact; list() of copies is right; one loader reopened on a
second epoch pins once. Prints the copy thread's CPU time. Skips (77)
without a GPU."""
import sys

from loader_testlib import (check_equal, hold_every_slot, simple,
                            torch, write_epoch)

if not torch.cuda.is_available():
    print("skip: torch has no CUDA device")
    sys.exit(77)
from batchfs_loader import Loader

many = [simple(100000, k) for k in range(8)]      # ~5 MiB batches
d0 = write_epoch("g0", many)
d1 = write_epoch("g1", many[::-1])
main = torch.cuda.current_stream()
side = torch.cuda.Stream()
SLOW = 20 * 1000 * 1000                            # _sleep cycles, ~10 ms


def clone(batch, s):
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLOW)
        return {n: t.clone() for n, t in batch.items()}


def compare(clones, want, where):
    torch.cuda.synchronize()
    assert len(clones) == len(want), (where, len(clones))
    for k, c in enumerate(clones):
        check_equal(c, want[k], "%s, batch %d" % (where, k))
    print("ok: %s" % where)


for copy in (False, True):
    # the prefetcher pattern: next() under the side stream
    with Loader(d0, device="cuda", slots=2, copy=copy) as L:
        it, clones = iter(L), []
        for _ in range(len(many)):
            with torch.cuda.stream(side):
                batch = next(it)
            assert batch.stream == main
            clones.append(clone(batch, main))
            del batch
        st = L.stats()
    compare(clones, many, "prefetcher pattern, copy=%s" % copy)
    # a slow consumer on the iteration's stream
    with Loader(d0, device="cuda", slots=2, copy=copy) as L:
        clones = [clone(b, main) for b in L]
    compare(clones, many, "slow consumer, copy=%s" % copy)
    # handed to a side stream
    with Loader(d0, device="cuda", slots=2, copy=copy) as L:
        clones = [clone(b.use_on(side), side) for b in L]
    compare(clones, many, "side stream with use_on, copy=%s" % copy)

# refused misuse: a third zero-copy batch with 2 slots
with Loader(d0, device="cuda", slots=2, copy=False) as L:
    held = hold_every_slot(L, 2)
compare(held, many[:2], "zero-copy over-hold refused, held batches intact")
del held

# copies: keep them all
compare(list(Loader(d0, device="cuda")), many, "list() of copies")

# epochs
with Loader(d0, device="cuda", slots=2) as L:
    a = list(L)
    L.reopen(d1)
    b = list(L)
    assert L.stats()["pin_calls"] == 1
compare(a, many, "epoch 0")
compare(b, many[::-1], "epoch 1 after reopen, one pinning")
print("copy thread CPU during the prefetcher run: %.3f s" %
      (st["copy_cpu_ns"] / 1e9))
