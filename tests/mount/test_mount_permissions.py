"""A mount never shows data to someone who could not read it at the source.

Mounted by root with -o allow_other, read by user nobody (uid 65534, no
groups but the ones a case gives it):

- a 0600 root archive: every node is root-owned with mode 0400 (files) or
  0500 (directories); nobody gets EACCES on batch files, index files,
  README, dataset.json, stats and listings; root reads;
- a 0644 archive in a 0755 directory: nobody reads the same bytes as root;
- a 0644 archive in a 0700 directory: nobody could not reach it, so EACCES;
- a 0640 archive of group G (4242, or the first gid above it that no
  group entry names, so that nobody is not in it): EACCES for nobody,
  read for nobody with supplementary group G (the mount carries the
  group);
- a 0640 archive of nobody's and one of root's, both of group G: the
  mount is nobody's (the first source's owner), but nobody is not in G and
  may not read root's, so only G keeps its bit (0040): nobody gets EACCES,
  as at the source;
- two shards, 0644 and 0600: the mount takes the most restrictive (0400);
- a 0644 archive with an ACL that shuts nobody out (when setfacl exists):
  only the owner may read;
- --owner nobody: refused for a 0600 root archive, naming it; for a 0644
  one every node is nobody's and nobody reads (allow_other implied), but
  nobody's `batchfs umount` is refused, saying only root may unmount;
  --owner nobody:G refused for a 0640 root:G archive (nobody is not in G);
- a symlink swapped after the source was opened through it (the mount
  stopped there, BATCHFS_DEBUG_STOP=perm): the permissions are those of
  the file opened (a 0644 file in a 0700 directory: 0400), not of the one
  the symlink names now (0644 in a 0755 directory);
- a source removed and another put at its path after it was opened:
  refused, saying the file opened is no longer at this path;
- a 0755 directory with an ACL that shuts nobody out, above a 0644
  archive (when setfacl exists): only the owner may read;
- no node has a write bit.

Skips (77) unless run as root (it needs another user and allow_other).
"""
import errno
import grp
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import mountlib as ml

try:
    import torch
except ImportError:
    ml.skip("torch is not installed")

NOBODY = 65534
failures = []


def lonely_gid():
    """A gid no group entry names (so no user is in it but by a case's
    setgroups), from 4242 up."""
    gid = 4242
    while True:
        try:
            grp.getgrgid(gid)
        except KeyError:
            return gid
        gid += 1


GROUP = lonely_gid()


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def as_nobody(code, *args, groups=()):
    """Run python code as uid/gid 65534 with these supplementary groups:
    (exit status, stdout)."""
    def drop():
        os.setgroups(list(groups))
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)],
                       capture_output=True, text=True, preexec_fn=drop)
    return p.returncode, p.stdout.strip()


# Exit status: 0 read, errno otherwise; stdout: the bytes' hex digest.
READ = """
import hashlib, os, sys
try:
    with open(sys.argv[1], "rb") as f:
        print(hashlib.sha256(f.read()).hexdigest())
except OSError as e:
    sys.exit(e.errno)
"""
LIST = """
import os, sys
try:
    os.listdir(sys.argv[1])
except OSError as e:
    sys.exit(e.errno)
"""


def digest(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def archive(path, mode, seed=1, uid=0, gid=0):
    g = torch.Generator().manual_seed(seed)
    torch.save({"x": torch.randint(0, 256, (200, 64), generator=g)
                .to(torch.uint8), "y": torch.arange(200)}, path)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def mount(srcs, name, *opts, check_rc=True):
    return ml.mount(srcs, os.path.join(WORK, name), "--batch-size", 16,
                    "-o", "allow_other", *opts, check=check_rc)


FILES = ["epoch/0/batch_0", "index/0/batch_0", "README", "dataset.json",
         "stats"]


def nodes_are(mnt, uid, gid, fmode):
    """Every node (root, dirs, files) is uid:gid, files fmode, dirs fmode
    with a search bit beside each read bit; none is writable."""
    dmode = fmode | fmode >> 2
    ok = True
    for rel, want in [("", dmode), ("epoch", dmode), ("epoch/0", dmode),
                      ("index/0", dmode)] + [(f, fmode) for f in FILES]:
        st = os.stat(os.path.join(mnt, rel))
        ok = ok and st.st_uid == uid and st.st_gid == gid and \
            stat.S_IMODE(st.st_mode) == want and not st.st_mode & 0o222
        if not ok:
            print("  %s: %d:%d %o (want %d:%d %o)" % (
                rel, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), uid,
                gid, want))
            break
    return ok


