#!/usr/bin/python3
"""Daemon lifecycle: SIGTERM unmounts cleanly; kill -9 leaves no mount
(auto_unmount); umount names the process that keeps a mount busy; bad
options exit 2 naming the option; a corrupt archive exits 1 with file,
offset and reason and leaves no mount; a tiny --cache-mb with a batch
bigger than it still serves correct bytes; a batch not ready within
--timeout fails the read with EIO and logs epoch, batch and sample."""
import os
import signal
import subprocess

import mountlib as ml

import torch

ml.require_fuse()
TMP = ml.TMP


def archive(name, n, row):
    path = os.path.join(TMP, name)
    g = torch.Generator().manual_seed(n)
    d = {"x": torch.randint(0, 256, (n, row), generator=g).to(torch.uint8),
         "y": torch.arange(n)}
    torch.save(d, path)
    return path, d


def sigterm_unmounts(mode, path):
    _, mnt = ml.mount(path, None, "--serve", mode, "--batch-size", 10)
    pid = ml.daemon_pid(mnt)
    ml.read_file(mnt + "/epoch/0/batch_0")
    os.kill(pid, signal.SIGTERM)
    assert ml.wait_pid_exit(pid), "daemon did not exit on SIGTERM"
    assert not ml.is_mounted(mnt), "SIGTERM left the mount"


def sigkill_leaves_no_mount(mode, path):
    _, mnt = ml.mount(path, None, "--serve", mode, "--batch-size", 10)
    pid = ml.daemon_pid(mnt)
    helpers = ml.unmount_helpers(mnt)
    assert helpers, "no auto_unmount helper"
    os.kill(pid, signal.SIGKILL)
    assert ml.wait_pid_exit(pid)
    for h in helpers:
        assert ml.wait_pid_exit(h), "auto_unmount helper did not finish"
    assert not ml.is_mounted(mnt), "kill -9 left a dead mount"


def umount_busy_names_holder(path):
    _, mnt = ml.mount(path, None)
    fd = os.open(mnt + "/README", os.O_RDONLY)
    p = ml.umount(mnt)
    assert p.returncode == 1, p
    assert "pid %d" % os.getpid() in p.stderr, p.stderr
    os.close(fd)
    assert ml.umount(mnt).returncode == 0
    assert not ml.is_mounted(mnt)


def bad_options(path):
    mnt = os.path.join(TMP, "bad")
    os.makedirs(mnt, exist_ok=True)
    for opts, name in [(["--batch-size", "0"], "--batch-size"),
                       (["--batch-size", "x"], "--batch-size"),
                       (["--seed", "-1"], "--seed"),
                       (["--epochs", "0"], "--epochs"),
                       (["--workers", ""], "--workers"),
                       (["--cache-mb", "1.5"], "--cache-mb"),
                       (["--timeout", "0"], "--timeout"),
                       (["--torch-compat", "3.0"], "--torch-compat"),
                       (["--rank", "1"], "--rank"),
                       (["--frobnicate"], "--frobnicate")]:
        p, _ = ml.mount(path, mnt, *opts, check=False)
        assert p.returncode == 2, (opts, p.returncode, p.stderr)
        first = p.stderr.splitlines()[0]
        assert name in first, (opts, first)
        assert "usage: batchfs mount" in p.stderr
        assert not ml.is_mounted(mnt)
    p = subprocess.run([ml.BATCHFS, "mount", path], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "MOUNTPOINT" in p.stderr
    p = subprocess.run([ml.BATCHFS, "mount", "--help"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and "--batch-size" in p.stdout


def corrupt_archive(path):
    bad = os.path.join(TMP, "corrupt.pt")
    data = bytearray(open(path, "rb").read())
    data[-22:-18] = b"XXXX"  # the end-of-central-directory signature
    open(bad, "wb").write(bytes(data))
    for victim in [bad, os.path.join(TMP, "missing.pt")]:
        p, mnt = ml.mount(victim, None, check=False)
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert victim in p.stderr, p.stderr
        assert not ml.is_mounted(mnt)
    p, mnt = ml.mount(bad, None, check=False)
    assert "offset" in p.stderr, p.stderr


def tiny_budget_big_batch(mode):
    path, d = archive("big.pt", 64, 64 * 1024)  # 4 MiB batches > 1 MiB budget
    _, mnt = ml.mount(path, None, "--serve", mode, "--batch-size", 64,
                      "--shuffle", "--seed", 3, "--cache-mb", 1,
                      "--prefetch", 4)
    for e in range(3):
        idx = ml.read_index(mnt + "/index/%d/batch_0" % e)
        _, arrs = ml.read_batch(mnt + "/epoch/%d/batch_0" % e)
        assert arrs["x"].tobytes() == d["x"][idx].numpy().tobytes()
        assert arrs["y"].tolist() == idx
    # nothing held once read (a READ of the kernel's read-ahead may still
    # be answered after the reader's last read returned: wait for it)
    s = ml.wait_stats(mnt, lambda s: s["cache_bytes"] <= 1 << 20)
    assert s["cache_budget_bytes"] == 1 << 20
    assert s["shmem_bytes"] <= s["cache_bytes"], s
    # daemon memory: budget + 64 MiB (anonymous memory; the archive's
    # mapping is file-backed page cache)
    status = open("/proc/%d/status" % ml.daemon_pid(mnt)).read()
    anon_kb = int(status.split("RssAnon:")[1].split()[0])
    assert anon_kb * 1024 <= (1 << 20) + (64 << 20), anon_kb
    assert ml.umount(mnt).returncode == 0


def timeout_gives_eio_and_log(mode, path):
    log = os.path.join(TMP, "daemon-%s.log" % mode)
    _, mnt = ml.mount(path, None, "--serve", mode, "--batch-size", 10,
                      "--timeout", 1,
                      "--log-file", log,
                      env={"BATCHFS_DEBUG_GATHER_DELAY_MS": "60000"})
    idx = ml.read_index(mnt + "/index/0/batch_2")
    ml.read_fails_with_eio(mnt + "/epoch/0/batch_2")
    text = open(log).read()
    assert "epoch 0 batch 2: not ready after 1000 ms (sample %d " % idx[0] \
        in text, text
    assert ml.stats(mnt)["read_timeouts"] >= 1
    assert ml.umount(mnt).returncode == 0


def main():
    path, _ = archive("small.pt", 100, 16)
    ml.for_each_mode(sigterm_unmounts, path)
    ml.for_each_mode(sigkill_leaves_no_mount, path)
    umount_busy_names_holder(path)
    bad_options(path)
    corrupt_archive(path)
    ml.for_each_mode(tiny_budget_big_batch)
    ml.for_each_mode(timeout_gives_eio_and_log, path)
    print("ok")


main()
