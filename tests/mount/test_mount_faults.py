"""Faults of the file system under the archive, for every serve mode
(ml.serve_modes()): batchfs is mounted on an archive served by
build/tests/bin/faultfs, which makes chosen byte ranges fail with EIO,
read short or stall, and truncates or grows the file, on command.

In each mode, reading a whole epoch after each fault (two epochs apart,
so none of its batches was prefetched before the fault):
- EIO on the pages of a few samples' rows: exactly the batches holding one
  of them fail with EIO; a log line names epoch, batch, the sample and an
  archive offset inside the faulty range; after `clear` the same batches
  read back right;
- a stall (longer than --timeout) on a page of one sample's row: its
  batch fails with EIO (the --timeout error, its log line names epoch,
  batch and sample), and only batches holding rows that share a page with
  it may fail too (the kernel reads the row's pages in one request);
  every other batch is served; once the stall is over the batch reads
  back right;
- a short read (FUSE's end of file) in the middle of a sample's row: the
  batch holding it fails with EIO (no zeros served as data), its log line
  names a sample of the batch whose row reaches past where the file
  "ended", and an offset there;
- the archive truncated under the mount (with no gather in flight:
  --prefetch 0): the file changed, so it is never trusted again: batches
  with rows past the cut fail with EIO, and from the first one that fails
  (the file's new size and mtime are then seen) every batch does; the log
  says the archive changed under the mount; restored and grown past its
  old size, every batch still fails with EIO (a remount serves it);
and throughout: every byte returned equals torch's rows, the daemon stays
alive (same pid in stats) and unmounts cleanly.
"""
import errno
import os
import re
import subprocess
import sys

import numpy as np

import mountlib as ml

N, ROW, B, PAGE = 1200, 6000, 40, 4096
TIMEOUT_S, STALL_S = 3, 8  # --timeout; the stall, well past it
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


class Dataset:
    """The torch rows, and where each sample's row of x lies in the
    archive (found by its bytes)."""

    def __init__(self):
        import torch
        g = torch.Generator().manual_seed(11)
        self.x = torch.randint(0, 256, (N, ROW), generator=g).to(torch.uint8)
        self.y = torch.arange(N) * 7
        self.path = os.path.join(ml.TMP, "faults.pt")
        # y first: its storage precedes x's in the archive, so a cut in
        # x's rows leaves every y row whole
        torch.save({"y": self.y, "x": self.x}, self.path)
        with open(self.path, "rb") as f:
            self.bytes = f.read()
        self.x_off = self.bytes.find(self.x[0].numpy().tobytes())
        assert self.x_off > 0 and \
            self.bytes.find(self.x[1].numpy().tobytes()) == self.x_off + ROW

    def row_span(self, s):
        """[start, end) of sample s's row of x in the archive."""
        return self.x_off + s * ROW, self.x_off + (s + 1) * ROW

    def inner_page(self, s):
        """A page wholly inside sample s's row (None if there is none)."""
        a, e = self.row_span(s)
        p = (a + PAGE - 1) // PAGE * PAGE
        return p if p + PAGE <= e else None

    def samples_on(self, lo, hi):
        """Samples whose rows touch a page of [lo, hi)."""
        lo, hi = lo // PAGE * PAGE, (hi + PAGE - 1) // PAGE * PAGE
        return {s for s in range(N) if self.row_span(s)[0] < hi and
                self.row_span(s)[1] > lo}