def nobody_denied(mnt, groups=()):
    rcs = [as_nobody(READ, os.path.join(mnt, f), groups=groups)[0]
           for f in FILES]
    rcs.append(as_nobody(LIST, os.path.join(mnt, "epoch/0"),
                         groups=groups)[0])
    return all(rc == errno.EACCES for rc in rcs), rcs


def nobody_reads(mnt, groups=()):
    path = os.path.join(mnt, "epoch/0/batch_3")
    rc, out = as_nobody(READ, path, groups=groups)
    return rc == 0 and out == digest(path)


def private_archive():
    src = archive(os.path.join(WORK, "private.pt"), 0o600)
    _, mnt = mount(src, "m-private")
    check(nodes_are(mnt, 0, 0, 0o400),
          "0600 root archive: every node root:root, files 0400, dirs 0500")
    ok, rcs = nobody_denied(mnt)
    check(ok, "0600 root archive: nobody gets EACCES on every file and "
          "listing (%s)" % rcs)
    check(as_nobody(READ, src)[0] == errno.EACCES,
          "0600 root archive: as at the source")
    check(len(ml.read_file(mnt + "/epoch/0/batch_0")) > 0,
          "0600 root archive: root reads")
    ml.umount(mnt)


def public_archive():
    src = archive(os.path.join(WORK, "public.pt"), 0o644)
    p, mnt = mount(src, "m-public")
    check(nodes_are(mnt, 0, 0, 0o444), "0644 archive: files 0444")
    check(nobody_reads(mnt), "0644 archive: nobody reads root's bytes")
    check("readable by everyone" in p.stderr,
          "allow_other: the mount says who may read (%s)" % p.stderr.strip())
    ml.umount(mnt)


def hidden_directory():
    d = os.path.join(WORK, "closed")
    os.makedirs(d, exist_ok=True)
    src = archive(os.path.join(d, "in-closed.pt"), 0o644)
    os.chmod(d, 0o700)
    _, mnt = mount(src, "m-closed")
    check(nodes_are(mnt, 0, 0, 0o400),
          "0644 archive in a 0700 directory: files 0400")
    ok, rcs = nobody_denied(mnt)
    check(ok, "0644 archive in a 0700 directory: nobody gets EACCES, as "
          "at the source (%s)" % rcs)
    ml.umount(mnt)


def group_archive():
    src = archive(os.path.join(WORK, "group.pt"), 0o640, gid=GROUP)
    _, mnt = mount(src, "m-group")
    check(nodes_are(mnt, 0, GROUP, 0o440), "0640 archive of group G: "
          "files root:G 0440")
    ok, rcs = nobody_denied(mnt)
    check(ok, "0640 archive: nobody outside the group gets EACCES (%s)"
          % rcs)
    check(nobody_reads(mnt, groups=(GROUP,)),
          "0640 archive: nobody in group G reads")
    ml.umount(mnt)


def group_the_owner_is_not_in():
    """The owner's read bit counts the groups the owner is really in, not
    the mount's group: nobody is not in G, so it may not read root's
    0640 root:G archive and must not read it through the mount."""
    a = archive(os.path.join(WORK, "nobodys.pt"), 0o640, seed=5,
                uid=NOBODY, gid=GROUP)
    b = archive(os.path.join(WORK, "roots.pt"), 0o640, seed=6, gid=GROUP)
    check(as_nobody(READ, b)[0] == errno.EACCES,
          "nobody:G + root:G 0640: nobody may not read root's at the "
          "source")
    _, mnt = mount([a, b], "m-not-in-group")
    check(nodes_are(mnt, NOBODY, GROUP, 0o040),
          "nobody:G + root:G 0640: the mount is nobody:G, files 0040")
    ok, rcs = nobody_denied(mnt)
    check(ok, "nobody:G + root:G 0640: nobody gets EACCES (%s)" % rcs)
    ok, rcs = nobody_denied(mnt, groups=(GROUP,))
    check(ok, "nobody:G + root:G 0640: nobody with group G too: its owner "
          "bits decide (%s)" % rcs)
    ml.umount(mnt)


