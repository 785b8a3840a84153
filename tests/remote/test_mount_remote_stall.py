#!/usr/bin/python3
"""A remote source whose server stalls (tests/lib/faultproxy.py: it
answers the headers, then nothing), with --timeout 120: nothing a user
does may have to wait for that deadline.

  interrupt (--serve auto, push, direct: where the wait is an open's or
    a read's): a reader waiting for a stalled batch is interrupted: `cat`
    killed by SIGTERM ends well within the bound (a fatal signal: the
    kernel waits for the daemon's answer, EINTR; in passthrough and push
    the wait is the open's); a reader of an O_DIRECT file (its READ
    waits, or its open where that finds rows to gather) whose signal
    handler raises sees that call end (EINTR); the
    daemon answers stats and index files meanwhile (a batch whose rows
    are cached cannot be had here: the read-ahead fetches the whole small
    object), and once the server answers again the batches they waited
    for are served, exact;
  plain umount while a reader waits: refused (busy), and the message
    names the reader, says it waits on the remote server, and says what
    to do: interrupt it or batchfs umount --lazy;
  lazy umount while a reader waits, then the reader interrupted: the
    daemon is gone well within the bound (its fetch in flight, still
    stalled, is cancelled when the session ends);
  an unreachable endpoint at mount: nothing listens on the port
    (connection refused): the mount fails well within the bound, after
    one line naming host:port, the error and until when it retries, and
    its message says the connection was refused; a server that accepts
    and never answers: that line comes within the bound, while the
    mount still waits (it then is stopped).

Every wait is bounded (a liveness bound of 20 s, far below the 120 s
deadline: not a timing measurement); a state is waited for (the proxy
stalls a request, the reader sleeps in a FUSE request), never slept."""
import os
import select
import signal
import socket
import subprocess
import sys
import time

import mountremote as mr
from mountremote import FaultProxy, ml, servers

ml.require_fuse()
servers.require_nginx()
try:
    import torch  # noqa: F401
except ImportError:
    ml.skip("torch is not installed")

N, ROW, B = 2400, 2500, 48
TIMEOUT = 120  # --timeout: the deadline nobody may have to wait for
BOUND = 20     # seconds: a liveness bound, well below TIMEOUT
failures = []

# A reader that opens a file with O_DIRECT (served as direct mode serves
# it, in every mode: the open returns at once, the READ waits for the
# batch) and reads it; its SIGUSR1 handler raises, so the handler runs
# (and the reader says so) only once the read returned: EINTR.
READER = r"""
import os, signal, sys
class Interrupted(Exception):
    pass
def handler(sig, frame):
    raise Interrupted()
signal.signal(signal.SIGUSR1, handler)
stage = "open"
try:
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
    stage = "read"
    os.read(fd, 1 << 24)
    print("read: done", flush=True)
except Interrupted:
    print("%s: interrupted" % stage, flush=True)
"""


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def mount(fp, serve="auto"):
    _, rm = mr.mount(fp.url("/data.pt"), "--batch-size", B, "--shuffle",
                     "--seed", 7, "--timeout", TIMEOUT, "--workers", 2,
                     "--serve", serve)
    return rm


