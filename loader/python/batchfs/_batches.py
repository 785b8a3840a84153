"""batchfs.Batches: the batches of a mount, epoch after epoch, resumable."""
import os
import sys

from ._batchfile import Buffers, load, parse_batch
from ._elastic import Elastic
from ._paths import MountWatch, dataset_of_root
from ._readers import check_readers, in_order, stream_readers
from ._stream import CHUNK, StreamReader, stream_offset, stream_offsets

# Entries of the epoch's directory listed ahead of the batch being opened.
LIST_AHEAD = 64


class _Listing:
    """The epoch's directory, read a little ahead of the batches opened.
    Listing a batchfs directory brings each entry into the kernel's cache
    with its attributes (READDIRPLUS), so opening a listed batch costs one
    round trip to the daemon (OPEN) instead of two (LOOKUP, OPEN): see
    "Listing ahead" in loader/python/batchfs/README.md. Entries come
    in batch order, lazily (os.scandir), so only what is opened soon is
    listed; any failure just stops the listing."""

    def __init__(self, path):
        self._it, self._seen = None, 0
        try:
            self._it = os.scandir(path)
        except OSError:
            pass

    def past(self, k):
        """List until batch k + LIST_AHEAD (or the end)."""
        while self._it is not None and self._seen <= k + LIST_AHEAD:
            try:
                next(self._it)
                self._seen += 1
            except (StopIteration, OSError):
                self.close()

    def close(self):
        if self._it is not None:
            self._it.close()
            self._it = None


# By default (Batches(stream=None)) the batches come from the epoch's
# stream when their files are at most STREAM_MAX_BYTES and their rows
# average under ZERO_COPY_ROW bytes a field; otherwise from the batch
# files, one O_DIRECT read each (rows of 4 KiB and more are then replied
# straight from the archive: fs/serve_direct.c). Measured in
# loader/python/batchfs/README.md (streams or batch files).
STREAM_MAX_BYTES = 1 << 20
ZERO_COPY_ROW = 4096

# With reader threads a stream is read in ranges of whole batches of at
# most this many bytes (or one batch, when larger), one preadv each.
RANGE_BYTES = CHUNK


def batch_bytes(info):
    """(the size of a full batch file of the mount whose dataset.json is
    'info', roughly: the header's page and the rows; the mean bytes of a
    field's row)."""
    rows = [int(f.get("row_bytes") or 0) for f in info.get("fields", [])]
    return (4096 + int(info.get("batch_size", 0)) * sum(rows),
            sum(rows) / max(1, len(rows)))


def _env_int(name):
    v = os.environ.get(name)
    try:
        return None if v is None else int(v)
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (name, v)) from None


