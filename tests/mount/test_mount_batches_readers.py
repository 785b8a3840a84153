#!/usr/bin/python3
"""The readers batchfs ships take the fastest path of any mount and give
the batch files' bytes. On real mounts, in every serve mode:
- every reader, batchfs.Batches() (its defaults: the stream or the batch
  files by batch size), Batches(stream=False), Batches(stream=True),
  Batches(zero_copy=True), each with one reader (readers=1: one batch
  at a time, no thread) and with 4 reader threads (and the stream read
  in ranges of one batch each), read_batch (read, and mapped),
  batchfs.DataLoader over an IterableDataset (no workers with 1 and 4
  readers, and two workers in the default mode) and the C loader (host
  mode), yields for each batch exactly the bytes of that batch file read
  plainly, for fixed fields, a ragged field and each rank of a
  multi-rank mount, over two epochs;
- an iteration with reader threads broken off mid-epoch leaves no reader
  thread running (Batches' three ways, IterableDataset under
  DataLoader), nor does a whole one; its state_dict() counts the
  batches yielded, not those read ahead, and a state_dict() /
  load_state_dict() / start_batch round trip with 4 readers gives the
  batches of one reader;
- the readers that read batch files open them with O_DIRECT and the mount
  serves those opens with direct I/O (stats: direct_opens counts them;
  the C loader counts its own), and in passthrough mode registers no
  backing file for them;
- an O_DIRECT open and a plain open of the same batch at once, in either
  order, read the same bytes, and the plain one maps (mmap, as
  numpy.memmap does; passthrough, push, cache);
- numpy.memmap of a batch file of a default mount works, before and
  after batchfs's own readers read that batch;
- batches held (whole, or a single tensor or array of one) stay
  unchanged while the reader reads on into buffers it reuses, small
  ones and huge-page mappings (which large batch files get: a buffer of
  2 MiB or more starts on a 2 MiB boundary of a mapping advised
  MADV_HUGEPAGE, unmapped with its last view); a reader's buffers serve
  the next reader of the process once it is let go, held ones never;
- a mount that refuses O_DIRECT (BATCHFS_DEBUG_NO_DIRECT_OPEN: the open
  fails with EINVAL, as on a file system without it) still gives every
  reader the same bytes: they fall back to plain opens (direct_opens and
  the loader's count stay 0);
- a batch file copied off the mount to a disk file system is read by
  read_batch and the C loader with plain opens (O_DIRECT there would
  bypass the page cache), and gives the same bytes."""
import errno
import os
import sys
import threading
import time

import mountlib as ml

import numpy as np
import torch

import batchfs
from batchfs import _batchfile, _batches
from batchfs._batchfile import parse_batch
from batchfs._readers import THREAD_PREFIX

ml.require_fuse()
TMP = ml.TMP
N, BATCH, EPOCHS = 45, 8, 2
failures = []


def dataset(kind):
    """(archive path, mount options) of each dataset kind."""
    g = torch.Generator().manual_seed(9)
    d = {"x": torch.randn(N, 3, 5, generator=g), "y": torch.arange(N) * 3}
    opts = []
    if kind == "ragged":
        lens = torch.randint(0, 9, (N,), generator=g)
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
        d["tok.values"] = torch.randint(0, 1000, (int(offs[-1]),),
                                        generator=g)
        d["tok.offsets"] = offs
        opts = ["--pad", "tok"]
    if kind == "ranks":
        opts = ["--world-size", 2, "--ranks", "all"]
    path = os.path.join(TMP, "readers-%s.pt" % kind)
    torch.save(d, path)
    return path, opts


def as_bytes(batch):
    """{name: bytes} of a batch dict (numpy arrays or torch tensors)."""
    out = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            v = v.contiguous().view(torch.uint8).numpy() if v.dtype in (
                torch.bfloat16,) else v.numpy()
        out[k] = np.ascontiguousarray(v).tobytes()
    return out


def want_of(root, epochs):
    """{epoch: [{name: bytes}, ...]} of the batch files under root, read
    plainly (open + read: the mount's mode serves them)."""
    out = {}
    for e in epochs:
        d = "%s/epoch/%d" % (root, e)
        out[e] = [as_bytes(parse_batch(np.frombuffer(
            ml.read_file("%s/batch_%d" % (d, k)), np.uint8).copy(), None, d))
            for k in range(len(os.listdir(d)))]
    return out


