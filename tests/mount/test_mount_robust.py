"""A live mount survives what happens around it:

- the archive is truncated under it: reads of batches whose rows are gone
  fail with EIO (never wrong bytes), the log names the file, the daemon
  keeps serving the rest and unmounts cleanly;
- the archive is replaced under it (rename over the path): the daemon keeps
  serving the bytes it mapped at mount time;
- a reader is killed in the middle of reading: the daemon keeps serving;
- the mount is unmounted while a file is open: `batchfs umount` refuses and
  names the holder, a lazy unmount detaches it, and the daemon exits once
  the last file is closed.
"""
import errno
import os
import signal
import subprocess
import sys

import numpy as np

import mountlib as ml

try:
    import torch
except ImportError:
    ml.skip("torch is not installed")

N, ROW, B = 3000, 4096, 64
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    what = "%s (%s)" % (what, ml.current_mode)
    if not ok:
        failures.append(what)


def make_archive(name, seed):
    path = os.path.join(ml.TMP, name)
    g = torch.Generator().manual_seed(seed)
    data = {"x": torch.randint(0, 256, (N, ROW), generator=g).to(torch.uint8),
            "y": torch.arange(N) * seed}
    torch.save(data, path)
    return path, data


def expected(data, mnt, e, k):
    idx = ml.read_index("%s/index/%d/batch_%d" % (mnt, e, k))
    return {name: ml.torch_np(t[idx]) for name, t in data.items()}


def batch_ok(data, mnt, e, k):
    """True if batch (e,k) reads back as the rows of 'data'; raises OSError
    when the read fails."""
    _, arrs = ml.read_batch("%s/epoch/%d/batch_%d" % (mnt, e, k))
    want = expected(data, mnt, e, k)
    return all(np.array_equal(arrs[n], want[n]) for n in want)


def truncated_archive_gives_eio(mode):
    path, data = make_archive("trunc-%s.pt" % mode, 3)
    log = os.path.join(ml.TMP, "trunc-%s.log" % mode)
    _, mnt = ml.mount(path, None, "--serve", mode, "--batch-size", B,
                      "--shuffle", "--seed", 5, "--log-file", log)
    pid = ml.daemon_pid(mnt)
    check(batch_ok(data, mnt, 0, 0), "truncate: batch 0 correct before")
    os.truncate(path, os.path.getsize(path) // 2)
    # Epoch 9 was never prefetched: its rows must come from the archive.
    errs, wrong = 0, 0
    for k in range(8):
        try:
            if not batch_ok(data, mnt, 9, k):
                wrong += 1
        except OSError as ex:
            errs += ex.errno == errno.EIO
    check(wrong == 0, "truncate: no batch ever returns wrong bytes")
    check(errs == 8, "truncate: reads of batches past the end fail with "
          "EIO (%d of 8)" % errs)
    check(ml.is_mounted(mnt) and ml.stats(mnt)["pid"] == pid,
          "truncate: the daemon is alive and still serves stats")
    with open(os.path.join(mnt, "dataset.json")) as f:
        check('"samples": %d' % N in f.read(),
              "truncate: dataset.json is still served")
    check(len(ml.read_index("%s/index/9/batch_0" % mnt)) == B,
          "truncate: index files are still served")
    with open(log) as f:
        text = f.read()
    check(path in text, "truncate: the log names the archive")
    check(ml.umount(mnt).returncode == 0 and ml.wait_pid_exit(pid),
          "truncate: clean unmount, the daemon exits")


def replaced_archive_keeps_old_bytes(mode):
    path, data = make_archive("repl-%s.pt" % mode, 4)
    _, mnt = ml.mount(path, None, "--serve", mode, "--batch-size", B,
                      "--shuffle", "--seed", 6)
    other, _ = make_archive("repl-new-%s.pt" % mode, 7)
    os.replace(other, path)
    ok = all(batch_ok(data, mnt, 4, k) for k in range(6))
    check(ok, "replace: batches keep the bytes mapped at mount time")
    check(ml.umount(mnt).returncode == 0, "replace: clean unmount")


def killed_reader_leaves_daemon_serving(mode):
    path, data = make_archive("kill-%s.pt" % mode, 5)
    _, mnt = ml.mount(path, None, "--serve", mode, "--batch-size", B,
                      "--shuffle", "--seed", 8)
    reader = subprocess.Popen(
        [sys.executable, "-c", """
import os, sys
mnt = sys.argv[1]
first = True
while True:
    for k in range(40):
        with open("%s/epoch/2/batch_%d" % (mnt, k), "rb", buffering=0) as f:
            while f.read(4096):
                if first:
                    print("reading", flush=True)
                    first = False
""", mnt], stdout=subprocess.PIPE, text=True)
    check(reader.stdout.readline().strip() == "reading",
          "kill: the reader is reading")
    reader.send_signal(signal.SIGKILL)
    reader.wait()
    ok = all(batch_ok(data, mnt, 2, k) for k in range(0, 40, 7))
    check(ok, "kill: batches still correct after a reader died mid-read")
    check(ml.umount(mnt).returncode == 0, "kill: clean unmount")


def umount_with_open_file(mode):
    path, data = make_archive("open-%s.pt" % mode, 6)
    _, mnt = ml.mount(path, None, "--serve", mode, "--batch-size", B)
    pid = ml.daemon_pid(mnt)
    f = open("%s/epoch/0/batch_1" % mnt, "rb", buffering=0)
    head = f.read(8)
    p = ml.umount(mnt)
    check(p.returncode != 0 and str(os.getpid()) in p.stdout + p.stderr,
          "open: batchfs umount refuses a busy mount and names the holder")
    lazy = subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
    check(lazy.returncode == 0 and not ml.is_mounted(mnt),
          "open: a lazy unmount detaches the busy mount")
    rest = f.read()
    check(len(head) == 8 and len(rest) > 0,
          "open: the open file still reads after the lazy unmount")
    f.close()
    check(ml.wait_pid_exit(pid), "open: the daemon exits once the last "
          "file is closed")


def main():
    ml.require_fuse()
    for fn in (truncated_archive_gives_eio, replaced_archive_keeps_old_bytes,
               killed_reader_leaves_daemon_serving, umount_with_open_file):
        ml.for_each_mode(fn)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
