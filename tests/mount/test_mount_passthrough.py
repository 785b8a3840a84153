#!/usr/bin/python3
"""--serve passthrough (the default where the kernel offers FUSE passthrough
and the daemon may register backing files): each batch lives in its own
memfd, registered as a backing file; opens reply with its backing id and
the kernel serves read() and mmap() from it, never the daemon. Checks:

- read(), mmap(MAP_SHARED) and numpy.memmap of a batch give torch's rows,
  while another process re-reads the same batch; no READ of a batch file
  ever reaches the daemon (stats batch_reads stays 0);
- a batch whose memfd was dropped (its last file closed) and is opened
  again is gathered again, with identical bytes, under a new backing id;
- 1000 opens and closes of one batch from 8 threads leak no backing id and
  no file descriptor of the daemon (/proc/PID/fd);
- a reader holding batches open does not make prefetch exceed the budget
  (prefetch waits) and its reads never fail; closing them frees them;
- over 10 epochs with --cache-mb 64 the daemon's anonymous memory and the
  system's shmem do not grow (flat within a few pages of noise).
Skipped (77) where passthrough cannot work (kernel, capabilities)."""
import mmap
import os
import subprocess
import sys
import threading

import mountlib as ml

import numpy as np
import torch

ml.require_fuse()
TMP = ml.TMP
N, BATCH = 2000, 64  # 3x32x32 bytes + int64: batch files of ~197 KB


def make_archive(path):
    g = torch.Generator().manual_seed(11)
    d = {"x": torch.randint(0, 256, (N, 3, 32, 32), generator=g).to(torch.uint8),
         "y": torch.arange(N) * 3}
    torch.save(d, path)
    return d


def expected(data, mnt, e, k):
    idx = torch.tensor(ml.read_index("%s/index/%d/batch_%d" % (mnt, e, k)))
    return {n: t[idx].numpy().tobytes() for n, t in data.items()}


def same_rows(blob, want):
    _, arrs = ml.parse_safetensors(blob)
    return {n: a.tobytes() for n, a in arrs.items()} == want


def mount(path, *opts):
    _, mnt = ml.mount(path, None, "--serve", "passthrough", "--batch-size",
                      BATCH, "--shuffle", "--seed", 3, *opts)
    assert ml.stats(mnt)["serve_mode"] == "passthrough"
    return mnt


def mapped_while_reread(path, data):
    mnt = mount(path)
    p = mnt + "/epoch/1/batch_4"
    want = expected(data, mnt, 1, 4)
    rereader = subprocess.Popen(
        [sys.executable, "-c", """
import sys
blob = None
for _ in range(200):
    with open(sys.argv[1], "rb") as f:
        b = f.read()
    assert blob is None or b == blob
    blob = b
print(len(blob))
""", p], stdout=subprocess.PIPE, text=True)
    m = np.memmap(p, mode="r", dtype=np.uint8)  # MAP_SHARED
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        assert same_rows(bytes(mm[:]), want)
        assert same_rows(m.tobytes(), want)
        assert same_rows(f.read(), want)
        mm.close()
    del m
    out, _ = rereader.communicate(timeout=120)
    assert rereader.returncode == 0 and int(out) == os.path.getsize(p)
    for k in range(8):  # the rest of an epoch, by plain reads
        assert same_rows(ml.read_file("%s/epoch/0/batch_%d" % (mnt, k)),
                         expected(data, mnt, 0, k))
    s = ml.stats(mnt)
    assert s["batch_reads"] == 0, s  # the kernel read them all
    assert s["batches_opened"] >= 9 + 200 and s["backing_opened"] > 0, s
    assert ml.umount(mnt).returncode == 0


