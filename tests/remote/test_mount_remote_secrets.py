#!/usr/bin/python3
"""What a mount of a remote source shows holds no secret, and its nodes
are its owner's.

Secrets: a presigned-style URL's query string (a signature, a credential,
a token) and a URL's user:password, for an archive behind the fault proxy
in front of nginx (which ignores both), and AWS_SECRET_ACCESS_KEY and
AWS_SESSION_TOKEN in its environment. The mount is made with -v (debug
lines in the log) while the proxy throttles a few answers (retries
logged); batches are read; a second mount of a missing object with the
same secrets fails, and so does `batchfs inspect` of it. None of the
secrets is in the log, stats, README,
dataset.json, `batchfs status`, the mount tables, the cache directory's
files or any message, nor in the daemon's /proc/PID/cmdline (read as
user nobody, as any user of the machine may; the URL is there, its
secrets masked) or /proc/PID/environ; the object is named without them.

Permissions (the mount is made by root here, as the tests run):
  a remote source alone: every node readable by its owner only (files
  0400, directories 0500); with --owner nobody:GROUP, owned by nobody,
  and its group may read too (0440); a remote shard mixed with a local
  file of mode 0644: still 0400 (the remote one decides)."""
import os
import pwd
import grp
import subprocess
import sys

import mountremote as mr
from mountremote import FaultProxy, ml, servers

ml.require_fuse()
servers.require_nginx()
try:
    import torch  # noqa: F401
except ImportError:
    ml.skip("torch is not installed")

SIG = "5ecre75e57bada55c0ffee0ddba11deadbeef00decafbad"
CRED = "AKIDPRESIGNEDMOUNTCRED01"
TOKEN = "PRESIGNEDSECRETMOUNTTOKEN01"
PASSWORD = "hunter2MOUNTSECRETPASSWORD"
AWS_KEY = "AWSSECRETKEYOFTHEMOUNTSENV0123456789"
AWS_TOKEN = "AWSSESSIONTOKENOFTHEMOUNTSENV0123456789"
NEEDLES = [SIG, CRED, TOKEN, PASSWORD, "X-Amz-Signature", "X-Amz-Credential",
           AWS_KEY, AWS_TOKEN]
failures = []
seen = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def secret_url(base, path):
    host = base.split("://", 1)[1]
    return (f"http://bob:{PASSWORD}@{host}{path}?X-Amz-Algorithm=AWS4"
            f"&X-Amz-Credential={CRED}&X-Amz-Security-Token={TOKEN}"
            f"&X-Amz-Signature={SIG}")


def texts_of(mnt, log):
    for name in ("README", "dataset.json", "stats"):
        with open(os.path.join(mnt, name)) as f:
            seen.append((name, f.read()))
    with open(log) as f:
        seen.append(("log", f.read()))
    for table in ("/proc/mounts", "/proc/self/mountinfo"):
        with open(table) as f:
            seen.append((table, f.read()))
    p = subprocess.run([ml.BATCHFS, "status", mnt], capture_output=True,
                       text=True, timeout=60)
    seen.append(("batchfs status", p.stdout + p.stderr))


def as_nobody(*cmd):
    """cmd's output and status, run as user nobody."""
    uid = pwd.getpwnam("nobody").pw_uid
    gid = pwd.getpwnam("nobody").pw_gid

    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    p = subprocess.run(cmd, capture_output=True, timeout=60,
                       preexec_fn=drop)
    return p.stdout.decode("latin-1"), p.returncode


def proc_of(pid, who):
    """What another user reads of process pid's command line (and root
    of its environment): the URL shown without its secrets."""
    cmdline, rc = as_nobody("cat", "/proc/%d/cmdline" % pid)
    check(rc == 0 and "/s.pt" in cmdline and "@127.0.0.1" in cmdline,
          "%s: user nobody reads its /proc/PID/cmdline, the URL in it "
          "(%d: %r)" % (who, rc, cmdline))
    seen.append(("%s: /proc/PID/cmdline as nobody" % who, cmdline))
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        seen.append(("%s: /proc/PID/cmdline" % who,
                     f.read().decode("latin-1")))
    with open("/proc/%d/environ" % pid, "rb") as f:
        env = f.read().decode("latin-1")
    check("AWS_SECRET_ACCESS_KEY=" in env and "AWS_SESSION_TOKEN=" in env,
          "%s: its /proc/PID/environ names the AWS variables" % who)
    seen.append(("%s: /proc/PID/environ" % who, env))
    found = sorted({n for n in NEEDLES if n in cmdline + env})
    check(not found, "%s: no secret in /proc/PID/cmdline or environ (%s)"
          % (who, found))


