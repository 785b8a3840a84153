#!/usr/bin/python3
"""Hostile torch.save archives (tests/lib/hostile.py) are refused, quickly
and with a message naming the file and the reason, or served exactly as
torch loads them; none crashes, hangs or is accepted wrongly.

For every case: what torch does with it (refuses / loads) is checked with
the torch installed, so "refuse what torch refuses" is pinned; then
`batchfs inspect` and `batchfs mount` are run on it:
  refused_by "inspect": both exit 1 (not a signal) naming the file and the
      reason; nothing is mounted;
  refused_by "mount": inspect describes it (exit 0), the mount exits 1
      with the reason, nothing is mounted;
  accepted: the mount serves batches equal to torch's rows.
Cases include the size arithmetic that used to wrap (stride-0 rows of
2^62 elements, sums of rows past 2^63) and write past the batch buffer,
a 4 TiB row, 2^40 samples, 10^6 keys naming one tensor (refused with
inspect's peak memory measured), a 200-byte storage key, a byteorder
record "big\\0garbage", empty containers, TorchScript, an empty ZIP, an
end record whose counts disagree and a tensor whose size os.system(...)
makes (refused naming the field and the global, never called). Every case runs under the
sanitizer build too (make check's second pass)."""

import os
import subprocess
import sys

import numpy as np
import torch

import hostile
import mountlib as ml

TMP = os.environ["BFS_TEST_TMP"]
failures = []
# Metadata is charged to one 256 MiB budget (BFS_DATASET_META_BUDGET);
# the rest of inspect is a few MiB. ASan's shadow and redzones triple it.
RSS_LIMIT_KIB = (256 + 64) << 10
if os.environ.get("SANITIZE"):
    RSS_LIMIT_KIB *= 3


# Runs argv[2:] and writes its exit status and peak RSS (KiB) to the fd
# numbered argv[1].
# An exec'd child inherits the peak RSS of the process it was forked from
# (the kernel keeps the old mm's high-water mark), so the command is
# started from this small interpreter, not from this torch-sized one.
MEASURE = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, st, ru = os.wait4(pid, 0)
os.write(int(sys.argv[1]),
         b"%d %d" % (os.waitstatus_to_exitcode(st), ru.ru_maxrss))
"""


def run(cmd):
    """(exit status, output, peak RSS in KiB) of a command."""
    r, w = os.pipe()
    p = subprocess.run(["/usr/bin/python3", "-S", "-c", MEASURE, str(w),
                        *cmd], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, pass_fds=(w,))
    os.close(w)
    rc, rss = map(int, os.read(r, 64).split())
    os.close(r)
    return rc, p.stdout, rss


def check(name, ok, what):
    print("%s %-22s %s" % ("ok  " if ok else "FAIL", name, what))
    if not ok:
        failures.append("%s: %s" % (name, what))


def refused(name, cmd, path, reason):
    rc, out, rss = run(cmd)
    last = out.strip().splitlines()[-1:] or [""]
    check(name, rc == 1 and path in out and reason in out,
          "%s -> rc %d, %d MiB: %s" % (cmd[1], rc, rss >> 10, last[0][:200]))
    return rss


def served_like_torch(name, path, opts):
    p, mnt = ml.mount(path, None, *opts, check=False)
    if p.returncode != 0:
        check(name, False, "mount refused: " + p.stderr.strip())
        return
    want = torch.load(path, weights_only=True)
    idx = ml.read_index(mnt + "/index/0/batch_0")
    _, arrs = ml.read_batch(mnt + "/epoch/0/batch_0")
    same = all(np.array_equal(arrs[k], want[k][idx].numpy()) for k in want)
    check(name, same, "served %d rows equal to torch's" % len(idx))
    ml.umount(mnt)


def main():
    ml.require_fuse()
    for name, case in hostile.CASES.items():
        path = case.build(os.path.join(TMP, name + ".pt"))
        verdict = hostile.torch_refuses(path)
        if case.torch:
            check(name, (verdict is not None) == (case.torch == "refuses"),
                  "torch %s (%s)" % (case.torch, verdict or "loaded"))
        mnt = os.path.join(TMP, "mnt_" + name)
        os.makedirs(mnt, exist_ok=True)
        mount = [ml.BATCHFS, "mount", *case.mount_opts, path, mnt]
        if case.refused_by == "inspect":
            rss = refused(name, [ml.BATCHFS, "inspect", path], path,
                          case.reason)
            if name == "million_keys":  # refused within the budget
                check(name, rss < RSS_LIMIT_KIB,
                      "inspect peak RSS %d MiB < %d" %
                      (rss >> 10, RSS_LIMIT_KIB >> 10))
        elif case.refused_by == "mount":
            rc, out, _ = run([ml.BATCHFS, "inspect", path])
            check(name, rc == 0, "inspect describes it (rc %d)" % rc)
        if case.refused_by:
            refused(name, mount, path, case.reason)
            check(name, not ml.is_mounted(mnt), "nothing mounted")
        else:
            served_like_torch(name, path, case.mount_opts)
    if failures:
        print("\nFAILURES:\n" + "\n".join(failures))
        return 1
    print("all %d hostile archives handled" % len(hostile.CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
