#!/usr/bin/python3
"""Random operations on a live mount, checked against a model of the
namespace (not a test itself: tests/mount/test_mount_fuzz.py runs it for
make check, `make soak` for SOAK_SECONDS).

  fuzz_mount.py [--seconds S] [--readers R] [--procs P] [--mode MODE]
                [--seed N] [--report FILE]

makes a small dataset with torch, mounts it, and for S seconds runs R
readers (P processes, R/P threads each; every reader its own seeded random
stream) doing random operations: open+read whole batch files with random
chunk sizes, pread at random offsets and sizes (past EOF too), mmap
(MAP_SHARED and MAP_PRIVATE) and touch, lseek past EOF, stat, readdir,
index/README/dataset.json/stats reads, lookups of malformed names
(epoch/-1, epoch/18446744073709551616/batch_0, batch_01, names longer
than FUSE's longest and than PATH_MAX, `..`), writes, truncates, renames, xattrs. Every answer is
checked against the model: sizes and file types, the exact errno, and every
byte of a batch file against torch's rows (the header is checked field by
field on the first full read of each batch, then byte for byte). Prints
(and writes to --report) a JSON report: operations per kind, errors by
errno split into expected and unexpected, wrong bytes, and the daemon's
RssAnon / RssShmem / open fds / threads at mount, after a warm-up of a
tenth of the run, and at the end, with the growth from warm-up to end.
Exit status 0 when nothing unexpected happened (with --flat: and RssAnon
and open fds grew at most 2 % after the warm-up), 1 otherwise.
"""
import argparse
import errno
import json
import mmap
import os
import random
import subprocess
import sys
import threading
import time

import numpy as np

import mountlib as ml

N, B, EPOCHS, ROW = 700, 32, 6, 300
NB = (N + B - 1) // B
ROOT = {"README", "dataset.json", "epoch", "index", "stats", "stream"}
EROFS_OPS = ("open_wronly", "open_rdwr", "open_trunc", "creat", "mkdir",
             "rmdir", "unlink", "rename", "truncate", "chmod", "utime",
             "symlink", "link")


def ename(e):
    return errno.errorcode.get(e, str(e))


class Tally:
    """Counts of one reader (merged at the end)."""

    def __init__(self):
        self.ops = {}
        self.errors = {}  # "expected ENOENT" -> n
        self.unexpected = []  # first few descriptions
        self.wrong = 0
        self.wrong_what = []

    def op(self, name):
        self.ops[name] = self.ops.get(name, 0) + 1

    def err(self, name, e, expected):
        key = "%s %s" % ("expected" if expected else "unexpected", ename(e))
        self.errors[key] = self.errors.get(key, 0) + 1
        if not expected and len(self.unexpected) < 20:
            self.unexpected.append("%s: %s" % (name, ename(e)))

    def surprise(self, what):
        self.errors["unexpected answer"] = \
            self.errors.get("unexpected answer", 0) + 1
        if len(self.unexpected) < 20:
            self.unexpected.append(what)

    def bad_bytes(self, what):
        self.wrong += 1
        if len(self.wrong_what) < 20:
            self.wrong_what.append(what)

    def as_dict(self):
        return {"ops": self.ops, "errors": self.errors,
                "unexpected": self.unexpected, "wrong": self.wrong,
                "wrong_what": self.wrong_what}


