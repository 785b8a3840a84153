#!/usr/bin/python3
"""batchfs mount reads -o as libfuse's option parser does: a backslash
escapes the next character ("\\," a comma within an item, "\\\\" a
backslash) and "\\NNN" is the byte of octal NNN, so batchfs's own options
and its checks see what FUSE will.

Regression: batchfs split -o at every comma and read the items as
written, while libfuse unescaped them: `-o allow_\\other` reached FUSE as
allow_other but batchfs did not see it (no note of who may read, no
warning that auto_unmount is off); `-o see\\144=7` was passed to FUSE
(which read "seed=7" and refused it as unknown) instead of setting
--seed 7. Now:
- `-o allow_\\other` mounts with allow_other and says so as -o
  allow_other does (root only: allow_other needs it or fuse.conf);
- `-o shuffle,see\\144=7` mounts with seed 7 (dataset.json);
- `-o fsname=a\\,b` passes one FUSE option, fsname "a,b" (the mount
  table's source), not "a" and an unknown option "b"."""
import json
import os
import sys

import mountlib as ml

import numpy as np

failures = []


def source():
    path = os.path.join(ml.TMP, "x.npy")
    np.save(path, np.arange(40 * 3, dtype=np.int32).reshape(40, 3))
    return path


def mounted(path, name, *opts):
    """(stderr, dataset.json, the mount table's line) of a mount of path
    with opts, unmounted again; a mount that fails is a failure."""
    p, mnt = ml.mount(path, os.path.join(ml.TMP, name), "--batch-size", 4,
                      *opts, check=False)
    if p.returncode:
        failures.append("%s: exit %d: %s" % (" ".join(opts), p.returncode,
                                             p.stderr.strip()))
        return p.stderr, {}, ""
    try:
        with open(os.path.join(mnt, "dataset.json")) as f:
            info = json.load(f)
        with open("/proc/mounts") as f:
            line = [x for x in f if x.split()[1] == mnt][0]
    finally:
        ml.umount(mnt)
    return p.stderr, info, line


def main():
    ml.require_fuse()
    path = source()
    if os.geteuid() == 0:
        err, _, line = mounted(path, "other", "-o", "allow_\\other")
        if "allow_other" not in line.split()[3].split(","):
            failures.append("-o allow_\\other: not allow_other: " + line)
        if "-o allow_other: files are" not in err or \
                "auto_unmount disabled" not in err:
            failures.append("-o allow_\\other: batchfs did not see "
                            "allow_other: " + err.strip())
    else:
        print("not root: -o allow_\\other not tried")
    _, info, _ = mounted(path, "seed", "-o", "shuffle,see\\144=7")
    if info and info.get("seed") != 7:
        failures.append("-o see\\144=7: seed %r" % info.get("seed"))
    _, _, line = mounted(path, "fsname", "-o", "fsname=a\\,b")
    if line and line.split()[0] != "a,b":
        failures.append("-o fsname=a\\,b: source %r" % line.split()[0])
    if not failures:
        print("ok: -o read as libfuse reads it")
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
