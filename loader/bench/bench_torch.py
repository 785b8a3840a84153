#!/usr/bin/python3
"""The loader from PyTorch on a real GPU: checks and a comparison with
DataLoader(pin_memory=True), in one run (loader/README.md, "Benchmark").

  device tensors  Loader(copy=False) gives CUDA tensors viewing the ring
                  (no host tensor made on the way), equal to the files
  overlap         torch.profiler over the loader feeding matmuls on torch's
                  default stream: the share of the loader's HtoD copy time
                  that runs while a kernel runs
  open/close      200 open/next/close cycles while torch holds all but
                  SPARE of the device memory: each works, the free memory
                  is the same after as before; then with too little left,
                  a LoaderError and torch still works
  graph capture   a global-mode CUDA graph captured on a side stream while
                  the loader prefetches; the epoch's batches equal the
                  files, the graph replays right
  vs DataLoader   batches/s and the GPU's idle share (1 - compute alone /
                  loop time) of the loader against DataLoader over a
                  Dataset that reads each batch file (num_workers W,
                  pin_memory=True) + .to('cuda', non_blocking=True), with
                  the same compute per batch, and with none

Usage: bench_torch.py DIR [--json OUT] [--batches N] [--workers W]
DIR receives the batch files (images uint8 256x3x224x224 + labels int64,
as batchfs writes them; reused when present). Exits 77 without CUDA, 1 when
a check fails (the figures are printed either way)."""
import argparse
import json
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from batchfs_loader import Loader, LoaderError  # noqa: E402

B, SHAPE = 256, (3, 224, 224)
LOADER_OPTS = {}     # slots, readers of the comparison's loader (--slots)
failures = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what), flush=True)
    if not ok:
        failures.append(what)


def write_batch(path, arrays, k):
    """A batch file as batchfs writes it: safetensors, data at 4096."""
    head = {"__metadata__": {"format": "batchfs/1", "epoch": "0",
                             "batch": str(k)}}
    off, blobs = 0, []
    for name, a in sorted(arrays.items(),
                          key=lambda kv: (-kv[1].itemsize, kv[0])):
        code = {np.uint8: "U8", np.int64: "I64"}[a.dtype.type]
        head[name] = {"dtype": code, "shape": list(a.shape),
                      "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    js = json.dumps(head).encode()
    start = (8 + len(js) + 4095) // 4096 * 4096
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", start - 8) + js + b" " * (start - 8 - len(js)))
        for b in blobs:
            f.write(b)


def make_files(d, n):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, (B,) + SHAPE, dtype=np.uint8)
    for k in range(n):
        p = "%s/batch_%d" % (d, k)
        if os.path.exists(p):
            continue
        img[0, 0, 0, :8] = k            # files differ
        write_batch(p, {"images": img, "labels": np.arange(B) + k}, k)
    return ["%s/batch_%d" % (d, k) for k in range(n)]


def file_tensors(path):
    """The file's tensors on the CPU, read plainly in one readinto; the
    tensors view that buffer (the reference, and the DataLoader's item)."""
    buf = bytearray(os.path.getsize(path))
    with open(path, "rb", buffering=0) as f:
        f.readinto(buf)
    n = struct.unpack_from("<Q", buf)[0]
    head = json.loads(bytes(buf[8:8 + n]))
    out = {}
    for name, h in head.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        dt = {"U8": torch.uint8, "I64": torch.int64}[h["dtype"]]
        size = torch.empty((), dtype=dt).element_size()
        out[name] = torch.frombuffer(buf, dtype=dt, count=(b - a) // size,
                                     offset=8 + n + a).reshape(h["shape"])
    return out


class Compute:
    """The compute stand-in: bf16 matmuls of 4096^2 on torch's current
    stream, 'reps' per batch, touching the batch (a reduction) first."""

    def __init__(self, reps):
        self.a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        self.reps = reps
        self.acc = torch.zeros((), device="cuda")

    def __call__(self, x):
        if x is not None:
            self.acc += x[:, 0, 0, :64].float().sum()
        c = self.a
        for _ in range(self.reps):
            c = torch.mm(self.a, c) * 1e-3
        return c