class Mount:
    def __init__(self, ds, ff, mode, *opts):
        self.ds = ds
        self.mode = mode
        self.log = os.path.join(ff.dir, "daemon.log")
        _, self.mnt = ml.mount(ff.archive, os.path.join(ff.dir, "mnt"),
                               "--batch-size", B, "--shuffle", "--seed", 5,
                               "--serve", mode, "--timeout", TIMEOUT_S,
                               "--workers", 4, "--log-file", self.log,
                               *opts)
        self.pid = ml.daemon_pid(self.mnt)
        self.nb = (N + B - 1) // B
        self.wrong = 0

    def index(self, e, k):
        return ml.read_index("%s/index/%d/batch_%d" % (self.mnt, e, k))

    def read(self, e, k):
        """'ok', or the errno of the failed read; counts wrong bytes."""
        idx = self.index(e, k)
        try:
            meta, arrs = ml.read_batch("%s/epoch/%d/batch_%d"
                                       % (self.mnt, e, k))
        except OSError as ex:
            return ex.errno
        good = (meta["epoch"] == str(e) and meta["batch"] == str(k) and
                np.array_equal(arrs["x"], ml.torch_np(self.ds.x[idx])) and
                np.array_equal(arrs["y"], ml.torch_np(self.ds.y[idx])))
        self.wrong += not good
        return "ok" if good else "wrong"

    def epoch(self, e):
        return {k: self.read(e, k) for k in range(self.nb)}

    def holding(self, e, samples):
        return {k for k in range(self.nb) if samples & set(self.index(e, k))}

    def log_text(self):
        with open(self.log) as f:
            return f.read()

    def alive(self):
        return ml.is_mounted(self.mnt) and ml.stats(self.mnt)["pid"] == \
            self.pid


def failed(res):
    return {k for k, r in res.items() if r != "ok"}


