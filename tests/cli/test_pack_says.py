#!/usr/bin/python3
"""What `batchfs pack` says:
- inputs with different sample counts: the refusal blames the input with
  fewest samples (a file cut short), whatever the argument order, and
  names one with most beside it (.npy files, lists, both);
- each archive's line states its size on disk, and a sharded pack ends
  with the total;
- on a terminal the progress line is erased: what stays on screen ends
  with the "wrote" line, and no progress text is left anywhere."""
import os
import pty
import subprocess

import numpy as np

TMP = os.environ.get("BFS_TEST_TMP") or "/tmp"
BATCHFS = os.environ.get("BATCHFS") or os.path.abspath("build/batchfs")


def run(*args):
    return subprocess.run([BATCHFS, *map(str, args)], capture_output=True,
                          text=True)


def the_short_input_is_blamed():
    f = {}
    for name, n in [("short", 5), ("long", 10), ("long2", 10)]:
        f[name] = os.path.join(TMP, name + ".npy")
        np.save(f[name], np.arange(n))
    f["shortlist"] = os.path.join(TMP, "shortlist.npz")
    np.savez(f["shortlist"], *[np.arange(i + 1) for i in range(4)])
    f["longlist"] = os.path.join(TMP, "longlist.npz")
    np.savez(f["longlist"], *[np.arange(i + 1) for i in range(10)])
    out = os.path.join(TMP, "mismatch.pt")
    for args, blamed, field, n, other, m in [
            (["a=" + f["short"], "b=" + f["long"]], "short", "a", 5,
             "long", 10),
            (["b=" + f["long"], "a=" + f["short"]], "short", "a", 5,
             "long", 10),
            (["a=" + f["long"], "b=" + f["long2"], "c=" + f["short"]],
             "short", "c", 5, "long", 10),
            (["a=" + f["long"], "b=@" + f["shortlist"]], "shortlist", "b",
             4, "long", 10),
            (["a=@" + f["shortlist"], "b=" + f["long"]], "shortlist", "a",
             4, "long", 10),
            (["a=@" + f["shortlist"], "b=@" + f["longlist"]], "shortlist",
             "a", 4, "longlist", 10)]:
        p = run("pack", "-o", out, *args)
        assert p.returncode == 1, (args, p)
        want = ("batchfs pack: %s: field '%s' has %d samples, but %s "
                "(field '" % (f[blamed], field, n, f[other]))
        assert p.stderr.startswith(want), (args, p.stderr)
        assert "has %d: all inputs are one dataset" % m in p.stderr, \
            p.stderr
        assert not os.path.exists(out)


def lines_state_the_file_size():
    out = os.path.join(TMP, "demo.pt")
    p = run("pack", "--demo", 100, "-o", out)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines == ["wrote %s: 2 tensors, samples 0..99, %d bytes"
                     % (out, os.stat(out).st_size)], lines
    out = os.path.join(TMP, "shards.pt")
    p = run("pack", "--demo", 2000, "--shard-size", "2M", "-o", out)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    total = 0
    for i, line in enumerate(lines[:-1]):
        path = os.path.join(TMP, "shards-%05d-of-%05d.pt" %
                            (i, len(lines) - 1))
        size = os.stat(path).st_size
        total += size
        assert line.startswith("wrote %s: " % path), line
        assert ", %d bytes (" % size in line, (line, size)
    assert len(lines) > 2, lines
    assert lines[-1].startswith("wrote %d archives, %d bytes ("
                                % (len(lines) - 1, total)), lines


def screen(raw):
    """What a terminal shows after 'raw': \\r returns to column 0, \\n
    starts a line, ESC [ K erases to the end of the line."""
    rows, row, col = [], [], 0
    i = 0
    while i < len(raw):
        c = raw[i]
        if raw.startswith("\x1b[K", i):
            del row[col:]
            i += 3
            continue
        if c == "\r":
            col = 0
        elif c == "\n":
            rows.append("".join(row))
            row, col = [], 0
        else:
            row[col:col + 1] = [c]
            col += 1
        i += 1
    if row:
        rows.append("".join(row))
    return rows


def no_stale_progress_line_on_a_terminal():
    out = os.path.join(TMP, "tty.pt")
    env = dict(os.environ, BATCHFS_DEBUG_PROGRESS_MIN="0")
    pid, fd = pty.fork()
    if pid == 0:  # stdout and stderr on the same terminal
        os.execve(BATCHFS, [BATCHFS, "pack", "--demo", "30000", "-o", out],
                  env)
    raw = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, raw
    rows = [r for r in screen(raw.decode()) if r.strip()]
    assert rows == ["wrote %s: 2 tensors, samples 0..29999, %d bytes "
                    "(%.1f MB)" % (out, os.stat(out).st_size,
                                   os.stat(out).st_size / 1e6)], rows


def main():
    the_short_input_is_blamed()
    lines_state_the_file_size()
    no_stale_progress_line_on_a_terminal()
    print("ok")


main()
