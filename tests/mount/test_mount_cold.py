"""Data that does not fit in memory is read ahead, many reads at once
(fs/memory, fs/fetch, fs/reader, fs/readahead), and served byte-exact:

- BATCHFS_DEBUG_COLD=1 (the memory policy acts as if the data did not
  fit), 48-KiB rows, 1000-byte rows + int64 labels: the gathers read
  the big rows with O_DIRECT and the 1000-byte ones buffered (stats
  rows_read_direct counts both), every batch of an epoch equals numpy's
  rows, with --reader io_uring and --reader threads; stats and
  dataset.json name the reader and say why;
- a daemon that may not set up io_uring (tests/bin/no_uring: a seccomp
  filter, as some container profiles have): --reader auto falls back to
  reader threads and says why (log, stats, dataset.json), batches exact;
  --reader io_uring fails the mount with the reason;
- faults of the io_uring under those reads and the read-ahead
  (BATCHFS_DEBUG_URING_*): waits cut short by EINTR (as SIGSTOP or a
  cgroup freeze do), submits that fail (a few, or all) or take only one
  read: every batch exact, every row still read with O_DIRECT (no batch
  fell back to the mapping), never a hang;
- faults under the O_DIRECT reads (faultfs): EIO on one sample's row
  fails exactly the batches holding it, with EIO, the daemon stays alive,
  and after `clear` they read back; a read stalled past --timeout fails
  its batch with EIO, and once the stall is over the batch reads back;
- in a memory cgroup (root and a memory controller, else this part is
  skipped): an archive three times the cgroup's limit is served
  byte-exact with io_uring and with threads, and no process of the
  cgroup is OOM-killed.
"""
import errno
import json
import os
import subprocess
import sys

import numpy as np

import mountlib as ml

ROW = 48 << 10  # bytes per sample of x: read with O_DIRECT (>= 32 KiB)
ZROW = 1000  # ... of z: read buffered (512 bytes up to 32 KiB)
B = 16
NO_URING = os.path.join(os.environ.get("BFS_SRC", "."), ml.BUILD_DIR,
                        "tests", "bin", "no_uring")
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


class Data:
    """n samples: x uint8 [n, ROW], y int64, z uint8 [n, ZROW]; packed
    into an archive."""

    def __init__(self, name, n, seed):
        rng = np.random.default_rng(seed)
        d = os.path.join(ml.TMP, name)
        os.makedirs(d, exist_ok=True)
        np.save(d + "/x.npy", rng.integers(0, 256, (n, ROW), np.uint8))
        np.save(d + "/y.npy", np.arange(n, dtype=np.int64) * 3 + seed)
        np.save(d + "/z.npy", rng.integers(0, 256, (n, ZROW), np.uint8))
        self.x = np.load(d + "/x.npy", mmap_mode="r")
        self.y = np.load(d + "/y.npy")
        self.z = np.load(d + "/z.npy")
        self.path = d + ".pt"
        subprocess.run([ml.BATCHFS, "pack", "-o", self.path,
                        "x=" + d + "/x.npy", "y=" + d + "/y.npy",
                        "z=" + d + "/z.npy"],
                       check=True, capture_output=True)
        self.n = n


def outcome(data, mnt, e, k):
    """'ok', 'wrong', or the errno of the failed read of batch (e, k)."""
    idx = ml.read_index("%s/index/%d/batch_%d" % (mnt, e, k))
    try:
        _, arrs = ml.read_batch("%s/epoch/%d/batch_%d" % (mnt, e, k))
    except OSError as ex:
        return ex.errno
    same = np.array_equal(arrs["x"], data.x[idx]) and \
        np.array_equal(arrs["y"], data.y[idx]) and \
        np.array_equal(arrs["z"], data.z[idx])
    return "ok" if same else "wrong"


def epoch(data, mnt, e):
    nb = (data.n + B - 1) // B
    return [outcome(data, mnt, e, k) for k in range(nb)]


def mount(data, name, *opts, env=None, preexec_fn=None, check_rc=True):
    e = {"BATCHFS_DEBUG_COLD": "1"}
    e.update(env or {})
    return ml.mount(data.path, os.path.join(ml.TMP, name), "--batch-size",
                    B, "--shuffle", "--seed", 9, "--log-file",
                    os.path.join(ml.TMP, name + ".log"), *opts, env=e,
                    preexec_fn=preexec_fn, check=check_rc)