class Model:
    """What the mount must show: the dataset's arrays and each epoch's
    sample order (torch's DataLoader), from the file the controller
    wrote."""

    def __init__(self, path, mnt, mode):
        z = np.load(path)
        self.x, self.y, self.w = z["x"], z["y"], z["w"]
        self.order = z["order"]  # [EPOCHS, N]
        self.mnt = mnt
        self.mode = mode
        self.headers = {}  # (e, k) -> header bytes, once checked
        self.texts = {}  # path -> bytes of README / dataset.json
        self.lock = threading.Lock()

    def idx(self, e, k):
        return self.order[e][k * B:(k + 1) * B]

    def data(self, e, k):
        i = self.idx(e, k)
        # fields by descending element size, ties by name: y, w, x
        return self.y[i].tobytes() + self.w[i].tobytes() + \
            self.x[i].tobytes()

    def size(self, e, k):
        return 4096 + len(self.idx(e, k)) * (8 + 20 + ROW)

    def batch(self, e, k):
        return "%s/epoch/%d/batch_%d" % (self.mnt, e, k)

    def index_text(self, e, k):
        return "".join("%d\n" % i for i in self.idx(e, k)).encode()

    def check_header(self, e, k, head):
        """Parse and check a batch's header bytes; None or what is
        wrong."""
        n = int.from_bytes(head[:8], "little")
        if 8 + n != 4096:
            return "header length %d" % n
        try:
            h = json.loads(head[8:8 + n])
        except ValueError as ex:
            return "header JSON: %s" % ex
        rows = len(self.idx(e, k))
        want = {"__metadata__": {"format": "batchfs/1", "epoch": str(e),
                                 "batch": str(k)},
                "y": {"dtype": "I64", "shape": [rows],
                      "data_offsets": [0, 8 * rows]},
                "w": {"dtype": "F32", "shape": [rows, 5],
                      "data_offsets": [8 * rows, 28 * rows]},
                "x": {"dtype": "U8", "shape": [rows, ROW],
                      "data_offsets": [28 * rows, (28 + ROW) * rows]}}
        return None if h == want else "header %r" % h

    def expected(self, e, k):
        """The whole batch file, or None before its header was seen."""
        head = self.headers.get((e, k))
        return None if head is None else head + self.data(e, k)


def random_valid_path(rnd):
    e, k = rnd.randrange(EPOCHS), rnd.randrange(NB)
    return rnd.choice([
        ("README", "f"), ("dataset.json", "f"), ("stats", "f"),
        ("epoch", "d"), ("index", "d"), ("epoch/%d" % e, "d"),
        ("index/%d" % e, "d"), ("epoch/%d/batch_%d" % (e, k), "f"),
        ("index/%d/batch_%d" % (e, k), "f"),
        ("epoch/%d/../../README" % e, "f"), ("epoch/../index/%d" % e, "d"),
        ("", "d")])


def malformed(rnd):
    """(path, errnos it may give)."""
    e = rnd.randrange(EPOCHS)
    enoent = (errno.ENOENT,)
    return rnd.choice([
        ("epoch/-1", enoent), ("epoch/%d" % EPOCHS, enoent),
        ("epoch/%d" % (EPOCHS + rnd.randrange(1 << 40)), enoent),
        ("epoch/18446744073709551616/batch_0", enoent),
        ("epoch/18446744073709551615", enoent),
        ("epoch/0%d" % e, enoent), ("epoch/+%d" % e, enoent),
        ("epoch/ %d" % e, enoent), ("epoch/%d " % e, enoent),
        ("epoch/%d/batch_0%d" % (e, rnd.randrange(NB)), enoent),
        ("epoch/%d/batch_%d" % (e, NB + rnd.randrange(1000)), enoent),
        ("epoch/%d/batch_-1" % e, enoent), ("epoch/%d/batch_" % e, enoent),
        ("epoch/%d/batch" % e, enoent), ("epoch/%d/Batch_0" % e, enoent),
        ("epoch/%d/batch_0x1" % e, enoent),
        ("epoch/%d/batch_18446744073709551616" % e, enoent),
        ("index/%d/batch_%d" % (e, NB), enoent),
        ("epoch/%d/batch_0/x" % e, (errno.ENOTDIR,)),
        ("README/x", (errno.ENOTDIR,)),
        ("epoch/%d/%s" % (e, "b" * rnd.randrange(256, 1025)), enoent),
        # FUSE's longest name is 1024 bytes before Linux 6.14, 4095 after
        ("epoch/%s" % ("9" * 2000), (errno.ENAMETOOLONG, errno.ENOENT)),
        ("epoch/%s" % ("9" * 5000), (errno.ENAMETOOLONG,)),
        ("nonexistent", enoent), ("epoch/x", enoent), ("..x", enoent)])