def loader_batches(root, e):
    """The C loader's batches of epoch e (host mode) as {name: bytes},
    and the files it opened with O_DIRECT."""
    from batchfs_loader import Loader
    ld = Loader("%s/epoch/%d" % (root, e), device="cpu")
    got = [as_bytes(b) for b in ld]
    return got, ld.stats().get("direct_files", 0)


def readers(mnt, root, rank, workers):
    """(name, epoch -> list of {name: bytes}) of every reader."""
    def batches(**kw):
        return lambda e: [as_bytes(b) for b in batchfs.Batches(
            mnt, epoch=e, rank=rank, device="cpu", **kw)]

    def one_batch_ranges(e):
        """Batches(stream=True, readers=4) with a stream range per
        batch: many ranges in flight, each handed over in order."""
        old, _batches.RANGE_BYTES = _batches.RANGE_BYTES, 1
        try:
            return batches(stream=True, readers=4)(e)
        finally:
            _batches.RANGE_BYTES = old

    def loader(workers, **kw):
        def run(e):
            ds = batchfs.IterableDataset(mnt, epoch=e, rank=rank, **kw)
            return [as_bytes(b) for b in batchfs.DataLoader(
                ds, num_workers=workers)]
        return run

    def read_batch(zero_copy):
        return lambda e: [as_bytes(batchfs.read_batch(
            "%s/epoch/%d/batch_%d" % (root, e, k), zero_copy=zero_copy))
            for k in range(len(os.listdir("%s/epoch/%d" % (root, e))))]

    out = []
    for n in (1, 4):
        out += [("Batches(readers=%d)" % n, batches(readers=n)),
                ("Batches(stream=False, readers=%d)" % n,
                 batches(stream=False, readers=n)),
                ("Batches(stream=True, readers=%d)" % n,
                 batches(stream=True, readers=n)),
                ("Batches(zero_copy=True, readers=%d)" % n,
                 batches(zero_copy=True, readers=n)),
                ("DataLoader(IterableDataset(readers=%d)), 0 workers" % n,
                 loader(0, readers=n))]
    out += [("Batches(stream=True, readers=4), a range per batch",
             one_batch_ranges),
            ("read_batch", read_batch(False)),
            ("read_batch(zero_copy=True)", read_batch(True)),
            ("C loader", lambda e: loader_batches(root, e)[0])]
    if workers:
        out.append(("DataLoader(IterableDataset), %d workers" % workers,
                    loader(workers)))
    return out


def every_reader_gives_the_batch_files(kind, mode, env=None):
    path, opts = dataset(kind)
    _, mnt = ml.mount(path, None, "--batch-size", BATCH, "--shuffle",
                      "--seed", 3, "--epochs", EPOCHS, "--serve", mode,
                      *opts, env=env)
    refused = bool(env)
    try:
        ranks = [0, 1] if kind == "ranks" else [None]
        for rank in ranks:
            root = mnt if rank is None else "%s/rank/%d" % (mnt, rank)
            want = want_of(root, range(EPOCHS))
            workers = 2 if mode == ml.serve_modes()[0] and \
                kind == "fixed" else 0
            for name, read in readers(mnt, root, rank, workers):
                before = ml.stats(mnt)

                def run():
                    for e in range(EPOCHS):
                        got = read(e)
                        assert got == want[e], (
                            "%s, epoch %d: %d batches, %d differ"
                            % (name, e, len(got), sum(
                                a != b for a, b in zip(got, want[e]))))
                err = ml.bounded(mnt, [run])[0]
                if err is not None:
                    raise err
                after = ml.stats(mnt)
                files = sum(len(w) for w in want.values())
                opened = after.get("direct_opens", 0) - \
                    before.get("direct_opens", 0)
                reads_files = name.startswith("Batches(stream=False") or \
                    name in ("read_batch", "C loader") or \
                    name.endswith("%d workers" % workers) and workers
                if refused:
                    assert opened == 0, (name, opened)
                elif reads_files:
                    assert opened >= files, (name, opened, files)
                    if mode == "passthrough":
                        assert after["backing_opened"] == \
                            before["backing_opened"], (name, before, after)
            if not refused:
                assert loader_batches(root, 0)[1] == len(want[0])
            else:
                assert loader_batches(root, 0)[1] == 0
        print("ok: every reader, %s (--serve %s%s)"
              % (kind, mode, ", O_DIRECT refused" if refused else ""))
    except AssertionError as ex:
        failures.append("%s --serve %s%s: %r" % (
            kind, mode, " (O_DIRECT refused)" if refused else "", ex))
    finally:
        if ml.is_mounted(mnt):
            ml.umount(mnt)


