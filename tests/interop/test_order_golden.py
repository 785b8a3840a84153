"""Golden suite: fs/order (through build/tests/bin/order_dump) against the
batch indices of real torch DataLoaders, for every sampler batchfs offers.

Each configuration builds the PyTorch loader that bfs_order_describe names,
over TensorDataset(torch.arange(n)) (so a batch *is* its indices), iterates
E epochs with a fresh iterator each (DistributedSampler: set_epoch(e)
first), and compares every batch with order_dump's output for the
corresponding options. The configurations (> 200) are generated from a
fixed seed plus hand-picked edge cases: n = 1, primes, n < world_size *
batch_size, padding longer than the dataset, seeds >= 2^32, generator states
saved from an advanced torch.Generator, subset/weights given as text and as
.npy. The global generator is reseeded at random before every loader, to
show it does not matter (the sampler= forms draw _base_seed from it).
DistributedSampler's drop_last (--sampler-drop-last) is drawn apart from
DataLoader's (--drop-last), so DDP's usual pair (the sampler pads,
DataLoader drops) is among them. Some configurations run DataLoader with
a worker and persistent_workers=True (--persistent-workers): one iterator
for every epoch, so the base seed is drawn once, which changes the order
of epochs 1 and later of DataLoader(shuffle=True, generator=G) and of no
other form.

When build/batchfs has a mount subcommand that serves index/N/batch_K, a
second part mounts a fixture archive with the same options and compares the
index files for a subset of the configurations.

Every configuration but those naming a model (--torch-compat) passes
--torch-version with the version of the torch running the test, so the
same file checks each torch it is run with: Debian's 1.13 (make check
runs it with /usr/bin/python3) and the venvs of tools/scripts/venv.sh
(torch 2.13 in make check: tests/run.sh's FILE@torch-2.13.0). The orders
differ between versions only for WeightedRandomSampler drawing one sample
per epoch (here: num_samples=1, in every weighted group) and randperm of
n >= 214748364 (test_order_large_randperm.py).

Exit 0 = all match, 1 = a mismatch (printed with its command), 77 = skip.
"""
import os
import random
import shlex
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from torch.utils.data import (DataLoader, DistributedSampler,
                                  RandomSampler, SubsetRandomSampler,
                                  TensorDataset, WeightedRandomSampler)
except ImportError as e:  # pragma: no cover
    print(f"skip: torch/numpy not importable ({e})")
    sys.exit(77)

SRC = os.environ.get("BFS_SRC", os.getcwd())
BUILD = os.environ.get("BUILD", "build")
DUMP = os.path.join(SRC, BUILD, "tests", "bin", "order_dump")
TMP = os.environ.get("BFS_TEST_TMP") or tempfile.mkdtemp()
if not os.access(DUMP, os.X_OK):
    print(f"skip: {DUMP} not built")
    sys.exit(77)

SEEDS = [0, 1, 7, 42, 1234, 2**32 + 5, 2**40 + 123, 12345678901, 2**63 - 1]
PRIMES = [2, 3, 5, 7, 13, 31, 97, 257, 1009]
BATCHES = [1, 2, 3, 4, 5, 8, 16, 32, 64, 100, 128, 256]


def generator(cfg):
    """The sampler's generator: manual_seed(seed) or set_state(file)."""
    g = torch.Generator()
    if cfg.get("state"):
        with open(cfg["state"], "rb") as f:
            g.set_state(torch.frombuffer(bytearray(f.read()),
                                         dtype=torch.uint8))
    else:
        g.manual_seed(cfg["seed"])
    return g


