#!/usr/bin/python3
"""A real mount serves every batch as valid safetensors whose bytes equal the
rows named by index/N/batch_K, taken from the archive by torch; every file's
st_size equals the bytes it yields; listings have len(DataLoader) entries;
inode numbers are below 2^32 and distinct on a small mount;
reads of any size/offset work; mmap(MAP_SHARED) works; the mount is
read-only and unknown names are ENOENT."""
import errno
import json
import mmap
import os
import threading

import mountlib as ml

import numpy as np
import torch

ml.require_fuse()
TMP = ml.TMP


def make_archive(path, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = {"images": torch.randint(0, 256, (n, 3, 8, 8), generator=g).to(torch.uint8),
         "labels": torch.randint(-2**40, 2**40, (n,), generator=g),
         "feat": torch.randn((n, 5), generator=g),
         "half": torch.randn((n, 2, 3), generator=g).to(torch.bfloat16),
         "flag": torch.randint(0, 2, (n,), generator=g).bool()}
    torch.save(d, path)
    return d


def check_batches_match_indices(mnt, data, epochs, nbatches):
    for e in range(epochs):
        for k in range(nbatches):
            idx = ml.read_index("%s/index/%d/batch_%d" % (mnt, e, k))
            meta, arrs = ml.read_batch("%s/epoch/%d/batch_%d" % (mnt, e, k))
            assert meta == {"format": "batchfs/1", "epoch": str(e),
                            "batch": str(k)}, meta
            assert set(arrs) == set(data)
            for name, t in data.items():
                ref = ml.torch_np(t[torch.tensor(idx, dtype=torch.long)])
                assert arrs[name].shape == ref.shape, (name, arrs[name].shape)
                assert arrs[name].tobytes() == ref.tobytes(), (e, k, name)


def check_sizes(mnt):
    for root, dirs, files in os.walk(mnt):
        if "/epoch/" in root + "/" and not root.endswith(("/0", "/1")):
            continue
        for f in files:
            p = os.path.join(root, f)
            st = os.stat(p)
            assert st.st_blksize == 1 << 20, p
            assert st.st_size == len(ml.read_file(p)), p


def check_reads(path):
    whole = ml.read_file(path)
    size = len(whole)
    fd = os.open(path, os.O_RDONLY)
    try:
        for off, n in [(0, 1), (0, 4096), (0, 1 << 20), (1, 4095), (4095, 3),
                       (4097, 65536), (size - 1, 10), (size - 7, 7),
                       (size, 10), (size + 12345, 4096), (12345, 1 << 20)]:
            assert os.pread(fd, n, off) == whole[off:off + n], (off, n)
        # sequential 1-byte reads over the header
        os.lseek(fd, 0, os.SEEK_SET)
        got = b"".join(os.read(fd, 1) for _ in range(100))
        assert got == whole[:100]
    finally:
        os.close(fd)


def check_concurrent(mnt, nbatches):
    paths = ["%s/epoch/2/batch_%d" % (mnt, k % nbatches) for k in range(6)]
    paths += [paths[0]] * 4  # same batch, several readers
    want = {p: ml.read_file(p) for p in set(paths)}
    errors = []

    def reader(p):
        try:
            for _ in range(3):
                if ml.read_file(p, chunk=65536) != want[p]:
                    errors.append(p)
        except Exception as ex:  # noqa: BLE001
            errors.append(repr(ex))

    ts = [threading.Thread(target=reader, args=(p,)) for p in paths]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def check_mmap(mnt, mode):
    p = mnt + "/epoch/4/batch_1"
    if mode == "direct":  # direct I/O: MAP_SHARED is refused (libfuse 3.14)
        with open(p, "rb") as f:
            expect_errno(lambda: mmap.mmap(f.fileno(), 0,
                                           access=mmap.ACCESS_READ),
                         errno.ENODEV)
        return
    whole = ml.read_file(p)
    m = np.memmap(p, mode="r", dtype=np.uint8)  # MAP_SHARED
    assert m.tobytes() == whole
    del m
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        assert mm[:] == whole
        mm.close()
    # a batch never read before, through mmap first
    p = mnt + "/epoch/5/batch_2"
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        first = bytes(mm[:])
        mm.close()
    assert first == ml.read_file(p)
    ml.parse_safetensors(first)


def expect_errno(fn, code):
    try:
        fn()
    except OSError as ex:
        assert ex.errno == code, (fn, ex)
        return
    raise AssertionError("no error from %r" % fn)


def check_readonly_and_enoent(mnt, epochs, nbatches):
    b0 = mnt + "/epoch/0/batch_0"
    expect_errno(lambda: open(b0, "r+b"), errno.EROFS)
    expect_errno(lambda: open(mnt + "/new", "wb"), errno.EROFS)
    expect_errno(lambda: os.mkdir(mnt + "/d"), errno.EROFS)
    expect_errno(lambda: os.unlink(b0), errno.EROFS)
    expect_errno(lambda: os.rename(b0, mnt + "/x"), errno.EROFS)
    for name in ["nope", "epoch/%d" % epochs, "epoch/%d/batch_0" % epochs,
                 "epoch/0/batch_%d" % nbatches, "epoch/0/batch_01",
                 "epoch/00", "epoch/-1", "index/0/batch_%d" % nbatches,
                 "epoch/0/batch_", "epoch/0/x"]:
        expect_errno(lambda: os.stat(os.path.join(mnt, name)), errno.ENOENT)
        expect_errno(lambda: os.stat(os.path.join(mnt, name)), errno.ENOENT)


def check_listing_lengths(archive, n):
    from torch.utils.data import DataLoader
    for b, dl in [(1, False), (7, False), (7, True), (n, True), (n + 5, False),
                  (n + 5, True), (64, False)]:
        p, mnt = ml.mount(archive, None, "--batch-size", b,
                          *(["--drop-last"] if dl else []), "--epochs", 3,
                          check=False)
        want = len(DataLoader(range(n), batch_size=b, drop_last=dl))
        if want == 0:  # refused, with the reason
            assert p.returncode == 1 and "0 batches per epoch" in p.stderr
            assert not ml.is_mounted(mnt)
            continue
        assert p.returncode == 0, p.stderr
        assert len(os.listdir(mnt + "/epoch/0")) == want, (b, dl)
        assert len(os.listdir(mnt + "/index/1")) == want + 1, (b, dl)
        assert "offsets" in os.listdir(mnt + "/index/1")
        assert sorted(os.listdir(mnt + "/stream")) == ["0", "1", "2"]
        assert sorted(os.listdir(mnt + "/epoch")) == ["0", "1", "2"]
        info = json.load(open(mnt + "/dataset.json"))
        assert info["batches_per_epoch"] == want
        assert info["batch_size"] == b, (info["batch_size"], b, dl)
        assert info["seed_source"] == "unused", info["seed_source"]
        if b == 64:
            check_inode_numbers(mnt)
        assert ml.umount(mnt).returncode == 0
        assert not ml.is_mounted(mnt)


def check_inode_numbers(mnt):
    """Every inode number of a small mount, as listings and stat show it,
    is below 2^32 (a 32-bit stat() fails with EOVERFLOW above) and names
    one node: a listing's and stat's agree, no two nodes share one."""
    seen = {}
    todo = [mnt]
    while todo:
        d = todo.pop()
        with os.scandir(d) as it:
            for ent in it:
                st = os.stat(ent.path)
                assert ent.inode() == st.st_ino, (ent.path, ent.inode(),
                                                  st.st_ino)
                assert st.st_ino < 2 ** 32, (ent.path, st.st_ino)
                assert st.st_ino not in seen, (ent.path, seen.get(st.st_ino))
                seen[st.st_ino] = ent.path
                if ent.is_dir():
                    todo.append(ent.path)
    assert os.stat(mnt).st_ino == 1
    assert len(seen) == 6 + 3 * (2 + 2 * 16 + 1 + 1), len(seen)


def check_text(mnt, archive):
    info = json.load(open(mnt + "/dataset.json"))
    assert info["sources"] == [os.path.realpath(archive)]
    assert info["samples"] == 1000 and info["batch_size"] == 64
    assert info["seed"] == 7 and info["format"] == "safetensors"
    assert info["pytorch"].startswith("DataLoader(")
    names = {f["name"]: f for f in info["fields"]}
    assert names["images"]["shape"] == [3, 8, 8]
    assert names["half"]["dtype"] == "bfloat16"
    readme = open(mnt + "/README").read()
    assert info["pytorch"] in readme
    # The README's reader runs as written (json + numpy only).
    code = readme[readme.index("import json"):readme.index("batch = read_batch")]
    ns = {}
    exec(code, ns)
    got = ns["read_batch"](mnt + "/epoch/0/batch_3")
    _, ref = ml.read_batch(mnt + "/epoch/0/batch_3")
    for k in ref:
        assert np.array_equal(got[k], ref[k])
    # ... and its stream reader (with the first part's names)
    code = readme[readme.index("def read_stream"):
                  readme.index("batches = list(read_stream")]
    exec(code, ns)
    got = list(ns["read_stream"](mnt + "/stream/0"))
    assert len(got) == len(os.listdir(mnt + "/epoch/0"))
    for k in (0, 3, len(got) - 1):
        _, ref = ml.read_batch(mnt + "/epoch/0/batch_%d" % k)
        assert got[k].keys() == ref.keys()
        for f in ref:
            assert np.array_equal(got[k][f], ref[f]), (k, f)
    s = ml.stats(mnt)
    assert s["batches_served"] > 0 and s["bytes_served"] > 0
    assert s["cache_budget_bytes"] == 512 << 20


def check_stats_accounting(mode, archive, known_first):
    """Reading an epoch once, in order, serves each batch once, counts each
    open as one prefetch hit or miss, and leaves only the prefetch window in
    memory. known_first: every batch file is stat'ed before reading, so the
    kernel knows its inode and workers push batches into the page cache
    before they are opened (an open that finds its batch there is a hit).
    Each batch name is looked up once (LOOKUP), unless the directory was
    listed first: READDIRPLUS puts the listed names in the kernel's cache."""
    _, mnt = ml.mount(archive, None, "--serve", mode, "--batch-size", 100,
                      "--shuffle", "--seed", 1, "--workers", 2,
                      "--prefetch", 3)
    names = ["batch_%d" % k for k in range(10)]
    if known_first:
        for b in names:
            os.stat(mnt + "/epoch/0/" + b)
    total = sum(len(ml.read_file(mnt + "/epoch/0/" + b)) for b in names)
    s = ml.stats(mnt)
    assert s["serve_mode"] == mode, s
    assert s["batches_opened"] == 10, s
    assert s["batch_lookups"] == 10, s
    assert s["batches_served"] == 10, s
    assert s["bytes_served"] == total, s
    assert s["prefetch_hits"] + s["prefetch_misses"] == 10, s
    # Memory comes back to the prefetch window (3), plus the batch just
    # served: its buffer goes when the read that served its last bytes
    # drops its reference, right after the reply, and a batch a worker
    # was still gathering may be counted until it is done. A state to
    # wait for, not a count at an instant (5 was seen at load 4).
    ml.wait_stats(mnt, lambda s: s["cache_batches"] <= 3 + 1)
    assert sorted(os.listdir(mnt + "/epoch/1")) == sorted(names)
    for b in names:
        ml.read_file(mnt + "/epoch/1/" + b)
    s = ml.stats(mnt)
    assert s["batches_opened"] == 20 and s["batch_lookups"] == 10, s
    assert ml.umount(mnt).returncode == 0


def check_mode(mode, archive, data):
    _, mnt = ml.mount(archive, None, "--serve", mode, "--batch-size", 64,
                      "--shuffle", "--seed", 7, "--epochs", 8)
    # the archive fits in memory: it is read in whole, in the background
    ml.wait_stats(mnt, lambda s: s["readahead_bytes"] ==
                  os.path.getsize(archive))
    assert sorted(os.listdir(mnt)) == ["README", "dataset.json", "epoch",
                                       "index", "stats", "stream"]
    nb = len(os.listdir(mnt + "/epoch/0"))
    assert nb == 16
    check_batches_match_indices(mnt, data, 2, nb)
    check_sizes(mnt)
    check_reads(mnt + "/epoch/3/batch_15")   # the short last batch
    check_reads(mnt + "/epoch/3/batch_4")
    check_reads(mnt + "/README")
    check_concurrent(mnt, nb)
    check_mmap(mnt, mode)
    check_readonly_and_enoent(mnt, 8, nb)
    check_text(mnt, archive)
    assert ml.umount(mnt).returncode == 0
    assert not ml.is_mounted(mnt)
    check_stats_accounting(mode, archive, False)
    check_stats_accounting(mode, archive, True)


def main():
    archive = os.path.join(TMP, "data.pt")
    n = 1000
    data = make_archive(archive, n)
    ml.for_each_mode(check_mode, archive, data)
    check_listing_lengths(archive, n)
    print("ok")


main()
