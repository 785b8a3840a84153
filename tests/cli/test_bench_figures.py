#!/usr/bin/python3
"""tools/bench/figures.py, the bench's figures: ratios() turns each part's
measurements (bench.py's keys) into batchfs / baseline, leaving out what
was not measured; without matplotlib the script says how to install it,
draws nothing and exits 0; with it, a results file of every part gives
one PNG per part (800x450, under 100 KB) beside it, and a part the file
does not hold keeps its PNG. The committed results file has a figure of
each of its parts, each under 100 KB. Skipped (77) without matplotlib,
once what needs none has passed."""
import json
import math
import os
import struct
import subprocess
import sys

SRC = os.path.abspath(os.environ.get("BFS_SRC") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BENCH = os.path.join(SRC, "tools", "bench")
SCRIPT = os.path.join(BENCH, "figures.py")
PY = os.environ.get("PYTHON", "/usr/bin/python3")
TMP = os.environ.get("BFS_TEST_TMP") or "/tmp"
sys.path.insert(0, BENCH)
import figures  # noqa: E402

RUN = {"date": "2026-01-02 03:04", "machine": "2 CPUs, 24 GiB, Linux 6.18",
       "load": [0.5, 2.5], "reps": 3, "row": 792, "batch": 256}

# bench.py's measurements of each part, small: the wanted ratios are exact
MEASURED = {
    "small rows modes": ("modes", {
        "pagecache": 8.0, "memcpy": 16.0, "nullfs": {"1M": 4.0},
        "plain": {"readinto 1M": 2.0}, "dl0": 0.25, "dl2": 0.5,
        "batchfs": {"passthrough": {"py 1M": 1.0}, "push": {"py 1M": 0.5},
                    "direct": {"error": "mount failed"}}}),
    "small rows readers": ("readers", {
        "GB/s": {"numpy gather": 4.0, "Batches()": 2.0,
                 "DataLoader(IterableDataset)": 1.0, "C loader, host": 3.0},
        "dl0": 0.25, "dl2": 0.125}),
    "small rows compare": ("compare", {
        "warm bound": 8.0, "cold bound": 2.0,
        "warm": {"Batches()": 2.0, "DataLoader, in memory, 0 workers": 0.5,
                 "DataLoader, from the file, 4 workers": 0.25},
        "cold": {"Batches()": 0.5,
                 "DataLoader, from the file, 0 workers": float("nan"),
                 "DataLoader, from the file, 8 workers": 0.125}}),
    "small rows epochs": ("epochs", {
        "default": [{"GB/s": 0.5}, {"GB/s": 1.0}, {"GB/s": 1.0}],
        "no-read-in": [{"GB/s": 0.25}, {"GB/s": 1.0}, {"GB/s": 1.0}]}),
    "small rows cold": ("cold", {"dd": 2.0, "default": 1.0,
                                 "no-read-in": 0.5}),
    "small rows ranks": ("ranks", {
        "world size": 8,
        "warm": {"1": {"GB/s": 1.0, "vs R x one": 1.0},
                 "2": {"GB/s": 1.5, "vs R x one": 0.75},
                 "4": {"GB/s": 2.0, "vs R x one": 0.5},
                 "8": {"GB/s": 2.0, "vs R x one": 0.25}},
        "cold remote": {"skipped": "nginx is not installed"}}),
    "small rows notfit": ("notfit", {
        "batchfs": 100.0, "pread 16 threads": 80.0, "pread 64 threads": 100.0,
        "DataLoader pread, 0 workers": 10.0,
        "DataLoader pread, 2 workers": float("nan"),
        "DataLoader pread, 4 workers": 25.0, "reader": "io_uring"}),
    "ragged rows": ("ragged rows", {"pad": 60.0, "pack": 90.0, "dl0": 100.0,
                                    "dl2": 12.0}),
    "small rows remote": ("remote", {
        "n": 1000, "cold s": 2.0, "warm s": 0.5, "link s": 1.0,
        "download+warm s": 1.0, "local s": 0.25,
        "best peer samples/s": 50.0,
        "cache": {"hits": 90, "next use hits": 100, "lru hits": 60}}),
}
WANT = {
    "small rows modes": {
        "plain files on tmpfs, Python": {"passthrough": 0.5, "push": 0.25},
        "null FUSE server, direct_io": {"passthrough": 0.25, "push": 0.125},
        "page cache, C read()": {"passthrough": 0.125, "push": 0.0625},
        "memcpy, 1 thread": {"passthrough": 0.0625, "push": 0.03125},
        "best DataLoader": {"passthrough": 2.0, "push": 1.0}},
    "small rows readers": {
        "numpy gather, in process": {
            "Batches()": 0.5, "DataLoader(IterableDataset)": 0.25,
            "C loader, host": 0.75},
        "best DataLoader, tensors in RAM": {
            "Batches()": 8.0, "DataLoader(IterableDataset)": 4.0,
            "C loader, host": 12.0}},
    "small rows compare": {
        "best DataLoader, warm": {"Batches()": 4.0},
        "the bound, warm": {"Batches()": 0.25},
        "best DataLoader, cold": {"Batches()": 4.0},
        "the bound, cold": {"Batches()": 0.25}},
    "small rows epochs": {"its third epoch": {
        "read in at mount (default)": 0.5, "without the read-in": 0.25}},
    "small rows cold": {"dd bs=1M of the archive": {
        "read in at mount (default)": 0.5, "without the read-in": 0.25}},
    "small rows ranks": {"R times one rank alone, warm": {
        "R = 2": 0.75, "R = 4": 0.5, "R = 8": 0.25}},
    "small rows notfit": {
        "random pread, 16 threads": {"batchfs": 1.25},
        "random pread, 64 threads": {"batchfs": 1.0},
        "best DataLoader (pread)": {"batchfs": 4.0}},
    "ragged rows": {"best DataLoader + pad_sequence": {
        "--pad (default)": 0.6, "--pack": 0.9}},
    "small rows remote": {
        "cold epoch over the link's limit (curl, 8 MiB ranges)": {
            "batchfs": 0.5},
        "cold epoch over download at the link + a warm epoch": {
            "batchfs": 0.5},
        "cold epoch over the best peer (rclone, s3fs) + DataLoader": {
            "batchfs": 10.0},
        "second epoch over the archive on local disk": {"batchfs": 0.5},
        "cache of 1/4: hits over evicting by next use (simulated)": {
            "batchfs": 0.9},
        "cache of 1/4: hits over LRU (simulated)": {"batchfs": 1.5}},
}


def results():
    """A results file's object as bench.py writes it, one entry a part."""
    out = {}
    for key, (part, m) in MEASURED.items():
        out[key] = dict(m, run=RUN, ratios=figures.ratios(part, m))
    out["latency"] = {"mount": 0.05, "run": RUN, "ratios": {}}
    return out


def ratios_are_batchfs_over_each_baseline():
    for key, (part, m) in MEASURED.items():
        got = figures.ratios(part, m)
        assert got == WANT[key], (key, got, WANT[key])
    # nothing measured, nothing to draw
    for part, _, _, _ in figures.FIGURES:
        assert figures.ratios(part, {}) == {}, part
    assert figures.ratios("modes", {"plain": {"readinto 1M": 1.0},
                                    "batchfs": {"push": {"py 1M": None}}}) \
        == {}


def run_script(*args, env=None):
    p = subprocess.run([PY, SCRIPT] + list(args), capture_output=True,
                       text=True, env=env, timeout=300)
    return p.returncode, p.stdout + p.stderr


def without_matplotlib_it_says_how_to_get_it():
    d = os.path.join(TMP, "nompl")
    os.makedirs(os.path.join(d, "matplotlib"))
    with open(os.path.join(d, "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('no matplotlib here')\n")
    res = os.path.join(TMP, "nompl-results.json")
    with open(res, "w") as f:
        json.dump(results(), f)
    env = dict(os.environ, PYTHONPATH=d)
    rc, out = run_script(res, TMP, env=env)
    assert rc == 0, (rc, out)
    assert "apt-get install python3-matplotlib" in out, out
    assert not [n for n in os.listdir(TMP) if n.endswith(".png")]


def have_matplotlib():
    return subprocess.run([PY, "-c", "import matplotlib"],
                          capture_output=True).returncode == 0


def png_size(path):
    """(width, height) of a PNG file; asserts its signature and IHDR."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", (path, head[:8])
    assert head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def a_png_per_part():
    out = os.path.join(TMP, "figs")
    os.makedirs(out)
    res = os.path.join(out, "results.json")
    # a figure of a part the file does not hold is left alone
    keep = os.path.join(out, "fig-ranks.png")
    data = results()
    del data["small rows ranks"]
    with open(res, "w") as f:
        json.dump(data, f)
    with open(keep, "wb") as f:
        f.write(b"an older figure")
    rc, text = run_script(res)   # DIR: the results file's folder
    assert rc == 0, (rc, text)
    with open(keep, "rb") as f:
        assert f.read() == b"an older figure"
    os.unlink(keep)
    pngs = sorted(n for n in os.listdir(out) if n.endswith(".png"))
    want = sorted(name for part, name, _, _ in figures.FIGURES
                  if part != "ranks")
    assert pngs == want, (pngs, want)
    for n in pngs:
        path = os.path.join(out, n)
        assert png_size(path) == (800, 450), (n, png_size(path))
        size = os.path.getsize(path)
        assert 5000 < size <= 100 * 1024, (n, size)


def committed_figures_are_drawn_and_small():
    with open(os.path.join(BENCH, "results.json")) as f:
        committed = json.load(f)
    for part, name, _, _ in figures.FIGURES:
        ents = figures.entries(committed, part)
        path = os.path.join(BENCH, name)
        assert not ents or os.path.exists(path), (part, name)
        for key, e in ents:
            run = e["run"]
            assert run.get("date") and run.get("machine"), key
            for b in e["ratios"].values():
                assert all(math.isfinite(r) and r > 0 for r in b.values())
        if ents:
            assert png_size(path)[0] == 800, name
            assert os.path.getsize(path) <= 100 * 1024, name


def main():
    ratios_are_batchfs_over_each_baseline()
    without_matplotlib_it_says_how_to_get_it()
    committed_figures_are_drawn_and_small()
    if not have_matplotlib():
        print("skip: no matplotlib (apt-get install python3-matplotlib); "
              "ratios and the message without it ok")
        sys.exit(77)
    a_png_per_part()
    print("ok")


main()
