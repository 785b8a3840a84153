#!/usr/bin/python3
"""batchfs mounts as other FUSE file systems do, from /etc/fstab and
`mount -t fuse.batchfs` (mount.fuse3 runs `batchfs SOURCE MOUNTPOINT -o
OPTIONS`, every option in -o):
- an fstab line (a file of the test's own, `mount -T FILE MOUNTPOINT`)
  with batch_size=, shuffle, seed=, log_file=, a second shard as
  source=, and mount(8)'s and systemd's own options (nofail, _netdev,
  x-systemd.*) mounts the same batches as a plain `batchfs mount` of the
  same shards;
- so does `mount -t fuse.batchfs SOURCE MOUNTPOINT -o ...`;
- mount tables show the first source's path as what is mounted
  (`findmnt -no SOURCE`), also with a comma and a space in it;
- `batchfs SOURCE MOUNTPOINT -o batch_size` (no value) is a usage error
  that names the option;
- `mount -t fuse.batchfs URL MOUNTPOINT -o source=URL2,...` of URLs with
  a user:password and a presigned-style query (nginx on 127.0.0.1, which
  ignores both), AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN in the
  environment: the daemon's /proc/PID/cmdline, read as user nobody (as
  any user may), and its /proc/PID/environ hold none of the secrets, the
  URLs and the other options still there (skipped, saying so, without
  nginx).

mount(8) runs its helpers without the caller's PATH (/bin/sh's default
one), so the test runs in a mount namespace of its own in which
/usr/local/sbin holds only `batchfs`, a link to the build's. Skipped
(77) where mount.fuse3 (Debian's fuse3) is missing, and where this
process may not make that namespace (not root)."""
import json
import os
import shutil
import subprocess
import sys

import mountlib as ml

import numpy as np

NS = "BFS_FSTAB_NAMESPACE"
HELPER_DIR = "/usr/local/sbin"   # first in /bin/sh's default PATH


def enter_namespace():
    """Run this test again in a mount namespace of its own (private: what
    it mounts there stays there), unless it runs in it already."""
    if os.environ.get(NS):
        return
    if not (shutil.which("mount.fuse3") or os.path.exists("/sbin/mount.fuse3")):
        ml.skip("mount.fuse3 is not installed (Debian: fuse3)")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        ml.skip("not root: no mount namespace for batchfs on mount(8)'s "
                "PATH")
    env = dict(os.environ, **{NS: "1"})
    os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private",
                           sys.executable, os.path.abspath(__file__)], env)


def put_batchfs_on_helpers_path():
    """/usr/local/sbin, in this namespace only: a directory holding
    `batchfs`, a link to the build's."""
    d = os.path.join(ml.TMP, "sbin")
    os.makedirs(d, exist_ok=True)
    os.symlink(os.path.abspath(ml.BATCHFS), os.path.join(d, "batchfs"))
    subprocess.run(["mount", "--bind", d, HELPER_DIR], check=True)
    out = subprocess.run(["env", "-i", "/bin/sh", "-c", "command -v batchfs"],
                         capture_output=True, text=True).stdout.strip()
    assert out == os.path.join(HELPER_DIR, "batchfs"), out


def shards():
    """Two shards (directories of .npy files), the first one's name with a
    comma and a space."""
    out = []
    for i, name in enumerate(["sh,ard 0", "shard1"]):
        d = os.path.join(ml.TMP, name)
        os.makedirs(d, exist_ok=True)
        n = 50 + 10 * i
        np.save(os.path.join(d, "x.npy"),
                np.arange(n * 6, dtype=np.float32).reshape(n, 6) + 1000 * i)
        np.save(os.path.join(d, "y.npy"), np.arange(n, dtype=np.int64) + i)
        out.append(d)
    return out


def fstab_field(s):
    """s as an fstab field: space, tab, backslash as octal escapes."""
    return "".join("\\%03o" % ord(c) if c in " \t\\" else c for c in s)


def files_of(mnt, epochs=2):
    """{relative path: bytes} of the first epochs' batch files."""
    out = {}
    for e in range(epochs):
        d = os.path.join(mnt, "epoch", str(e))
        for name in os.listdir(d):
            out["%d/%s" % (e, name)] = ml.read_file(os.path.join(d, name))
    return out


def source_shown(mnt):
    return subprocess.run(["findmnt", "-no", "SOURCE", mnt],
                          capture_output=True, text=True).stdout.rstrip("\n")


def same_as_plain(mnt, want, srcs):
    """The mount at mnt serves 'want' (a plain mount's files), names both
    shards, and mount tables show the first."""
    errs = ml.bounded(mnt, [lambda: files_of(mnt)])
    assert errs == [None], errs
    got = files_of(mnt)
    assert got.keys() == want.keys(), (sorted(got), sorted(want))
    assert all(got[k] == want[k] for k in want), "batches differ"
    with open(os.path.join(mnt, "dataset.json")) as f:
        assert json.load(f)["sources"] == srcs
    shown = source_shown(mnt)
    assert shown == srcs[0], (shown, srcs[0])