def torch_batches(cfg):
    """Every epoch's batches from a real DataLoader, as text lines."""
    n, bs, dl = cfg["n"], cfg["bs"], cfg["drop_last"]
    ds = TensorDataset(torch.arange(n))
    torch.manual_seed(random.getrandbits(32))
    kind, sampler = cfg["kind"], None
    workers = dict(num_workers=1, persistent_workers=True) \
        if cfg.get("persistent") else {}
    if kind == "seq":
        loader = DataLoader(ds, batch_size=bs, drop_last=dl, **workers)
    elif kind == "shuffle":
        loader = DataLoader(ds, batch_size=bs, shuffle=True, drop_last=dl,
                            generator=generator(cfg), **workers)
    elif kind == "random":
        sampler = RandomSampler(ds, replacement=cfg["replacement"],
                                num_samples=cfg.get("num_samples"),
                                generator=generator(cfg))
    elif kind == "subset":
        sampler = SubsetRandomSampler(cfg["indices"],
                                      generator=generator(cfg))
    elif kind == "weighted":
        sampler = WeightedRandomSampler(cfg["weights"], cfg["num_samples"],
                                        replacement=True,
                                        generator=generator(cfg))
    elif kind == "dist":
        sampler = DistributedSampler(ds, num_replicas=cfg["world"],
                                     rank=cfg["rank"],
                                     shuffle=cfg["shuffle"],
                                     seed=cfg["seed"],
                                     drop_last=cfg["sampler_drop_last"])
    if sampler is not None:
        loader = DataLoader(ds, batch_size=bs, drop_last=dl, sampler=sampler,
                            **workers)
    out = []
    for e in range(cfg["epochs"]):
        if kind == "dist":
            sampler.set_epoch(e)
        out.append(f"epoch {e}")
        for (b,) in loader:
            out.append(" ".join(str(i) for i in b.tolist()))
    return out


def write_values(path_base, values, as_npy, dtype):
    if as_npy:
        path = path_base + ".npy"
        np.save(path, np.asarray(values, dtype=dtype))
    else:
        path = path_base + ".txt"
        with open(path, "w") as f:
            f.writelines(f"{v!r}\n" if isinstance(v, float) else f"{v}\n"
                         for v in values)
    return path


def dump_args(cfg):
    """order_dump / batchfs mount options for a configuration."""
    a = ["--batch-size", str(cfg["bs"]), "--seed", str(cfg["seed"])]
    kind = cfg["kind"]
    if cfg["drop_last"]:
        a.append("--drop-last")
    if cfg.get("sampler_drop_last"):
        a.append("--sampler-drop-last")
    if cfg.get("persistent"):
        a.append("--persistent-workers")
    if kind == "shuffle" or (kind == "dist" and cfg["shuffle"]):
        a.append("--shuffle")
    if kind == "random" and cfg["replacement"]:
        a.append("--replacement")
    if kind == "random" and cfg.get("num_samples") is not None:
        a.append("--shuffle")  # RandomSampler's num_samples needs it
    if cfg.get("num_samples") is not None:
        a += ["--num-samples", str(cfg["num_samples"])]
    if kind == "subset":
        a += ["--subset", cfg["indices_file"]]
    if kind == "weighted":
        a += ["--weights", cfg["weights_file"]]
    if kind == "dist":
        a += ["--world-size", str(cfg["world"]), "--rank", str(cfg["rank"])]
    if cfg.get("state"):
        a += ["--generator-state", cfg["state"]]
    if cfg.get("compat"):
        a += ["--torch-compat", cfg["compat"]]
    else:
        a += ["--torch-version", torch.__version__]
    return a


def make_state(rng, i):
    """A get_state() file of a generator advanced by a random draw."""
    g = torch.Generator().manual_seed(rng.choice(SEEDS))
    torch.randperm(rng.randrange(1, 3000), generator=g)
    if rng.random() < 0.5:
        torch.empty((), dtype=torch.int64).random_(generator=g)
    path = os.path.join(TMP, f"state{i}.bin")
    with open(path, "wb") as f:
        f.write(g.get_state().numpy().tobytes())
    return path