class Reader:
    def __init__(self, model, seed, deadline):
        self.m = model
        self.rnd = random.Random(seed)
        self.deadline = deadline
        self.t = Tally()

    # -- helpers -----------------------------------------------------------
    def call(self, name, fn, allowed=()):
        """fn() or None after an OSError (counted; 'allowed' errnos are
        expected ones)."""
        self.t.op(name)
        try:
            return fn()
        except OSError as ex:
            self.t.err(name, ex.errno, ex.errno in allowed)
            return None

    def expect_errno(self, name, fn, want, what=""):
        """fn() must fail with an errno in 'want' ('what': for the
        report)."""
        self.t.op(name)
        try:
            fn()
        except OSError as ex:
            self.t.err("%s %s" % (name, what), ex.errno, ex.errno in want)
            return
        self.t.surprise("%s: succeeded, wanted %s"
                        % (name, "/".join(ename(e) for e in want)))

    def pick(self):
        return self.rnd.randrange(EPOCHS), self.rnd.randrange(NB)

    def full(self, e, k):
        """The expected bytes of batch (e, k), reading it whole (checked)
        first if its header is not known yet; None when that failed."""
        want = self.m.expected(e, k)
        if want is None:
            self.read_whole(e, k)
            want = self.m.expected(e, k)
        return want

    # -- operations --------------------------------------------------------
    def read_whole(self, e, k):
        def go():
            fd = os.open(self.m.batch(e, k), os.O_RDONLY)
            try:
                parts = []
                while True:
                    b = os.read(fd, self.rnd.choice(
                        [1, 7, 4096, 65536, 1 << 20, 3 << 20]))
                    if not b:
                        break
                    parts.append(b)
                return b"".join(parts)
            finally:
                os.close(fd)
        got = self.call("read_whole", go)
        if got is None:
            return
        what = "epoch %d batch %d" % (e, k)
        if len(got) != self.m.size(e, k):
            self.t.bad_bytes("%s: %d bytes, want %d" % (what, len(got),
                                                        self.m.size(e, k)))
            return
        want = self.m.expected(e, k)
        if want is None:
            bad = self.m.check_header(e, k, got[:4096])
            if bad:
                self.t.bad_bytes("%s: %s" % (what, bad))
                return
            with self.m.lock:
                self.m.headers[(e, k)] = got[:4096]
            want = self.m.expected(e, k)
        if got != want:
            at = next(i for i in range(len(got)) if got[i] != want[i])
            self.t.bad_bytes("%s: byte %d differs" % (what, at))

    def pread(self, e, k):
        want = self.full(e, k)
        if want is None:
            return
        size = len(want)
        off = self.rnd.choice([0, self.rnd.randrange(size + 8192),
                               size - 1, size, size + 1, 4095, 4096,
                               1 << 40])
        n = self.rnd.choice([0, 1, 100, 4096, self.rnd.randrange(1, 1 << 21)])

        def go():
            fd = os.open(self.m.batch(e, k), os.O_RDONLY)
            try:
                return os.pread(fd, n, off)
            finally:
                os.close(fd)
        got = self.call("pread", go)
        if got is not None and got != want[off:off + n]:
            self.t.bad_bytes("epoch %d batch %d: pread(%d, %d): %d bytes "
                             "wrong" % (e, k, n, off, len(got)))

    def mmap_touch(self, e, k):
        want = self.full(e, k)
        if want is None:
            return
        shared = self.rnd.random() < 0.5
        fd = self.call("mmap_open", lambda: os.open(self.m.batch(e, k),
                                                    os.O_RDONLY))
        if fd is None:
            return
        try:
            flags = mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE
            # libfuse 3.14: no MAP_SHARED of a direct_io file
            nodev = (errno.ENODEV,) if shared and self.m.mode == "direct" \
                else ()
            mm = self.call("mmap_shared" if shared else "mmap_private",
                           lambda: mmap.mmap(fd, 0, flags, mmap.PROT_READ),
                           nodev)
            if mm is None:
                return
            if nodev:
                self.t.surprise("mmap_shared: worked on a direct_io file")
            with mm:
                if len(mm) != len(want):
                    self.t.bad_bytes("mmap length %d, want %d"
                                     % (len(mm), len(want)))
                    return
                for _ in range(16):
                    a = self.rnd.randrange(len(want))
                    b = min(len(want), a + self.rnd.choice([1, 64, 5000]))
                    if mm[a:b] != want[a:b]:
                        self.t.bad_bytes("epoch %d batch %d: mmap bytes "
                                         "%d..%d" % (e, k, a, b))
                        return
        finally:
            os.close(fd)

    def lseek_past_end(self, e, k):
        size = self.m.size(e, k)
        past = size + self.rnd.randrange(1 << 30)

        def go():
            fd = os.open(self.m.batch(e, k), os.O_RDONLY)
            try:
                end = os.lseek(fd, 0, os.SEEK_END)
                os.lseek(fd, past, os.SEEK_SET)
                return end, os.read(fd, 4096)
            finally:
                os.close(fd)
        r = self.call("lseek_past_end", go)
        if r is not None and (r[0] != size or r[1] != b""):
            self.t.surprise("lseek: end %d (want %d), read %d bytes past "
                            "it" % (r[0], size, len(r[1])))

    def partial_close(self, e, k):
        """Read a little of a batch and close it (release before the
        end)."""
        def go():
            fd = os.open(self.m.batch(e, k), os.O_RDONLY)
            try:
                return os.read(fd, self.rnd.choice([1, 8, 4096, 5000]))
            finally:
                os.close(fd)
        got = self.call("partial_close", go)
        want = self.m.expected(e, k)
        if got is not None and want is not None and \
                got != want[:len(got)]:
            self.t.bad_bytes("epoch %d batch %d: first %d bytes"
                             % (e, k, len(got)))

    def many_open(self, e, k):
        """Hold several batch files open at once, read one byte of each."""
        fds = []
        try:
            for _ in range(self.rnd.randrange(2, 12)):
                ee, kk = self.pick()
                fd = self.call("many_open", lambda: os.open(
                    self.m.batch(ee, kk), os.O_RDONLY))
                if fd is not None:
                    fds.append(fd)
            for fd in fds:
                self.call("many_open_read", lambda: os.pread(fd, 1, 0))
        finally:
            for fd in fds:
                os.close(fd)

    def read_index(self, e, k):
        path = "%s/index/%d/batch_%d" % (self.m.mnt, e, k)
        got = self.call("read_index", lambda: open(path, "rb").read())
        if got is not None and got != self.m.index_text(e, k):
            self.t.bad_bytes("index %d/%d differs" % (e, k))

    def read_text(self, e, k):
        name = self.rnd.choice(["README", "dataset.json"])
        path = "%s/%s" % (self.m.mnt, name)

        def go():
            return os.stat(path).st_size, open(path, "rb").read()
        r = self.call("read_text", go)
        if r is None:
            return
        size, got = r
        with self.m.lock:
            first = self.m.texts.setdefault(name, got)
        if len(got) != size or got != first:
            self.t.bad_bytes("%s: %d bytes (st_size %d), %s the first read"
                             % (name, len(got), size,
                                "same as" if got == first else "not"))
        if name == "dataset.json":
            try:
                d = json.loads(got)
                ok = d["samples"] == N and d["batch_size"] == B
            except (ValueError, KeyError):
                ok = False
            if not ok:
                self.t.bad_bytes("dataset.json: wrong samples/batch_size")

    def read_stats(self, e, k):
        got = self.call("read_stats",
                        lambda: open(self.m.mnt + "/stats", "rb").read())
        if got is None:
            return
        # "name value" lines: counters are integers; serve_mode and the
        # serve_mode, reader and last_error_* are words or text ("-":
        # none)
        try:
            st = dict(ln.split(None, 1) for ln in got.decode().splitlines())
            counters = [v.strip() for k, v in st.items()
                        if k not in ("serve_mode", "serve_mode_why",
                                     "reader")
                        and not k.startswith("last_error")]
            ok = (int(st["pid"]) > 0 and all(v.lstrip("-").isdigit()
                                              for v in counters)
                  and self.m.mode in ("auto", st["serve_mode"].strip()))
        except (ValueError, KeyError):
            ok = False
        if not ok:
            self.t.bad_bytes("stats: not 'name value' lines with integer "
                             "counters and this serve_mode")

    def stat_valid(self, e, k):
        path, kind = random_valid_path(self.rnd)
        st = self.call("stat", lambda: os.stat(self.m.mnt + "/" + path))
        if st is None:
            return
        isdir = (st.st_mode & 0o170000) == 0o040000
        if isdir != (kind == "d"):
            self.t.surprise("stat %s: directory %s" % (path, isdir))
        if path.startswith("epoch/") and "batch_" in path and \
                st.st_size != self.m.size(*map(int, path[6:].replace(
                    "batch_", "").split("/"))):
            self.t.surprise("stat %s: size %d" % (path, st.st_size))

    def listdir(self, e, k):
        path, want = self.rnd.choice([
            ("", ROOT),
            ("epoch", {str(i) for i in range(EPOCHS)}),
            ("index", {str(i) for i in range(EPOCHS)}),
            ("stream", {str(i) for i in range(EPOCHS)}),
            ("epoch/%d" % e, {"batch_%d" % i for i in range(NB)}),
            ("index/%d" % e, {"batch_%d" % i for i in range(NB)} |
             {"offsets"})])
        got = self.call("listdir",
                        lambda: os.listdir(self.m.mnt + "/" + path))
        if got is not None and (set(got) != want or len(got) != len(want)):
            self.t.surprise("listdir %s: %d entries, %d expected"
                            % (path, len(got), len(want)))

    def lookup_malformed(self, e, k):
        path, want = malformed(self.rnd)
        how = self.rnd.choice(["stat", "open", "listdir"])
        full = self.m.mnt + "/" + path
        if how == "stat":
            fn = lambda: os.stat(full)  # noqa: E731
        elif how == "open":
            fn = lambda: os.close(os.open(full, os.O_RDONLY))  # noqa: E731
        else:
            fn = lambda: os.listdir(full)  # noqa: E731
        self.expect_errno("malformed_" + how, fn, want, path[:60])

    def write_op(self, e, k):
        m = self.m.mnt
        op = self.rnd.choice(EROFS_OPS)
        f = "%s/epoch/%d/batch_%d" % (m, e, k)
        fn = {
            "open_wronly": lambda: os.open(f, os.O_WRONLY),
            "open_rdwr": lambda: os.open(f, os.O_RDWR),
            "open_trunc": lambda: os.open(f, os.O_RDONLY | os.O_TRUNC),
            "creat": lambda: os.open("%s/epoch/%d/new" % (m, e),
                                     os.O_CREAT | os.O_WRONLY, 0o644),
            "mkdir": lambda: os.mkdir("%s/epoch/%d" % (m, EPOCHS + 5)),
            "rmdir": lambda: os.rmdir("%s/epoch/%d" % (m, e)),
            "unlink": lambda: os.unlink(f),
            "rename": lambda: os.rename(f, f + ".x"),
            "truncate": lambda: os.truncate(f, self.rnd.randrange(9000)),
            "chmod": lambda: os.chmod(f, 0o777),
            "utime": lambda: os.utime(f),
            "symlink": lambda: os.symlink("README", m + "/link"),
            "link": lambda: os.link(f, m + "/hard"),
        }[op]
        self.expect_errno("write_" + op, fn, (errno.EROFS,))

    def xattr(self, e, k):
        path = self.m.mnt + "/" + random_valid_path(self.rnd)[0]
        op = self.rnd.choice(["get", "list", "set", "remove"])
        nosup = (errno.ENOTSUP, errno.ENODATA)
        if op == "get":
            self.expect_errno("xattr_get", lambda: os.getxattr(
                path, "user.batchfs"), nosup)
        elif op == "list":
            got = self.call("xattr_list", lambda: os.listxattr(path),
                            (errno.ENOTSUP,))
            if got:
                self.t.surprise("listxattr: %r" % got)
        elif op == "set":
            self.expect_errno("xattr_set", lambda: os.setxattr(
                path, "user.batchfs", b"1"), (errno.EROFS,))
        else:
            self.expect_errno("xattr_remove", lambda: os.removexattr(
                path, "user.batchfs"), (errno.EROFS,) + nosup)

    def dir_misuse(self, e, k):
        m = self.m.mnt
        if self.rnd.random() < 0.5:
            def go():
                fd = os.open("%s/epoch/%d" % (m, e), os.O_RDONLY)
                try:
                    os.read(fd, 10)
                finally:
                    os.close(fd)
            self.expect_errno("read_dir", go, (errno.EISDIR,))
        else:
            self.expect_errno("open_file_as_dir", lambda: os.open(
                m + "/README", os.O_RDONLY | os.O_DIRECTORY),
                (errno.ENOTDIR,))

    def statvfs(self, e, k):
        sv = self.call("statvfs", lambda: os.statvfs(self.m.mnt))
        if sv is not None and not sv.f_flag & os.ST_RDONLY:
            self.t.surprise("statvfs: not read-only")

    OPS = [(read_whole, 10), (pread, 10), (mmap_touch, 5),
           (lseek_past_end, 3), (partial_close, 4), (many_open, 1),
           (read_index, 4), (read_text, 3), (read_stats, 2),
           (stat_valid, 4), (listdir, 3), (lookup_malformed, 5),
           (write_op, 3), (xattr, 2), (dir_misuse, 2), (statvfs, 1)]

    def run(self):
        ops, weights = zip(*self.OPS)
        while time.monotonic() < self.deadline:
            op = self.rnd.choices(ops, weights)[0]
            op(self, *self.pick())


