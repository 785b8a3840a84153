"""batchfs.IterableDataset and batchfs.DataLoader: a mount as a torch
IterableDataset of whole batches, for DataLoader(ds, batch_size=None) and
what builds on it (Lightning, HF Trainer, Accelerate), with a position
that stays right when DataLoader workers read the batches.

Why workers need more than Batches: each worker iterates a copy of the
dataset, and the DataLoader prefetches, so no copy knows which batch the
training loop has received. So the position lives in two places:
- the main process's Batches (ds.batches): the next batch the loop will
  see. Exact when the iteration runs in the main process
  (num_workers=0), or when batchfs.DataLoader counts what the loop
  receives; unknown after a plain DataLoader's workers read batches
  (state_dict() then raises instead of answering stale).
- a _Record in shared memory: the position the main process published
  and the current "generation" (one pass of one DataLoader's workers).
  Workers take their start from it, never from their copy, so
  persistent_workers and spawn work too.
"""
import multiprocessing
import os

import torch

from ._batchfile import Buffers
from ._batches import Batches

# The _Record's fields, one int64 each, then one slot per worker: the
# generation (_GEN) it last joined.
(_EPOCH, _NEXT,        # the position the main process published
 _SERIAL,              # bumped by every publication
 _DRIVEN,              # _SERIAL when batchfs.DataLoader started its pass
 _UNKNOWN,             # 1: a plain DataLoader's workers read batches since
                       #    the main process last set the position
 _GEN,                 # the current generation's number, 0 before any
 _GEN_SEED, _GEN_ITER, _GEN_WORKERS,   # its key (_worker_key)
 _GEN_SERIAL,          # _SERIAL when it started
 _GEN_EPOCH, _GEN_START,               # the epoch and batch it starts at
 _GEN_DONE,            # its workers that iterated their share to the end
 _ARRIVED) = range(14)
MAX_WORKERS = 1024

USE_LOADER = ("use batchfs.DataLoader(ds, num_workers=N) and its "
              "state_dict() / load_state_dict(): it counts the batches "
              "the loop receives")


class _Record:
    """The position shared by the main process and the DataLoader's
    workers (multiprocessing shared memory and a lock). Created with the
    dataset, so that workers inherit it through the DataLoader's Process
    arguments; its lock comes from the "spawn" context, which works for
    forked, spawned and forkserver workers alike (a "fork" lock cannot be
    sent to a spawned process; the cost: multiprocessing's resource
    tracker process, started once). Any other copy (copy.deepcopy, pickle)
    gets a record of its own with the same values."""

    def __init__(self, epoch, batch, values=None):
        ctx = multiprocessing.get_context("spawn")
        self._a = ctx.Array("q", _ARRIVED + MAX_WORKERS)
        if values is not None:
            self._a[:] = values
        else:
            self._a[_EPOCH], self._a[_NEXT] = epoch, batch
            self._a[_DRIVEN] = -1

    def __getstate__(self):
        if multiprocessing.context.get_spawning_popen() is None:
            return {"values": self._a[:]}
        return {"array": self._a}

    def __setstate__(self, state):
        if "array" in state:
            self._a = state["array"]
        else:
            self.__init__(0, 0, state["values"])

    def publish(self, epoch, batch, known=False, driven=False):
        """The main process's position is (epoch, batch). known: set by
        the user (set_epoch, load_state_dict); driven: batchfs.DataLoader
        starts a pass from it."""
        a = self._a
        with a.get_lock():
            a[_EPOCH], a[_NEXT] = epoch, batch
            a[_SERIAL] += 1
            if known:
                a[_UNKNOWN] = 0
            if driven:
                a[_DRIVEN] = a[_SERIAL]

    def unknown(self):
        return self._a[_UNKNOWN] != 0

    def join(self, key, worker, len_of):
        """Worker 'worker' starts an iteration: (generation, epoch, first
        batch). The first worker of a generation to arrive decides its
        start (_start); the others take the same. A worker that already
        joined the current generation, or a different key, starts a new
        one (a key can repeat: a DataLoader made anew with the same
        seeded generator)."""
        if worker >= MAX_WORKERS:
            raise ValueError("batchfs.IterableDataset: at most %d workers"
                             % MAX_WORKERS)
        a = self._a
        with a.get_lock():
            same = (a[_GEN] > 0 and a[_ARRIVED + worker] != a[_GEN] and
                    tuple(a[_GEN_SEED:_GEN_WORKERS + 1]) == key)
            if not same:
                epoch, start = self._start(len_of)
                a[_GEN] += 1
                a[_GEN_SEED:_GEN_WORKERS + 1] = key
                a[_GEN_SERIAL] = a[_SERIAL]
                a[_GEN_EPOCH], a[_GEN_START] = epoch, start
                a[_GEN_DONE] = 0
                if a[_SERIAL] != a[_DRIVEN]:
                    a[_UNKNOWN] = 1
            a[_ARRIVED + worker] = a[_GEN]
            return a[_GEN], a[_GEN_EPOCH], a[_GEN_START]

    def _start(self, len_of):
        """A new generation's start (under the lock): the published
        position if the main process published since the last generation
        started; else the next epoch if every worker of the last one
        finished its share (as Batches goes on after a whole epoch; a pass
        broken off within its last prefetch counts as whole: the workers
        read it all); else (a pass broken off, nobody said where to go
        on) an error."""
        a = self._a
        if a[_GEN] == 0 or a[_SERIAL] != a[_GEN_SERIAL]:
            if a[_NEXT] >= len_of(a[_EPOCH]):
                return a[_EPOCH] + 1, 0
            return a[_EPOCH], a[_NEXT]
        if a[_GEN_DONE] == a[_GEN_WORKERS]:
            return a[_GEN_EPOCH] + 1, 0
        raise RuntimeError(
            "batchfs.IterableDataset: the DataLoader's previous pass stopped "
            "mid-epoch and nothing set the position since, so where this "
            "pass starts is unknown: call ds.set_epoch(epoch) (or "
            "ds.load_state_dict(state)) before each pass, or " + USE_LOADER)

    def finish(self, gen):
        """A worker of generation 'gen' iterated its share to the end."""
        a = self._a
        with a.get_lock():
            if a[_GEN] == gen:
                a[_GEN_DONE] += 1


