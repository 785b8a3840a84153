#!/usr/bin/python3
"""How the serving mode is chosen at mount, where passthrough cannot work
(forced here with BATCHFS_DEBUG_NO_PASSTHROUGH, which makes the daemon
ignore the kernel's offer, as an older kernel or a daemon without
CAP_SYS_ADMIN would):
- the default (--serve auto) falls back to push, says why once in the log,
  and stats and dataset.json name the mode and the reason; batches are
  served right;
- --serve passthrough fails with one line saying why, exit 1, nothing
  mounted and no daemon left;
- --serve push/cache/direct are taken as asked, with the reason
  '--serve MODE'; --serve bogus is bad usage (exit 2)."""
import json
import os

import mountlib as ml

import torch

ml.require_fuse()
TMP = ml.TMP
NO_PT = {"BATCHFS_DEBUG_NO_PASSTHROUGH": "1"}


def daemons_on(mnt):
    """batchfs processes whose command line names mountpoint mnt."""
    exe = os.path.realpath(ml.BATCHFS)
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink("/proc/%s/exe" % pid) != exe:
                continue
            cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if mnt.encode() in cmd:
            out.append(int(pid))
    return out


def main():
    path = os.path.join(TMP, "fb.pt")
    data = {"x": torch.arange(300).reshape(100, 3), "y": torch.arange(100)}
    torch.save(data, path)
    log = os.path.join(TMP, "fb.log")

    _, mnt = ml.mount(path, None, "--batch-size", 10, "--log-file", log,
                      env=NO_PT)
    s = ml.stats(mnt)
    info = json.load(open(mnt + "/dataset.json"))
    assert s["serve_mode"] == "push", s
    assert info["serve_mode"] == "push", info
    assert "BATCHFS_DEBUG_NO_PASSTHROUGH" in info["serve_mode_why"], info
    idx = ml.read_index(mnt + "/index/0/batch_3")
    _, arrs = ml.read_batch(mnt + "/epoch/0/batch_3")
    assert arrs["x"].tolist() == data["x"][idx].tolist()
    assert ml.umount(mnt).returncode == 0
    said = [line for line in open(log) if "mode (" in line]
    assert len(said) == 1 and "push" in said[0], said

    p, mnt = ml.mount(path, None, "--serve", "passthrough", env=NO_PT,
                      check=False)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1, p
    assert len(err) == 1 and "--serve passthrough cannot work here" in err[0]
    assert not ml.is_mounted(mnt)
    assert not daemons_on(mnt)

    for mode in ("push", "cache", "direct"):
        _, mnt = ml.mount(path, None, "--serve", mode, env=NO_PT)
        info = json.load(open(mnt + "/dataset.json"))
        assert (info["serve_mode"], info["serve_mode_why"]) == \
            (mode, "--serve " + mode), info
        assert ml.umount(mnt).returncode == 0
    p, _ = ml.mount(path, None, "--serve", "bogus", check=False)
    assert p.returncode == 2 and "--serve" in p.stderr, p.stderr
    print("ok")


main()