def _process_group():
    """(rank, world size, what says so) of torch.distributed's default
    process group when one is initialised in this process, as
    DistributedSampler takes them (init_process_group(rank=r, ...) under
    mp.spawn sets no RANK); else $RANK and $WORLD_SIZE (torchrun sets
    them), each None when unset. torch is not imported for it: a process
    group needs torch imported already."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and \
                dist.is_initialized():
            return (dist.get_rank(), dist.get_world_size(),
                    "torch.distributed.get_rank()")
    except (RuntimeError, ValueError):
        pass
    return _env_int("RANK"), _env_int("WORLD_SIZE"), "RANK"


def pick_rank(path, info, rank, whole_dataset=False):
    """The rank a process reads from the mount at 'path' (dataset.json:
    'info'): 'rank' if given, else torch.distributed.get_rank() when a
    process group is initialised, else $RANK (torchrun sets it, and
    WORLD_SIZE) on a mount of several ranks (`--ranks`); None on a mount
    that is not distributed. A rank the mount does not serve, or a world
    size (the process group's, or WORLD_SIZE) other than the mount's, is
    a ValueError that says what to do; so is a mount that is not
    distributed read by one of several ranks (world size > 1, or rank= 1
    or more), which would give every rank every batch, unless
    whole_dataset=True says that is the aim."""
    world, ranks = info.get("world_size", 1), info.get("ranks", [0])
    env_rank, env_world, source = _process_group()
    world_name = "WORLD_SIZE" if source == "RANK" else \
        "torch.distributed.get_world_size()"
    if world == 1 and not info.get("rank_dirs"):
        if rank is not None:
            rank = int(rank)
        if not whole_dataset and ((env_world or 1) > 1 or (rank or 0) > 0):
            raise ValueError(_whole_dataset_message(
                path, env_world, env_rank if rank is None else rank,
                "rank=%d" % rank if rank is not None else None, source,
                world_name))
        return rank
    if env_world is not None and env_world != world:
        raise ValueError(
            "%s serves a DistributedSampler of world size %d, but "
            "%s=%d: mount with --world-size %d" %
            (path, world, world_name, env_world, env_world))
    said = "rank=%s" % rank
    if rank is None:
        rank, said = env_rank, "%s=%s" % (source, env_rank)
    if rank is None:
        if len(ranks) > 1:
            raise ValueError(
                "%s serves ranks %s of %d: say which with rank=R, set "
                "RANK (torchrun does), or initialise torch.distributed "
                "first" % (path, _ranges(ranks), world))
        rank = ranks[0]
    rank = int(rank)
    if not 0 <= rank < world:
        raise ValueError(
            "%s is not a rank of %s: its world size is %d (ranks 0..%d)%s"
            % (said, path, world, world - 1,
               "; RANK must be below WORLD_SIZE=%d" % env_world
               if env_world is not None and source == "RANK" else ""))
    if rank not in ranks:
        how = ("mount with --ranks all (one mount for every rank)"
               if info.get("rank_dirs") else
               "mount with --ranks all to serve every rank from one mount, "
               "or one mount per rank with --rank")
        raise ValueError("%s serves rank%s %s of %d, not rank %d: %s" %
                         (path, "s" if len(ranks) > 1 else "",
                          _ranges(ranks), world, rank, how))
    return rank


def _whole_dataset_message(path, world, rank, rank_arg, source="RANK",
                           world_name="WORLD_SIZE"):
    """What to say when one of several ranks (world: the world size, or
    None; rank: rank=, the process group's or $RANK, or None; source,
    world_name: what said them) reads a mount that is not distributed:
    the options that split it."""
    w = str(world) if world and world > 1 else "W"
    r = "R" if rank is None else str(rank)
    said = ", ".join(x for x in (
        rank_arg or (None if rank is None else "%s=%d" % (source, rank)),
        None if w == "W" else "%s=%s" % (world_name, w)) if x)
    return ("%s was mounted without --world-size: it serves the whole "
            "dataset, but this process is %s (%s), so every rank would read "
            "every batch. Mount with `batchfs mount ... --world-size %s "
            "--ranks all` (one mount for every rank of the node, read from "
            "rank/$RANK/) or `batchfs mount ... --world-size %s --rank %s` "
            "(one mount per rank); or pass whole_dataset=True to read the "
            "whole dataset on every rank on purpose"
            % (path, "one of %s ranks" % w if rank is None else
               "rank %s" % r + ("" if w == "W" else " of " + w), said, w,
               w, r))


def _ranges(ranks):
    """[0, 1, 2, 5] -> "0-2,5"."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else
                   "%d-%d" % (ranks[i], ranks[j]))
        i = j + 1
    return ",".join(out)


