#!/usr/bin/python3
"""The readers batchfs ships take the fastest path of any mount and give
the batch files' bytes. On real mounts, in every serve mode:
- every reader, batchfs.Batches() (its defaults: the stream or the batch
  files by batch size), Batches(stream=False), Batches(stream=True),
  read_batch (read, and mapped), batchfs.DataLoader over an
  IterableDataset (no workers, and two in the default mode) and the C
  loader (host mode), yields for each batch exactly the bytes of that
  batch file read plainly, for fixed fields, a ragged field and each rank
  of a multi-rank mount, over two epochs;
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
  unchanged while the reader reads on into buffers it reuses;
- a mount that refuses O_DIRECT (BATCHFS_DEBUG_NO_DIRECT_OPEN: the open
  fails with EINVAL, as on a file system without it) still gives every
  reader the same bytes: they fall back to plain opens (direct_opens and
  the loader's count stay 0)."""
import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mountlib as ml  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import batchfs  # noqa: E402  (mountlib put loader/python on the path)
from batchfs._batchfile import parse_batch  # noqa: E402

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

    def loader(e):
        ds = batchfs.IterableDataset(mnt, epoch=e, rank=rank)
        return [as_bytes(b) for b in batchfs.DataLoader(
            ds, num_workers=workers)]

    def read_batch(zero_copy):
        return lambda e: [as_bytes(batchfs.read_batch(
            "%s/epoch/%d/batch_%d" % (root, e, k), zero_copy=zero_copy))
            for k in range(len(os.listdir("%s/epoch/%d" % (root, e))))]

    return [("Batches()", batches()),
            ("Batches(stream=False)", batches(stream=False)),
            ("Batches(stream=True)", batches(stream=True)),
            ("read_batch", read_batch(False)),
            ("read_batch(zero_copy=True)", read_batch(True)),
            ("DataLoader(IterableDataset), %d workers" % workers, loader),
            ("C loader", lambda e: loader_batches(root, e)[0])]


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
                reads_files = name in ("Batches(stream=False)", "read_batch",
                                       "C loader") or \
                    (name.startswith("DataLoader") and workers)
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


def held_batches_stay_unchanged():
    """Batches reuse the buffers of batches nobody holds: every batch
    kept (a whole dict, one tensor of it, a numpy array of it, a slice)
    while the epoch is read on still has its bytes at the end."""
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
        err = ml.bounded(mnt, [run])[0]
        if err is not None:
            raise err
        print("ok: batches held stay unchanged while reading on")
    except AssertionError as ex:
        failures.append("held batches: %r" % (ex,))
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
    return ml.finish(failures)


sys.exit(main())