def dropped_and_recreated(path, data):
    mnt = mount(path, "--prefetch", 0)
    p = mnt + "/epoch/2/batch_7"
    first = ml.read_file(p)  # opened, read, closed: its memfd goes
    s1 = ml.wait_stats(mnt, lambda s: s["backing_files"] == 0)
    again = ml.read_file(p)
    s2 = ml.stats(mnt)
    assert again == first and same_rows(again, expected(data, mnt, 2, 7))
    assert s2["batches_materialized"] == s1["batches_materialized"] + 1, s2
    assert s2["backing_opened"] == s1["backing_opened"] + 1, s2
    assert ml.umount(mnt).returncode == 0


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def many_opens_leak_nothing(path, data):
    mnt = mount(path, "--prefetch", 0)
    pid = ml.daemon_pid(mnt)
    p = mnt + "/epoch/0/batch_3"
    want = ml.read_file(p)
    s0 = ml.wait_stats(mnt, lambda s: s["backing_files"] == 0)
    before = fds(pid)
    errors = []

    def opener():
        try:
            for i in range(125):
                with open(p, "rb", buffering=0) as f:
                    if i % 25 == 0 and f.read() != want:
                        errors.append("bytes differ")
        except OSError as ex:
            errors.append(str(ex))

    ts = [threading.Thread(target=opener) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s1 = ml.wait_stats(mnt, lambda s: s["backing_files"] == 0)
    assert not errors, errors[:3]
    assert s1["batches_opened"] == s0["batches_opened"] + 1000, s1
    assert s0["backing_files"] == 0, s0
    assert fds(pid) == before, (before, fds(pid))
    assert ml.umount(mnt).returncode == 0


def held_batches_and_budget(path, data):
    # ~197 KB batches, a 1 MiB budget: five held batches fill it
    mnt = mount(path, "--cache-mb", 1, "--prefetch", 4)
    held = [open("%s/epoch/0/batch_%d" % (mnt, k), "rb") for k in range(8)]
    for k, f in enumerate(held):  # every read works, held over budget
        assert same_rows(f.read(), expected(data, mnt, 0, k))
    s = ml.stats(mnt)
    assert s["prefetch_skipped"] > 0, s  # prefetch waited for room
    # the held batches, plus at most one prefetch gathered before room ran out
    assert s["cache_bytes"] <= 9 * 200704 + (1 << 20), s
    for f in held:
        f.close()
    assert same_rows(ml.read_file(mnt + "/epoch/0/batch_9"),
                     expected(data, mnt, 0, 9))
    # closed: their memfds go
    ml.wait_stats(mnt, lambda s: s["cache_bytes"] <= 1 << 20)
    assert ml.umount(mnt).returncode == 0


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(key)


def anon_kb(pid):
    status = open("/proc/%d/status" % pid).read()
    return int(status.split("RssAnon:")[1].split()[0])


def flat_over_epochs(path, data):
    mnt = mount(path, "--cache-mb", 64)
    pid = ml.daemon_pid(mnt)
    nb = len(os.listdir(mnt + "/epoch/0"))
    seen = []
    for e in range(10):
        for k in range(nb):
            ml.read_file("%s/epoch/%d/batch_%d" % (mnt, e, k))
        seen.append((anon_kb(pid), meminfo("Shmem"), ml.stats(mnt)))
    (a2, sh2, st2), (a9, sh9, st9) = seen[1], seen[-1]
    print("epoch 2 -> 10: RssAnon %d -> %d KiB, Shmem %d -> %d KiB, "
          "shmem held %d -> %d bytes" % (a2, a9, sh2, sh9,
                                         st2["shmem_bytes"],
                                         st9["shmem_bytes"]))
    assert st9["shmem_bytes"] <= 64 << 20
    # A memfd per batch kept would be 32 batches (~6 MB) per epoch.
    if ml.sanitizer_of(pid):
        print("RssAnon bound not checked: under %s RssAnon is mostly the "
              "sanitizer's own state (mountlib.sanitizer_of)"
              % ml.sanitizer_of(pid))
    else:
        assert a9 - a2 <= 1024, (a2, a9)
    assert sh9 - sh2 <= 2048, (sh2, sh9)
    assert ml.umount(mnt).returncode == 0


def main():
    if "passthrough" not in ml.serve_modes():
        ml.skip("FUSE passthrough is not available here")
    path = os.path.join(TMP, "pt.pt")
    data = make_archive(path)
    for check in (mapped_while_reread, dropped_and_recreated,
                  many_opens_leak_nothing, held_batches_and_budget,
                  flat_over_epochs):
        check(path, data)
        print("ok", check.__name__)


main()