def dataset_json(mnt):
    with open(mnt + "/dataset.json") as f:
        return json.load(f)


def readers_serve_exact(data):
    for reader in ("io_uring", "threads"):
        _, mnt = mount(data, "cold-" + reader, "--reader", reader)
        got = epoch(data, mnt, 0)
        check(got == ["ok"] * len(got), "%s: every batch of an epoch is "
              "exact (%s)" % (reader, sorted(set(map(str, got)))))
        s = ml.stats(mnt)
        check(s["reader"] == reader and s["rows_read_direct"] >= 2 * data.n,
              "%s: stats name the reader, x's rows were read with O_DIRECT "
              "and z's buffered (%s, %d rows)"
              % (reader, s["reader"], s["rows_read_direct"]))
        j = dataset_json(mnt)
        check(j["reader"] == reader and "O_DIRECT" in j["reader_why"] and
              "512 bytes buffered" in j["reader_why"],
              "%s: dataset.json says how and why: %s" % (reader,
                                                        j["reader_why"]))
        ml.umount(mnt)


def seccomp_falls_back(data):
    if not os.path.exists(NO_URING):
        check(False, "tests/bin/no_uring is built")
        return
    p = subprocess.run([NO_URING, "/usr/bin/true"])
    if p.returncode:
        print("skip: seccomp part (a filter cannot be installed here)")
        return
    env = dict(os.environ, BATCHFS_DEBUG_COLD="1")
    log = os.path.join(ml.TMP, "seccomp.log")
    mnt = os.path.join(ml.TMP, "seccomp")
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.run([NO_URING, ml.BATCHFS, "mount", data.path, mnt,
                        "--batch-size", str(B), "--shuffle", "--seed", "9",
                        "--log-file", log], capture_output=True, text=True,
                       env=env)
    check(p.returncode == 0, "seccomp: the mount works (%s)" % p.stderr)
    if p.returncode:
        return
    ml._mounts.append(mnt)
    got = epoch(data, mnt, 0)
    check(got == ["ok"] * len(got), "seccomp: every batch exact")
    why = dataset_json(mnt)["reader_why"]
    check(ml.stats(mnt)["reader"] == "threads" and
          "io_uring cannot be set up" in why and
          "Function not implemented" in why,
          "seccomp: reader threads, and why: %s" % why)
    with open(log) as f:
        check("io_uring cannot be set up" in f.read(),
              "seccomp: the log says why")
    ml.umount(mnt)
    p = subprocess.run([NO_URING, ml.BATCHFS, "mount", data.path, mnt,
                        "--reader", "io_uring"], capture_output=True,
                       text=True, env=env)
    check(p.returncode == 1 and "io_uring cannot be set up" in p.stderr and
          not ml.is_mounted(mnt),
          "seccomp: --reader io_uring fails the mount with the reason "
          "(%d: %s)" % (p.returncode, p.stderr.strip()))


URING_FAULTS = [
    ("eintr", {"BATCHFS_DEBUG_URING_EINTR": "4"}),
    ("submit-fails", {"BATCHFS_DEBUG_URING_SUBMIT_FAIL": "2"}),
    ("submit-always-fails", {"BATCHFS_DEBUG_URING_SUBMIT_FAIL": "1000000"}),
    ("submit-short", {"BATCHFS_DEBUG_URING_SUBMIT_SHORT": "1000000"}),
]


def uring_faults(data):
    for name, env in URING_FAULTS:
        _, mnt = mount(data, "uring-" + name, "--reader", "io_uring",
                       "--epochs", 1, env=env)
        got = []
        try:
            ml.bounded(mnt, [lambda: got.extend(epoch(data, mnt, 0))])
        except AssertionError as ex:
            check(False, "%s: %s" % (name, ex))
            continue
        check(got == ["ok"] * len(got), "%s: every batch of an epoch is "
              "exact (%s)" % (name, sorted(set(map(str, got)))))
        direct = ml.stats(mnt)["rows_read_direct"]
        check(direct >= 2 * data.n, "%s: every row read by the gathers "
              "(x's with O_DIRECT, z's buffered), none from the mapping "
              "after a failed read (%d of %d)" % (name, direct, 2 * data.n))
        ml.umount(mnt)