def time_compute(comp, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        comp(None)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def device_tensors(d, files):
    with Loader(d, device="cuda", copy=False, slots=3) as L:
        it = iter(L)
        b = next(it)
        on_dev = all(t.is_cuda for t in b.values())
        ok = on_dev and all(torch.equal(b[n].cpu(), t)
                            for n, t in file_tensors(files[0]).items())
        st = L.stats()
        del b, it
    check(ok, "device tensors: Loader(copy=False) gives CUDA tensors equal "
          "to the file (mode %s, %d copies for %d batches)"
          % ("cuda" if on_dev else "?", st.get("copies", -1),
             st.get("batches", -1)))


def overlap(d, comp, n):
    """Share of the loader's HtoD copy time spent under a kernel."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with Loader(d, device="cuda", slots=3) as L:
        it = iter(L)
        next(it)                                  # pipeline filled
        with profile(activities=acts) as prof:
            for k, b in enumerate(it):
                comp(b["images"])
                if k + 2 >= n:
                    break
            torch.cuda.synchronize()
    copies, kernels = [], []
    for e in prof.events():
        if str(e.device_type) != "DeviceType.CUDA":
            continue
        r = (e.time_range.start, e.time_range.end)
        name = e.name.lower()
        if "memcpy" in name and "htod" in name.replace(" ", ""):
            copies.append(r)
        elif "memcpy" not in name and "memset" not in name:
            kernels.append(r)
    kernels.sort()
    merged = []
    for a, b in kernels:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = sum(b - a for a, b in copies)
    under = 0.0
    for a, b in copies:
        for ka, kb in merged:
            under += max(0.0, min(b, kb) - max(a, ka))
    share = under / total if total else float("nan")
    print("overlap: %d HtoD copies (%.1f ms), %d kernels; %.1f %% of the "
          "copy time under a kernel" % (len(copies), total / 1e3,
                                        len(kernels), 100 * share))
    check(len(copies) > 0, "overlap: the profiler sees the loader's copies")
    check(share >= 0.5, "overlap: most of the copy time under kernels "
          "(%.1f %%)" % (100 * share))
    return share


def open_close(small, spare_gb):
    free0, total = torch.cuda.mem_get_info()
    hog = torch.empty(max(0, free0 - int(spare_gb * 2**30)),
                      dtype=torch.uint8, device="cuda")
    torch.cuda.empty_cache()
    free1 = torch.cuda.mem_get_info()[0]
    bad, frees = 0, []
    for k in range(200):
        try:
            with Loader(small, device="cuda", slots=2) as L:
                b = next(iter(L))
                if not b["images"].is_cuda:
                    bad += 1
                del b
        except LoaderError as e:
            bad += 1
            print("open/close cycle %d: %s" % (k, e))
        if k in (9, 199):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            frees.append(torch.cuda.mem_get_info()[0])
    check(bad == 0, "open/close: 200 cycles with %.1f GiB of %.1f GiB free "
          "(%d failed)" % (free1 / 2**30, total / 2**30, bad))
    check(abs(frees[1] - frees[0]) <= 64 << 20 and
          abs(frees[1] - free1) <= 64 << 20,
          "open/close: free device memory the same after 200 cycles "
          "(%d, %d, %d MiB)" % (free1 >> 20, frees[0] >> 20, frees[1] >> 20))
    # too little left: a clear error, torch unharmed
    left = torch.cuda.mem_get_info()[0]
    hog2 = torch.empty(max(0, left - (32 << 20)), dtype=torch.uint8,
                       device="cuda")
    try:
        with Loader(small, device="cuda", slots=3) as L:
            next(iter(L))
        check(False, "open/close: a loader opened with 32 MiB free "
              "(its ring needs more)")
    except LoaderError as e:
        print("open with 32 MiB free: LoaderError: %s" % e)
        check(True, "open/close: too little device memory is a LoaderError")
    del hog2
    x = torch.ones(1024, device="cuda").sum().item()
    check(x == 1024, "open/close: torch works after the refused open")
    del hog
    torch.cuda.empty_cache()


def graph_capture(d, files):
    """Ten captures, one between each of the first ten next() calls, so
    that the loader's readers and copy thread work during them."""
    side = torch.cuda.Stream()
    x = torch.randn(1024, 1024, device="cuda")
    with torch.cuda.stream(side):
        y = x @ x                             # warm-up outside the capture
    torch.cuda.synchronize()
    graphs, got = [], []
    with Loader(d, device="cuda", slots=3) as L:
        it = iter(L)
        for _ in range(10):
            got.append(next(it))              # readers and copies running
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side,
                                  capture_error_mode="global"):
                y = x @ x
            graphs.append((g, y))
        got.extend(it)
    ok = True
    for g, y in graphs:
        g.replay()
        torch.cuda.synchronize()
        ok = ok and torch.allclose(y, x @ x, rtol=1e-2, atol=1e-1)
    same = all(torch.equal(b["images"].cpu(), file_tensors(f)["images"])
               for b, f in zip(got, files))
    check(ok and same and len(got) == len(files),
          "graph capture (global mode, 10 times) while the loader "
          "prefetches: %d batches equal the files, the graphs replay right"
          % len(got))


