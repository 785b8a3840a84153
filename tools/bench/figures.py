#!/usr/bin/python3
"""The bench's ratios as figures: one PNG per part of `make bench`.

    tools/bench/figures.py [RESULTS [DIR]]

reads the results file tools/bench/bench.py writes (RESULTS, default
tools/bench/results.json) and draws DIR/fig-<part>.png (DIR, default the
results file's folder) for every part it holds: batchfs beside each
baseline of the part as a ratio (batchfs / baseline: 1x as fast, 2x twice
as fast, 0.5x half as fast; bars from 1x on a log scale, each labelled),
one panel per workload, each panel with the date, load and passes of its
run, the machine under the figure. Parts the file does not hold keep the PNG they
have. `make bench` runs it after the benchmark.

Drawn with matplotlib (Debian's python3-matplotlib, which
`tools/scripts/deps.sh torch` installs); without it, it says how to get it
and draws nothing, with exit status 0: a bench never fails for a figure.

The results file is one JSON object, an entry per part measured, keyed
as BENCH_ONLY names the parts ("small rows modes", "large rows cold",
"ragged rows", ...). An entry holds the part's measurements (bench.py's
own keys), "run" (date, machine, load at start and end, reps, scale,
source) and "ratios": {baseline: {batchfs variant: batchfs / baseline}},
which ratios() below computes from the measurements. An entry copied
from tools/bench/RESULTS.md by hand holds "run" (with "from": the section)
and "ratios" only. When you add a part to bench.py, also add it to FIGURES
and give ratios() its case.

Importing this file needs no matplotlib: bench.py calls ratios().
"""
import json
import os
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))

# part (an entry's key is the part, or "<workload> <part>"), file name,
# title, what batchfs's bars are
FIGURES = [
    ("modes", "fig-modes.png", "Warm epochs, per serve mode",
     "batchfs: every batch of a shuffled epoch read from Python, readinto "
     "1 MiB, archive in the page cache"),
    ("readers", "fig-readers.png", "The readers batchfs ships",
     "batchfs: a shuffled epoch through each reader on a default mount "
     "(torch tensors), archive in the page cache"),
    ("compare", "fig-compare.png", "batchfs against the DataLoader you "
     "would write",
     "GB/s of payload (images and labels as torch tensors in the training "
     "process), higher is better, log scale. batchfs: batchfs.Batches() "
     "with its defaults on a default mount. DataLoader: shuffle=True, 0, 4 "
     "or 8 workers, over the archive's tensors in memory (torch.load, a "
     "TensorDataset; cold: torch.load of the cold archive plus an epoch) "
     "or over the archive file (a Dataset that preads each sample's rows). "
     "Warm: the archive in the page cache; cold: the page cache dropped "
     "before each pass, batchfs timed from `batchfs mount` on. The dashed "
     "line is what reading the archive itself gives: the page cache's read "
     "of it (warm), `dd bs=1M` of it (cold)"),
    ("epochs", "fig-epochs.png", "The first epoch of a fresh mount",
     "batchfs: epoch 0 of a fresh mount against its third epoch, archive "
     "in the page cache, Python readinto 1 MiB"),
    ("cold", "fig-cold.png", "A cold epoch, from batchfs mount",
     "batchfs: mount + a shuffled epoch 0, page cache dropped first, "
     "against `dd bs=1M` of the archive, cold"),
    ("ranks", "fig-ranks.png", "One mount for many ranks (--world-size 8 "
     "--ranks all)",
     "batchfs: R processes at once, each Batches() over its own rank of "
     "one mount, their total against R times one rank alone; warm (local, "
     "page cache) and cold (http:// through a 20 ms, 200 MB/s link, cache "
     "emptied)"),
    ("notfit", "fig-notfit.png", "Data that does not fit in memory",
     "batchfs: a shuffled epoch (samples/s), everything in a memory cgroup "
     "too small for the archive, page cache dropped first"),
    ("ragged rows", "fig-ragged.png", "Ragged rows (token sequences)",
     "batchfs: every batch of a shuffled epoch read from Python (samples/s), "
     "against a DataLoader padding the same arrays"),
    ("remote", "fig-remote.png", "The archive on an HTTP server, through a "
     "link of 20 ms and 200 MB/s",
     "batchfs: `batchfs mount http://...`, a cold shuffled epoch from the "
     "mount on (cache emptied) and the second epoch, against the link's "
     "limit (parallel curl, 8 MiB ranges), the peers' DataLoaders through "
     "rclone and s3fs mounts, local disk; and its cache bounded to a "
     "quarter of the archive: chunk hits against evicting by next use and "
     "LRU, simulated; and with memory a quarter too, 3 epochs against the "
     "peers with the same bounds"),
]