class _DatasetBatches(Batches):
    """An IterableDataset's Batches: its messages name IterableDataset."""
    _API = "batchfs.IterableDataset"


class _WorkerShare(Batches):
    """The batches of one DataLoader worker from (epoch, start): every
    num_workers-th, worker k from start + k. DataLoader takes one from
    each worker in turn, from worker 0, so the order is the epoch's."""

    def __init__(self, parent, worker, workers, epoch, start):
        self.__dict__.update(parent.__dict__)
        self._bufs = Buffers(parent._bufs.keep)   # never the parent's
        self._worker, self._workers = worker, workers
        self._epoch, self._next = epoch, start

    def _indices(self, k):
        return range(k + self._worker, self._len_of(self._epoch),
                     self._workers)


class IterableDataset(torch.utils.data.IterableDataset):
    """The batches of a batchfs mount, each a dict name -> tensor:
    DataLoader(IterableDataset(mnt), batch_size=None) yields exactly
    PyTorch's batches for the mounted options, epoch after epoch.

    Batches are CPU tensors (device="cpu"; pin_memory=True in DataLoader
    for fast copies to a GPU). epoch / start_batch / zero_copy / stream /
    set_epoch() / state_dict() / load_state_dict() are batchfs.Batches':
    each pass goes on from where the last stopped, the next epoch after a
    whole one; with num_workers=0 small batches come from the epoch's
    stream (stream=None: batchfs.Batches picks by batch size), each batch
    file otherwise read with O_DIRECT, the mount's fastest path. Each
    iteration (in the main process, or in each worker) reads ahead with
    'readers' threads as batchfs.Batches does (None: half the online
    CPUs, 4 to 8; 1: one batch at a time, no thread), made in the process
    that iterates and gone when its iteration ends or is abandoned.

    With num_workers > 0 worker k reads batches k, k + N, ... from the
    start, as batch files (the order stays the epoch's; keep device="cpu":
    no CUDA in workers). Save and restore the position with
    batchfs.DataLoader's state_dict() / load_state_dict(): under a plain
    DataLoader with workers, this dataset's state_dict() raises (the main
    process cannot know which batches the loop received). Without
    set_epoch() a plain DataLoader's next pass starts the next epoch
    after a whole pass, and raises after a pass broken off mid-epoch.

    On a mount of several ranks (`--ranks`) it reads the rank 'rank', or
    torch.distributed's (a process group initialised), or $RANK (torchrun
    sets it): see batchfs.Batches. As there, a mount without ranks read
    by one of several ranks (world size > 1) is a ValueError
    naming the mount options that split it, unless whole_dataset=True
    (every rank reads every batch, on purpose); a path other
    than the mount's root is a ValueError naming the one it wants, and a
    mount gone while iterating (its daemon exited) a MountGoneError
    naming the mount and the daemon's log; from a worker, DataLoader
    raises it again in the training loop with the worker's traceback."""

    def __init__(self, mountpoint, epoch=0, start_batch=0, device="cpu",
                 zero_copy=False, rank=None, whole_dataset=False,
                 stream=None, readers=None):
        super().__init__()
        self.batches = _DatasetBatches(mountpoint, epoch, start_batch,
                                       device, zero_copy, rank, stream,
                                       whole_dataset=whole_dataset,
                                       readers=readers)
        self.rank = self.batches.rank
        self._record = _Record(self.batches._epoch, self.batches._next)
        self._iters = (None, 0)   # (pid, iterations in that process)

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return self._in_process()
        return self._in_worker(info, self._worker_key(info))

    def set_epoch(self, epoch):
        self.batches.set_epoch(epoch)
        self._publish(known=True)

    def state_dict(self):
        """{"epoch": E, "batch": K}: the next batch the loop sees. Raises
        RuntimeError after a plain DataLoader's workers read batches (until
        set_epoch() / load_state_dict())."""
        if self._record.unknown():
            raise RuntimeError(
                "batchfs.IterableDataset.state_dict(): the position is "
                "unknown in this process: DataLoader workers read the "
                "batches (from copies of the dataset, ahead of the loop); "
                + USE_LOADER)
        return self.batches.state_dict()

    def load_state_dict(self, state):
        self.batches.load_state_dict(state)
        self._publish(known=True)

    def _publish(self, known=False, driven=False):
        b = self.batches
        self._record.publish(b._epoch, b._next, known, driven)

    def _in_process(self):
        """The main process's iteration (num_workers=0): Batches'
        position is exact; published for workers to come. Closed (a
        break), it closes Batches' iteration: its reader threads end."""
        it = iter(self.batches)
        try:
            for batch in it:
                self._publish()
                yield batch
                del batch
        finally:
            it.close()
        self._publish()

    def _worker_key(self, info):
        """The key of this worker's generation: the DataLoader iterator's
        base seed (new for each iterator unless its generator is seeded
        anew), this process's count of its iterations (persistent workers
        iterate again), the workers. Counted here, when DataLoader creates
        the iteration, not at its first batch: a worker that is never
        asked for one still counts."""
        pid = os.getpid()
        n = self._iters[1] + 1 if self._iters[0] == pid else 1
        self._iters = (pid, n)
        return ((info.seed - info.id) & (2 ** 63 - 1), n, info.num_workers)

    def _in_worker(self, info, key):
        """A worker's share of the generation's pass. Joins at the first
        batch: an error raised here reaches the training loop (one raised
        by iter() in a persistent worker would kill it)."""
        gen, epoch, start = self._record.join(key, info.id,
                                              self.batches._len_of)
        it = iter(_WorkerShare(self.batches, info.id, info.num_workers,
                               epoch, start))
        try:
            yield from it
        finally:
            it.close()
        self._record.finish(gen)

    def _drive(self):
        """batchfs.DataLoader starts a pass: its start (epoch, batch),
        published for the workers."""
        if self._record.unknown():
            raise RuntimeError(
                "batchfs.DataLoader: the position is unknown: a plain "
                "DataLoader's workers read this dataset since its position "
                "was last set; call set_epoch(epoch) or load_state_dict() "
                "first")
        self.batches._roll()
        self._publish(driven=True)
        return self.batches._epoch, self.batches._next

    def _received(self, epoch, k):
        """The loop received batch k - 1 of 'epoch' (k = len(self): the
        pass ended)."""
        if self.batches._epoch == epoch:  # set_epoch() meanwhile: theirs wins
            self.batches._next = k
            self._publish()