def read_fd(fd, size):
    return os.pread(fd, size + 4096, 0)


def both_opens_at_once(mode):
    """An O_DIRECT open and a plain open of one batch, in either order:
    the same bytes, and the plain one maps."""
    path, _ = dataset("fixed")
    _, mnt = ml.mount(path, None, "--batch-size", BATCH, "--serve", mode)
    try:
        def run():
            for k, first_direct in ((1, False), (2, True), (3, False)):
                p = "%s/epoch/0/batch_%d" % (mnt, k)
                want = ml.read_file(p)
                flags = [os.O_RDONLY, os.O_RDONLY | os.O_DIRECT]
                if first_direct:
                    flags.reverse()
                fds = [os.open(p, f) for f in flags]
                try:
                    for fd in fds:
                        assert read_fd(fd, len(want)) == want, (k, fds)
                    plain = fds[0] if not first_direct else fds[1]
                    if mode != "direct":  # direct I/O refuses MAP_SHARED
                        m = np.memmap(p, np.uint8, "r")
                        assert m.tobytes() == want
                        del m
                        import mmap
                        mm = mmap.mmap(plain, 0, prot=mmap.PROT_READ)
                        assert mm[:] == want
                        mm.close()
                    # a third, O_DIRECT, while both are open
                    fd3 = os.open(p, os.O_RDONLY | os.O_DIRECT)
                    assert read_fd(fd3, len(want)) == want
                    os.close(fd3)
                finally:
                    for fd in fds:
                        os.close(fd)
        err = ml.bounded(mnt, [run])[0]
        if err is not None:
            raise err
        print("ok: an O_DIRECT and a plain open at once (--serve %s)" % mode)
    except (AssertionError, OSError) as ex:
        failures.append("both opens --serve %s: %r" % (mode, ex))
    finally:
        if ml.is_mounted(mnt):
            ml.umount(mnt)


def memmap_on_a_default_mount():
    """numpy.memmap of batch files of a default mount: their bytes,
    before and after Batches read them (O_DIRECT)."""
    path, _ = dataset("fixed")
    _, mnt = ml.mount(path, None, "--batch-size", BATCH, "--shuffle")
    try:
        def run():
            for k in range(3):
                p = "%s/epoch/0/batch_%d" % (mnt, k)
                want = ml.read_file(p)
                assert np.memmap(p, np.uint8, "r").tobytes() == want
                got = batchfs.Batches(mnt, stream=False).read(0, k)
                assert as_bytes(got) == as_bytes(parse_batch(
                    np.frombuffer(want, np.uint8).copy(), None, p))
                assert np.memmap(p, np.uint8, "r").tobytes() == want
        err = ml.bounded(mnt, [run])[0]
        if err is not None:
            raise err
        print("ok: numpy.memmap of batch files of a default mount (%s)"
              % ml.stats(mnt)["serve_mode"])
    except AssertionError as ex:
        failures.append("memmap on a default mount: %r" % (ex,))
    finally:
        if ml.is_mounted(mnt):
            ml.umount(mnt)


