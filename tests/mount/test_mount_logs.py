#!/usr/bin/python3
"""The daemon's log: by default a file named after the mountpoint under
$XDG_RUNTIME_DIR/batchfs/, named in dataset.json and the mount's README;
stderr with -f; an unusable --log-file fails the mount (exit 1, nothing
mounted); -v logs each batch's open, materialize, serve and evict with
timings; stats ends with last_error (time, epoch, batch, message, with
the reason a lower layer logged; the message not padded: the size follows
it); the line that logs the options names --seed only for an order that
is random.

Run as root: a default log directory swapped for a symlink once it was
checked (the mount stopped there, BATCHFS_DEBUG_STOP=log) lets nothing be
created through the symlink. A source named with a newline, ESC and
other control characters gets one log line where they are escaped, and
an error naming such a file is one line on stderr, escaped too."""
import json
import os
import re
import signal
import subprocess
import time

import mountlib as ml

import torch

ml.require_fuse()
TMP = ml.TMP


def archive(name, n, row):
    path = os.path.join(TMP, name)
    torch.save({"x": torch.arange(n * row, dtype=torch.int32).reshape(n, row),
                "y": torch.arange(n)}, path)
    return path


def dataset_json(mnt):
    with open(os.path.join(mnt, "dataset.json")) as f:
        return json.load(f)


def default_log_is_named_after_the_mountpoint(path):
    xdg = os.path.join(TMP, "xdg")
    os.makedirs(xdg)
    mnt = os.path.join(TMP, "by", "name")
    _, mnt = ml.mount(path, mnt, "--batch-size", 5,
                      env={"XDG_RUNTIME_DIR": xdg})
    # '/' becomes '-', and a '-' of the path %2D (TMP has one)
    want = os.path.join(xdg, "batchfs", mnt.strip("/").replace(
        "-", "%2D").replace("/", "-") + ".log")
    assert dataset_json(mnt)["log"] == want, dataset_json(mnt)
    assert "The daemon logs to: %s\n" % want in \
        open(os.path.join(mnt, "README")).read()
    pid = ml.daemon_pid(mnt)
    assert ml.umount(mnt).returncode == 0
    # the daemon writes its last line after the unmount: wait for it
    assert ml.wait_pid_exit(pid), "the daemon did not exit"
    text = open(want).read()
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z batchfs"
                     r"\[mount\]: mounting .* on %s" % re.escape(mnt), text,
                     re.M), text
    assert "unmounting " + mnt in text, text


def seed_logged_only_for_a_random_order(path):
    """The line that logs the options (and README's) names the seed of a
    random order, and no seed for a sequential one (none is used), also
    when --seed was given (which warns)."""
    for opts, want in [(["--shuffle", "--seed", 7], "--seed 7"),
                       (["--seed", 7], None), ([], None),
                       (["--world-size", 2, "--rank", 1], None)]:
        log = os.path.join(TMP, "seed.log")
        if os.path.exists(log):
            os.unlink(log)
        _, mnt = ml.mount(path, None, "--batch-size", 5, "--log-file", log,
                          *opts)
        readme = [x for x in open(os.path.join(mnt, "README"))
                  if x.startswith("Options: ")][0]
        pid = ml.daemon_pid(mnt)
        assert ml.umount(mnt).returncode == 0
        assert ml.wait_pid_exit(pid), "the daemon did not exit"
        line = [x for x in open(log) if "[mount]: mounting " in x][0]
        if want:
            assert want in line and want in readme, (opts, line)
        else:
            assert "--seed" not in line + readme, (opts, line, readme)