def most_restrictive_shard():
    a = archive(os.path.join(WORK, "shard-a.pt"), 0o644, seed=2)
    b = archive(os.path.join(WORK, "shard-b.pt"), 0o600, seed=3)
    _, mnt = mount([a, b], "m-shards")
    check(nodes_are(mnt, 0, 0, 0o400),
          "shards 0644 + 0600: the mount is 0400")
    ok, rcs = nobody_denied(mnt)
    check(ok, "shards 0644 + 0600: nobody gets EACCES (%s)" % rcs)
    ml.umount(mnt)


def acl_shuts_out():
    if not shutil.which("setfacl"):
        print("skip: ACL case (setfacl is not installed)")
        return
    src = archive(os.path.join(WORK, "acl.pt"), 0o644)
    p = subprocess.run(["setfacl", "-m", "u:%d:---" % NOBODY, src],
                       capture_output=True, text=True)
    if p.returncode:
        print("skip: ACL case (%s)" % p.stderr.strip())
        return
    check(as_nobody(READ, src)[0] == errno.EACCES,
          "ACL: nobody may not read the source")
    _, mnt = mount(src, "m-acl")
    check(nodes_are(mnt, 0, 0, 0o400), "ACL: only the owner keeps read")
    ok, rcs = nobody_denied(mnt)
    check(ok, "ACL: nobody gets EACCES (%s)" % rcs)
    ml.umount(mnt)


def owner_option():
    src = archive(os.path.join(WORK, "owned.pt"), 0o600, seed=4)
    p, _ = ml.mount(src, os.path.join(WORK, "m-owner-refused"), "--owner",
                    "nobody", check=False)
    check(p.returncode == 1 and src in p.stderr and "nobody" in p.stderr,
          "--owner nobody on a 0600 root archive: refused, naming it (%d: "
          "%s)" % (p.returncode, p.stderr.strip()))
    os.chmod(src, 0o644)
    _, mnt = ml.mount(src, os.path.join(WORK, "m-owner"), "--owner",
                      "nobody", "--batch-size", 16)
    st = os.stat(mnt + "/epoch/0/batch_0")
    check(st.st_uid == NOBODY and stat.S_IMODE(st.st_mode) == 0o444,
          "--owner nobody: files are nobody's, 0444")
    check(nobody_reads(mnt), "--owner nobody: nobody reads (allow_other "
          "implied)")
    p = subprocess.run([ml.BATCHFS, "umount", mnt], capture_output=True,
                       text=True, preexec_fn=lambda: os.setuid(NOBODY))
    check(p.returncode == 1 and "root mounted it, so only root may unmount "
          "it" in p.stderr and "you are nobody" in p.stderr and
          ml.is_mounted(mnt),
          "--owner nobody: nobody's batchfs umount is refused, saying only "
          "root may (%d: %s)" % (p.returncode, p.stderr.strip()))
    ml.umount(mnt)
    grouped = archive(os.path.join(WORK, "owned-g.pt"), 0o640, seed=7,
                      gid=GROUP)
    p, _ = ml.mount(grouped, os.path.join(WORK, "m-owner-g"), "--owner",
                    "nobody:%d" % GROUP, check=False)
    check(p.returncode == 1 and grouped in p.stderr and
          "not in group %d" % GROUP in p.stderr,
          "--owner nobody:G on a 0640 root:G archive: refused, saying nobody "
          "is not in G (%d: %s)" % (p.returncode, p.stderr.strip()))


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


