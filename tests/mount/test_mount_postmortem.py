"""A fatal signal leaves one line in the log before the process dies
(mount/postmortem): the signal, the faulting address (or the sender) and a
backtrace naming the function, on one line.

- build/tests/bin/crash_probe (the handler linked into a small program)
  writes through 0x10, calls abort(), and touches an archive row whose page
  is gone outside fs/dataset's SIGBUS guard (after a fault inside the guard
  came back as -EIO without a word from the handler): the guard chains to
  the post-mortem handler, the process dies of the signal;
- a mounted daemon whose main thread is sent SIGSEGV or SIGBUS (after a
  gather installed the guard) writes the line into its --log-file, with
  frames of batchfs, dies, and auto_unmount removes the mount;
- in a SANITIZE= build, when no log_path is given in the sanitizer's
  options, the sanitizer's own report goes to the --log-file too, and an
  ASan error (a read of a freed block) ends with the crash line.
"""
import ctypes
import os
import re
import signal
import subprocess
import sys

import mountlib as ml

BUILD = os.environ.get("BUILD", "build")
PROBE = os.path.join(os.environ.get("BFS_SRC", "."), BUILD, "tests", "bin",
                     "crash_probe")
CRASH = "batchfs[crash]: "
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def crash_lines(log):
    with open(log) as f:
        return [ln for ln in f.read().splitlines() if ln.startswith(CRASH)]


def sanitizer_runtime(binary):
    deps = subprocess.run(["ldd", binary], capture_output=True,
                          text=True).stdout
    for name in ("asan", "tsan", "ubsan"):
        if "lib%s.so" % name in deps:
            return name
    return None


SAN = sanitizer_runtime(ml.BATCHFS)


def without_log_path():
    """The environment with log_path removed from every sanitizer's
    options: reports then go where the program sends them."""
    env = {}
    for var in ("ASAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS"):
        opts = [o for o in os.environ.get(var, "").split(":")
                if o and not o.startswith("log_path=")]
        env[var] = ":".join(opts)
    return env


def probe(mode, sig, want, frame):
    log = os.path.join(ml.TMP, "probe-%s.log" % mode)
    env = dict(os.environ, **without_log_path())
    p = subprocess.run([PROBE, mode, log, ml.TMP], capture_output=True,
                       text=True, env=env)
    lines = crash_lines(log)
    if SAN in ("asan", "tsan") and sig != signal.SIGABRT:
        # the chained handler is the sanitizer's: it reports (into the
        # log) and exits with its exitcode
        with open(log) as f:
            text = f.read()
        check(p.returncode > 0 and re.search("Sanitizer: (SEGV|BUS) on", text),
              "%s: the sanitizer's report follows in the log (rc %d)"
              % (mode, p.returncode))
    else:
        check(p.returncode == -sig, "%s: the probe dies of %s (rc %d)"
              % (mode, signal.Signals(sig).name, p.returncode))
    check(len(lines) == 1, "%s: one crash line (%d)" % (mode, len(lines)))
    line = lines[0] if lines else ""
    check(re.search(want, line) is not None,
          "%s: the line says %r: %s" % (mode, want, line[:200]))
    check("; backtrace: " in line and frame in line,
          "%s: the backtrace names %s" % (mode, frame))
    return p, log


def probes():
    probe("segv", signal.SIGSEGV,
          r"fatal signal SIGSEGV \(SEGV_MAPERR, address 0x10\) in thread "
          r"\d+ of pid \d+", "(probe_segv+")
    probe("abort", signal.SIGABRT,
          r"fatal signal SIGABRT \(sent by pid \d+\)", "(abort+")
    p, _ = probe("bus", signal.SIGBUS,
                 r"fatal signal SIGBUS \(BUS_ADRERR, address 0x[0-9a-f]+\)",
                 "(probe_bus+")
    check("guarded gather: -5" in p.stdout,
          "bus: a fault inside the gather guard is -EIO, not a crash")
    if SAN == "asan":
        log = os.path.join(ml.TMP, "probe-heap.log")
        p = subprocess.run([PROBE, "heap", log, ml.TMP], capture_output=True,
                           text=True, env=dict(os.environ,
                                               **without_log_path()))
        with open(log) as f:
            text = f.read()
        lines = crash_lines(log)
        check(p.returncode > 0 and "heap-use-after-free" in text and
              len(lines) == 1 and "sanitizer report (above) ends the "
              "process" in lines[0] and "(probe_heap+" in text,
              "heap: ASan's report, then one crash line, in the log")


def daemon_killed(sig):
    path = os.path.join(ml.TMP, "pm.pt")
    if not os.path.exists(path):
        import torch
        torch.save({"x": torch.arange(4000).reshape(1000, 4)}, path)
    log = os.path.join(ml.TMP, "daemon-%d.log" % sig)
    _, mnt = ml.mount(path, None, "--batch-size", 10, "--prefetch", 0,
                      "--log-file", log, env=without_log_path())
    pid = ml.daemon_pid(mnt)
    helpers = ml.unmount_helpers(mnt)
    ml.read_file(mnt + "/epoch/0/batch_3")  # a gather: the guard is in
    # To the main thread (tgkill): kill(2) lets the kernel pick any thread
    # that does not block the signal, and a libfuse worker's stack has no
    # frame of batchfs: which one it picks is scheduling, not a property.
    ctypes.CDLL(None, use_errno=True).tgkill(pid, pid, sig)
    name = signal.Signals(sig).name
    check(ml.wait_pid_exit(pid), "daemon %s: the daemon exits" % name)
    lines = crash_lines(log)
    check(len(lines) == 1, "daemon %s: one crash line (%d)"
          % (name, len(lines)))
    line = lines[0] if lines else ""
    check("fatal signal %s (sent by pid %d) in thread" % (name, os.getpid())
          in line and "of pid %d;" % pid in line,
          "daemon %s: the line names the signal, its sender and the "
          "daemon: %s" % (name, line[:200]))
    check("batchfs(" in line, "daemon %s: the backtrace has frames of "
          "batchfs" % name)
    check(all(ml.wait_pid_exit(h) for h in helpers)
          and not ml.is_mounted(mnt), "daemon %s: auto_unmount leaves no "
          "mount" % name)
    if SAN == "asan":
        with open(log) as f:
            text = f.read()
        check("ERROR: AddressSanitizer" in text,
              "daemon %s: the sanitizer's report is in the log" % name)


def main():
    ml.require_fuse()
    if not os.path.exists(PROBE):
        print("FAIL: %s not built" % PROBE)
        return 1
    probes()
    daemon_killed(signal.SIGSEGV)
    daemon_killed(signal.SIGBUS)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