def held_batches_stay_unchanged(huge=None):
    """Batches reuse the buffers of batches nobody holds: every batch
    kept (a whole dict, one tensor of it, a numpy array of it, a slice)
    while the epoch is read on still has its bytes at the end. huge:
    _batchfile.HUGE lowered to it, so that the buffers are huge-page
    mappings (those of large batch files)."""
    path, _ = dataset("fixed")
    _, mnt = ml.mount(path, None, "--batch-size", BATCH, "--shuffle",
                      "--epochs", 2)
    try:
        def run():
            want = want_of(mnt, [0, 1])
            for kw, device in ((dict(stream=False), "cpu"),
                               (dict(stream=True), "cpu"),
                               (dict(stream=False), None)):
                kept = []
                for e in (0, 1):
                    for k, b in enumerate(batchfs.Batches(
                            mnt, epoch=e, device=device, **kw)):
                        how = k % 4
                        if how == 0:
                            kept.append((e, k, None, b))
                        elif how == 1:
                            kept.append((e, k, "x", b["x"]))
                        elif how == 2:
                            kept.append((e, k, "y", b["y"][1:]))
                        del b
                for e, k, name, got in kept:
                    w = want[e][k]
                    if name is None:
                        assert as_bytes(got) == w, (kw, e, k)
                    elif name == "y":
                        assert as_bytes({"y": got})["y"] == \
                            w["y"][np.dtype("<i8").itemsize:], (kw, e, k)
                    else:
                        assert as_bytes({name: got})[name] == w[name], \
                            (kw, e, k)
        old, _batchfile.HUGE = _batchfile.HUGE, huge or _batchfile.HUGE
        try:
            err = ml.bounded(mnt, [run])[0]
        finally:
            _batchfile.HUGE = old
        if err is not None:
            raise err
        print("ok: batches held stay unchanged while reading on%s"
              % (" (buffers in huge-page mappings)" if huge else ""))
    except AssertionError as ex:
        failures.append("held batches%s: %r"
                        % (" (huge-page buffers)" if huge else "", ex))
    finally:
        if ml.is_mounted(mnt):
            ml.umount(mnt)