class Batches:
    """Iterate a mount's batches as dicts name -> array: numpy arrays
    (device=None) or torch tensors on 'device' ("cpu", "cuda", ...).

    An iteration yields one epoch, from batch 'start_batch' of epoch
    'epoch' on; the next iteration goes on from where it stopped: the
    next epoch after a whole one (as `for epoch ...: for batch in loader`
    expects), the next batch after a break. set_epoch(n) makes the next
    iteration epoch n (as DistributedSampler.set_epoch; calling it with
    the current epoch keeps a resumed position). state_dict() /
    load_state_dict() save and restore (epoch, next batch). len() is the
    batches per epoch. One iteration at a time.

    On a mount of several ranks (`batchfs mount --world-size W --ranks
    LIST`) it reads rank 'rank', or when rank is None the rank of
    torch.distributed's process group once one is initialised (as
    DistributedSampler: mp.spawn with init_process_group(rank=r)), else
    $RANK (torchrun sets RANK and WORLD_SIZE); .rank says which. A rank
    the mount does not serve, or a world size other than the mount's, is
    a ValueError. On a mount of one rank (`--rank R`) a rank or world
    size that says otherwise is one too. A mount without ranks (no
    --world-size) serves the whole dataset: read by one of several ranks
    (a world size > 1, as under torchrun, or rank= 1 or more) it is a
    ValueError naming the
    mount options that split it (--world-size W --ranks all, or
    --world-size W --rank R), unless whole_dataset=True: every rank then
    reads every batch, on purpose.

    Each batch comes the fastest way the mount has (README.md in this
    package: which path each reader takes). stream=True reads each epoch
    from its stream file (stream/N: the batch files back to back, one
    open per epoch) in large reads, the arrays viewing those reads'
    buffers; stream=False reads each batch file into memory its arrays
    own, with one O_DIRECT read sized to the file (a batchfs mount serves
    such an open with direct I/O in every serve mode: from the daemon's
    gathered buffer, or for rows of 4 KiB and more straight from the
    archive; where O_DIRECT is refused, a plain open and read). The
    default, stream=None, takes the stream for batch files of at most
    1 MiB of small rows, and the batch files otherwise. With DataLoader
    workers (IterableDataset) each worker reads batch files.
    zero_copy=True maps the batch files instead (mmap, copy-on-write)
    where the mount's serve mode allows it (passthrough, push, cache:
    dataset.json's serve_mode; direct reads): no copy, but each page is a
    page fault when first touched and the mapping is torn down when the
    batch goes, which cost more than the copy on the machines measured
    once the arrays are used (loader/python/batchfs/README.md); it pays
    when most of each batch is never read. Either way a batch stays valid
    and unchanged for as long as you hold it.

    An iteration reads ahead with 'readers' threads (None: half the
    online CPUs, 4 to 8, as the C loader's readers; for the stream, at
    most half the online CPUs, so one on 2 cores): that many batch
    files (read or mapped), or ranges of the stream (whole batches, 8
    MiB at most, where index/N/offsets says), are read at once, each
    into a buffer of its own, and the batches come out in order, exactly
    those and the bytes that readers=1 gives, which reads one batch at a
    time in the iterating thread and starts no thread. The threads are
    started when an iteration starts, in the process that iterates, and
    are gone when it ends or is abandoned (a break: the reads running
    finish, the others are never made). A read that fails raises in the
    iterating thread when its batch's turn comes, as it would have
    without threads; state_dict() counts the batches yielded, not those
    read ahead. read() always reads in the calling thread.

    'mountpoint' is the mount's root (where dataset.json is): another
    path (an epoch's directory, rank/R/, a directory that is no mount) is
    a ValueError that names the path it wants, e.g. Batches('/mnt/data',
    epoch=3). A negative epoch is a ValueError. When the mount is gone
    (its daemon exited, or it was unmounted) reading raises
    batchfs.MountGoneError, which names the mount and the daemon's log."""

    _API = "batchfs.Batches"   # in messages: what wants the mount's root

    def __init__(self, mountpoint, epoch=0, start_batch=0, device=None,
                 zero_copy=False, rank=None, stream=None,
                 whole_dataset=False, readers=None):
        self.readers = check_readers(readers)
        self._stream_readers = stream_readers(self.readers,
                                              readers is not None)
        self.path = os.fspath(mountpoint)
        info = dataset_of_root(self.path, self._API)
        self._watch = MountWatch(self.path, info.get("log"))
        self.rank = pick_rank(self.path, info, rank, whole_dataset)
        self._dir = self.path if not info.get("rank_dirs") else \
            "%s/rank/%d" % (self.path, self.rank)
        self._len = info["batches_per_epoch"]
        self._elastic = Elastic(info, self.path)
        self._epochs = info["epochs"]
        self.zero_copy = bool(zero_copy) and \
            info.get("serve_mode") != "direct"
        self.device = device
        self.stream = self._pick_stream(info, stream)
        self._direct = True      # ask for O_DIRECT (until refused)
        self._heads = {}         # headers parsed (parse_batch's cache)
        # buffers of batches nobody holds; one more per read in flight
        self._bufs = Buffers(Buffers.KEEP + self.readers)
        self.load_state_dict({"epoch": epoch, "batch": start_batch})

    def _pick_stream(self, info, stream):
        """Whether iterations read stream/N (one open per epoch) rather
        than the batch files: as asked, or (stream=None) where that is
        faster: small batch files of small rows (STREAM_MAX_BYTES,
        ZERO_COPY_ROW; loader/python/batchfs/README.md: streams or batch
        files, with the figures)."""
        has = "stream_path" in info
        if stream is None:
            size, row = batch_bytes(info)
            return has and not self.zero_copy and \
                size <= STREAM_MAX_BYTES and row < ZERO_COPY_ROW
        if stream and not has:
            raise ValueError("%s has no stream files (a batchfs older than "
                             "them): use stream=False" % self.path)
        if stream and self.zero_copy:
            raise ValueError("stream=True reads the stream; zero_copy=True "
                             "maps batch files: one or the other")
        return bool(stream)

    def __len__(self):
        """Batches of the current epoch (DataLoader's len(); the epoch an
        elastic resume starts in has fewer)."""
        return self._len_of(self._epoch)

    def _len_of(self, epoch):
        return self._elastic.len_of(epoch)

    @property
    def epoch(self):
        """The epoch the next iteration yields (or goes on with)."""
        self._roll()
        return self._epoch

    def _roll(self):
        if self._next >= self._len_of(self._epoch):
            self._epoch, self._next = self._epoch + 1, 0

    def _check_epoch(self, epoch):
        """int(epoch), or a ValueError for a negative one. (An epoch past
        the mount's --epochs fails when read: set_epoch(E) with E =
        epochs is what a loop does after the last one.)"""
        e = int(epoch)
        if e < 0:
            raise ValueError("epoch %d: epochs are numbered from 0 (the "
                             "mount has epochs 0..%d)"
                             % (e, self._epochs - 1))
        return e

    def set_epoch(self, epoch):
        """The next iteration yields epoch 'epoch' from its start, or from
        the resumed position when it is the current epoch already. A
        negative epoch is a ValueError."""
        e = self._check_epoch(epoch)
        self._roll()
        if e != self._epoch:
            self._epoch, self._next = e, 0

    def state_dict(self):
        """{"epoch": E, "batch": K}: the next iteration yields batch K of
        epoch E first. A --world-size mount adds where that is in the
        epoch's DistributedSampler list, for a restart on another number
        of ranks: "samples_seen" (what every rank has read when each read
        K batches), "list_world_size" (whose list), "world_size" and
        "resume_at" (the mount's --resume-at, or None)."""
        self._roll()
        state = {"epoch": self._epoch, "batch": self._next}
        if self._elastic.distributed:
            state.update(self._elastic.position(self._epoch, self._next))
        return state

    def load_state_dict(self, state):
        """Go on from state_dict()'s {"epoch": E, "batch": K}; a negative
        E, or a K outside 0..len(), is a ValueError. A state saved on a
        mount of another world size goes on from the start of this one's
        epoch E when this mount resumes E where the state stopped
        (--resume-at E:S:W, S its "samples_seen"; or S = 0); otherwise a
        ValueError gives the mount command that does. batchfs.resume_state
        picks, of every rank's state, the one all reached."""
        e, k = self._check_epoch(state["epoch"]), int(state["batch"])
        e, k = self._elastic.start_of(state, e, k)
        if not 0 <= k <= self._len_of(e):
            raise ValueError("batch %d: epoch %d has %d batches (0..%d)"
                             % (k, e, self._len_of(e), self._len_of(e) - 1))
        self._epoch, self._next = e, k
        self._roll()

    def batch_path(self, epoch, k):
        return "%s/epoch/%d/batch_%d" % (self._dir, epoch, k)

    def read(self, epoch, k):
        """Batch k of 'epoch' (any, in any order; the state is untouched).
        An epoch or batch the mount does not have is a ValueError; a mount
        that is gone (its daemon exited) a MountGoneError naming the mount
        and the daemon's log; a batch that fails with EIO for a reason the
        mount gives (stats: last_error, e.g. a source changed under it) a
        BatchReadError carrying that reason."""
        e, k = self._check_epoch(epoch), int(k)
        if e >= self._epochs:
            raise ValueError("epoch %d: the mount has epochs 0..%d (mount "
                             "with a larger --epochs)" % (e, self._epochs - 1))
        if not 0 <= k < self._len_of(e):
            raise ValueError("batch %d: epoch %d has %d batches (0..%d)"
                             % (k, e, self._len_of(e), self._len_of(e) - 1))
        return self._parse(e, k, lambda: self._load(e, k))

    def _load(self, e, k):
        """Batch file k of epoch e's bytes, read (or mapped), and whether
        to ask for O_DIRECT next time: the I/O alone, which a reader
        thread does."""
        return load(self.batch_path(e, k), self.zero_copy, self._direct,
                    self._bufs)

    def _parse(self, e, k, got):
        """The batch whose bytes got() returns (_load's answer: read here,
        or a reader thread's future.result()), in the caller's thread: a
        read that failed raises here as it would have read here
        (MountGoneError, BatchReadError, the OSError), and so does a file
        that is no batch file (ValueError)."""
        path = self.batch_path(e, k)
        try:
            buf, self._direct = got()
        except OSError as err:
            self._watch.check(err, path)
            raise
        return parse_batch(buf, self.device, path, cache=self._heads)

    def _indices(self, k):
        """The batch numbers an iteration from batch k yields (a
        DataLoader worker's share: batchfs.IterableDataset)."""
        return range(k, self._len_of(self._epoch))

    def _open_stream(self, path, at):
        """A StreamReader of the stream at path from byte 'at' on."""
        try:
            return StreamReader(path, at, self._bufs)
        except OSError as err:
            self._watch.check(err, path)
            raise

    def _stream_batch(self, reader, path, k):
        """Batch k, the next of reader's stream (at path), parsed."""
        try:
            buf, head = reader.next()
        except OSError as err:
            self._watch.check(err, "%s (batch %d)" % (path, k))
            raise
        if buf is None:
            raise OSError("%s ended before batch %d" % (path, k))
        return parse_batch(buf, self.device, "%s (batch %d)" % (path, k),
                           header=head)

    def _stream_batches(self, e, k):
        """Batches k, k+1, ... of epoch e from its stream file."""
        path = "%s/stream/%d" % (self._dir, e)
        reader = self._open_stream(path, stream_offset(
            "%s/index/%d" % (self._dir, e), k) if k else 0)
        try:
            for k in range(k, self._len_of(e)):
                yield k, self._stream_batch(reader, path, k)
        finally:
            reader.close()

    def _stream_ahead(self, e, k):
        """_stream_batches with reader threads: the epoch cut into ranges
        of whole batches of at most RANGE_BYTES (index/N/offsets says where
        each batch starts), self.readers ranges read at once, each with
        one preadv into a kept buffer, their batches handed out in
        order by one StreamReader (preload), which checks each header as
        it does its own reads. An offsets file that does not list the
        epoch's batches falls back to _stream_batches."""
        n = self._len_of(e)
        if k >= n:
            return
        path, index = ("%s/stream/%d" % (self._dir, e),
                       "%s/index/%d" % (self._dir, e))
        try:
            offs = stream_offsets(index, k, n)
        except (OSError, ValueError):
            offs = []
        if len(offs) != n - k + 1:
            yield from self._stream_batches(e, k)
            return
        reader = self._open_stream(path, offs[0])
        try:
            ranges, i = [], k
            while i < n:
                j = i + 1
                while j < n and \
                        offs[j + 1 - k] - offs[i - k] <= RANGE_BYTES:
                    j += 1
                ranges.append((i, j))
                i = j
            fd = reader._fd

            def read(r):
                lo, hi = offs[r[0] - k], offs[r[1] - k]
                buf, got = self._bufs(hi - lo), 0
                while got < hi - lo:
                    m = os.preadv(fd, [buf[got:]], lo + got)
                    if not m:
                        break
                    got += m
                return buf, got
            gen = in_order(ranges, read, self._stream_readers)
            try:
                for (i, j), fut in gen:
                    try:
                        buf, got = fut.result()
                        del fut
                        reader.preload(buf, got, offs[i - k])
                        del buf
                    except OSError as err:
                        self._watch.check(err, "%s (batch %d)" % (path, i))
                        raise
                    for b in range(i, j):
                        batch = self._stream_batch(reader, path, b)
                        yield b, batch
                        del batch
            finally:
                gen.close()
        finally:
            reader.close()

    def __iter__(self):
        self._roll()
        e = self._epoch
        if e >= self._epochs:
            raise ValueError("epoch %d: the mount has epochs 0..%d (mount "
                             "with a larger --epochs)" % (e, self._epochs - 1))
        if self.stream and type(self)._indices is Batches._indices:
            gen = (self._stream_batches if self._stream_readers == 1 else
                   self._stream_ahead)(e, self._next)
            try:
                for k, batch in gen:
                    if self._epoch == e:   # set_epoch() meanwhile: theirs
                        self._next = k + 1
                    yield batch
                    del batch
            finally:
                gen.close()
            if self._epoch == e:
                self._next = self._len_of(e)
                self._roll()
            return
        # From batch 0 only: from k, the listing would first list 0..k.
        listing = (_Listing("%s/epoch/%d" % (self._dir, e))
                   if self._next == 0 else None)
        gen = (((k, None) for k in self._indices(self._next))
               if self.readers == 1 else
               in_order(self._indices(self._next),
                        lambda k: self._load(e, k), self.readers,
                        listing.past if listing else None))
        try:
            for k, fut in gen:
                if fut is None:        # readers=1: one at a time, here
                    if listing:
                        listing.past(k)
                    batch = self.read(e, k)
                else:
                    batch = self._parse(e, k, fut.result)
                    del fut
                if self._epoch == e:   # set_epoch() meanwhile: theirs wins
                    self._next = k + 1
                yield batch
                del batch
        finally:
            gen.close()
            if listing:
                listing.close()
        if self._epoch == e:
            self._next = self._len_of(e)
            self._roll()