def configs():
    rng = random.Random(20240611)
    out = []

    def base(kind, n, **kw):
        c = dict(kind=kind, n=n, bs=rng.choice(BATCHES),
                 drop_last=rng.random() < 0.5, seed=rng.choice(SEEDS),
                 epochs=rng.randint(1, 4))
        if kind == "dist":
            c["sampler_drop_last"] = rng.random() < 0.5
        c.update(kw)
        out.append(c)
        return c

    def some_n():
        return rng.choice([1, 2, rng.choice(PRIMES), rng.randrange(1, 300),
                           rng.randrange(300, 3000)])

    # Hand-picked edge cases first.
    for dl in (False, True):
        for n in (1, 2, 3, 31):
            base("shuffle", n, bs=1, drop_last=dl, epochs=4)
            base("seq", n, bs=2, drop_last=dl)
        base("dist", 3, world=8, rank=5, shuffle=True, drop_last=dl,
             sampler_drop_last=dl)
        base("dist", 3, world=8, rank=0, shuffle=False, drop_last=dl,
             sampler_drop_last=dl)
        base("dist", 10, world=4, rank=3, bs=4, shuffle=True, drop_last=dl,
             sampler_drop_last=dl)
        # DDP's usual pair, and its mirror image
        base("dist", 10, world=4, rank=3, bs=2, shuffle=True, drop_last=dl,
             sampler_drop_last=not dl)
        base("dist", 37, world=8, rank=7, bs=4, shuffle=True, drop_last=dl,
             sampler_drop_last=not dl, epochs=3)
        base("random", 37, replacement=False, num_samples=100, drop_last=dl)
        base("random", 37, replacement=False, num_samples=74, drop_last=dl)
        base("random", 5, replacement=True, num_samples=1, drop_last=dl)
        base("shuffle", 1000, bs=32, drop_last=dl, epochs=4,
             compat="2.7")
    base("shuffle", 1000, bs=256, seed=2**32 + 42, epochs=4)
    base("shuffle", 1000, bs=256, seed=42, epochs=4)
    # Random mix over every sampler.
    for i in range(120):
        base("shuffle", some_n())
    for i in range(20):
        base("seq", some_n())
    for i in range(120):
        n = some_n()
        ns = rng.choice([None, 1, rng.randrange(1, 3 * n + 2), n, 2 * n])
        repl = rng.random() < 0.5
        if ns is None and not repl:
            ns = n
        base("random", n, replacement=repl, num_samples=ns)
    for i in range(60):
        n = some_n()
        k = rng.randrange(0, n + 1)
        idx = [rng.randrange(n) for _ in range(k)]
        c = base("subset", n, indices=idx)
        c["indices_file"] = write_values(os.path.join(TMP, f"sub{i}"), idx,
                                         i % 2 == 1, np.int64 if i % 4 == 1
                                         else np.int32)
    for i in range(60):
        n = min(some_n(), 2000)
        w = [0.0 if rng.random() < 0.2 else rng.random() * 10
             for _ in range(n)]
        if sum(w) == 0:
            w[-1] = 1.0
        as_npy = i % 2 == 1
        dt = np.float32 if i % 4 == 1 else np.float64
        if as_npy and dt == np.float32:
            w = [float(np.float32(x)) for x in w]
        ns = rng.choice([1, 2, rng.randrange(1, 700)])
        c = base("weighted", n, weights=w, num_samples=ns)
        c["weights_file"] = write_values(os.path.join(TMP, f"w{i}"), w,
                                         as_npy, dt)
    for i in range(150):
        n = some_n()
        world = rng.choice([1, 2, 3, 4, 8, 16])
        base("dist", n, world=world, rank=rng.randrange(world),
             shuffle=rng.random() < 0.7)
    # Continue from an exported generator state.
    for i in range(16):
        kind = ["shuffle", "random", "subset", "weighted"][i % 4]
        n = rng.randrange(1, 500)
        c = dict(state=make_state(rng, i))
        if kind == "random":
            c.update(replacement=i % 8 == 1, num_samples=rng.randrange(1, 900))
        if kind == "subset":
            c["indices"] = list(range(0, n, 2))
            c["indices_file"] = write_values(os.path.join(TMP, f"ssub{i}"),
                                             c["indices"], False, None)
        if kind == "weighted":
            c["weights"] = [float(j % 5) for j in range(n)]
            if sum(c["weights"]) == 0:
                c["weights"] = [1.0] * n
            c["num_samples"] = rng.randrange(2, 300)
            c["weights_file"] = write_values(os.path.join(TMP, f"sw{i}"),
                                             c["weights"], False, None)
        base(kind, n, **c)
    # Persistent workers: the shuffle form's epochs 1+ differ; the
    # others' do not (their base seed is the global generator's).
    for i in range(12):
        c = dict(persistent=True, epochs=rng.randint(2, 4))
        if i == 1:
            c.update(n=1, bs=1)
        if i == 2:
            c.update(compat="2.7")
        if i == 3:
            c.update(state=make_state(rng, 100 + i))
        base("shuffle", c.pop("n", some_n()), **c)
    for i in range(2):
        base("random", some_n(), persistent=True, epochs=3,
             replacement=i == 1, num_samples=rng.randrange(1, 100))
        base("dist", some_n(), world=2, rank=i, shuffle=True,
             persistent=True, epochs=3)
        base("seq", some_n(), persistent=True, epochs=2)
    base("subset", 50, indices=list(range(0, 50, 3)), persistent=True,
         indices_file=write_values(os.path.join(TMP, "psub"),
                                   list(range(0, 50, 3)), False, None),
         epochs=3)
    w = [float(j % 4) for j in range(40)]
    base("weighted", 40, weights=w, num_samples=30, persistent=True,
         weights_file=write_values(os.path.join(TMP, "pw"), w, False, None),
         epochs=3)
    return out


