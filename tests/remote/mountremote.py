"""Helpers for the tests that mount remote sources (not a test itself):
datasets written as every kind batchfs reads, mounts of remote and local
sources side by side, every batch of some epochs compared, every wait
bounded (mountlib.bounded)."""
import errno
import json
import os
import subprocess

import mountlib as ml
import servers  # noqa: F401
from faultproxy import FaultProxy  # noqa: F401

import numpy as np

TMP = ml.TMP
_n = 0


def env_without_aws(**extra):
    """The environment without the machine's AWS settings, HOME a
    directory of the test's own, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = os.path.join(TMP, "home")
    os.makedirs(env["HOME"], exist_ok=True)
    env.update(extra)
    return env


def mount(sources, *opts, cache=None, env=None, check=True, mnt=None):
    """batchfs mount SOURCES with opts (a cache directory of its own
    unless 'cache' names one), in 'env' (default: env_without_aws());
    returns (CompletedProcess, mountpoint)."""
    global _n
    _n += 1
    if isinstance(sources, str):
        sources = [sources]
    mnt = mnt or os.path.join(TMP, "rmnt%d" % _n)
    os.makedirs(mnt, exist_ok=True)
    cache = cache or os.path.join(TMP, "cache%d" % _n)
    p = subprocess.run([ml.BATCHFS, "mount", "--cache-dir", cache,
                        *map(str, opts), *sources, mnt],
                       capture_output=True, text=True,
                       env=env if env is not None else env_without_aws(),
                       timeout=300)
    if p.returncode == 0:
        ml._mounts.append(mnt)
    if check and p.returncode:
        raise AssertionError("mount failed (%d): %s" % (p.returncode,
                                                        p.stderr))
    return p, mnt


def info(mnt):
    with open(os.path.join(mnt, "dataset.json")) as f:
        return json.load(f)


def batch_paths(mnt, epochs):
    """Every batch file of epochs 0 .. epochs-1 (of every rank served)."""
    d = info(mnt)
    ranks = [f"rank/{r}/" for r in d["ranks"]] if d["rank_dirs"] else [""]
    return [f"{r}epoch/{e}/batch_{k}" for r in ranks for e in range(epochs)
            for k in range(d["batches_per_epoch"])]


def outcome(path):
    """A batch file's bytes, or "EIO" when reading it fails so."""
    try:
        return ml.read_file(path)
    except OSError as ex:
        if ex.errno == errno.EIO:
            return "EIO"
        raise


def read_all(mnt, paths, timeout=ml.LIVENESS_S * 4):
    """{path: bytes or "EIO"} of every path under mnt, bounded."""
    out = {}

    def run():
        for p in paths:
            out[p] = outcome(os.path.join(mnt, p))
    errs = ml.bounded(mnt, [run], timeout)
    if errs[0]:
        raise errs[0]
    return out


def same_batches(remote, local, epochs):
    """The paths whose bytes differ between two mounts (EIO counts as a
    difference), over 'epochs' epochs."""
    paths = batch_paths(local, epochs)
    a, b = read_all(remote, paths), read_all(local, paths)
    return [p for p in paths if a[p] != b[p]]


def unmount(*mnts):
    for m in mnts:
        ml.umount(m)


# ---- datasets of every kind --------------------------------------------

def arrays(n, row, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.integers(0, 256, (n, row), dtype=np.uint8),
            "y": rng.integers(0, 1 << 40, n, dtype=np.int64)}


def ragged(n, seed):
    """A ragged field tok (values [total, 3] int32, offsets) and y."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 40, n)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    vals = rng.integers(-1000, 1000, (int(offs[-1]), 3), dtype=np.int32)
    return {"tok.values": vals, "tok.offsets": offs,
            "y": rng.integers(0, 10, n, dtype=np.int64)}


def write(kind, path, arrs):
    """arrs as a source of 'kind' at path (for "npy": a directory path,
    one NAME.npy per array; returns the list of files)."""
    import torch
    if kind == "torch":
        torch.save({k: torch.from_numpy(np.ascontiguousarray(v))
                    for k, v in arrs.items()}, path)
    elif kind == "npz":
        with open(path, "wb") as f:
            np.savez(f, **arrs)
    elif kind == "safetensors":
        ml.write_safetensors(path, arrs)
    elif kind == "npy":
        os.makedirs(path, exist_ok=True)
        files = []
        for k, v in arrs.items():
            files.append(os.path.join(path, k + ".npy"))
            np.save(files[-1], v)
        return files
    return [path]
