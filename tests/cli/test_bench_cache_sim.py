#!/usr/bin/python3
"""build/bench/cache_sim, the remote bench part's bound on the cache's
hits: on sequences worked by hand, the hits of evicting by next use
(Belady), of LRU, and of next use known only K accesses ahead (K = 0 is
LRU, K past the end is Belady); bad input is refused."""
import os
import subprocess
import sys

SRC = os.path.abspath(os.environ.get("BFS_SRC") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("BUILD") or "build"
SIM = os.path.join(SRC, BUILD, "bench", "cache_sim") \
    if not os.path.isabs(BUILD) else os.path.join(BUILD, "bench", "cache_sim")


def sim(capacity, universe, seq, *horizons):
    p = subprocess.run([SIM, str(capacity), str(universe)] +
                       [str(k) for k in horizons],
                       input="".join("%d\n" % c for c in seq),
                       capture_output=True, text=True, timeout=60)
    if p.returncode:
        return p.returncode, p.stderr
    return 0, dict((k, int(v)) for k, v in
                   (kv.split("=") for kv in p.stdout.split()))


def main():
    if not os.access(SIM, os.X_OK):
        print("skip: %s is not built (make check-build)" % SIM)
        sys.exit(77)
    # The textbook string, 3 frames: Belady 9 misses, LRU 12 (of 20);
    # next use known 3 accesses ahead is enough here to match Belady.
    seq = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1]
    rc, got = sim(3, 8, seq, 0, 3, 100)
    assert rc == 0, got
    assert got == {"accesses": 20, "distinct": 6, "next_use": 11, "lru": 8,
                   "horizon_0": 8, "horizon_3": 11, "horizon_100": 11}, got
    # A cycle one longer than the cache: LRU never hits; Belady keeps
    # one chunk of the two each time: 1 2 3 | 1 (hit) 2 (miss) 3 (hit).
    # Known 1 ahead: at 3, chunk 1 (next used at once) is known, 2 is
    # not and goes; at 2, 3 is known, 1 (never again) goes: Belady's.
    rc, got = sim(2, 4, [1, 2, 3, 1, 2, 3], 0, 1, 20)
    assert rc == 0, got
    assert (got["next_use"], got["lru"], got["horizon_0"], got["horizon_1"],
            got["horizon_20"]) == (2, 0, 0, 2, 2), got
    # Everything fits: every access after the first of a chunk hits.
    rc, got = sim(4, 4, [0, 1, 0, 1, 2, 3, 3], 2)
    assert rc == 0, got
    assert (got["distinct"], got["next_use"], got["lru"],
            got["horizon_2"]) == (4, 3, 3, 3), got
    # Nothing read: nothing hit.
    rc, got = sim(1, 1, [])
    assert rc == 0 and got["accesses"] == 0 and got["next_use"] == 0, got
    # A chunk past the universe, a zero capacity: refused.
    rc, err = sim(2, 4, [1, 4])
    assert rc == 1 and "not below UNIVERSE" in err, (rc, err)
    rc, err = sim(0, 4, [1])
    assert rc == 2 and "must be > 0" in err, (rc, err)
    print("ok")


main()