INSTALL = ("figures: matplotlib is missing, no figures drawn (Debian: "
           "apt-get install python3-matplotlib, or tools/scripts/deps.sh "
           "torch)")


def number(x):
    """x if it is a measured number (not None, not NaN), else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x:
        return None
    return x


def best(*xs):
    vals = [x for x in map(number, xs) if x is not None]
    return max(vals) if vals else None


def ratios(part, e):
    """{baseline: {batchfs variant: batchfs / baseline}} of the entry 'e'
    of part 'part' (its measurements, bench.py's keys). A pair one side
    of which was not measured (missing, NaN, a failed mode) is left out;
    a part nothing of which was measured gives {}."""
    out = {}

    def put(baseline, variant, num, den):
        num, den = number(num), number(den)
        if num is not None and den:
            out.setdefault(baseline, {})[variant] = num / den

    if part == "modes":
        plain, nullfs = e.get("plain") or {}, e.get("nullfs") or {}
        bases = [("plain files on tmpfs, Python", plain.get("readinto 1M")),
                 ("null FUSE server, direct_io", nullfs.get("1M")),
                 ("page cache, C read()", e.get("pagecache")),
                 ("memcpy, 1 thread", e.get("memcpy")),
                 ("best DataLoader", best(e.get("dl0"), e.get("dl2")))]
        for baseline, den in bases:
            for mode, got in (e.get("batchfs") or {}).items():
                put(baseline, mode, got.get("py 1M"), den)
    elif part == "readers":
        g = e.get("GB/s") or {}
        for baseline, den in (
                ("numpy gather, in process", g.get("numpy gather")),
                ("best DataLoader, tensors in RAM",
                 best(e.get("dl0"), e.get("dl2")))):
            for variant in ("Batches()", "DataLoader(IterableDataset)",
                            "C loader, host"):
                put(baseline, variant, g.get(variant), den)
    elif part == "epochs":
        for variant, label in (("default", "read in at mount (default)"),
                               ("no-read-in", "without the read-in")):
            per = e.get(variant) or []
            if len(per) == 3:
                put("its third epoch", label, per[0].get("GB/s"),
                    per[2].get("GB/s"))
    elif part == "compare":
        for how in ("warm", "cold"):
            g = e.get(how) or {}
            dls = [v for k, v in g.items() if k.startswith("DataLoader")]
            put("best DataLoader, " + how, "Batches()", g.get("Batches()"),
                best(*dls))
            put("the bound, " + how, "Batches()", g.get("Batches()"),
                e.get(how + " bound"))
    elif part == "cold":
        for variant, label in (("default", "read in at mount (default)"),
                               ("no-read-in", "without the read-in")):
            put("dd bs=1M of the archive", label, e.get(variant), e.get("dd"))
    elif part == "ranks":
        for how in ("warm", "cold remote"):
            per = e.get(how) or {}
            for r in ("2", "4", "8"):
                x = per.get(r) or {}
                put("R times one rank alone, " + how, "R = " + r,
                    x.get("vs R x one"), 1)
    elif part == "notfit":
        dls = [v for k, v in e.items() if k.startswith("DataLoader")]
        for baseline, den in (
                ("random pread, 16 threads", e.get("pread 16 threads")),
                ("random pread, 64 threads", e.get("pread 64 threads")),
                ("best random read (pread threads, io_uring depth 1-256)",
                 e.get("best random read")),
                ("best DataLoader (pread)", best(*dls))):
            put(baseline, "batchfs", e.get("batchfs"), den)
            if e.get("batchfs --serve direct"):
                put(baseline, "batchfs --serve direct",
                    e.get("batchfs --serve direct"), den)
    elif part == "remote":
        n = e.get("n")
        cold, warm = number(e.get("cold s")), number(e.get("warm s"))
        rate = (lambda s: 1 / s if s else None)
        put("cold epoch over the link's limit (curl, 8 MiB ranges)",
            "batchfs", rate(cold), rate(e.get("link s")))
        put("cold epoch over the link's limit (curl, 8 MiB ranges)",
            "batchfs, Batches()", rate(number(e.get("cold py s"))),
            rate(e.get("link s")))
        put("cold epoch over download at the link + a warm epoch",
            "batchfs", rate(cold), rate(e.get("download+warm s")))
        peer = number(e.get("best peer samples/s"))
        if n and cold and peer:
            put("cold epoch over the best peer (rclone, s3fs) + DataLoader",
                "batchfs", n / cold, peer)
        put("second epoch over the archive on local disk", "batchfs",
            rate(warm), rate(e.get("local s")))
        put("second epoch over the archive on local disk",
            "batchfs, Batches()", rate(e.get("warm py s")),
            rate(e.get("local py s")))
        c = e.get("cache") or {}
        put("cache of 1/4: hits over evicting by next use (simulated)",
            "batchfs", c.get("hits"), c.get("next use hits"))
        put("cache of 1/4: hits over LRU (simulated)", "batchfs",
            c.get("hits"), c.get("lru hits"))
        b = e.get("bounded") or {}
        peers = [number((b.get(k) or {}).get("samples/s"))
                 for k in ("rclone", "s3fs")]
        peers = [x for x in peers if x]
        put("cache and memory of 1/4: over the best peer + DataLoader",
            "batchfs", number((b.get("batchfs") or {}).get("samples/s")),
            max(peers) if peers else None)
    elif part == "ragged rows":
        dl = best(e.get("dl0"), e.get("dl2"))
        put("best DataLoader + pad_sequence", "--pad (default)", e.get("pad"),
            dl)
        put("best DataLoader + pad_sequence", "--pack", e.get("pack"), dl)
    return out


def entries(results, part):
    """[(key, entry)] of 'part' that have ratios, small rows first."""
    got = [(k, e) for k, e in results.items()
           if (k == part or k.endswith(" " + part)) and isinstance(e, dict)
           and e.get("ratios")]
    return sorted(got, key=lambda ke: (not ke[0].startswith("small"), ke[0]))


def workload_label(key, part, run):
    """'small rows: 784 B + label, batch 256' from an entry's key and run."""
    name = key[:-len(part)].strip() or key
    row, batch = run.get("row"), run.get("batch")
    if not row or not batch:
        return name
    img = row - 8
    size = "%d B" % img if img < 10240 else "%.0f KiB" % (img / 1024)
    return "%s: %s + label, batch %d" % (name, size, batch)


def when(run):
    """'2026-11-25, load 0.3 -> 1.8, median of 3' of a run record (and
    its BENCH_SCALE, where that is not 1)."""
    words = [str(run.get("date", "date not recorded"))]
    load = run.get("load")
    if isinstance(load, list) and len(load) == 2 and None not in load:
        words.append("load %.1f \u2192 %.1f" % tuple(load))
    else:
        words.append("load not recorded")
    if run.get("reps"):
        words.append("median of %d" % run["reps"])
    if run.get("scale") not in (None, 1):
        words.append("BENCH_SCALE=%g" % run["scale"])
    return ", ".join(words)


def ticks(lo, hi):
    """Log-scale ticks between lo and hi (1-2-5, or the powers of ten
    over more than 500x), and their labels."""
    steps = (1, 2, 5) if hi / lo <= 500 else (1,)
    vals = [m * 10.0 ** k for k in range(-3, 4) for m in steps]
    vals = [v for v in vals if lo <= v <= hi]
    return vals, ["%g\u00d7" % v for v in vals]


def panel(ax, key, part, e, variants, colors, lo, hi, wrap):
    """One workload's bars: a group per baseline, a bar per variant (in
    the figure's order, so a variant has one place in every panel), each
    from 1x to its ratio and labelled, "n/a" where it was not measured;
    the y axis from lo to hi."""
    rat = e["ratios"]
    bases = list(rat)
    width = min(0.8 / len(variants), 0.3)
    small = 7 if len(variants) < 4 else 6
    for j, b in enumerate(bases):
        for i, v in enumerate(variants):
            x = j + width * (i - (len(variants) - 1) / 2)
            r = rat[b].get(v)
            if r is None:
                ax.annotate("n/a", (x, 1), xytext=(0, 2),
                            textcoords="offset points", ha="center",
                            va="bottom", fontsize=small, color="grey")
                continue
            ax.bar(x, r - 1, bottom=1, width=width * 0.9, color=colors[v])
            text = ("%.2f\u00d7" if r >= 0.1 else "%.3f\u00d7") % r
            ax.annotate(text, (x, r), xytext=(0, 2 if r >= 1 else -2),
                        textcoords="offset points", ha="center",
                        va="bottom" if r >= 1 else "top", fontsize=small)
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.set_yticks(*ticks(lo, hi))
    ax.minorticks_off()
    ax.set_xticks(range(len(bases)))
    ax.set_xticklabels([textwrap.fill(b, wrap) for b in bases], fontsize=7)
    ax.set_xlim(-0.6, len(bases) - 0.4)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title("%s\n%s" % (workload_label(key, part, e.get("run", {})),
                             when(e.get("run", {}))), fontsize=8)
    ax.grid(axis="y", linewidth=0.3, alpha=0.5)
    ax.set_axisbelow(True)


def unique(ents, field):
    """The distinct values of run field 'field' of the entries, in order."""
    got = []
    for _, e in ents:
        v = e.get("run", {}).get(field)
        if v and v not in got:
            got.append(v)
    return got


def draw(plt, part, title, what, ents, path):
    """One figure, 800 pixels wide: a panel per entry, side by side in
    450 pixels (stacked, each 300 pixels high, when the panels have many
    bars), a legend of the variants, a caption."""
    variants = []
    for _, e in ents:
        for b in e["ratios"].values():
            variants += [v for v in b if v not in variants]
    groups = max(len(e["ratios"]) for _, e in ents)
    stacked = len(ents) > 1 and (groups * len(variants) > 8 or groups > 3)
    rows = len(ents) if stacked else 1
    fig, axes = plt.subplots(rows, 1 if stacked else len(ents),
                             figsize=(8, 4.5 if rows == 1 else 1 + 3 * rows),
                             dpi=100, squeeze=False)
    axes = axes.ravel()
    cmap = plt.get_cmap("tab10")
    colors = {v: cmap(i % 10) for i, v in enumerate(variants)}
    # one scale for every panel, so bars compare across workloads
    vals = [r for _, e in ents for b in e["ratios"].values()
            for r in b.values()] + [1.0]
    lo, hi = min(vals) / 2.2, max(vals) * 2.2
    for ax, (key, e) in zip(axes, ents):
        panel(ax, key, part, e, variants, colors, lo, hi,
              18 if stacked or len(ents) == 1 else 14)
    for ax in axes if stacked else axes[:1]:
        ax.set_ylabel("batchfs / baseline (log)", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[v]) for v in variants]
    fig.legend(handles, variants, loc="upper right", fontsize=7,
               ncol=min(len(variants), 4), frameon=False,
               bbox_to_anchor=(0.99, 0.995))
    caption = what + ". Above 1\u00d7: batchfs is faster. Machine: " + \
        ("; ".join(unique(ents, "machine")) or "not recorded") + "."
    for src in unique(ents, "from"):
        names = [k[:-len(part)].strip() for k, e in ents
                 if e.get("run", {}).get("from") == src]
        whose = "" if len(names) == len(ents) or not all(names) else \
            " (%s)" % ", ".join(names)
        caption += " Copied from %s%s." % (src, whose)
    finish(plt, fig, title, caption, 0.95, path)


