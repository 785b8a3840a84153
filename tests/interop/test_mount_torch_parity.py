#!/usr/bin/python3
"""Every batch of a mount is bit-identical to the batch PyTorch's DataLoader
yields for the same options: several archives (dtypes incl. bf16, bool,
complex64, multi-dim shapes, n not divisible by B), seeds, drop_last, with
and without --shuffle, 3 epochs each. The reference is
DataLoader(dict dataset, batch_size=B, shuffle=S, drop_last=D,
generator=torch.Generator().manual_seed(seed)) with default_collate of dict
samples (stack per field), iterated once per epoch (a fresh iterator each
epoch, as a training loop does). The configurations take the serve modes
(passthrough where available, push, cache, direct) in turn."""
import os

import mountlib as ml

import torch
from torch.utils.data import DataLoader

ml.require_fuse()
TMP = ml.TMP


class DictDataset(torch.utils.data.Dataset):
    def __init__(self, d):
        self.d = d
        self.n = len(next(iter(d.values())))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.d.items()}


def archives():
    g = torch.Generator().manual_seed(42)
    a = {"img": torch.randint(0, 256, (103, 3, 5, 4), generator=g).to(torch.uint8),
         "label": torch.randint(0, 10, (103,), generator=g),
         "emb": torch.randn((103, 7), generator=g).to(torch.bfloat16),
         "mask": torch.randint(0, 2, (103, 2, 2), generator=g).bool()}
    b = {"x": torch.randn((50, 4), generator=g, dtype=torch.float64),
         "h": torch.randn((50,), generator=g).to(torch.float16),
         "z": torch.complex(torch.randn(50, 3, generator=g),
                            torch.randn(50, 3, generator=g)),
         "i8": torch.randint(-128, 128, (50, 1), generator=g).to(torch.int8),
         "i16": torch.randint(-999, 999, (50,), generator=g).to(torch.int16),
         "i32": torch.randint(-99999, 99999, (50, 2), generator=g).to(torch.int32)}
    c = {"only": torch.arange(17, dtype=torch.float32).reshape(17, 1) * 0.5}
    out = []
    for name, d in [("a", a), ("b", b), ("c", c)]:
        path = os.path.join(TMP, name + ".pt")
        torch.save(d, path)
        out.append((path, d))
    return out


def check(path, d, bs, shuffle, seed, drop_last, epochs=3):
    # every serve mode in turn: each serves bytes identical to DataLoader
    opts = ["--batch-size", bs, "--epochs", epochs, "--serve", ml.next_mode()]
    if shuffle:
        opts += ["--shuffle", "--seed", seed]
    if drop_last:
        opts += ["--drop-last"]
    _, mnt = ml.mount(path, None, *opts)
    loader = DataLoader(DictDataset(d), batch_size=bs, shuffle=shuffle,
                        drop_last=drop_last,
                        generator=torch.Generator().manual_seed(seed))
    assert len(os.listdir(mnt + "/epoch/0")) == len(loader)
    for e in range(epochs):
        k = -1
        for k, ref in enumerate(loader):
            _, got = ml.read_batch("%s/epoch/%d/batch_%d" % (mnt, e, k))
            assert set(got) == set(ref), (set(got), set(ref))
            for name, t in ref.items():
                want = ml.torch_np(t)
                assert got[name].shape == want.shape, (name, got[name].shape)
                assert got[name].tobytes() == want.tobytes(), \
                    (path, bs, shuffle, seed, drop_last, e, k, name, opts)
        assert k + 1 == len(loader)
    assert ml.umount(mnt).returncode == 0


def main():
    n_checked = 0
    for path, d in archives():
        n = len(next(iter(d.values())))
        for bs in sorted({1, 8, n // 3 + 1, n + 1} - {0}):
            for drop_last in (False, True):
                if drop_last and bs > n:
                    continue
                check(path, d, bs, False, 0, drop_last)
                n_checked += 1
                for seed in (0, 7, 2**32 + 5):
                    if bs == 1 and seed != 7:
                        continue
                    check(path, d, bs, True, seed, drop_last)
                    n_checked += 1
    print("ok: %d configurations x 3 epochs" % n_checked)


main()