def as_nobody(*cmd):
    """cmd's output and status, run as user nobody."""
    import pwd
    pw = pwd.getpwnam("nobody")

    def drop():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    p = subprocess.run(cmd, capture_output=True, timeout=60,
                       preexec_fn=drop)
    return p.stdout.decode("latin-1"), p.returncode


def remote_secrets():
    """A mount(8) of URLs with secrets: none in the daemon's /proc."""
    import servers
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        print("skip: the remote case (nginx is not installed)")
        return
    password, sig = "pa55wordFSTAB", "secretsigFSTAB0123456789"
    key, token = "AWSKEYFSTAB0123456789", "AWSTOKENFSTAB0123456789"
    root = os.path.join(ml.TMP, "www")
    os.makedirs(root, exist_ok=True)
    for i in range(2):
        ml.write_safetensors(os.path.join(root, "s%d.safetensors" % i), {
            "x": np.arange(240, dtype=np.float32).reshape(40, 6) + i,
            "y": np.arange(40, dtype=np.int64)})
    mnt = os.path.join(ml.TMP, "remote")
    os.makedirs(mnt)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDFSTAB",
               AWS_SECRET_ACCESS_KEY=key, AWS_SESSION_TOKEN=token)
    with servers.Nginx(root) as ng:
        host = ng.base_url.split("://", 1)[1]
        urls = ["http://user:%s@%s/s%d.safetensors?X-Amz-Signature=%s"
                % (password, host, i, sig) for i in range(2)]
        p = subprocess.run(["mount", "-t", "fuse.batchfs", urls[0], mnt,
                            "-o", "batch_size=16,source=%s,cache_dir=%s"
                            % (urls[1], os.path.join(ml.TMP, "cache"))],
                           capture_output=True, text=True, timeout=120,
                           env=env)
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        ml._mounts.append(mnt)
        errs = ml.bounded(mnt, [lambda: files_of(mnt, 1)])
        assert errs == [None], errs
        assert len(files_of(mnt, 1)) == 5
        pid = ml.daemon_pid(mnt)
        cmdline, rc = as_nobody("cat", "/proc/%d/cmdline" % pid)
        assert rc == 0 and "s0.safetensors" in cmdline and \
            "s1.safetensors" in cmdline and "cache_dir=" in cmdline, \
            (rc, cmdline)
        with open("/proc/%d/environ" % pid, "rb") as f:
            environ = f.read().decode("latin-1")
        assert "AWS_SECRET_ACCESS_KEY=" in environ
        for secret in (password, sig, key, token):
            assert secret not in cmdline, (secret, cmdline)
            assert secret not in environ, (secret, "environ")
        unmount(mnt)
    print("ok: no secret in the /proc of a daemon mount(8) started")


def unmount(mnt):
    p = subprocess.run(["umount", mnt], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    if mnt in ml._mounts:
        ml._mounts.remove(mnt)
    assert not ml.is_mounted(mnt)


def main():
    enter_namespace()
    ml.require_fuse()
    put_batchfs_on_helpers_path()
    srcs = shards()
    opts = ["--batch-size", 16, "--shuffle", "--seed", 7]
    _, plain = ml.mount(srcs, os.path.join(ml.TMP, "plain"), *opts)
    want = files_of(plain)
    assert len(want) == 2 * 7, sorted(want)
    assert ml.umount(plain).returncode == 0

    # an fstab line of the test's own
    mnt = os.path.join(ml.TMP, "from fstab")
    os.makedirs(mnt)
    log = os.path.join(ml.TMP, "fstab.log")
    fstab = os.path.join(ml.TMP, "fstab")
    with open(fstab, "w") as f:
        f.write("# batchfs\n%s %s fuse.batchfs batch_size=16,shuffle,seed=7,"
                "log_file=%s,source=%s,nofail,_netdev,"
                "x-systemd.requires=network.target 0 0\n"
                % (fstab_field(srcs[0]), fstab_field(mnt), fstab_field(log),
                   fstab_field(srcs[1])))
    p = subprocess.run(["mount", "-T", fstab, mnt], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    ml._mounts.append(mnt)
    same_as_plain(mnt, want, srcs)
    assert os.path.getsize(log) > 0
    unmount(mnt)

    # mount -t fuse.batchfs, options spelled with '-' or '_'
    mnt = os.path.join(ml.TMP, "mount-t")
    os.makedirs(mnt)
    p = subprocess.run(["mount", "-t", "fuse.batchfs", srcs[0], mnt, "-o",
                        "batch-size=16,shuffle,seed=7,source=%s,log_file=%s"
                        % (srcs[1], log)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    ml._mounts.append(mnt)
    same_as_plain(mnt, want, srcs)
    unmount(mnt)

    # an option without its value: a usage error naming it
    p = subprocess.run([ml.BATCHFS, srcs[0], mnt, "-o", "shuffle,batch_size"],
                       capture_output=True, text=True)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "-o batch_size: needs a value" in p.stderr, p.stderr
    assert not ml.is_mounted(mnt)
    remote_secrets()
    print("ok")


if __name__ == "__main__":
    main()