def mode_of(path):
    st = os.stat(path)
    return st.st_uid, st.st_gid, st.st_mode & 0o777


def secrets(fp, local):
    log = os.path.join(mr.TMP, "secret.log")
    cache = os.path.join(mr.TMP, "secret-cache")
    fp.fail("503", count=4, retry_after=0)
    p, rm = mr.mount(secret_url(fp.base_url, "/s.pt"), "-v",
                     "--batch-size", 50, "--log-file", log, cache=cache,
                     env=mr.env_without_aws(AWS_ACCESS_KEY_ID="AKIDOFTHEENV",
                                            AWS_SECRET_ACCESS_KEY=AWS_KEY,
                                            AWS_SESSION_TOKEN=AWS_TOKEN))
    seen.append(("mount output", p.stdout + p.stderr))
    proc_of(ml.daemon_pid(rm), "the daemon")
    _, lm = mr.mount(local, "--batch-size", 50)
    bad = mr.same_batches(rm, lm, 1)
    check(not bad, "a URL with secrets: batches exact (%d differ)"
          % len(bad))
    d = mr.info(rm)
    check(d["sources"] == [fp.base_url + "/s.pt"],
          "dataset.json names the object without its secrets (%s)"
          % d["sources"])
    check(d["cache"]["dir"] == cache, "dataset.json names the cache")
    with open(os.path.join(rm, "README")) as f:
        check(cache in f.read(), "README names the cache")
    texts_of(rm, log)
    check(mode_of(os.path.join(rm, "epoch/0/batch_0"))[2] == 0o400 and
          mode_of(os.path.join(rm, "epoch"))[2] == 0o500,
          "a remote source's nodes are its owner's only (%o, %o)"
          % (mode_of(os.path.join(rm, "epoch/0/batch_0"))[2],
             mode_of(os.path.join(rm, "epoch"))[2]))
    mr.unmount(rm, lm)
    p, _ = mr.mount(secret_url(fp.base_url, "/none.pt"), check=False,
                    cache=cache)
    seen.append(("failed mount", p.stdout + p.stderr))
    check(p.returncode == 1 and "none.pt" in p.stderr,
          "a missing object fails the mount, named (%s)" % p.stderr.strip())
    p = subprocess.run([ml.BATCHFS, "inspect",
                        secret_url(fp.base_url, "/s.pt")],
                       capture_output=True, text=True, timeout=60)
    seen.append(("batchfs inspect", p.stdout + p.stderr))
    check(p.returncode == 1 and "remote source" in p.stderr,
          "batchfs inspect of a URL says it reads local files (%s)"
          % p.stderr.strip())
    for name in os.listdir(cache):
        with open(os.path.join(cache, name), "rb") as f:
            seen.append((name, f.read().decode("latin-1")))
    found = sorted({w for w, t in seen for n in NEEDLES if n in t})
    check(not found, "no secret in %d files, logs and messages (%s)"
          % (len(seen), found))


def owners(ng, local):
    group = grp.getgrgid(pwd.getpwnam("nobody").pw_gid).gr_name
    _, rm = mr.mount(ng.url("s.pt"), "--owner", "nobody:" + group)
    uid, _, mode = mode_of(os.path.join(rm, "epoch/0/batch_0"))
    check(uid == pwd.getpwnam("nobody").pw_uid and mode == 0o440,
          "--owner nobody:%s: its nodes, its group reads too (%o)"
          % (group, mode))
    mr.unmount(rm)
    os.chmod(local, 0o644)
    _, rm = mr.mount([ng.url("s.pt"), local])
    check(mode_of(os.path.join(rm, "epoch/0/batch_0"))[2] == 0o400,
          "a remote shard beside a 0644 local one: 0400")
    mr.unmount(rm)


def main():
    if os.geteuid() != 0:
        ml.skip("the permission cases are for a mount made by root")
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    mr.write("torch", os.path.join(root, "s.pt"), mr.arrays(600, 1000, 1))
    local = os.path.join(mr.TMP, "s.pt")
    mr.write("torch", local, mr.arrays(600, 1000, 1))
    with servers.Nginx(root) as ng, FaultProxy(ng.base_url) as fp:
        secrets(fp, local)
        owners(ng, local)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
