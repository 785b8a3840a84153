#!/usr/bin/python3
"""Zero copy (--serve direct): READs of batches whose rows are stored as
served (C-contiguous, little-endian) are replied straight from the archive
mapping (fuse_reply_iov), with no gather. Checks, on real mounts, in
--serve direct and the default mode:
- every batch equals torch's rows, for an eligible archive (shuffled and
  sequential order, where slices merge) and an ineligible one (a
  per-sample transposed view: gathered);
- reads of 1 B, 4 KiB, 1 MiB and at unaligned offsets spanning the
  header/field/row boundaries, and past EOF, equal the same bytes of the
  whole file;
- in direct mode the eligible batches are served with no gather
  (batches_materialized stays 0) and counted served;
- rows too small to be worth slices (under 4 KiB a slice on average),
  batches too big for one reply of <= 1023 slices (small rows) and READs
  over a lowered slice cap (BATCHFS_DEBUG_ZC_MAX_IOV) fall back to the
  gathered buffer, same bytes;
- a shard truncated under the mount: reads of batches with its rows fail
  with EIO (size check; and with BATCHFS_DEBUG_ZC_NO_CHECK the kernel's
  copy faults: EFAULT in the daemon's writev, EIO for the reader), the
  daemon stays alive, serves the other shard's batches, dataset.json and
  README, and unmounts cleanly."""
import errno
import os

import mountlib as ml

import torch

ml.require_fuse()
TMP = ml.TMP
N, BATCH = 300, 32
MODES = [("--serve", "direct"), ()]


def save(path, d):
    torch.save(d, path)
    return d


def eligible(path, n=N, seed=1):
    g = torch.Generator().manual_seed(seed)
    return save(path, {
        "x": torch.randint(0, 256, (n, 3, 80, 80), generator=g).to(torch.uint8),
        "y": torch.arange(n) * 7,
        "z": torch.randn(n, 5, generator=g)})


def transposed(path):
    g = torch.Generator().manual_seed(2)
    base = torch.randint(0, 256, (N, 40, 30), generator=g).to(torch.uint8)
    d = {"x": base.transpose(1, 2), "y": torch.arange(N)}
    assert not d["x"].is_contiguous()
    return save(path, d)


def expected(data, mnt, e, k):
    idx = ml.read_index("%s/index/%d/batch_%d" % (mnt, e, k))
    return {n: ml.torch_np(t[torch.tensor(idx)]).tobytes()
            for n, t in data.items()}


def check_epoch(data, mnt, e=0):
    names = sorted(os.listdir("%s/epoch/%d" % (mnt, e)),
                   key=lambda s: int(s.split("_")[1]))
    assert names
    for name in names:
        k = int(name.split("_")[1])
        _, arrs = ml.read_batch("%s/epoch/%d/%s" % (mnt, e, name))
        assert {n: a.tobytes() for n, a in arrs.items()} == \
            expected(data, mnt, e, k), (mnt, e, k)
    return len(names)


def pread(path, off, n):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, off)
    finally:
        os.close(fd)


def check_ranges(path):
    whole = ml.read_file(path)
    size = len(whole)
    hdr = 8 + int.from_bytes(whole[:8], "little")
    row = 3 * 80 * 80
    cuts = [0, 1, 7, 8, 9, 4095, hdr - 1, hdr, hdr + 1, hdr + row - 3,
            hdr + 5 * row + 11, hdr + BATCH * row - 2, size - 300,
            size - 1]
    for off in cuts:
        for n in (1, 4096, 1 << 20, 5000):
            assert pread(path, off, n) == whole[off:off + n], (path, off, n)
    assert pread(path, size, 4096) == b""
    assert pread(path, size + 12345, 1) == b""
    # a reader's buffer at an odd offset, 1 MiB reads
    with open(path, "rb", buffering=0) as f:
        f.seek(3)
        got = bytearray(3)
        got[:3] = whole[:3]
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            got += b
    assert bytes(got) == whole


def test_eligible(arch, data, opts, shuffle):
    extra = ["--shuffle", "--seed", "4"] if shuffle else []
    _, mnt = ml.mount(arch, None, "--batch-size", BATCH, "--epochs", 2,
                      *extra, *opts)
    nb = check_epoch(data, mnt, 0)
    check_epoch(data, mnt, 1)
    check_ranges("%s/epoch/1/batch_3" % mnt)
    check_ranges("%s/epoch/0/batch_%d" % (mnt, nb - 1))  # the short one
    st = ml.stats(mnt)
    if opts:  # direct: every eligible batch came from the archive
        assert st["batches_materialized"] == 0, st
        assert st["batches_served"] >= 2 * nb, st
    ml.umount(mnt)
    assert not ml.is_mounted(mnt)


