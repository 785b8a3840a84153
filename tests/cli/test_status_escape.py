#!/usr/bin/python3
"""What batchfs status prints from a mount cannot drive the terminal nor
forge lines: in every string it prints from a mount (the mount point,
sources, serve mode, log) control characters (C0, DEL, C1, U+0080..U+009F
in UTF-8 or as \\u escapes in dataset.json) and bytes that are not UTF-8
are shown as escapes (\\x1b, \\u009b; a backslash as \\\\), and the rest
of UTF-8 as is. Its output then holds no control byte but the newlines
that end its own lines.

Two mounts say such things: a real batchfs mount of a source whose file
name holds ESC, a newline and U+009B, with such a log file and mount
point; and tests/bin/fakebatchfs, which calls itself batchfs (as any FUSE
server can) and serves a hostile dataset.json and stats."""
import os
import subprocess

import numpy as np

import statuslib as sl  # puts tests/mount on the path
from statuslib import ml

ml.require_fuse()
TMP = ml.TMP


def check_clean(raw):
    """No byte a terminal acts on in raw, but newlines."""
    bad = [b for b in raw if (b < 0x20 and b != 0x0a) or b == 0x7f]
    assert not bad, "control bytes %r in %r" % (bytes(bad), raw)
    text = raw.decode("utf-8")  # strict: every byte is UTF-8
    c1 = [c for c in text if 0x80 <= ord(c) <= 0x9f]
    assert not c1, "C1 controls %r in %r" % (c1, text)


def real_mount(mounts):
    src = os.path.join(TMP, "a\x1b[31mred\nFAKE\u009b.npy")
    np.save(src, np.arange(10))
    log = os.path.join(TMP, "l\x1b]0;pwn\x07.log")
    mnt = os.path.join(TMP, "m\x1b[2Jnt\nX")
    mounts.append(mnt)
    ml.mount(src, mnt, "--log-file", log)
    p = sl.status(mnt, own=[mnt])
    assert p.returncode == 0, p
    check_clean(p.raw)
    assert sl.blocks(p.stdout) == {TMP + "/m\\x1b[2Jnt\\x0aX": [
        "source      " + TMP + "/a\\x1b[31mred\\x0aFAKE\\u009b.npy",
        "serve mode  " + ml.stats(mnt)["serve_mode"],
        "log         " + TMP + "/l\\x1b]0;pwn\\x07.log",
        "pid         %d" % ml.daemon_pid(mnt)]}, p


# A dataset.json as no batchfs writes it: control characters as \u
# escapes and raw, C1 both ways, a byte that is not UTF-8, NUL, a lone
# surrogate; six sources (four shown).
HOSTILE = (
    b'{"sources": ["\\u001b]0;owned\\u0007",'
    b' "c1 \\u009b31m \\u0085",'
    b' "raw \x1b[2J \xc2\x9b \xff \x7f",'
    b' "nul \\u0000 sur \\ud800 \\ud83d\\ude00 \xc3\xa9 \\u65e5 \\\\ end",'
    b' "5", "6"],'
    b' "serve_mode": "push\r\\u001b[1A",'
    b' "log": "/l\nFAKE LINE"}')


def fake_mount(fakes):
    mnt = os.path.join(TMP, "fake\x1b]2;t\x07mnt\u009b")
    point = TMP + "/fake\\x1b]2;t\\x07mnt\\u009b"
    fakes.append(sl.FakeBatchfs(mnt, HOSTILE, b"pid 7\x1b[31m\n"))
    p = sl.status(mnt, own=[mnt])
    assert p.returncode == 0, p
    check_clean(p.raw)
    assert sl.blocks(p.stdout) == {point: [
        "source      \\x1b]0;owned\\x07",
        "            c1 \\u009b31m \\u0085",
        "            raw \\x1b[2J \\u009b \\xff \\x7f",
        "            nul \\x00 sur \ufffd \U0001F600 \u00e9 \u65e5 \\\\ end",
        "            ... and 2 more (%s/dataset.json)" % point,
        "serve mode  push\\x0d\\x1b[1A",
        "log         /l\\x0aFAKE LINE",
        "pid         7"]}, p
    # listed with every mount: the same lines
    p = sl.status(own=[mnt])
    check_clean(p.raw)
    assert sl.blocks(p.stdout)[point][0] == "source      \\x1b]0;owned\\x07"


mounts, fakes = [], []
try:
    real_mount(mounts)
    fake_mount(fakes)
    print("ok")
finally:
    for fake in fakes:
        fake.close()
    # mountlib's cleanup compares with /proc/mounts' escaped names
    for mnt in mounts:
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
