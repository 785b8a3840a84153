#!/usr/bin/python3
"""index/N/offsets costs the daemon no memory per open, however long the
epoch: a reader cannot grow the daemon by opening it.

Regression: each open rendered the whole file into the daemon's memory
(2 M batches: 42 MB and ~0.6 s of a FUSE thread per open; eight opens took
the daemon from 5.6 MB to 334 MB). Now each READ renders the lines it
covers. Here, 2 000 000 batches of one sample: eight opens held at once,
each read at its start, its end and a line in the middle, leave the
daemon's RssAnon within 16 MiB of what it was (one rendering would be
42 MB), and every line read is right: line K (at byte 21 K, 20 digits and
a newline) is where batch K starts in stream/N, the last the stream's
size."""
import os
import sys

import mountlib as ml

N, SLACK_KB = 2000000, 16 * 1024


def rss_anon_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/%d/status" % pid)


def main():
    ml.require_fuse()
    import torch
    path = os.path.join(ml.TMP, "bytes.pt")
    torch.save({"b": torch.zeros(N, dtype=torch.uint8)}, path)
    _, mnt = ml.mount(path, None, "--batch-size", 1, "--epochs", 2)
    failures = []
    try:
        pid = ml.daemon_pid(mnt)
        size = os.stat(mnt + "/epoch/1/batch_7").st_size
        offs = mnt + "/index/1/offsets"
        assert os.stat(offs).st_size == (N + 1) * 21
        assert os.stat(mnt + "/stream/1").st_size == N * size
        before = rss_anon_kb(pid)
        files = [open(offs, "rb", buffering=0) for _ in range(8)]
        try:
            def lines_right(f):
                for k in (0, 1, N // 2 + 3, N - 1, N):
                    line = os.pread(f.fileno(), 21, 21 * k)
                    assert line == b"%020d\n" % (k * size), (k, line)
                assert os.pread(f.fileno(), 100, 21 * N) == \
                    b"%020d\n" % (N * size)
                mid = os.pread(f.fileno(), 50, 21 * 1000 + 5)
                assert mid == (b"%020d\n" * 3 % (
                    1000 * size, 1001 * size, 1002 * size))[5:55], mid

            errs = ml.bounded(mnt, [lambda f=f: lines_right(f)
                                    for f in files])
            assert errs == [None] * 8, errs
            after = rss_anon_kb(pid)
            if ml.sanitizer_of(pid) is None:
                assert after - before <= SLACK_KB, \
                    ("RssAnon grew by %d KiB with 8 opens of offsets"
                     % (after - before))
            print("ok: 8 opens of index/1/offsets (%d lines): RssAnon "
                  "%d -> %d KiB, lines right" % (N + 1, before, after))
        finally:
            for f in files:
                f.close()
    except AssertionError as e:
        failures.append(str(e))
    finally:
        ml.umount(mnt)
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