def start_waiting(fp, argv, injected_before):
    """Start argv (a reader of a stalled batch) and wait until the proxy
    stalled a request and the reader sleeps in a FUSE request. The
    process, and whether both were seen."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    seen = ml.wait_for(lambda: fp.stats()["injected"]["stall"] >
                       injected_before and p.poll() is None, BOUND) and \
        ml.wait_blocked(p.pid, BOUND)
    return p, seen


def ended(p, timeout=BOUND):
    """Whether p ended within timeout seconds (else it is left running,
    for the caller's mount abort)."""
    try:
        p.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def interrupt(fp, lm, paths, serve):
    def said(ok, what):
        check(ok, "interrupt (--serve %s): %s" % (serve, what))

    rm = mount(fp, serve)
    n0 = fp.stats()["injected"]["stall"]
    fp.fail("stall", after=0)
    batch = os.path.join(rm, paths[0])
    cat, seen = start_waiting(fp, ["cat", batch], n0)
    said(seen, "cat waits for a stalled batch (the proxy stalled its "
         "request, cat sleeps in a FUSE request)")
    t0 = time.monotonic()
    cat.send_signal(signal.SIGTERM)
    said(ended(cat) and cat.returncode == -signal.SIGTERM,
         "cat killed by SIGTERM ends within %d s, not at --timeout %d s "
         "(%.1f s, status %s)"
         % (BOUND, TIMEOUT, time.monotonic() - t0, cat.returncode))
    # its batch may be stalled already (prefetched): any stall will do
    reader, seen = start_waiting(
        fp, [sys.executable, "-c", READER, os.path.join(rm, paths[1])], 0)
    said(seen, "a second reader waits for a stalled batch")
    t0 = time.monotonic()
    reader.send_signal(signal.SIGUSR1)
    out = reader.communicate(timeout=BOUND)[0] if ended(reader) else ""
    # the call that waits is the open or the read, as the way serving
    # the file has it (an open that finds rows to gather waits there);
    # either must end at the signal
    said(out.strip() in ("open: interrupted", "read: interrupted"),
         "an O_DIRECT reader's waiting call (its open or its read) returns "
         "at its signal (EINTR), within %d s (%.1f s: %r)"
         % (BOUND, time.monotonic() - t0, out.strip()))
    s = ml.stats(rm)
    said(s["pid"] > 0, "the daemon still answers stats")
    said(len(ml.read_index(os.path.join(rm, "index/5/batch_0"))) == B,
         "the daemon still serves index files")
    fp.clear()
    got = mr.read_all(rm, paths[:2], timeout=BOUND * 3)
    said(all(got[p] == lm[p] for p in paths[:2]),
         "once the server answers, the interrupted batches are served, "
         "exact")
    for p in (cat, reader):
        if p.poll() is None:
            p.kill()
    mr.unmount(rm)


def plain_umount(fp, paths):
    rm = mount(fp)
    n0 = fp.stats()["injected"]["stall"]
    fp.fail("stall", after=0)
    cat, seen = start_waiting(fp, ["cat", os.path.join(rm, paths[0])], n0)
    check(seen, "umount: cat waits for a stalled batch")
    u = subprocess.run([ml.BATCHFS, "umount", rm], capture_output=True,
                       text=True, timeout=BOUND * 3)
    msg = u.stderr
    low = msg.lower()
    print(msg)
    check(u.returncode == 1 and "busy" in msg,
          "umount while a read waits: refused, busy (%d)" % u.returncode)
    check("pid %d (cat)" % cat.pid in msg,
          "umount: the message names the waiting reader")
    check("waiting" in low and "remote" in low,
          "umount: the message says the reader waits on the remote server")
    check("umount --lazy" in msg and "interrupt" in low,
          "umount: the message says what to do (interrupt the reader, or "
          "batchfs umount --lazy)")
    cat.send_signal(signal.SIGTERM)
    check(ended(cat), "umount: the reader then ends at its signal")
    fp.clear()
    if cat.poll() is None:
        ml.abort_mount(rm)
    u = ml.umount(rm)
    check(u.returncode == 0, "umount: then it unmounts")


def lazy_umount(fp, paths):
    rm = mount(fp)
    pid = ml.daemon_pid(rm)
    n0 = fp.stats()["injected"]["stall"]
    fp.fail("stall", after=0)
    cat, seen = start_waiting(fp, ["cat", os.path.join(rm, paths[0])], n0)
    check(seen, "lazy: cat waits for a stalled batch")
    u = subprocess.run([ml.BATCHFS, "umount", "--lazy", rm],
                       capture_output=True, text=True, timeout=BOUND)
    check(u.returncode == 0, "lazy: batchfs umount --lazy detaches it (%s)"
          % u.stderr.strip())
    if u.returncode == 0 and rm in ml._mounts:
        ml._mounts.remove(rm)
    t0 = time.monotonic()
    cat.send_signal(signal.SIGTERM)
    check(ended(cat), "lazy: the reader ends at its signal")
    gone = ml.wait_pid_exit(pid, BOUND)
    check(gone, "lazy: the daemon (pid %d) is gone within %d s of its "
          "last reader, its stalled fetch cancelled, not after --timeout "
          "%d s (%.1f s)" % (pid, BOUND, TIMEOUT, time.monotonic() - t0))
    fp.clear()
    if not gone:  # the old daemon: do not leave it behind
        os.kill(pid, signal.SIGKILL)
    if cat.poll() is None:
        cat.kill()


def mount_lines(url, until):
    """Start batchfs mount of url (--timeout TIMEOUT) and collect its
    stderr lines until until(lines) holds, it exits, or BOUND seconds
    pass. (process, lines, seconds)."""
    mnt = os.path.join(mr.TMP, "unreachable")
    os.makedirs(mnt, exist_ok=True)
    t0 = time.monotonic()
    p = subprocess.Popen([ml.BATCHFS, "mount", "--cache-dir",
                          os.path.join(mr.TMP, "ucache"), "--timeout",
                          str(TIMEOUT), url, mnt],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, env=mr.env_without_aws())
    lines = []
    while not until(lines) and time.monotonic() - t0 < BOUND:
        r, _, _ = select.select([p.stderr], [], [], 0.2)
        if r:
            line = p.stderr.readline()
            if not line:  # it exited
                break
            lines.append(line.strip())
    return p, lines, time.monotonic() - t0


def unreachable():
    port = servers.free_port()  # nothing listens there
    where = "127.0.0.1:%d" % port
    url = "http://%s/data.pt" % where
    p, lines, took = mount_lines(url, lambda ls: False)
    ended_ = ended(p, 1)
    print("\n".join(lines))
    check(ended_ and p.returncode == 1,
          "refused: the mount fails within %d s, not at --timeout %d s "
          "(%.1f s, status %s)" % (BOUND, TIMEOUT, took, p.returncode))
    said = [x for x in lines if where in x and "retrying until" in x]
    check(len(said) == 1 and "refused" in said[0],
          "refused: one line names %s, the error and until when it "
          "retries" % where)
    check(lines and "connection refused" in lines[-1],
          "refused: the mount's message says the connection was refused")
    if p.poll() is None:
        p.kill()
        p.wait()

    # a server that accepts and never answers
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    where = "127.0.0.1:%d" % srv.getsockname()[1]
    p, lines, took = mount_lines(
        "http://%s/data.pt" % where,
        lambda ls: any(where in x and "retrying until" in x for x in ls))
    print("\n".join(lines))
    check(p.poll() is None and any(where in x and "retrying until" in x
                                   for x in lines),
          "silent server: while the mount waits, a line names %s and "
          "until when it retries, within %d s (%.1f s)"
          % (where, BOUND, took))
    p.terminate()
    check(ended(p), "silent server: the waiting mount ends at SIGTERM")
    srv.close()


def main():
    root = os.path.join(mr.TMP, "www")
    os.makedirs(root, exist_ok=True)
    mr.write("torch", os.path.join(root, "data.pt"), mr.arrays(N, ROW, 1))
    keep = os.path.join(mr.TMP, "data.pt")
    mr.write("torch", keep, mr.arrays(N, ROW, 1))
    _, lm = mr.mount(keep, "--batch-size", B, "--shuffle", "--seed", 7)
    paths = mr.batch_paths(lm, 1)[:2]
    local = mr.read_all(lm, paths)
    with servers.Nginx(root) as ng, \
            FaultProxy(ng.base_url, max_stall=TIMEOUT * 3) as fp:
        for serve in ("auto", "push", "direct"):
            interrupt(fp, local, paths, serve)
        plain_umount(fp, paths)
        lazy_umount(fp, paths)
    unreachable()
    mr.unmount(lm)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