def worker(args):
    """One process: --threads readers until --seconds pass; prints its
    merged tally as JSON."""
    model = Model(args.model, args.mnt, args.mode)
    deadline = time.monotonic() + args.seconds
    readers = [Reader(model, args.seed * 1000 + i, deadline)
               for i in range(args.threads)]
    ths = [threading.Thread(target=r.run) for r in readers]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    json.dump(merge([r.t.as_dict() for r in readers]), sys.stdout)
    return 0


def merge(tallies):
    out = {"ops": {}, "errors": {}, "unexpected": [], "wrong": 0,
           "wrong_what": []}
    for t in tallies:
        for key in ("ops", "errors"):
            for k, v in t[key].items():
                out[key][k] = out[key].get(k, 0) + v
        out["unexpected"] += t["unexpected"][:20 - len(out["unexpected"])]
        out["wrong"] += t["wrong"]
        out["wrong_what"] += t["wrong_what"][:20 - len(out["wrong_what"])]
    return out


def daemon_resources(pid):
    res = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "RssShmem"):
                res[k + "_kB"] = int(v.split()[0])
            elif k == "Threads":
                res["threads"] = int(v)
    res["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    return res


def make_model(work):
    """The dataset (torch.save) and the model file for the readers."""
    import torch
    g = torch.Generator().manual_seed(1234)
    x = torch.randint(0, 256, (N, ROW), generator=g).to(torch.uint8)
    y = torch.arange(N) * 3 + 1
    w = torch.rand((N, 5), generator=g)
    src = os.path.join(work, "fuzz.pt")
    torch.save({"x": x, "y": y, "w": w}, src)
    dl = torch.utils.data.DataLoader(
        range(N), batch_size=B, shuffle=True,
        generator=torch.Generator().manual_seed(7))
    order = np.array([[i for b in dl for i in b.tolist()]
                      for _ in range(EPOCHS)])
    model = os.path.join(work, "model.npz")
    np.savez(model, x=x.numpy(), y=y.numpy(), w=w.numpy(), order=order)
    return src, model


def run(mode, seconds, readers, procs, seed, work):
    """Mount, fuzz, unmount; returns the report (a dict)."""
    os.makedirs(work, exist_ok=True)
    src, model = make_model(work)
    log = os.path.join(work, "daemon-%s.log" % mode)
    _, mnt = ml.mount(src, os.path.join(work, "mnt-" + mode),
                      "--batch-size", B, "--shuffle", "--seed", 7,
                      "--epochs", EPOCHS, "--serve", mode, "--log-file", log)
    pid = ml.daemon_pid(mnt)
    start = time.monotonic()
    samples = [(0.0, daemon_resources(pid))]
    per = [readers // procs + (i < readers % procs) for i in range(procs)]
    ps = [subprocess.Popen([sys.executable, os.path.abspath(__file__),
                            "--worker", model, "--mnt", mnt, "--mode", mode,
                            "--threads", str(n), "--seconds", str(seconds),
                            "--seed", str(seed * 100 + i)],
                           stdout=subprocess.PIPE, text=True)
          for i, n in enumerate(per) if n]
    while any(p.poll() is None for p in ps):
        time.sleep(1)  # sampling the daemon, not waiting for the mount
        if os.path.exists("/proc/%d" % pid):
            samples.append((time.monotonic() - start, daemon_resources(pid)))
    outs = [p.communicate()[0] for p in ps]
    elapsed = time.monotonic() - start
    tallies, failed = [], []
    for p, out in zip(ps, outs):
        try:
            tallies.append(json.loads(out))
        except ValueError:
            failed.append("a reader process exited %d" % p.returncode)
    rep = merge(tallies)
    total = sum(rep["ops"].values())
    warm = next((r for t, r in samples if t >= seconds / 10), samples[-1][1])
    alive = ml.is_mounted(mnt) and ml.stats(mnt)["pid"] == pid
    served = ml.stats(mnt)["serve_mode"] if alive else None
    with open(log) as f:
        crash = [ln for ln in f if "batchfs[crash]" in ln]
    rep.update({
        "mode": mode, "serve_mode": served, "seconds": round(elapsed, 1),
        "readers": readers,
        "processes": len(ps), "operations": total,
        "ops_per_s": round(total / elapsed, 1),
        "daemon_start": samples[0][1], "daemon_warm": warm,
        "daemon_end": samples[-1][1], "daemon_alive": alive,
        "crash_lines": crash, "reader_failures": failed,
        "load_average": os.getloadavg()})
    rep["unexpected_count"] = sum(v for k, v in rep["errors"].items()
                                  if k.startswith("unexpected"))
    end = samples[-1][1]
    rep["growth_warm_to_end_pct"] = {
        k: round(100.0 * (end[k] - warm[k]) / warm[k], 2) if warm[k] else 0
        for k in ("RssAnon_kB", "RssShmem_kB", "fds", "threads")}
    rep["umount_rc"] = ml.umount(mnt).returncode
    ml.wait_pid_exit(pid)
    return rep


def ok(rep, flat=False):
    """Nothing unexpected; with 'flat', also RssAnon and open fds within
    2 % from the end of the warm-up to the end (the soak's target)."""
    g = rep["growth_warm_to_end_pct"]
    return (rep["unexpected_count"] == 0 and rep["wrong"] == 0 and
            rep["daemon_alive"] and not rep["crash_lines"] and
            not rep["reader_failures"] and rep["umount_rc"] == 0 and
            (not flat or (abs(g["RssAnon_kB"]) <= 2 and
                          abs(g["fds"]) <= 2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--procs", type=int, default=0,
                    help="processes (default: readers / 2)")
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--report")
    ap.add_argument("--flat", action="store_true",
                    help="fail unless RssAnon and fds stay within 2 %%")
    ap.add_argument("--work", default=ml.TMP)
    ap.add_argument("--worker", dest="model")
    ap.add_argument("--mnt")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.model:
        return worker(args)
    ml.require_fuse()
    rep = run(args.mode, args.seconds, args.readers,
              args.procs or max(1, args.readers // 2), args.seed,
              os.path.join(args.work, "fuzz"))
    text = json.dumps(rep, indent=1, sort_keys=True)
    print(text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")
    return 0 if ok(rep, args.flat) else 1


if __name__ == "__main__":
    sys.exit(main())
