#!/bin/bash
# make demo: pack a demo dataset, mount it as batches, look around, read a
# batch from Python with numpy only, check epoch 0 against torch's
# DataLoader (tools/scripts/demo_check.py: without torch, against the
# archive, and it says so), unmount. Run from the repository root after
# `make` (the demo target does both). BUILD selects the build folder, DEMO
# the demo's own ($BUILD/demo: the archive and the mountpoint).
set -eu
BUILD=${BUILD:-build}
BFS="$BUILD/batchfs"
DEMO=${DEMO:-$BUILD/demo}
MNT="$DEMO/mnt"
PY=/usr/bin/python3

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

mkdir -p "$MNT"
# A mount left by an interrupted demo would make the next mount fail.
if grep -q " $(realpath "$MNT") fuse" /proc/mounts; then
	fusermount3 -uz "$MNT" || true
fi
trap '"$BFS" umount "$MNT" >/dev/null 2>&1 || fusermount3 -uz "$MNT" 2>/dev/null || true' EXIT

step batchfs pack --demo 10000 -o "$DEMO/demo.pt"
"$BFS" pack --demo 10000 -o "$DEMO/demo.pt"
step batchfs mount "$DEMO/demo.pt" "$MNT" --batch-size 256 --shuffle --seed 7
"$BFS" mount "$DEMO/demo.pt" "$MNT" --batch-size 256 --shuffle --seed 7
step ls "$MNT"
ls "$MNT"
step "ls $MNT/epoch/0 | head -5"
ls "$MNT/epoch/0" | head -5
step "ls -l $MNT/epoch/0 | head -4"
ls -l "$MNT/epoch/0" | head -4
step head -5 "$MNT/index/0/batch_0"
head -5 "$MNT/index/0/batch_0"
step cat "$MNT/dataset.json"
cat "$MNT/dataset.json"
step "python3: read epoch/0/batch_0 with json + numpy only"
"$PY" - "$MNT" <<'PYEOF'
import json, sys
import numpy as np
NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
      "I32": "<i4", "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4",
      "U16": "<u2", "U8": "u1", "BOOL": "?", "C64": "<c8",
      "F8_E4M3": "u1", "F8_E5M2": "u1"}
mnt = sys.argv[1]
buf = open(mnt + "/epoch/0/batch_0", "rb").read()
n = int.from_bytes(buf[:8], "little")
head = json.loads(buf[8:8 + n])
print("metadata:", head.pop("__metadata__"))
for name, t in head.items():
    a = np.frombuffer(buf, NP[t["dtype"]], offset=8 + n + t["data_offsets"][0],
                      count=int(np.prod(t["shape"]))).reshape(t["shape"])
    print("%-8s %-5s shape=%-18s first values: %s" % (
        name, t["dtype"], list(a.shape), a.reshape(-1)[:6].tolist()))
idx = [int(x) for x in open(mnt + "/index/0/batch_0").read().split()]
print("sample indices of batch 0:", idx[:8], "...")
PYEOF
step "cat epoch 0 > /dev/null  (40 batches)"
cat "$MNT"/epoch/0/batch_* >/dev/null
step cat "$MNT/stats"
cat "$MNT/stats"
step python3 tools/scripts/demo_check.py "$MNT" "$DEMO/demo.pt" 256 7
check=0
"$PY" tools/scripts/demo_check.py "$MNT" "$DEMO/demo.pt" 256 7 || check=$?
step batchfs umount "$MNT"
"$BFS" umount "$MNT"
trap - EXIT
[ "$check" -eq 0 ] || exit "$check"
echo "demo done"