def mismatch(what, proc, got, want):
    """1 (and the first differing line printed) when got != want."""
    if proc.returncode == 0 and got == want:
        return 0
    where = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b),
                 min(len(got), len(want)))
    print(f"{what}\n  rc={proc.returncode} {proc.stderr.strip()}\n  line "
          f"{where}: got {got[where:where + 1]} want {want[where:where + 1]}")
    return 1


def mount_part(cfgs, per_kind=5):
    """Mount with the same options; index/N/batch_K (and the x field of
    epoch/N/batch_K, x = arange(n)) must equal torch's batches. Returns the
    number of mismatching configurations, or None when it cannot run."""
    batchfs = os.environ.get("BATCHFS") or os.path.join(SRC, BUILD, "batchfs")
    if not os.access(batchfs, os.X_OK):
        print("mount part skipped: no build/batchfs")
        return None
    os.environ["BATCHFS"] = batchfs
    import mountlib as ml
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        print("mount part skipped: /dev/fuse is not usable")
        return None
    chosen, seen = [], {}
    for cfg in cfgs:
        key = (cfg["kind"], bool(cfg.get("state")),
               bool(cfg.get("persistent")))
        if seen.get(key, 0) < per_kind:
            seen[key] = seen.get(key, 0) + 1
            chosen.append(cfg)
    archives, bad = {}, 0
    for cfg in chosen:
        n = cfg["n"]
        if n not in archives:
            archives[n] = os.path.join(TMP, f"arange{n}.pt")
            torch.save({"x": torch.arange(n)}, archives[n])
        want = torch_batches(cfg)
        opts = dump_args(cfg) + ["--epochs", str(cfg["epochs"])]
        p, mnt = ml.mount(archives[n], None, *opts, check=False)
        got = []
        if all(w.startswith("epoch ") for w in want):  # no batch: refused
            if p.returncode != 1 or "0 batches per epoch" not in p.stderr:
                print(f"MOUNT NOT REFUSED (n={n}, 0 batches per epoch): "
                      f"batchfs mount {shlex.join(opts)}: rc={p.returncode}")
                bad += 1
            continue
        if p.returncode == 0:
            for e in range(cfg["epochs"]):
                got.append(f"epoch {e}")
                names = [x for x in os.listdir(f"{mnt}/index/{e}")
                         if x.startswith("batch_")]
                for k in range(len(names)):
                    idx = ml.read_index(f"{mnt}/index/{e}/batch_{k}")
                    got.append(" ".join(map(str, idx)))
                    if k == len(names) // 2:
                        _, arrs = ml.read_batch(f"{mnt}/epoch/{e}/batch_{k}")
                        if arrs["x"].tolist() != idx:
                            got.append("epoch file differs from index")
            ml.umount(mnt)
        bad += mismatch(f"MOUNT MISMATCH (n={n}): batchfs mount "
                        f"{shlex.join(opts)}", p, got, want)
    print(f"order golden (mount): {len(chosen) - bad}/{len(chosen)} mounted "
          f"configurations serve torch's index/N/batch_K")
    return bad


def main():
    cfgs = configs()
    rng = random.Random(7)
    bad = 0
    for i, cfg in enumerate(cfgs):
        want = torch_batches(cfg)
        cmd = [DUMP, "--n", str(cfg["n"]), "--epochs", str(cfg["epochs"])] \
            + dump_args(cfg)
        p = subprocess.run(cmd, capture_output=True, text=True)
        got = p.stdout.splitlines()
        # Random access: one batch of a late epoch, computed cold.
        batches = [j for j, line in enumerate(want) if not
                   line.startswith("epoch")]
        if p.returncode == 0 and got == want and batches and i % 3 == 0:
            j = rng.choice(batches)
            e = sum(1 for line in want[:j] if line.startswith("epoch")) - 1
            k = j - want.index(f"epoch {e}") - 1
            cmd = cmd + ["--only", str(e), str(k)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            got, want = p.stdout.splitlines(), want[j:j + 1]
        bad += mismatch(f"MISMATCH config {i}: {shlex.join(cmd)}", p, got,
                        want)
    print(f"order golden: {len(cfgs) - bad}/{len(cfgs)} configurations "
          f"match torch {torch.__version__}")
    mount_bad = mount_part(cfgs)
    return 1 if bad or mount_bad else 0


if __name__ == "__main__":
    sys.exit(main())
