"""The daemon's life under load, cycle after cycle on one mountpoint (the
serve mode rotating through ml.serve_modes()):

- mount, 4 reader processes reading whole batches, SIGTERM to the daemon
  while they read: the daemon exits and unmounts cleanly, every reader ends
  with ENOTCONN, ECONNABORTED (its request was in flight) or EIO (or
  ENOENT: it opened after the unmount); nothing hangs (each wait is bounded
  by ml.LIVENESS_S, a hang detector, not a measurement);
- the same with SIGKILL: auto_unmount removes the mount (no stale mount
  left), and the next cycle mounts on the same mountpoint;
- `batchfs umount` while a reader waits for a slow batch
  (BATCHFS_DEBUG_GATHER_DELAY_MS): it answers, while the reader is still
  waiting, that the mount is busy, names the reader as waiting for a
  batch and says to interrupt it; the reader then gets its whole batch, and the next `batchfs umount` succeeds.

CYCLES (default 10; `make soak` runs 100) cycles of each kind. The
dataset is written with numpy and `batchfs pack`, so readers are forked
from a process without torch.
"""
import errno
import os
import random
import select
import signal
import subprocess
import sys
import time

import numpy as np

import mountlib as ml

N, B, E, READERS, BOUND_S = 4000, 64, 4, 4, ml.LIVENESS_S
SLOW_MS = 8000  # the slow batch: umount answers long before it is ready
NB = (N + B - 1) // B
# the connection is gone (ENOTCONN), a request in flight was aborted with
# it (ECONNABORTED), EIO, or the reader opened after the unmount (ENOENT)
ENDINGS = {errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ENOENT}
failures = []
endings = {}


def check(ok, what):
    if not ok:
        print("FAIL " + what)
        failures.append(what)


