#!/usr/bin/python3
"""Zero copy (--serve direct) and a source rewritten in place during the
kernel's copy: what holds, exactly.

The reply of a zero-copy READ is the kernel's copy from the archive
mapping; the daemon checks the source before it (size, mtime) and, since
the reviewer found the gap, again after it. A change that lands between
the two cannot be taken back from the reader (it has the bytes), but it is
never silent. Here the daemon stops itself once between its check and
the reply (BATCHFS_DEBUG_ZC_STOP); the test rewrites a row of that batch
in place, lets the daemon go on and reads:
- the batch read holds the new row among the old ones (the copy is made
  after the rewrite: this is the window), and stats' last_error names that
  very batch as possibly holding rows of both versions (the old code said
  nothing: the reader got mixed rows with no error anywhere);
- every later batch that reads the rewritten file fails with EIO;
- the daemon stays alive and unmounts."""
import errno
import os
import signal
import sys
import threading
import time
import zipfile

import mountlib as ml

import numpy as np
import torch

N, ROW, B = 64, 16384, 8


def state_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def wait_stopped(pid, timeout=ml.LIVENESS_S):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if state_of(pid) == "T":
            return True
        time.sleep(0.01)
    return False


def row_offset(path, sample):
    """Where row 'sample' of x (storage data/0) starts in the archive."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist()
                    if i.filename.endswith("/data/0"))
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        head = f.read(30)
    name_len = int.from_bytes(head[26:28], "little")
    extra_len = int.from_bytes(head[28:30], "little")
    return info.header_offset + 30 + name_len + extra_len + sample * ROW


def main():
    ml.require_fuse()
    failures = []
    src = os.path.join(ml.TMP, "big_rows.pt")
    x = torch.arange(N * ROW, dtype=torch.int64).remainder(200).to(
        torch.uint8).reshape(N, ROW)
    torch.save({"x": x, "y": torch.arange(N)}, src)
    _, mnt = ml.mount(src, None, "--batch-size", B, "--shuffle", "--seed",
                      4, "--serve", "direct", "--prefetch", 0,
                      env={"BATCHFS_DEBUG_ZC_STOP": "1"})
    pid = ml.daemon_pid(mnt)
    try:
        idx = ml.read_index(mnt + "/index/0/batch_2")
        victim = idx[3]
        path = mnt + "/epoch/0/batch_2"
        size = os.stat(path).st_size
        got = {}

        def read():
            with open(path, "rb", buffering=0) as f:
                got["bytes"] = f.read(size)

        t = threading.Thread(target=read, daemon=True)
        t.start()
        assert wait_stopped(pid), "the daemon did not stop before its reply"
        with open(src, "r+b") as f:  # in place: same inode, new mtime
            os.pwrite(f.fileno(), b"\xff" * ROW, row_offset(src, victim))
        os.kill(pid, signal.SIGCONT)
        t.join(ml.LIVENESS_S)
        if t.is_alive():
            ml.abort_mount(mnt)
            raise AssertionError("the read did not return")
        meta, arrays = ml.parse_safetensors(got["bytes"])
        mixed = (arrays["x"][3] == 255).all()
        others = all(np.array_equal(arrays["x"][i], x[idx[i]].numpy())
                     for i in range(B) if i != 3)
        assert others, "rows other than the rewritten one changed"
        assert mixed, "the kernel copied before the rewrite: no window"
        st = ml.stats(mnt)
        assert "both versions" in st["last_error"], st["last_error"]
        assert st["last_error_batch"] == 2, st
        print("ok: the reply holds the rewritten row; last_error: %s"
              % st["last_error"].strip()[:70])
        later = 0
        for k in range(N // B):
            if victim in ml.read_index("%s/index/1/batch_%d" % (mnt, k)):
                later = k
        try:
            ml.read_file("%s/epoch/1/batch_%d" % (mnt, later))
            raise AssertionError("a later batch of the rewritten file read")
        except OSError as e:
            assert e.errno == errno.EIO, e
        print("ok: epoch 1 batch %d (the same row) fails with EIO" % later)
    except AssertionError as e:
        failures.append(str(e))
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        if ml.umount(mnt).returncode:
            ml.abort_mount(mnt)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