def foreground_logs_to_stderr(path):
    mnt = os.path.join(TMP, "fg")
    os.makedirs(mnt)
    p = subprocess.Popen([ml.BATCHFS, "mount", "-f", path, mnt],
                         stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stderr:       # blocks until the daemon says it serves
            if "batchfs[mount]: serving " + mnt in line:
                break
        assert dataset_json(mnt)["log"] == "stderr"
        assert ml.umount(mnt).returncode == 0
        assert p.wait() == 0
        assert "unmounting " + mnt in p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()


def unusable_log_file_fails_the_mount(path):
    mnt = os.path.join(TMP, "nolog")
    os.makedirs(mnt)
    for bad in [TMP, os.path.join(TMP, "missing", "x.log")]:
        p, _ = ml.mount(path, mnt, "--log-file", bad, check=False)
        assert p.returncode == 1, p
        assert p.stderr.startswith("batchfs mount: --log-file %s: " % bad), \
            p.stderr
        assert not ml.is_mounted(mnt)


def verbose_logs_every_step_of_a_batch(mode, path):
    log = os.path.join(TMP, "v-%s.log" % mode)
    # 256 KiB batches, a 1 MiB budget: a jump ahead evicts prefetched ones
    _, mnt = ml.mount(path, None, "-v", "--log-file", log, "--serve", mode,
                      "--batch-size", 64, "--cache-mb", 1, "--workers", 1,
                      "--prefetch", 2)
    ml.read_file(mnt + "/epoch/0/batch_0")
    ml.wait_stats(mnt, lambda s: s["cache_batches"] >= 2)
    ml.read_file(mnt + "/epoch/7/batch_3")
    s = ml.stats(mnt)
    assert ml.umount(mnt).returncode == 0
    text = open(log).read()
    ms = r" [0-9]+\.[0-9]{3} ms"
    for step in [r"epoch 0 batch 0: open \(%s\): ok in%s" % (mode, ms),
                 r"epoch 0 batch 0: materialized in%s \(\d+ bytes, "
                 r"demanded\)" % ms,
                 r"epoch 0 batch 1: materialized in%s \(\d+ bytes, "
                 r"prefetched\)" % ms,
                 r"epoch 0 batch 0: served \(\d+ bytes\), (pushed|%s "
                 r"after its open)" % ms[1:],
                 r"epoch 7 batch 3: served"]:
        assert re.search(step, text), (step, text)
    if s["evictions"]:
        assert re.search(r"epoch 0 batch \d+: evicted for room,%s after "
                         r"it was materialized" % ms, text), text


def last_error_in_stats(path):
    log = os.path.join(TMP, "err.log")
    _, mnt = ml.mount(path, None, "--batch-size", 10, "--timeout", 1,
                      "--log-file", log,
                      env={"BATCHFS_DEBUG_GATHER_DELAY_MS": "60000"})
    size = os.stat(mnt + "/stats").st_size
    assert len(open(mnt + "/stats").read()) == size
    s = ml.stats(mnt)
    for k in ["last_error_time", "last_error_epoch", "last_error_batch",
              "last_error"]:
        assert s[k] == "-", s
    idx = ml.read_index(mnt + "/index/0/batch_2")
    ml.read_fails_with_eio(mnt + "/epoch/0/batch_2")
    s = ml.stats(mnt)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                        s["last_error_time"]), s
    assert s["last_error_epoch"] == 0 and s["last_error_batch"] == 2, s
    assert s["last_error"] == ("not ready after 1000 ms (sample %d first "
                               "of 10 samples): read fails with EIO"
                               % idx[0]), s
    # the message as it is, no padding; the size follows, never cached
    with open(mnt + "/stats") as f:
        text = f.read()
    line = [x for x in text.splitlines() if x.startswith("last_error ")][0]
    assert line.endswith(s["last_error"]), repr(line)
    assert text.endswith(line + "\n"), repr(text[-300:])
    assert os.stat(mnt + "/stats").st_size == len(text) > size
    assert ml.umount(mnt).returncode == 0


def last_error_carries_the_reason(path):
    """A gather that fails names the reason the dataset logged (the
    archive shrank under the mount)."""
    victim = os.path.join(TMP, "victim.pt")
    with open(path, "rb") as f:
        data = f.read()
    with open(victim, "wb") as f:
        f.write(data)
    _, mnt = ml.mount(victim, None, "--batch-size", 10, "--prefetch", 0,
                      "--log-file", os.path.join(TMP, "victim.log"))
    os.truncate(victim, 4096)
    ml.read_fails_with_eio(mnt + "/epoch/0/batch_3")
    s = ml.stats(mnt)
    assert s["last_error_batch"] == 3, s
    assert s["last_error"].startswith("gather failed: Input/output error ("), s
    assert "victim.pt" in s["last_error"], s
    assert ml.umount(mnt).returncode == 0


