"""A source that changes under a mount is never mixed into a batch.

In every serve mode, an archive mounted, then:

- rewritten in place with torch.save (same size, other content): every
  batch read afterwards is the old bytes (gathered before the change) or
  fails with EIO, never anything else; batches of an epoch nobody touched
  before fail with EIO; the log has one line naming the file and saying it
  changed; stats' last_error says so; the daemon keeps serving the rest
  (stats, index files);
- rewritten in place with dd conv=notrunc (only the second half of the
  file): the same;
- rewritten block by block with dd while a reader reads epoch after epoch
  (and one more once it is over): each batch it reads is the old bytes or
  EIO;
- replaced by a new file renamed over its path (the safe way to update a
  dataset): the mount keeps serving the old version, consistently, with
  no error.

Each archive's mtime is set back a day before it is mounted, so a rewrite
moves it whatever the clock granularity of the file system.
"""
import errno
import os
import subprocess
import sys
import threading
import time

import numpy as np

import mountlib as ml

try:
    import torch
except ImportError:
    ml.skip("torch is not installed")

N, ROW, B = 2000, 2048, 50
NB = N // B
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append("%s (%s)" % (what, ml.current_mode))


def tensors(seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randint(0, 256, (N, ROW), generator=g)
            .to(torch.uint8),
            "y": torch.randint(0, 1 << 40, (N,), generator=g)}


def make_archive(path, seed):
    data = tensors(seed)
    torch.save(data, path)
    day_ago = time.time() - 86400
    os.utime(path, (day_ago, day_ago))
    return data


def outcome(mnt, data, e, k):
    """'old' when batch (e, k) reads back as the rows of data, 'EIO' when
    its read fails so, else 'WRONG' (mixed or new bytes)."""
    try:
        _, arrs = ml.read_batch("%s/epoch/%d/batch_%d" % (mnt, e, k))
    except OSError as ex:
        return "EIO" if ex.errno == errno.EIO else errno.errorcode[ex.errno]
    idx = ml.read_index("%s/index/%d/batch_%d" % (mnt, e, k))
    same = all(np.array_equal(arrs[n], ml.torch_np(t[idx]))
               for n, t in data.items())
    return "old" if same else "WRONG"


def mount(path, log, *opts):
    if os.path.exists(log):
        os.unlink(log)  # a fresh log: it is appended to
    _, mnt = ml.mount(path, None, "--serve", ml.current_mode,
                      "--batch-size", B, "--shuffle", "--seed", 3,
                      "--log-file", log, *opts)
    return mnt


def after_change(mnt, data, log, path, what):
    """The checks once the archive changed: epochs 0 (read in part before)
    and 7 (never touched)."""
    got = [outcome(mnt, data, 0, k) for k in range(NB)]
    check(set(got) <= {"old", "EIO"}, "%s: every batch of epoch 0 is the "
          "old bytes or EIO (%s)" % (what, sorted(set(got))))
    got = [outcome(mnt, data, 7, k) for k in range(NB)]
    check(got == ["EIO"] * NB, "%s: every batch of an epoch gathered after "
          "the change fails with EIO (%s)" % (what, sorted(set(got))))
    with open(log) as f:
        lines = [x for x in f if "changed under the mount (modified" in x]
    check(len(lines) == 1 and path in lines[0],
          "%s: one log line names the file and the change (%d)"
          % (what, len(lines)))
    s = ml.stats(mnt)
    check("changed under the mount" in s["last_error"],
          "%s: stats' last_error says the source changed (%s)"
          % (what, s["last_error"]))
    check(len(ml.read_index("%s/index/9/batch_0" % mnt)) == B,
          "%s: the daemon still serves index files" % what)


def rewrite_torch_save(mode):
    path = os.path.join(ml.TMP, "chg-save-%s.pt" % mode)
    log = path + ".log"
    data = make_archive(path, 1)
    mnt = mount(path, log)
    first = [outcome(mnt, data, 0, k) for k in range(3)]
    check(first == ["old"] * 3, "torch.save: batches right before")
    size = os.path.getsize(path)
    new = tensors(2)
    torch.save(new, path)  # opens with O_TRUNC, writes again
    check(os.path.getsize(path) == size, "torch.save: same size")
    after_change(mnt, data, log, path, "torch.save")
    ml.umount(mnt)


def rewrite_dd(mode):
    path = os.path.join(ml.TMP, "chg-dd-%s.pt" % mode)
    other = path + ".other"
    log = path + ".log"
    data = make_archive(path, 3)
    make_archive(other, 4)
    mnt = mount(path, log)
    check(outcome(mnt, data, 0, 0) == "old", "dd: batch 0 right before")
    half = os.path.getsize(path) // 2 // 4096
    subprocess.run(["dd", "if=" + other, "of=" + path, "bs=4096",
                    "skip=%d" % half, "seek=%d" % half, "conv=notrunc"],
                   check=True, capture_output=True)
    after_change(mnt, data, log, path, "dd conv=notrunc")
    ml.umount(mnt)


def rewrite_while_reading(mode):
    path = os.path.join(ml.TMP, "chg-race-%s.pt" % mode)
    other = path + ".other"
    data = make_archive(path, 5)
    make_archive(other, 6)
    mnt = mount(path, path + ".log")
    seen, stop = set(), threading.Event()

    def reader():  # epochs until the rewrite is over, then one more
        e, last = 20, False
        while not last:
            last = stop.is_set()
            for k in range(NB):
                seen.add(outcome(mnt, data, e, k))
            e += 1

    t = threading.Thread(target=reader)
    t.start()
    blocks = os.path.getsize(path) // 65536
    for b in range(0, blocks, 8):  # the whole file, 512 KiB at a time
        subprocess.run(["dd", "if=" + other, "of=" + path, "bs=65536",
                        "skip=%d" % b, "seek=%d" % b, "count=8",
                        "conv=notrunc"], check=True, capture_output=True)
    stop.set()
    t.join()
    check(seen <= {"old", "EIO"} and "EIO" in seen,
          "rewrite while reading: each batch is the old bytes or EIO (%s)"
          % sorted(seen))
    ml.umount(mnt)


def rename_over(mode):
    path = os.path.join(ml.TMP, "chg-rename-%s.pt" % mode)
    data = make_archive(path, 7)
    mnt = mount(path, path + ".log")
    check(outcome(mnt, data, 0, 0) == "old", "rename: batch 0 before")
    tmp = path + ".new"
    torch.save(tensors(8), tmp)
    os.replace(tmp, path)
    got = [outcome(mnt, data, e, k) for e in (0, 5) for k in range(NB)]
    check(got == ["old"] * len(got), "rename over: the mount keeps "
          "serving the old version, every batch, no error (%s)"
          % sorted(set(got)))
    ml.umount(mnt)


def main():
    ml.require_fuse()
    for fn in (rewrite_torch_save, rewrite_dd, rewrite_while_reading,
               rename_over):
        ml.for_each_mode(fn)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
