#!/usr/bin/python3
"""The daemon's file descriptors are bounded, and a limit that is hit is
named as such.

Regression: in passthrough each batch lives in a memfd, and nothing but the
byte budget bounded how many the daemon held (1,954 descriptors after one
`cat stream/0` of 40,000 batches of 4.4 KB); under a soft limit of 1,024
`cat stream/0` failed with "Too many open files" and stats blamed the
data. Here the daemon starts with a soft limit of 64 and a hard one of
128 (passthrough mode; skipped where passthrough is not available):
- it raises its soft limit to the hard one (/proc/PID/limits, and the log
  says so), and stats says how many batches may hold a descriptor;
- `cat stream/0` of 4,000 small batches and every batch file of epoch 1
  read with --prefetch 300 come out right, with the daemon never holding
  more descriptors than its limit allows;
- a reader holding 150 batch files open at once gets the batches that fit
  and ENFILE for the rest (not EIO, not a wrong batch); last_error says
  that the daemon ran out of descriptors, not that the data is bad; once
  they are closed every batch opens again."""
import errno
import json
import os
import resource
import subprocess
import sys

import mountlib as ml

N, B = 16000, 4
failures = []


def limits_of(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return tuple(int(x) for x in line.split()[3:5])
    raise AssertionError("no open-files line in /proc/%d/limits" % pid)


def fds_of(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def low_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 128))


def main():
    ml.require_fuse()
    import torch
    if "passthrough" not in ml.serve_modes():
        ml.skip("passthrough is not available here")
    src = os.path.join(ml.TMP, "small.pt")
    torch.save({"x": torch.arange(N * 8, dtype=torch.int32).reshape(N, 8) %
                1000, "y": torch.arange(N)}, src)
    _, mnt = ml.mount(src, None, "--batch-size", B, "--shuffle", "--seed",
                      1, "--epochs", 2, "--serve", "passthrough",
                      "--prefetch", 300, preexec_fn=low_limit)
    try:
        pid = ml.daemon_pid(mnt)
        assert limits_of(pid) == (128, 128), limits_of(pid)
        st = ml.stats(mnt)
        assert 0 < st["batch_fds_max"] < 128, st["batch_fds_max"]
        with open(json.load(open(mnt + "/dataset.json"))["log"]) as f:
            assert "descriptor limit raised from 64 to 128" in f.read()
        nb = N // B
        size = os.stat(mnt + "/epoch/0/batch_0").st_size

        def stream_and_files():
            cat = subprocess.run(["cat", mnt + "/stream/0"],
                                 capture_output=True, timeout=ml.LIVENESS_S)
            assert cat.returncode == 0, cat.stderr
            assert len(cat.stdout) == nb * size, len(cat.stdout)
            assert cat.stdout[:size] == ml.read_file(mnt +
                                                     "/epoch/0/batch_0")
            most = 0
            for k in range(nb):
                meta, a = ml.read_batch("%s/epoch/1/batch_%d" % (mnt, k))
                assert meta["batch"] == str(k)
                assert list(a["y"]) == ml.read_index(
                    "%s/index/1/batch_%d" % (mnt, k))
                if k % 50 == 0:
                    most = max(most, fds_of(pid))
            assert most <= 128, most
            return most

        most = [0]
        errs = ml.bounded(mnt, [lambda: most.__setitem__(
            0, stream_and_files())])
        assert errs == [None], errs
        print("ok: limit raised to 128; stream/0 and %d batch files with "
              "--prefetch 300, at most %d descriptors" % (nb, most[0]))

        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
        held, refused = [], []
        for k in range(150):
            try:
                held.append(open("%s/epoch/0/batch_%d" % (mnt, k), "rb"))
            except OSError as e:
                refused.append(e.errno)
        try:
            assert refused, "150 batch files open at once: none refused"
            assert set(refused) == {errno.ENFILE}, set(refused)
            assert fds_of(pid) <= 128, fds_of(pid)
            for f in held[:5]:
                ml.parse_safetensors(f.read())
        finally:
            for f in held:
                f.close()
        st = ml.stats(mnt)
        assert "no file descriptor" in st["last_error"], st["last_error"]
        assert st["batch_fd_limit_hits"] > 0, st
        ml.wait_stats(mnt, lambda s: s["cache_batches"] <= s["batch_fds_max"])
        for k in range(140, 150):
            meta, _ = ml.read_batch("%s/epoch/0/batch_%d" % (mnt, k))
            assert meta["batch"] == str(k)
        print("ok: %d of 150 batch files held open, %d refused with ENFILE "
              "(last_error: %s); all open again afterwards"
              % (len(held), len(refused), st["last_error"][:60]))
    except AssertionError as e:
        failures.append(str(e))
    finally:
        ml.umount(mnt)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
