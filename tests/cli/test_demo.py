#!/usr/bin/python3
"""make demo's script (tools/scripts/demo.sh, in a directory of its own)
checks the parity it claims and says which check ran:
- with torch, every batch of epoch 0 against DataLoader(ds,
  batch_size=256, shuffle=True, generator=torch.Generator().manual_seed(7))
  ("checked against torch ...");
- without torch (an import of torch that fails, as on a fresh machine) it
  still runs to the end and says DataLoader's order was not checked, and
  what was: each batch against the archive's rows its index file lists;
- both checks fail, naming the batch, when the mount is not what they
  check (a mount of another seed; of another archive);
- no mount is left behind."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
import mountlib as ml  # noqa: E402

import numpy as np  # noqa: E402

ml.require_fuse()
SRC = os.path.abspath(os.environ.get("BFS_SRC") or os.path.join(HERE, "..",
                                                                 ".."))
TMP = ml.TMP
PY = os.environ.get("PYTHON", "/usr/bin/python3")
CHECK = os.path.join(SRC, "tools", "scripts", "demo_check.py")
CALL = ("DataLoader(ds, batch_size=256, shuffle=True, "
        "generator=torch.Generator().manual_seed(7))")
NO_TORCH = os.path.join(TMP, "no-torch")     # on PYTHONPATH: torch fails


def hide_torch():
    os.makedirs(os.path.join(NO_TORCH, "torch"), exist_ok=True)
    with open(os.path.join(NO_TORCH, "torch", "__init__.py"), "w") as f:
        f.write("raise ImportError('torch is hidden by test_demo.py')\n")


def env(torch):
    e = dict(os.environ, BATCHFS=ml.BATCHFS)
    if not torch:
        e["PYTHONPATH"] = NO_TORCH
    return e


def demo(torch):
    """Run the demo in its own directory: its output (exit 0 asserted)."""
    d = os.path.join(TMP, "demo-%s" % ("torch" if torch else "no-torch"))
    p = subprocess.run(["tools/scripts/demo.sh"], cwd=SRC, text=True,
                       capture_output=True,
                       env=dict(env(torch), BUILD=ml.BUILD_DIR, DEMO=d))
    out = p.stdout + p.stderr
    assert p.returncode == 0, "demo failed (%d):\n%s" % (p.returncode,
                                                         out[-3000:])
    assert not ml.is_mounted(os.path.join(d, "mnt")), "the demo left a mount"
    assert "demo done" in out, out[-2000:]
    return out, os.path.join(d, "demo.pt")


def check(mnt, archive, torch):
    p = subprocess.run([PY, CHECK, mnt, archive, "256", "7"], text=True,
                       capture_output=True, env=env(torch))
    return p.returncode, p.stdout + p.stderr


def torch_importable():
    return subprocess.run([PY, "-c", "import torch"],
                          capture_output=True).returncode == 0


def main():
    hide_torch()
    failures = []
    has_torch = torch_importable()
    if has_torch:
        out, archive = demo(torch=True)
        if "checked against torch" not in out or \
                "all 40 batches of epoch 0 equal %s's" % CALL not in out:
            failures.append("with torch, the demo did not say it checked "
                            "epoch 0 against %s:\n%s" % (CALL, out[-1500:]))
    else:
        print("torch is not installed here: the torch check is not run")
    out, archive = demo(torch=False)
    for words in ["torch is not installed, so DataLoader's order was not "
                  "checked", "each of the 40 batches of epoch 0 holds the "
                  "archive's samples its index file lists",
                  "install python3-torch"]:
        if words not in out:
            failures.append("without torch, the demo did not say %r:\n%s"
                            % (words, out[-1500:]))

    # The checks fail on a mount that is not what they check.
    if has_torch:
        _, mnt = ml.mount(archive, os.path.join(TMP, "seed8"), "--batch-size",
                          256, "--shuffle", "--seed", 8)
        rc, out = check(mnt, archive, torch=True)
        if rc != 1 or "demo check FAILED: batch 0" not in out:
            failures.append("the torch check passed a mount of seed 8 "
                            "(%d): %s" % (rc, out))
        ml.umount(mnt)
    g = np.random.default_rng(1)
    np.save(os.path.join(TMP, "images.npy"),
            g.integers(0, 256, (10000, 3, 32, 32), dtype=np.uint8))
    np.save(os.path.join(TMP, "labels.npy"), g.integers(0, 10, 10000))
    other = os.path.join(TMP, "other.pt")
    p = subprocess.run([ml.BATCHFS, "pack", "-o", other,
                        "images=" + os.path.join(TMP, "images.npy"),
                        "labels=" + os.path.join(TMP, "labels.npy")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    _, mnt = ml.mount(other, os.path.join(TMP, "other"), "--batch-size",
                      256, "--shuffle", "--seed", 7)
    rc, out = check(mnt, archive, torch=False)
    if rc != 1 or "demo check FAILED: batch 0" not in out:
        failures.append("the check without torch passed a mount of another "
                        "archive (%d): %s" % (rc, out))
    ml.umount(mnt)
    return ml.finish(failures)


sys.exit(main())
