#!/usr/bin/python3
"""A cache directory and entries only the mounter could have written
(run as root: files are planted as user nobody).

- --cache-dir owned by nobody: the mount is refused, saying whose it is
  and what to do (chown, or another --cache-dir); group or world
  writable (0770, 0777): refused (chmod go-w); a symlink: refused; a
  sticky world-writable one of ours (1777, the log directory's rule):
  mounted.
- An entry of the object, its map saying every chunk read is present,
  its data file holding other rows, planted: owned by nobody; with
  a second hard link; group and world writable; a symlink to a file of
  ours. Each time the planted entry is not used (logged, removed) and
  the mount serves the object's own bytes, fetched afresh."""
import os
import pwd
import shutil
import sys

import mountremote as mr
from mountremote import ml, servers

ml.require_fuse()
servers.require_nginx()
try:
    import torch  # noqa: F401
except ImportError:
    ml.skip("torch is not installed")

failures = []
OPTS = ("--batch-size", 40, "--shuffle", "--seed", 5)


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def refused(url, cache, want, what):
    p, _ = mr.mount(url, *OPTS, cache=cache, check=False)
    msg = p.stderr.strip()
    check(p.returncode != 0 and cache in msg and
          all(w in msg for w in want),
          "%s: the mount is refused, saying %s (rc %d: %s)"
          % (what, " and ".join(want), p.returncode, msg))


def directories(url, nobody):
    d = os.path.join(mr.TMP, "dir-nobody")
    os.makedirs(d)
    os.chown(d, nobody, nobody)
    os.chmod(d, 0o700)
    refused(url, d, ["uid %d" % nobody, "chown", "--cache-dir"],
            "a cache directory owned by nobody")
    for mode in (0o770, 0o777):
        d = os.path.join(mr.TMP, "dir-%o" % mode)
        os.makedirs(d)
        os.chmod(d, mode)
        refused(url, d, ["%04o" % mode, "chmod go-w", "--cache-dir"],
                "a cache directory of mode %o" % mode)
    real = os.path.join(mr.TMP, "dir-real")
    os.makedirs(real, mode=0o700)
    link = os.path.join(mr.TMP, "dir-link")
    os.symlink(real, link)
    refused(url, link, ["symbolic link"], "a cache directory that is a "
            "symlink")
    d = os.path.join(mr.TMP, "dir-sticky")
    os.makedirs(d)
    os.chmod(d, 0o1777)
    p, rm = mr.mount(url, *OPTS, cache=d, check=False)
    check(p.returncode == 0, "a sticky cache directory of ours (1777): "
          "mounted (%s)" % p.stderr.strip())
    if p.returncode == 0:
        mr.unmount(rm)


def entries(url, local, nobody):
    cache = os.path.join(mr.TMP, "planted")
    _, lm = mr.mount(local, *OPTS)
    _, rm = mr.mount(url, *OPTS, cache=cache)
    bad = mr.same_batches(rm, lm, 1)
    check(not bad, "first mount: exact (%d differ)" % len(bad))
    mr.unmount(rm)
    names = [f[:-5] for f in os.listdir(cache) if f.endswith(".data")]
    if len(names) != 1:
        check(False, "one entry in the cache (%s)" % os.listdir(cache))
        return
    base = os.path.join(cache, names[0])
    with open(base + ".map", "rb") as f:
        good_map = f.read()
    with open(base + ".data", "rb") as f:
        data = f.read()
    # other bytes in the middle of the rows of x (the archive's structure
    # kept: a mount of it succeeds and serves them)
    a, b = len(data) // 4, len(data) // 2
    poisoned = data[:a] + bytes(c ^ 0x5a for c in data[a:b]) + data[b:]
    elsewhere = os.path.join(mr.TMP, "elsewhere")
    os.makedirs(elsewhere, mode=0o700, exist_ok=True)

    def plant(how):
        for ext in ("map", "data"):
            try:
                os.unlink(base + "." + ext)
            except FileNotFoundError:
                pass
        with open(base + ".map", "wb") as f:
            f.write(good_map)
        os.chmod(base + ".map", 0o600)
        target = base + ".data"
        if how == "symlink":
            target = os.path.join(elsewhere, "data")
            if os.path.exists(target):
                os.unlink(target)
        with open(target, "wb") as f:
            f.write(poisoned)
        os.chmod(target, 0o600)
        if how == "nobody":
            for ext in ("map", "data"):
                os.chown(base + "." + ext, nobody, nobody)
        elif how == "hard link":
            extra = os.path.join(elsewhere, "link")
            if os.path.exists(extra):
                os.unlink(extra)
            os.link(target, extra)
        elif how == "writable":
            os.chmod(target, 0o666)
        elif how == "symlink":
            os.symlink(target, base + ".data")

    for how in ("nobody", "hard link", "writable", "symlink"):
        plant(how)
        log = os.path.join(mr.TMP, "planted-%s.log" % how.replace(" ", "-"))
        p, rm = mr.mount(url, *OPTS, "--log-file", log, cache=cache,
                         check=False)
        if p.returncode:
            check(False, "an entry planted (%s): the mount fails (%s)"
                  % (how, p.stderr.strip()))
            continue
        bad = mr.same_batches(rm, lm, 1)
        mr.unmount(rm)
        with open(log) as f:
            said = "not used, removed" in f.read() + p.stderr
        st = os.lstat(base + ".data")
        check(not bad and said and st.st_uid == os.geteuid() and
              st.st_nlink == 1 and (st.st_mode & 0o777) == 0o600 and
              not os.path.islink(base + ".data"),
              "an entry planted (%s): not used (logged: %s), the object's "
              "own bytes served (%d batches differ), the entry made anew "
              "(uid %d, %d links, mode %o)"
              % (how, said, len(bad), st.st_uid, st.st_nlink,
                 st.st_mode & 0o777))
    mr.unmount(lm)


def main():
    if os.geteuid() != 0:
        ml.skip("planting files as another user needs root")
    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        ml.skip("no user nobody")
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    mr.write("torch", os.path.join(root, "o.pt"), mr.arrays(600, 1000, 7))
    local = os.path.join(mr.TMP, "o.pt")
    shutil.copyfile(os.path.join(root, "o.pt"), local)
    with servers.Nginx(root) as ng:
        directories(ng.url("o.pt"), nobody)
        entries(ng.url("o.pt"), local, nobody)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