def eio_case(ds, m, ff):
    bad_samples = [100, 555, 1000]
    ranges = [(ds.row_span(s)[0] + 10, 3000) for s in bad_samples]
    for off, ln in ranges:
        ff.ctl("eio %d %d" % (off, ln))
    bad = set()
    for off, ln in ranges:
        bad |= ds.samples_on(off, off + ln)
    res = m.epoch(3)
    want = m.holding(3, bad)
    check(failed(res) == want and all(res[k] == errno.EIO for k in want),
          "%s eio: exactly the batches holding a faulty row fail with EIO "
          "(%s, want %s)" % (m.mode, sorted(failed(res)), sorted(want)))
    text = m.log_text()
    for k in sorted(want):
        hit = re.search(r"epoch 3 batch %d: gather failed: Input/output "
                        r"error \(sample (\d+), \S+ at offset (\d+)\)" % k,
                        text)
        check(hit is not None and int(hit.group(1)) in bad and
              any(o // PAGE * PAGE <= int(hit.group(2)) <
                  (o + ln + PAGE - 1) // PAGE * PAGE for o, ln in ranges),
              "%s eio: batch %d's log line names a faulty sample and an "
              "offset inside the range" % (m.mode, k))
    check(ff.stats()["eio"] > 0, "%s eio: faultfs answered EIO" % m.mode)
    ff.ctl("clear")
    again = {k: m.read(3, k) for k in sorted(want)}
    check(all(r == "ok" for r in again.values()),
          "%s eio: after clear the failed batches read back right" % m.mode)


def stall_case(ds, m, ff):
    s = next(s for s in range(700, N) if ds.inner_page(s) is not None)
    page = ds.inner_page(s)
    ff.ctl("stall %d %d %d" % (page, PAGE, STALL_S))
    res = m.epoch(5)
    k = min(m.holding(5, {s}))
    # The kernel reads the row's pages in one request (batchfs advises
    # them), so the rows sharing a page with s's wait for it too.
    may = m.holding(5, ds.samples_on(*ds.row_span(s)))
    check(res[k] == errno.EIO and failed(res) <= may,
          "%s stall: the batch holding the stalled row fails with EIO, "
          "only batches sharing its pages may, the others are served "
          "(%s, may %s)" % (m.mode, sorted(failed(res)), sorted(may)))
    idx = m.index(5, k)
    check(re.search(r"epoch 5 batch %d: not ready after %d ms \(sample %d "
                    r"first of %d samples\)" % (k, TIMEOUT_S * 1000, idx[0],
                                                len(idx)),
                    m.log_text()) is not None,
          "%s stall: the timeout's log line names epoch, batch, sample"
          % m.mode)
    ff.ctl("clear")
    # the stalled gather finishes once faultfs answers: its read waits
    # for it (within --timeout: the stall is over after STALL_S)
    for _ in range(STALL_S):
        r = m.read(5, k)
        if r == "ok":
            break
    check(r == "ok", "%s stall: after the stall the batch reads back right"
          % m.mode)
    check(ff.stats()["stalls"] > 0, "%s stall: faultfs stalled" % m.mode)


def short_case(ds, m, ff):
    s = 321
    off = ds.row_span(s)[0] + 1234  # mid-page: the page's tail would be 0
    ff.ctl("short %d %d" % (off, 100))
    res = m.epoch(7)
    k = min(m.holding(7, {s}))
    check(res[k] == errno.EIO, "%s short: the batch holding the short row "
          "fails with EIO (%s)" % (m.mode, res[k]))
    check(all(r in ("ok", errno.EIO) for r in res.values()),
          "%s short: the other batches are served or fail with EIO" % m.mode)
    # Past the short read the file "ended": the line names the first row
    # of the batch found past that end (s's or a later one's) and where.
    hit = re.search(r"epoch 7 batch %d: gather failed: Input/output error "
                    r"\(sample (\d+), \S+ at offset (\d+)\)" % k,
                    m.log_text())
    named, at = (int(hit.group(1)), int(hit.group(2))) if hit else (-1, -1)
    check(named in m.index(7, k) and off <= at < ds.row_span(named)[1] and
          ds.row_span(named)[1] > off,
          "%s short: the batch's log line names one of its samples whose "
          "row reaches past the short read's end, and an offset there "
          "(%s)" % (m.mode, hit.group(0) if hit else None))
    check(ff.stats()["short"] > 0, "%s short: faultfs read short" % m.mode)
    ff.ctl("clear")
    res = m.epoch(9)
    check(not failed(res), "%s short: after clear every batch is served"
          % m.mode)


def truncate_case(ds, m, ff):
    cut = ds.row_span(N - 10)[0] + 100
    ff.ctl("truncate %d" % cut)
    res = m.epoch(11)  # read in order, batch after batch
    want = m.holding(11, set(range(N - 10, N)))
    bad = sorted(failed(res))
    check(want <= set(bad) and all(res[k] == errno.EIO for k in bad),
          "%s truncate: batches with rows past the cut fail with EIO (%s, "
          "want %s)" % (m.mode, bad, sorted(want)))
    check(bad == list(range(bad[0], m.nb)) if bad else False,
          "%s truncate: from the first that fails, every batch fails (the "
          "file changed) (%s)" % (m.mode, bad))
    check("changed under the mount (modified" in m.log_text(),
          "%s truncate: the log says the archive changed" % m.mode)
    with open(ff.backing, "r+b") as f:  # the bytes back, and 1 MiB more
        f.write(ds.bytes)
        f.write(b"\0" * (1 << 20))
    ff.ctl("drop")
    res = m.epoch(13)
    check(all(r == errno.EIO for r in res.values()),
          "%s grow: restored and grown, every batch still fails with EIO"
          % m.mode)


def finish(m, what):
    check(m.wrong == 0, "%s: no wrong byte in any batch read (%d)"
          % (what, m.wrong))
    check(m.alive(), "%s: the daemon is alive" % what)
    check("batchfs[crash]" not in m.log_text(), "%s: no crash" % what)
    check(ml.umount(m.mnt).returncode == 0 and ml.wait_pid_exit(m.pid),
          "%s: clean unmount" % what)


def run_mode(ds, mode):
    ff = ml.FaultFS(ds.path, mode)
    m = None
    try:
        m = Mount(ds, ff, mode)
        res = m.epoch(0)
        check(not failed(res), "%s: epoch 0 served with no fault" % mode)
        eio_case(ds, m, ff)
        stall_case(ds, m, ff)
        short_case(ds, m, ff)
        finish(m, mode)
        # The server truncates with no gather in flight (--prefetch 0):
        # see fs/README.md (Faults) for a truncation racing a gather.
        m = Mount(ds, ff, mode, "--prefetch", 0)
        truncate_case(ds, m, ff)
        finish(m, mode + " --prefetch 0")
    finally:
        if m and ml.is_mounted(m.mnt):
            subprocess.run(["fusermount3", "-uz", m.mnt])
            ml.wait_pid_exit(m.pid)
        ff.close()


def main():
    ml.require_fuse()
    if not os.path.exists(ml.FAULTFS):
        print("FAIL: %s not built" % ml.FAULTFS)
        return 1
    try:
        import torch  # noqa: F401
    except ImportError:
        ml.skip("torch is not installed")
    ds = Dataset()
    for mode in ml.serve_modes():
        run_mode(ds, mode)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
