"""randperm on both sides of its large-n branch: torch 2.7 and later
shuffle n >= 214,748,364 (UINT32_MAX / 20) inside-out with 64-bit words,
earlier releases with the forward Fisher-Yates of smaller n. fs/order
(through build/tests/bin/order_dump --sha256) must give, for each model,
the permutation that torch itself gave: the sha256 of
torch.randperm(n, generator=torch.Generator().manual_seed(7)) as
little-endian int64, taken once from real torch (the permutations are
1.7 GB each and take torch minutes, so the digests are kept here):

    torch 1.13.0a0 (Debian)  n = 214748363: 6e613d44...  n = 214748364: 48492b65...
    torch 2.13.0+cpu (PyPI)  n = 214748363: 6e613d44...  n = 214748364: bc1a4563...
    torch 2.14.1 (PyPI)      the same as 2.13

RandomSampler(ds, num_samples=n, generator=G) draws randperm(n) first,
so epoch 0 of `--shuffle --num-samples n --seed 7` is that permutation.
Below the branch every model gives the same permutation; above it the
models 1.13 and 2.1 give 1.13's and 2.7 gives 2.13's, whether chosen with
--torch-compat or by --torch-version. Needs ~1 GB of memory and a minute.

Exit 0 = all match, 1 = a mismatch, 77 = skip (order_dump not built).
"""
import os
import subprocess
import sys

SRC = os.environ.get("BFS_SRC", os.getcwd())
DUMP = os.path.join(SRC, os.environ.get("BUILD", "build"), "tests", "bin",
                    "order_dump")
if not os.access(DUMP, os.X_OK):
    print("skip: %s not built" % DUMP)
    sys.exit(77)

SMALL, LARGE = 214748363, 214748364
FISHER_YATES_LARGE = \
    "48492b656821db07330872d6c544c6658c94a06371d917135d95613d5ef003f4"
INSIDE_OUT_LARGE = \
    "bc1a456324f5a859ee4e9c06495dd01950811344e384db27ab00e6c548d83938"
BELOW = "6e613d44146caef653b2ca4dc0584d5f11fc2476ad738e39e6d141e5365a52bd"

CASES = [
    (SMALL, ["--torch-version", "2.13.0"], BELOW),
    (LARGE, ["--torch-version", "1.13.1"], FISHER_YATES_LARGE),
    (LARGE, ["--torch-compat", "2.7"], INSIDE_OUT_LARGE),
]

bad = 0
for n, opts, want in CASES:
    cmd = [DUMP, "--n", str(n), "--shuffle", "--num-samples", str(n),
           "--seed", "7", "--batch-size", str(1 << 20), "--sha256"] + opts
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    got = p.stdout.split()
    if p.returncode != 0 or got != ["epoch", "0", want]:
        print("MISMATCH: %s\n  rc=%d %s\n  got %s\n  want %s"
              % (" ".join(cmd), p.returncode, p.stderr.strip(), got, want))
        bad += 1
    else:
        print("ok: n=%d %s: %s..." % (n, " ".join(opts), want[:16]))
sys.exit(1 if bad else 0)