def vm_flags(addr):
    """The VmFlags of the mapping of this process holding addr."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return None


def huge_page_buffers():
    """_batchfile.aligned: from HUGE bytes on, a buffer starts on a 2 MiB
    boundary in a mapping advised MADV_HUGEPAGE (VmFlags "hg"), holds
    what is written to it, and the mapping goes once nothing views it;
    smaller ones start on a page."""
    try:
        size = 2 * _batchfile.HUGE + 5
        b = _batchfile.aligned(size)
        addr = b.ctypes.data
        assert len(b) == size and addr % _batchfile.HUGE == 0, \
            (len(b), addr)
        assert "hg" in (vm_flags(addr) or []), vm_flags(addr)
        b[:] = np.arange(size, dtype=np.uint64).astype(np.uint8)
        view = b[size - 10:]
        del b
        assert view.tolist() == [(size - 10 + i) % 256 for i in range(10)]
        del view
        assert vm_flags(addr) is None, "mapping left after its last view"
        small = _batchfile.aligned(1000)
        assert len(small) == 1000 and \
            small.ctypes.data % _batchfile.PAGE == 0
        print("ok: buffers of 2 MiB and more are huge-page mappings, "
              "unmapped with their last view")
    except AssertionError as ex:
        failures.append("huge-page buffers: %r" % (ex,))


def spares_serve_the_next_reader():
    """A Buffers let go (a Batches() over an epoch ends) leaves its buffers
    to the process's spares: the next one's first buffer is memory the
    first used and nobody holds; one still viewed is never handed out,
    and keeps its bytes."""
    try:
        _batchfile._spares[:] = []
        first = _batchfile.Buffers(2)
        free, held = first(70000), first(80000)
        was_free, was_held = free.ctypes.data, held.ctypes.data
        held[:] = 7
        del free, first
        second = _batchfile.Buffers(2)
        a = second(60000)
        assert a.ctypes.data == was_free and len(a) == 60000, \
            (a.ctypes.data, was_free, was_held)
        b = second(60000)
        assert b.ctypes.data not in (was_free, was_held), \
            "a held buffer was handed out again"
        b[:] = 9
        assert (held == 7).all(), "a held buffer was written"
        del a, b, second
        _batchfile._spares[:] = []
        print("ok: a reader's buffers serve the next reader (held ones "
              "never)")
    except AssertionError as ex:
        failures.append("spare buffers: %r" % (ex,))


def reader_threads():
    return [t.name for t in threading.enumerate()
            if t.name.startswith(THREAD_PREFIX)]


def no_reader_threads(what):
    """Wait (at most 10 s) for every reader thread to be gone; an
    AssertionError naming those left."""
    end = time.monotonic() + 10
    while reader_threads() and time.monotonic() < end:
        time.sleep(0.05)
    left = reader_threads()
    assert not left, "%s: reader threads left running: %r" % (what, left)


def readers_stop_and_resume():
    """Reader threads end with their iteration, whole or broken off (no
    thread left), a break leaves state_dict() at the batches yielded, and
    resuming with 4 readers (state_dict / load_state_dict, start_batch)
    gives the batches of one reader."""
    path, _ = dataset("ragged")
    _, mnt = ml.mount(path, None, "--batch-size", BATCH, "--shuffle",
                      "--epochs", 3, "--pad", "tok")
    try:
        def run():
            want = want_of(mnt, [0, 1, 2])
            n = len(want[0])
            assert not reader_threads(), reader_threads()
            for kw in (dict(stream=False), dict(stream=True),
                       dict(zero_copy=True)):
                what = "Batches(%r, readers=4)" % kw
                bs = batchfs.Batches(mnt, readers=4, **kw)
                for k, b in enumerate(bs):
                    assert as_bytes(b) == want[0][k], (what, k)
                    if k == 2:
                        assert reader_threads(), "%s: no reader thread" \
                            % what
                        break
                del b
                no_reader_threads(what + ", broken off at batch 2")
                state = bs.state_dict()
                assert state == {"epoch": 0, "batch": 3}, (what, state)
                # the rest of epoch 0, then epoch 1, whole
                got = [as_bytes(b) for b in bs] + [as_bytes(b) for b in bs]
                assert got == want[0][3:] + want[1], what
                no_reader_threads(what + ", whole epochs")
                # a round trip mid-epoch: 4 readers give 1 reader's
                for state in ({"epoch": 1, "batch": 4},
                              {"epoch": 2, "batch": n - 2},
                              {"epoch": 2, "batch": 0}):
                    runs = []
                    for r in (1, 4):
                        b1 = batchfs.Batches(mnt, readers=r, **kw)
                        b1.load_state_dict(state)
                        it = iter(b1)
                        first = as_bytes(next(it))
                        saved = b1.state_dict()
                        del it
                        b2 = batchfs.Batches(mnt, readers=r, **kw)
                        b2.load_state_dict(saved)
                        rest = [as_bytes(b) for b in b2]
                        b3 = batchfs.Batches(mnt, epoch=state["epoch"],
                                             start_batch=state["batch"],
                                             readers=r, **kw)
                        runs.append((first, saved, rest,
                                     [as_bytes(b) for b in b3]))
                    e, k = state["epoch"], state["batch"]
                    assert runs[0] == runs[1], (what, state)
                    assert runs[1][0] == want[e][k], (what, state)
                    assert runs[1][2] == want[e][k + 1:], (what, state)
                    assert runs[1][3] == want[e][k:], (what, state)
                no_reader_threads(what + ", resumed")
            # IterableDataset under DataLoader (no workers), broken off
            ds = batchfs.IterableDataset(mnt, readers=4)
            loader = batchfs.DataLoader(ds)
            for k, b in enumerate(loader):
                assert as_bytes(b) == want[0][k], k
                if k == 1:
                    break
            del b
            no_reader_threads("DataLoader(IterableDataset(readers=4))")
            assert loader.state_dict() == {"epoch": 0, "batch": 2}, \
                loader.state_dict()
            assert [as_bytes(b) for b in loader] == want[0][2:]
            no_reader_threads("DataLoader(IterableDataset(readers=4)), "
                              "whole")
            # readers=1 starts no thread
            for b in batchfs.Batches(mnt, readers=1, stream=False):
                assert not reader_threads(), reader_threads()
                break
            assert batchfs.Batches(mnt).readers == max(4, min(8, os.sysconf(
                "SC_NPROCESSORS_ONLN") // 2))
            for bad in (0, -1, "4", 2.5):
                try:
                    batchfs.Batches(mnt, readers=bad)
                    raise AssertionError("readers=%r taken" % (bad,))
                except ValueError as ex:
                    assert "readers=" in str(ex), ex
        err = ml.bounded(mnt, [run])[0]
        if err is not None:
            raise err
        print("ok: reader threads end with their iteration; resuming with "
              "4 readers gives 1 reader's batches")
    except AssertionError as ex:
        failures.append("readers stop and resume: %r" % (ex,))
    finally:
        if ml.is_mounted(mnt):
            ml.umount(mnt)


def o_direct_refused_is_einval():
    path, _ = dataset("fixed")
    _, mnt = ml.mount(path, None, "--batch-size", BATCH,
                      env={"BATCHFS_DEBUG_NO_DIRECT_OPEN": "1"})
    try:
        try:
            os.close(os.open(mnt + "/epoch/0/batch_0",
                             os.O_RDONLY | os.O_DIRECT))
            failures.append("BATCHFS_DEBUG_NO_DIRECT_OPEN: O_DIRECT open "
                            "of a batch file succeeded")
        except OSError as e:
            if e.errno != errno.EINVAL:
                failures.append("O_DIRECT refused with %r, want EINVAL"
                                % e)
        # other files and plain opens are untouched
        assert ml.read_file(mnt + "/epoch/0/batch_0")
        print("ok: BATCHFS_DEBUG_NO_DIRECT_OPEN refuses O_DIRECT (EINVAL)")
    finally:
        ml.umount(mnt)


def copies_on_disk_are_opened_plainly():
    """read_batch and the C loader ask for O_DIRECT on FUSE only: a copy
    of a mount's batch files on disk (here ext4, whose O_DIRECT reads of
    these whole-page sizes would succeed and skip the page cache) is
    opened plainly, read right."""
    import shutil
    path, _ = dataset("fixed")
    _, mnt = ml.mount(path, None, "--batch-size", BATCH)
    copy = os.path.join(TMP, "copied-epoch")
    try:
        os.makedirs(copy, exist_ok=True)
        for k in range(2):
            shutil.copyfile("%s/epoch/0/batch_%d" % (mnt, k),
                            "%s/batch_%d" % (copy, k))
        ml.umount(mnt)
        assert not _batchfile.on_fuse(copy)
        seen, real_open = [], os.open

        def spy(p, flags, *a, **kw):
            seen.append(flags)
            return real_open(p, flags, *a, **kw)
        os.open = spy
        try:
            got = batchfs.read_batch(copy + "/batch_0", zero_copy=False)
        finally:
            os.open = real_open
        assert seen and not any(f & os.O_DIRECT for f in seen), seen
        want = [as_bytes(parse_batch(np.frombuffer(ml.read_file(
            "%s/batch_%d" % (copy, k)), np.uint8).copy(), None, copy))
            for k in range(2)]
        assert as_bytes(got) == want[0]
        from batchfs_loader import Loader
        ld = Loader(copy, device="cpu")
        assert [as_bytes(b) for b in ld] == want
        direct = ld.stats().get("direct_files", 0)
        assert direct == 0, "C loader: %d files opened with O_DIRECT" \
            % direct
        print("ok: batch files on disk are opened plainly (read_batch, "
              "C loader)")
    except AssertionError as ex:
        failures.append("copies on disk: %r" % (ex,))
    finally:
        if ml.is_mounted(mnt):
            ml.umount(mnt)


def main():
    modes = ml.serve_modes()
    for mode in modes:
        for kind in ("fixed", "ragged", "ranks"):
            every_reader_gives_the_batch_files(kind, mode)
        both_opens_at_once(mode)
    o_direct_refused_is_einval()
    for kind in ("fixed", "ranks"):
        every_reader_gives_the_batch_files(
            kind, modes[0], env={"BATCHFS_DEBUG_NO_DIRECT_OPEN": "1"})
    memmap_on_a_default_mount()
    held_batches_stay_unchanged()
    held_batches_stay_unchanged(huge=_batchfile.PAGE)
    huge_page_buffers()
    spares_serve_the_next_reader()
    readers_stop_and_resume()
    copies_on_disk_are_opened_plainly()
    return ml.finish(failures)


sys.exit(main())
