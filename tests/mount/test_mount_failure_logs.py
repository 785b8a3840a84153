#!/usr/bin/python3
"""A mount that fails says why, and its log never misleads:
- a user who may not open /dev/fuse (a node of mode 0600 bound over it in
  a private mount namespace, the mount run as nobody) gets one message
  naming /dev/fuse, the user, the node's mode and what to do, not
  fusermount3's bare "Permission denied", and no log file is created;
- a mount refused before anything is mounted (a bad archive) creates no
  log;
- a mount that fails after its log is opened writes the reason into it
  (a forced --serve passthrough that cannot work, fails in the daemon;
  bad FUSE options fail before the fork);
- two mountpoints never share a default log file: .../a-b and .../a/b,
  and two long paths that differ only past the file name limit, get
  files of their own, each holding only its own mount's lines."""
import json
import os
import shutil
import subprocess

import mountlib as ml

import torch

ml.require_fuse()
TMP = ml.TMP
NOBODY = 65534
NOGROUP = 65534


def logs_in(xdg):
    """The log files under $XDG_RUNTIME_DIR/batchfs: {name: text}."""
    d = os.path.join(xdg, "batchfs")
    if not os.path.isdir(d):
        return {}
    return {n: open(os.path.join(d, n)).read() for n in os.listdir(d)}


def fresh_xdg(name, owner=0):
    xdg = os.path.join(TMP, name)
    os.makedirs(xdg)
    os.chown(xdg, owner, owner)
    return xdg


def inaccessible_dev_fuse_says_what_to_do(path):
    if os.geteuid() != 0 or not shutil.which("unshare") or \
            not shutil.which("setpriv") or \
            subprocess.run(["unshare", "-m", "true"]).returncode:
        print("skip part: needs root, setpriv and unshare -m")
        return
    # nobody must reach the archive, the mountpoint and its own log dir
    os.chmod(TMP, 0o755)
    os.chmod(path, 0o644)
    mnt = os.path.join(TMP, "nobody-mnt")
    os.makedirs(mnt)
    os.chown(mnt, NOBODY, NOGROUP)
    xdg = fresh_xdg("xdg-nobody", NOBODY)
    node = os.path.join(TMP, "fuse-0600")
    open(node, "w").close()
    os.chmod(node, 0o600)
    # A private mount namespace: the 0600 node hides /dev/fuse for this
    # command only; the machine's /dev/fuse is never touched.
    script = ('mount --bind "$1" /dev/fuse && exec setpriv --reuid=%d '
              '--regid=%d --clear-groups env XDG_RUNTIME_DIR="$2" '
              '"$3" mount "$4" "$5"' % (NOBODY, NOGROUP))
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh",
                        "-c", script, "sh", node, xdg, ml.BATCHFS, path,
                        mnt], capture_output=True, text=True)
    assert p.returncode == 1, (p.returncode, p.stderr)
    err = p.stderr.strip().splitlines()
    assert len(err) == 1, err
    for want in ["cannot open /dev/fuse: Permission denied",
                 "user nobody", "-rw------- root:root",
                 "chmod 0666 /dev/fuse", "mount as root"]:
        assert want in err[0], (want, err)
    assert "fusermount3" not in p.stderr, p.stderr
    assert logs_in(xdg) == {}, logs_in(xdg)
    assert not ml.is_mounted(mnt)


def refused_mount_creates_no_log(path):
    xdg = fresh_xdg("xdg-refused")
    bad = os.path.join(TMP, "bad.pt")
    with open(bad, "wb") as f:
        f.write(b"PK\x03\x04 this is not an archive")
    p, mnt = ml.mount(bad, os.path.join(TMP, "refused"), check=False,
                      env={"XDG_RUNTIME_DIR": xdg})
    assert p.returncode == 1 and "bad.pt" in p.stderr, p.stderr
    assert logs_in(xdg) == {}, logs_in(xdg)


def failure_after_the_log_is_opened_is_logged(path):
    xdg = fresh_xdg("xdg-failed")
    p, mnt = ml.mount(path, os.path.join(TMP, "no-pt"), "--serve",
                      "passthrough", check=False,
                      env={"XDG_RUNTIME_DIR": xdg,
                           "BATCHFS_DEBUG_NO_PASSTHROUGH": "1"})
    assert p.returncode == 1, p
    why = "--serve passthrough cannot work here"
    assert why in p.stderr, p.stderr
    logs = logs_in(xdg)
    assert len(logs) == 1, logs
    text = list(logs.values())[0]
    assert "mount failed: " + why in text, text
    assert not ml.is_mounted(mnt)

    p, mnt = ml.mount(path, os.path.join(TMP, "bad-o"), "-o", "frobnicate",
                      check=False, env={"XDG_RUNTIME_DIR": xdg})
    assert p.returncode == 2 and "bad FUSE options" in p.stderr, p.stderr
    logs = logs_in(xdg)
    assert len(logs) == 2, logs
    assert any("mount failed: bad FUSE options 'frobnicate'" in t
               for t in logs.values()), logs
    assert not ml.is_mounted(mnt)


def mounts_never_share_a_log(path):
    xdg = fresh_xdg("xdg-names")
    long = "d" * 200
    pairs = [(os.path.join(TMP, "x", "a-b"), os.path.join(TMP, "x", "a", "b")),
             (os.path.join(TMP, long, long + "1"),
              os.path.join(TMP, long, long + "2"))]
    for one, two in pairs:
        mnts = [ml.mount(path, m, env={"XDG_RUNTIME_DIR": xdg})[1]
                for m in (one, two)]
        logs = [json.load(open(m + "/dataset.json"))["log"] for m in mnts]
        assert logs[0] != logs[1], logs
        for m, log in zip(mnts, logs):
            assert os.path.dirname(log) == os.path.join(xdg, "batchfs"), log
            assert len(os.path.basename(log)) <= 255, log
            text = open(log).read()
            assert "on %s (pid" % m in text, (m, text)
            others = [o for o in mnts if o != m]
            assert "on %s (pid" % others[0] not in text, (m, text)
        for m in mnts:
            assert ml.umount(m).returncode == 0


def main():
    path = os.path.join(TMP, "d.pt")
    torch.save({"x": torch.arange(40).reshape(20, 2)}, path)
    inaccessible_dev_fuse_says_what_to_do(path)
    refused_mount_creates_no_log(path)
    failure_after_the_log_is_opened_is_logged(path)
    mounts_never_share_a_log(path)
    print("ok")


main()