def faults(data):
    if not os.path.exists(ml.FAULTFS):
        check(False, "faultfs is built")
        return
    ff = ml.FaultFS(data.path, "cold")
    try:
        with open(data.path, "rb") as f:
            blob = f.read()
        s = 7
        off = blob.find(np.ascontiguousarray(data.x[s]).tobytes())
        ff.ctl("eio %d 100" % (off + ROW // 2))
        _, mnt = ml.mount(ff.archive, os.path.join(ml.TMP, "cold-ff"),
                          "--batch-size", B, "--shuffle", "--seed", 9,
                          "--timeout", 3,
                          env={"BATCHFS_DEBUG_COLD": "1"})
        pid = ml.daemon_pid(mnt)
        got = epoch(data, mnt, 0)
        hold = [k for k in range(len(got)) if s in ml.read_index(
            "%s/index/0/batch_%d" % (mnt, k))]
        bad = [k for k, r in enumerate(got) if r != "ok"]
        check(bad == hold and all(got[k] == errno.EIO for k in bad),
              "faults: EIO on a row fails exactly its batch (%s, want %s)"
              % ([(k, got[k]) for k in bad], hold))
        check(ml.stats(mnt)["rows_read_direct"] > 0,
              "faults: rows were read with O_DIRECT")
        ff.ctl("clear")
        check(outcome(data, mnt, 0, hold[0]) == "ok",
              "faults: after clear the batch reads back")
        ff.ctl("stall %d 4096 8" % ((off + 8192) // 4096 * 4096))
        k5 = next(j for j in range(len(got)) if s in ml.read_index(
            "%s/index/5/batch_%d" % (mnt, j)))  # epoch 5: never prefetched
        first = outcome(data, mnt, 5, k5)
        check(first == errno.EIO, "faults: a stall past --timeout fails "
              "the batch with EIO (%s)" % first)
        ff.ctl("clear")
        again = "?"
        for _ in range(10):  # the stalled read ends: the batch is served
            again = outcome(data, mnt, 5, k5)
            if again == "ok":
                break
        check(again == "ok", "faults: after the stall the batch reads back")
        check(ml.is_mounted(mnt) and ml.daemon_pid(mnt) == pid,
              "faults: the daemon is alive")
        # faultfs unmounts only once the daemon holds no file of it open
        check(ml.umount(mnt).returncode == 0 and ml.wait_pid_exit(pid),
              "faults: clean unmount")
    finally:
        ff.close()


def in_cgroup():
    if os.geteuid() != 0:
        print("skip: cgroup part (needs root)")
        return
    limit = 64 << 20
    data = Data("big", 3 * limit // ROW, 5)  # three times the limit
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    for reader in ("io_uring", "threads"):
        cg = ml.memory_cgroup(limit)
        pid = None
        try:
            _, mnt = ml.mount(data.path, os.path.join(ml.TMP, "cg-" + reader),
                              "--batch-size", B, "--shuffle", "--seed", 9,
                              "--cache-mb", 16, "--reader", reader,
                              preexec_fn=lambda: ml.join_cgroup(cg))
            pid = ml.daemon_pid(mnt)
            if ml.sanitizer_of(pid) == "TSan":
                print("skip: cgroup part under ThreadSanitizer (its "
                      "runtime alone outgrows the cgroup)")
                ml.umount(mnt)
                return
            got = epoch(data, mnt, 0)
            check(got == ["ok"] * len(got), "cgroup %s: an archive 3x the "
                  "limit, every batch exact (%s)"
                  % (reader, sorted(set(map(str, got)))))
            s = ml.stats(mnt)
            check(s["rows_read_direct"] >= data.n and s["pid"] == pid,
                  "cgroup %s: rows read with O_DIRECT, the daemon alive"
                  % reader)
            ml.umount(mnt)
            oom = ml.cgroup_oom_kills(cg)
            check(oom == 0, "cgroup %s: no OOM kill (%s)" % (reader, oom))
        finally:
            if pid:
                ml.wait_pid_exit(pid)
            ml.remove_cgroup(cg)


def main():
    ml.require_fuse()
    data = Data("cold", 600, 1)
    readers_serve_exact(data)
    seccomp_falls_back(data)
    uring_faults(data)
    faults(data)
    in_cgroup()
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
