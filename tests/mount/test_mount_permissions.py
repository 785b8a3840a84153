"""A mount never shows data to someone who could not read it at the source.

Mounted by root with -o allow_other, read by user nobody (uid 65534, no
groups but the ones a case gives it):

- a 0600 root archive: every node is root-owned with mode 0400 (files) or
  0500 (directories); nobody gets EACCES on batch files, index files,
  README, dataset.json, stats and listings; root reads;
- a 0644 archive in a 0755 directory: nobody reads the same bytes as root;
- a 0644 archive in a 0700 directory: nobody could not reach it, so EACCES;
- a 0640 archive of group 4242: EACCES for nobody, read for nobody with
  supplementary group 4242 (the mount carries the group);
- two shards, 0644 and 0600: the mount takes the most restrictive (0400);
- a 0644 archive with an ACL that shuts nobody out (when setfacl exists):
  only the owner may read;
- --owner nobody: refused for a 0600 root archive, naming it; for a 0644
  one every node is nobody's and nobody reads (allow_other implied);
- no node has a write bit.

Skips (77) unless run as root (it needs another user and allow_other).
"""
import errno
import os
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mountlib as ml  # noqa: E402

try:
    import torch
except ImportError:
    ml.skip("torch is not installed")

NOBODY = 65534
failures = []


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
    src = archive(os.path.join(WORK, "group.pt"), 0o640, gid=4242)
    _, mnt = mount(src, "m-group")
    check(nodes_are(mnt, 0, 4242, 0o440), "0640 archive of group 4242: "
          "files root:4242 0440")
    ok, rcs = nobody_denied(mnt)
    check(ok, "0640 archive: nobody outside the group gets EACCES (%s)"
          % rcs)
    check(nobody_reads(mnt, groups=(4242,)),
          "0640 archive: nobody in group 4242 reads")
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
               group_archive, most_restrictive_shard, acl_shuts_out,
               owner_option):
        fn()
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
