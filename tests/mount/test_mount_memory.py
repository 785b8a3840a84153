"""The daemon's memory does not grow with the epochs it serves: reading
every batch of 200 shuffled epochs, its RssAnon at epoch 200 is at most its
RssAnon at epoch 10 + 2 MiB.

Regression: fs/order calloc'ed each epoch's random-order table (4 bytes per
sample) and freed the one it replaced; once glibc's mmap threshold had risen
to the table's size, tables came from the heaps of whichever threads asked
and stayed resident there after free (5 MB more every few epochs at 1.3 M
samples). Here 500 000 samples make 2 MB tables; the daemon grew from
10.8 MB at epoch 10 to 16.7 MB at epoch 40 and stayed there.

--prefetch 0 makes the measurement exact: the three order tables then hold
the last three epochs read, fully, whenever RssAnon is read (with prefetch,
whether the next epoch has taken the oldest table yet is a race worth one
table, 2 MB)."""
import os

import mountlib as ml

N, B, EPOCHS, SLACK_KB = 500000, 4096, 200, 2048


def rss_anon_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/%d/status" % pid)


def main():
    ml.require_fuse()
    try:
        import torch
    except ImportError:
        ml.skip("torch is not installed")
    path = os.path.join(ml.TMP, "labels.pt")
    torch.save({"y": torch.arange(N)}, path)
    _, mnt = ml.mount(path, None, "--batch-size", B, "--shuffle", "--seed",
                      7, "--prefetch", 0)
    pid = ml.daemon_pid(mnt)
    nb = (N + B - 1) // B
    rss = {}
    for e in range(EPOCHS + 1):
        for k in range(nb):
            with open("%s/epoch/%d/batch_%d" % (mnt, e, k), "rb",
                      buffering=0) as f:
                while f.read(1 << 20):
                    pass
        if e in (10, 100, EPOCHS):
            rss[e] = rss_anon_kb(pid)
    print("RssAnon: epoch 10 %d kB, epoch 100 %d kB, epoch %d %d kB"
          % (rss[10], rss[100], EPOCHS, rss[EPOCHS]))
    if ml.sanitizer_of(pid):
        print("RssAnon bound not checked: under %s RssAnon is mostly the "
              "sanitizer's own state (mountlib.sanitizer_of)"
              % ml.sanitizer_of(pid))
    else:
        assert rss[EPOCHS] <= rss[10] + SLACK_KB, rss
    assert ml.umount(mnt).returncode == 0
    print("ok")


if __name__ == "__main__":
    main()