def dataset():
    x = np.random.default_rng(5).integers(0, 256, (N, 2048), dtype=np.uint8)
    np.save(os.path.join(ml.TMP, "x.npy"), x)
    np.save(os.path.join(ml.TMP, "y.npy"), np.arange(N, dtype=np.int64))
    path = os.path.join(ml.TMP, "cycles.pt")
    p = subprocess.run([ml.BATCHFS, "pack", "-o", path,
                        "x=" + os.path.join(ml.TMP, "x.npy"),
                        "y=" + os.path.join(ml.TMP, "y.npy")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return path


def reader(mnt, ready, seed):
    """Child: read whole batches until an error; exit status = errno."""
    rnd = random.Random(seed)
    first = True
    try:
        while True:
            fd = os.open("%s/epoch/%d/batch_%d" % (mnt, rnd.randrange(E),
                                                   rnd.randrange(NB)),
                         os.O_RDONLY)
            try:
                while os.read(fd, 1 << 20):
                    pass
            finally:
                os.close(fd)
            if first:
                os.write(ready, b"r")
                first = False
    except OSError as ex:
        os._exit(ex.errno)
    except BaseException:
        os._exit(250)


def start_readers(mnt, seed):
    """Fork READERS readers; returns their pids once each has read a
    whole batch (or has died trying)."""
    r, w = os.pipe()
    pids = []
    for i in range(READERS):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            reader(mnt, w, seed * 10 + i)
        pids.append(pid)
    os.close(w)
    got = 0
    while got < READERS:
        b = os.read(r, READERS)
        if not b:
            break  # a reader died before its first batch: reap reports it
        got += len(b)
    os.close(r)
    return pids


def reap(pids, what):
    """Wait (at most BOUND_S) for the readers; count how they ended."""
    deadline = time.monotonic() + BOUND_S
    for pid in pids:
        fd = os.pidfd_open(pid)
        left = max(0.0, deadline - time.monotonic())
        done = select.select([fd], [], [], left)[0]
        os.close(fd)
        if not done:
            check(False, "%s: reader %d still running after %.0f s"
                  % (what, pid, BOUND_S))
            os.kill(pid, signal.SIGKILL)
        _, st = os.waitpid(pid, 0)
        code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st)
        name = errno.errorcode.get(code, str(code))
        endings[name] = endings.get(name, 0) + 1
        check(code in ENDINGS, "%s: a reader ended with %s" % (what, name))


late = []


def unmounted(mnt):
    """True once mnt is no longer mounted (bounded by BOUND_S); a mount
    still there when its daemon and helper are gone is counted in late."""
    deadline = time.monotonic() + BOUND_S
    first = True
    while ml.is_mounted(mnt):
        if first:
            late.append(mnt)
            first = False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def cycle(src, mnt, n, sig):
    mode = ml.serve_modes()[n % len(ml.serve_modes())]
    what = "cycle %d (%s, %s)" % (n, signal.Signals(sig).name, mode)
    p, _ = ml.mount(src, mnt, "--batch-size", B, "--shuffle", "--seed", n,
                    "--epochs", E, "--serve", mode, check=False)
    check(p.returncode == 0, "%s: mount on the same mountpoint: %s"
          % (what, p.stderr.strip()))
    if p.returncode:
        return
    pid = ml.daemon_pid(mnt)
    helpers = ml.unmount_helpers(mnt)
    pids = start_readers(mnt, n)
    os.kill(pid, sig)
    check(ml.wait_pid_exit(pid, BOUND_S), "%s: the daemon exits" % what)
    reap(pids, what)
    if sig == signal.SIGKILL:
        check(all(ml.wait_pid_exit(h, BOUND_S) for h in helpers),
              "%s: auto_unmount's helper finishes" % what)
    check(unmounted(mnt), "%s: no mount left after %.0f s" % (what, BOUND_S))


def umount_while_blocked(src):
    mnt = os.path.join(ml.TMP, "slow")
    _, mnt = ml.mount(src, mnt, "--batch-size", B, "--timeout", 600,
                      env={"BATCHFS_DEBUG_GATHER_DELAY_MS": str(SLOW_MS)})
    pid = ml.daemon_pid(mnt)
    child = os.fork()
    if child == 0:
        try:
            data = ml.read_file(mnt + "/epoch/0/batch_5")
            os._exit(0 if len(data) == os.stat(
                mnt + "/epoch/0/batch_5").st_size else 1)
        except OSError as ex:
            os._exit(ex.errno)
    check(ml.wait_blocked(child, BOUND_S),
          "slow: the reader waits for its batch")
    p = subprocess.run([ml.BATCHFS, "umount", mnt], capture_output=True,
                       text=True, timeout=BOUND_S)
    done, st = os.waitpid(child, os.WNOHANG)
    waiting = done == 0
    said = ("pid %d " % child in p.stderr and "waiting for a batch" in
            p.stderr and "Interrupt" in p.stderr)
    check(p.returncode == 1 and said and waiting,
          "slow: batchfs umount answers, while the reader still waits, "
          "that it is busy with that reader waiting for a batch (rc %d, "
          "reader waiting: %s): %s"
          % (p.returncode, waiting, p.stderr.strip()[-300:]))
    if waiting:
        _, st = os.waitpid(child, 0)
    check(os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0,
          "slow: the reader gets its whole batch (status %d)" % st)
    check(ml.umount(mnt).returncode == 0 and ml.wait_pid_exit(pid),
          "slow: then batchfs umount unmounts and the daemon exits")


def main():
    ml.require_fuse()
    cycles = int(os.environ.get("CYCLES", 10))
    src = dataset()
    mnt = os.path.join(ml.TMP, "mnt")
    t0 = time.monotonic()
    for n in range(cycles):
        cycle(src, mnt, n, signal.SIGTERM)
    for n in range(cycles):
        cycle(src, mnt, cycles + n, signal.SIGKILL)
    umount_while_blocked(src)
    print("%d SIGTERM and %d SIGKILL cycles with %d readers in %.0f s; "
          "readers ended with %s; %d mounts outlived their daemon and "
          "helper for a moment; %d failures"
          % (cycles, cycles, READERS, time.monotonic() - t0, endings,
             len(late), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