class FileBatches(torch.utils.data.Dataset):
    """Item k = batch file k read plainly into CPU tensors."""

    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, k):
        return file_tensors(self.files[k])


def feed(kind, d, files, comp, workers):
    """(batches/s, seconds) of one epoch fed by kind, comp per batch."""
    n = len(files)
    torch.cuda.synchronize()
    if kind == "loader":
        t0 = time.perf_counter()
        with Loader(d, device="cuda", **LOADER_OPTS) as L:
            for b in L:
                comp(b["images"]) if comp else b["images"]
    else:
        dl = torch.utils.data.DataLoader(
            FileBatches(files), batch_size=None, shuffle=False,
            num_workers=workers, pin_memory=True,
            persistent_workers=False, prefetch_factor=4 if workers else None)
        t0 = time.perf_counter()
        for b in dl:
            x = b["images"].to("cuda", non_blocking=True)
            b["labels"].to("cuda", non_blocking=True)
            comp(x) if comp else x
    torch.cuda.synchronize()
    s = time.perf_counter() - t0
    return n / s, s


def versus(d, files, comp, workers, reps):
    n = len(files)
    out = {}
    t_c = statistics.median(time_compute(comp, n) for _ in range(reps))
    out["compute_alone_s"] = t_c
    for label, c in (("no compute", None), ("with compute", comp)):
        for kind in ("loader", "dataloader"):
            runs = [feed(kind, d, files, c, workers) for _ in range(reps)]
            bps = statistics.median(r[0] for r in runs)
            s = statistics.median(r[1] for r in runs)
            idle = 1 - t_c / s if c else float("nan")
            out["%s %s" % (kind, label)] = {"batches_per_s": bps, "s": s,
                                            "gpu_idle": idle}
    print("\n%-28s %10s %10s %9s" % ("epoch of %d x %.1f MB batches" % (
        n, os.path.getsize(files[0]) / 1e6), "batches/s", "GB/s",
        "GPU idle"))
    mb = os.path.getsize(files[0]) / 1e9
    for k, v in out.items():
        if k == "compute_alone_s":
            continue
        print("%-28s %10.1f %10.2f %9s" % (
            k, v["batches_per_s"], v["batches_per_s"] * mb,
            "-" if v["gpu_idle"] != v["gpu_idle"] else
            "%.1f %%" % (100 * v["gpu_idle"])))
    print("compute alone: %.3f s (%.2f ms per batch); DataLoader: %d "
          "workers, pin_memory=True; loader %s" % (
              t_c, 1e3 * t_c / n, workers,
              ", ".join("%s=%s" % (k, v or "default")
                        for k, v in LOADER_OPTS.items())))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--json")
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--matmuls", type=int, default=16)
    ap.add_argument("--spare-gb", type=float, default=2.0)
    ap.add_argument("--slots", type=int, default=0,
                    help="the loader's slots in the comparison (0: default)")
    ap.add_argument("--readers", type=int, default=0)
    ap.add_argument("--only", default="",
                    help="comma-separated steps (device,overlap,open,"
                    "graph,versus)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("skip: torch has no CUDA device")
        return 77
    print("torch %s, %s" % (torch.__version__, torch.cuda.get_device_name()))
    files = make_files(a.dir, a.batches)
    small_dir = a.dir + "-small"
    make_files(small_dir, 3)
    comp = Compute(a.matmuls)
    comp(None)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    steps = [("device tensors", lambda: device_tensors(a.dir, files)),
             ("overlap", lambda: res.__setitem__(
                 "overlap", overlap(a.dir, Compute(4 * a.matmuls),
                                    a.batches))),
             ("open/close", lambda: open_close(small_dir, a.spare_gb)),
             ("graph capture", lambda: graph_capture(a.dir, files)),
             ("versus", lambda: res.__setitem__(
                 "versus", versus(a.dir, files, comp, a.workers, a.reps)))]
    global LOADER_OPTS
    LOADER_OPTS = {"slots": a.slots, "readers": a.readers}
    for name, fn in steps:
        if a.only and not any(w in name for w in a.only.split(",")):
            continue
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as e:  # one step's failure must not hide the rest
            import traceback
            traceback.print_exc()
            check(False, "%s: %r" % (name, e))
        print("[%s: %.1f s]" % (name, time.perf_counter() - t0), flush=True)
    res["failures"] = failures
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print("\n%d check(s) failed" % len(failures) if failures else
          "\nall checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