def wait_stopped(pid, timeout=ml.LIVENESS_S):
    """Until process pid is stopped (SIGSTOP); False after timeout seconds
    or when it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in "tT":
            return True
        if state in "ZX":
            return False
        time.sleep(0.01)
    return False


def log_directory_swapped_for_a_symlink(path):
    """sudo -E: root with the XDG_RUNTIME_DIR of a user, who swaps
    XDG_RUNTIME_DIR/batchfs for a symlink to a directory only root may
    write once root has checked it: no file appears there."""
    if os.geteuid() != 0:
        print("skip: symlink swap case (needs root)")
        return
    xdg = os.path.join(TMP, "xdg-user")
    os.makedirs(xdg)
    os.chown(xdg, 65534, 65534)
    os.chmod(xdg, 0o700)
    target = os.path.join(TMP, "root-only")
    os.makedirs(target)
    os.chmod(target, 0o700)
    mnt = os.path.join(TMP, "swapped")
    os.makedirs(mnt)
    env = dict(os.environ, XDG_RUNTIME_DIR=xdg, BATCHFS_DEBUG_STOP="log")
    p = subprocess.Popen([ml.BATCHFS, "mount", path, mnt],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert wait_stopped(p.pid), "the mount did not stop at log"
        logs = os.path.join(xdg, "batchfs")
        os.rename(logs, logs + ".old")
        os.symlink(target, logs)
    finally:
        os.kill(p.pid, signal.SIGCONT)
        _, err = p.communicate(timeout=ml.LIVENESS_S)
    if p.returncode == 0:
        ml._mounts.append(mnt)
        assert ml.umount(mnt).returncode == 0
    assert os.listdir(target) == [], (os.listdir(target), err)


# A name that would be a log line of its own, and terminal escapes.
EVIL = "x.pt\n2030-01-01T00:00:00.000Z batchfs[mount]: fake\r\x1b[2J\x7f"


def control_characters_are_escaped(path):
    evil = os.path.join(TMP, EVIL)
    with open(path, "rb") as f, open(evil, "wb") as g:
        g.write(f.read())
    log = os.path.join(TMP, "evil.log")
    _, mnt = ml.mount(evil, None, "--log-file", log)
    assert ml.umount(mnt).returncode == 0
    text = open(log, encoding="utf-8", errors="replace").read()
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z batchfs\[")
    for line in text.split("\n")[:-1]:
        assert stamp.match(line) and "fake" not in line[:40], (line, text)
    for c in "\r\x1b\x7f":
        assert c not in text, (c, text)
    assert "x.pt\\n2030-01-01T00:00:00.000Z batchfs[mount]: fake\\r" \
        "\\x1b[2J\\x7f" in text, text
    # a file that is not an archive: its error on stderr is one line
    bad = os.path.join(TMP, "bad\n\x1b[31m.pt")
    with open(bad, "wb") as f:
        f.write(b"not an archive" * 100)
    p, _ = ml.mount(bad, os.path.join(TMP, "badmnt"), check=False)
    assert p.returncode == 1, p
    assert p.stderr.count("\n") == 1 and "\x1b" not in p.stderr, p.stderr
    assert "bad\\n\\x1b[31m.pt" in p.stderr, p.stderr


def main():
    path = archive("d.pt", 400, 1024)
    log_directory_swapped_for_a_symlink(path)
    control_characters_are_escaped(path)
    default_log_is_named_after_the_mountpoint(path)
    foreground_logs_to_stderr(path)
    seed_logged_only_for_a_random_order(path)
    unusable_log_file_fails_the_mount(path)
    ml.for_each_mode(verbose_logs_every_step_of_a_batch, path)
    last_error_in_stats(path)
    last_error_carries_the_reason(path)
    print("ok")


main()
