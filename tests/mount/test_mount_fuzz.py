"""Random operations on a live mount for 60 seconds, split over the serve
modes (ml.serve_modes()), 4 readers each (2 processes x 2 threads), checked
against a model of the namespace by tests/mount/fuzz_mount.py (which
`make soak` runs for SOAK_SECONDS with 8 readers): no unexpected answer
(every errno is the one the model expects), no wrong byte, the daemon
alive, no crash line in its log, a clean unmount. FUZZ_SECONDS overrides
the 60 s."""
import json
import os
import sys

import mountlib as ml
import fuzz_mount


def main():
    ml.require_fuse()
    try:
        import torch  # noqa: F401
    except ImportError:
        ml.skip("torch is not installed")
    total = float(os.environ.get("FUZZ_SECONDS", 60))
    bad = []
    for i, mode in enumerate(ml.serve_modes()):
        rep = fuzz_mount.run(mode, total / len(ml.serve_modes()), readers=4,
                             procs=2, seed=i + 1,
                             work=os.path.join(ml.TMP, "fuzz-" + mode))
        print(json.dumps(rep, sort_keys=True))
        print("%s: %d operations (%.0f/s), errors %s, wrong bytes %d, "
              "daemon %s -> %s" % (mode, rep["operations"], rep["ops_per_s"],
                                    rep["errors"], rep["wrong"],
                                    rep["daemon_start"], rep["daemon_end"]))
        if not fuzz_mount.ok(rep):
            bad.append(mode)
    if bad:
        print("FAIL in modes: " + ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