def mount_stopped_at(point, srcs, mnt, opts, then):
    """batchfs mount with BATCHFS_DEBUG_STOP=point: once it stops there,
    then() runs and the mount goes on. (CompletedProcess-like (returncode,
    stderr), mountpoint)."""
    os.makedirs(mnt, exist_ok=True)
    env = dict(os.environ, BATCHFS_DEBUG_STOP=point)
    p = subprocess.Popen([ml.BATCHFS, "mount", *map(str, opts), *srcs, mnt],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        check(wait_stopped(p.pid), "the mount stops at %s" % point)
        then()
    finally:
        os.kill(p.pid, signal.SIGCONT)
        _, err = p.communicate(timeout=ml.LIVENESS_S)
    if p.returncode == 0:
        ml._mounts.append(mnt)  # unmounted at exit if a check fails
    return p.returncode, err


def symlink_swapped_after_open():
    closed = os.path.join(WORK, "closed-link")
    os.makedirs(closed)
    secret = archive(os.path.join(closed, "secret.pt"), 0o644, seed=8)
    os.chmod(closed, 0o700)
    public = archive(os.path.join(WORK, "decoy.pt"), 0o644, seed=9)
    link = os.path.join(WORK, "link.pt")
    os.symlink(secret, link)

    def swap():
        os.symlink(public, link + ".new")
        os.rename(link + ".new", link)

    mnt = os.path.join(WORK, "m-swapped")
    rc, err = mount_stopped_at("perm", [link], mnt,
                               ["--batch-size", 16, "-o", "allow_other"],
                               swap)
    if rc != 0:  # refusing is as good, if it says why
        check("changed" in err, "symlink swapped: refused, saying the path "
              "changed (%s)" % err.strip())
        return
    check(nodes_are(mnt, 0, 0, 0o400), "symlink swapped after open: the "
          "mount has the bits of the file opened (0644 in a 0700 "
          "directory: 0400)")
    ok, rcs = nobody_denied(mnt)
    check(ok, "symlink swapped after open: nobody gets EACCES, as at the "
          "file opened (%s)" % rcs)
    ml.umount(mnt)


def source_replaced_after_open():
    src = archive(os.path.join(WORK, "replaced.pt"), 0o644, seed=10)

    def replace():
        os.unlink(src)
        archive(src, 0o644, seed=11)

    rc, err = mount_stopped_at("perm", [src], os.path.join(WORK, "m-repl"),
                               ["--batch-size", 16], replace)
    check(rc == 1 and src in err and "no longer at this path" in err,
          "a source replaced after it was opened: refused, naming it "
          "(%d: %s)" % (rc, err.strip()))


def directory_acl_shuts_out():
    if not shutil.which("setfacl"):
        print("skip: directory ACL case (setfacl is not installed)")
        return
    d = os.path.join(WORK, "acl-dir")
    os.makedirs(d)
    src = archive(os.path.join(d, "in-acl-dir.pt"), 0o644, seed=12)
    p = subprocess.run(["setfacl", "-m", "u:%d:---" % NOBODY, d],
                       capture_output=True, text=True)
    if p.returncode:
        print("skip: directory ACL case (%s)" % p.stderr.strip())
        return
    _, mnt = mount(src, "m-acl-dir")
    check(nodes_are(mnt, 0, 0, 0o400), "directory ACL: only the owner "
          "keeps read")
    ml.umount(mnt)


def main():
    ml.require_fuse()
    if os.geteuid() != 0:
        ml.skip("needs root (another user, -o allow_other)")
    global WORK
    # nobody must be able to reach the work directory (the runner's is
    # 0700): the cases choose what it may not reach
    os.chmod(ml.TMP, stat.S_IMODE(os.stat(ml.TMP).st_mode) | 0o011)
    WORK = os.path.join(ml.TMP, "bfs-perm")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    os.chmod(WORK, 0o755)
    for fn in (private_archive, public_archive, hidden_directory,
               group_archive, group_the_owner_is_not_in,
               most_restrictive_shard, acl_shuts_out, owner_option,
               symlink_swapped_after_open, source_replaced_after_open,
               directory_acl_shuts_out):
        fn()
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