class DataLoader(torch.utils.data.DataLoader):
    """torch's DataLoader for a batchfs.IterableDataset (batch_size=None:
    the batch files are the batches), which knows the position: it counts
    the batches the training loop receives, in the main process, so
    state_dict() is {"epoch": E, "batch": K}, the next batch the loop
    will see, for any num_workers, after a break too; a whole pass goes on
    to the next epoch. load_state_dict() / set_epoch() as Batches' (with
    the current epoch set_epoch keeps a resumed position). The dataset's
    own state_dict() says the same. Every other DataLoader argument
    (num_workers, pin_memory, persistent_workers, prefetch_factor,
    multiprocessing_context, timeout, ...) passes through.

        loader = batchfs.DataLoader(batchfs.IterableDataset(mnt),
                                    num_workers=4)
        loader.load_state_dict(saved)     # when resuming
        for batch in loader:
            ...
            saved = loader.state_dict()   # resumes after this batch
    """

    def __init__(self, dataset, batch_size=None, **kwargs):
        if not isinstance(dataset, IterableDataset):
            raise TypeError("batchfs.DataLoader reads a "
                            "batchfs.IterableDataset, not %s"
                            % type(dataset).__name__)
        if batch_size is not None:
            raise ValueError("batchfs.DataLoader: batch_size must be None "
                             "(the mount's batch files are the batches: "
                             "mount with --batch-size %r instead)"
                             % (batch_size,))
        super().__init__(dataset, batch_size=None, **kwargs)

    def __iter__(self):
        ds = self.dataset
        epoch, start = ds._drive()
        k = start
        for batch in super().__iter__():
            k += 1
            ds._received(epoch, k)
            yield batch
        ds._received(epoch, ds.batches._len_of(epoch))

    def set_epoch(self, epoch):
        self.dataset.set_epoch(epoch)

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state)