def finish(plt, fig, title, caption, top, path):
    """A figure's title and caption (wrapped under the panels, which end
    at 'top' of its height), saved to path and closed."""
    fig.suptitle(title, x=0.01, y=0.995, ha="left", fontsize=10,
                 fontweight="bold")
    lines = textwrap.wrap(caption, 165)
    fig.text(0.01, 0.005, "\n".join(lines), fontsize=6.5, ha="left",
             va="bottom")
    fig.tight_layout(rect=(0, 0.02 + 0.025 * len(lines), 1, top))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw_compare(plt, title, what, ents, path):
    """The compare part's figure: a panel per workload, a group per
    condition (warm, cold), a bar per reader in GB/s (log scale, each
    labelled), the condition's bound as a dashed line across its group."""
    fig, axes = plt.subplots(1, len(ents), figsize=(8, 4.5), dpi=100,
                             squeeze=False)
    readers = []
    for _, e in ents:
        for how in ("warm", "cold"):
            readers += [k for k in (e.get(how) or {}) if k not in readers]
    cmap = plt.get_cmap("tab10")
    colors = {r: cmap(i % 10) for i, r in enumerate(readers)}
    vals = [v for _, e in ents for how in ("warm", "cold")
            for v in list((e.get(how) or {}).values()) +
            [e.get(how + " bound")] if number(v)]
    lo, hi = min(vals) / 2.5, max(vals) * 2.5
    width = 0.8 / max(1, len(readers))
    for ax, (key, e) in zip(axes.ravel(), ents):
        hows = [h for h in ("warm", "cold") if e.get(h)]
        for j, how in enumerate(hows):
            for i, r in enumerate(readers):
                v = number((e.get(how) or {}).get(r))
                x = j + width * (i - (len(readers) - 1) / 2)
                if v is None:
                    continue
                ax.bar(x, v, width=width * 0.9, color=colors[r])
                ax.annotate("%.2f" % v if v >= 0.1 else "%.3f" % v, (x, v),
                            xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=5.5)
            b = number(e.get(how + " bound"))
            if b:
                ax.hlines(b, j - 0.45, j + 0.45, colors="black",
                          linestyles="dashed", linewidth=0.9)
                ax.annotate("bound %.2f" % b, (j + 0.45, b), xytext=(0, 2),
                            textcoords="offset points", ha="right",
                            va="bottom", fontsize=6)
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        at, labels = ticks(lo, hi)
        ax.set_yticks(at, [t.replace("\u00d7", "") for t in labels])
        ax.minorticks_off()
        ax.set_xticks(range(len(hows)))
        ax.set_xticklabels(hows, fontsize=8)
        ax.set_xlim(-0.6, len(hows) - 0.4)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title("%s\n%s" % (workload_label(key, "compare",
                                                 e.get("run", {})),
                                  when(e.get("run", {}))), fontsize=7)
        ax.grid(axis="y", linewidth=0.3, alpha=0.5)
        ax.set_axisbelow(True)
    axes.ravel()[0].set_ylabel("GB/s of payload (log)", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[r]) for r in readers]
    fig.legend(handles, readers, loc="upper center", fontsize=6.5, ncol=4,
               frameon=False, bbox_to_anchor=(0.5, 0.955))
    finish(plt, fig, title, what + ". Machine: " +
           ("; ".join(unique(ents, "machine")) or "not recorded") + ".",
           0.87, path)


def main(argv):
    src = argv[1] if len(argv) > 1 else os.path.join(HERE, "results.json")
    out = argv[2] if len(argv) > 2 else \
        os.path.dirname(os.path.abspath(src))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(INSTALL)
        return 0
    try:
        with open(src) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        print("figures: cannot read %s (%s): no figures drawn" % (src, e))
        return 1
    drawn = 0
    for part, name, title, what in FIGURES:
        ents = entries(results, part)
        if not ents:
            continue
        path = os.path.join(out, name)
        if part == "compare":
            draw_compare(plt, title, what, ents, path)
        else:
            draw(plt, part, title, what, ents, path)
        print("figures: %s (%s)" % (path, ", ".join(k for k, _ in ents)))
        drawn += 1
    if not drawn:
        print("figures: %s holds no ratios: no figures drawn" % src)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