def test_ineligible(opts):
    arch = os.path.join(TMP, "transposed.pt")
    data = transposed(arch)
    _, mnt = ml.mount(arch, None, "--batch-size", BATCH, "--shuffle",
                      "--seed", "5", *opts)
    nb = check_epoch(data, mnt)
    assert ml.stats(mnt)["batches_materialized"] >= nb
    ml.umount(mnt)


def test_fallbacks(opts):
    # 16-byte rows, batch 4096: a 1 MiB READ could need 65538 slices.
    arch = os.path.join(TMP, "small.pt")
    g = torch.Generator().manual_seed(3)
    data = save(arch, {"x": torch.randint(0, 256, (10000, 16), generator=g)
                       .to(torch.uint8), "y": torch.arange(10000)})
    _, mnt = ml.mount(arch, None, "--batch-size", 4096, "--shuffle",
                      "--seed", "6", *opts)
    check_epoch(data, mnt)
    ml.umount(mnt)
    # Zero-copy handles whose 1 MiB READs exceed a cap of 8 slices.
    arch = os.path.join(TMP, "elig_cap.pt")
    data = eligible(arch)
    _, mnt = ml.mount(arch, None, "--batch-size", BATCH, "--shuffle",
                      "--seed", "7", *opts,
                      env={"BATCHFS_DEBUG_ZC_MAX_IOV": "8"})
    nb = check_epoch(data, mnt)
    if opts:  # each batch gathered once for its big READ, none prefetched
        st = ml.stats(mnt)
        assert st["batches_materialized"] == nb, (st, nb)
        assert st["prefetch_hits"] == 0, st
    check_ranges("%s/epoch/0/batch_2" % mnt)
    ml.umount(mnt)


def expect_eio(path):
    try:
        ml.read_file(path)
    except OSError as e:
        assert e.errno == errno.EIO, (path, e)
        return
    raise AssertionError("%s: read of a truncated shard succeeded" % path)


def test_truncated(opts, env=None):
    a = os.path.join(TMP, "t1.pt")
    b = os.path.join(TMP, "t2.pt")
    da = eligible(a, 96, 8)
    db = eligible(b, 96, 9)
    data = {n: torch.cat([da[n], db[n]]) for n in da}
    # Sequential: batches 0-2 hold rows of a, 3-5 rows of b. Only batch 0
    # is read before the truncation (and batch 1 prefetched), so no copy
    # of b's rows exists in the pool or the page cache.
    _, mnt = ml.mount([a, b], None, "--batch-size", BATCH, "--prefetch", 1,
                      *opts, env=env)
    pid = ml.daemon_pid(mnt)
    _, arrs = ml.read_batch("%s/epoch/0/batch_0" % mnt)
    assert {n: x.tobytes() for n, x in arrs.items()} == \
        expected(data, mnt, 0, 0)
    size = os.path.getsize(b)
    os.truncate(b, size // 2)
    for k in (3, 4, 5):
        expect_eio("%s/epoch/0/batch_%d" % (mnt, k))
    for k in (0, 1, 2):
        _, arrs = ml.read_batch("%s/epoch/0/batch_%d" % (mnt, k))
        assert {n: x.tobytes() for n, x in arrs.items()} == \
            expected(data, mnt, 0, k)
    with open(os.path.join(mnt, "dataset.json")) as f:
        assert f.read().strip()
    with open(os.path.join(mnt, "README")) as f:
        assert f.read()
    assert ml.daemon_pid(mnt) == pid
    assert ml.umount(mnt).returncode == 0
    assert ml.wait_pid_exit(pid)
    assert not ml.is_mounted(mnt)


def main():
    arch = os.path.join(TMP, "elig.pt")
    data = eligible(arch)
    for opts in MODES:
        test_eligible(arch, data, opts, shuffle=True)
        test_eligible(arch, data, opts, shuffle=False)
        test_ineligible(opts)
        test_fallbacks(opts)
        test_truncated(opts)
    # The kernel's own fault path: no size check before the reply.
    test_truncated(MODES[0], env={"BATCHFS_DEBUG_ZC_NO_CHECK": "1"})
    print("ok")


if __name__ == "__main__":
    main()
