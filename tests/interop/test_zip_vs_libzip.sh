#!/bin/bash
# Our central-directory parser lists every torch-written archive exactly as
# libzip does (name, size, CRC, method; bytes of small records compared
# through zip_fread), including CRC-0 copies and a > 4 GiB ZIP64 archive
# laid out as torch writes it (sparse, so it costs no disk); and fs/pickle
# finds in each fixture the tensors torch.load returns.
set -eu
: "${BFS_TEST_TMP:?}" "${BUILD:?}" "${PYTHON:?}"
cd "${BFS_SRC:-.}"
bin="$BUILD/tests/bin"
for b in zipdiff zipcheck; do
	[ -x "$bin/$b" ] || { echo "FAIL: $bin/$b not built"; exit 1; }
done
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
	echo "skip: $PYTHON has no torch"; exit 77
fi
fx="$BFS_TEST_TMP/fixtures"
"$PYTHON" tests/lib/fixtures.py "$fx" >/dev/null
mapfile -t archives < <(find "$fx" -name '*.pt' | sort)
[ "${#archives[@]}" -ge 10 ] || { echo "FAIL: only ${#archives[@]} fixtures"; exit 1; }

# 1. Every fixture: same listing as libzip, and the pickle parses.
"$bin/zipdiff" "${archives[@]}"
"$bin/zipcheck" "${archives[@]}" >/dev/null

# 1b. Every torch-loadable fixture: the tensors fs/pickle finds (name,
#     dtype, storage offset, sizes, strides) are the ones torch.load returns.
for f in "${archives[@]}"; do
	case "$f" in */special/*) continue ;; esac
	"$bin/zipcheck" "$f" | awk '{$3 = ""; print}' >"$BFS_TEST_TMP/ours.txt"
	"$PYTHON" - "$f" >"$BFS_TEST_TMP/torch.txt" <<'PY'
import sys, torch
obj = torch.load(sys.argv[1])
if isinstance(obj, torch.Tensor):
    items = [("0", obj)]
elif isinstance(obj, dict):
    items = list(obj.items())
else:
    items = [(str(i), t) for i, t in enumerate(obj)]
for name, t in items:
    dims = lambda v: "[" + ",".join(str(x) for x in v) + "]"
    print(name, str(t.dtype)[6:], "", t.storage_offset(), dims(t.shape),
          dims(t.stride()))
PY
	if ! diff -u "$BFS_TEST_TMP/torch.txt" "$BFS_TEST_TMP/ours.txt"; then
		echo "FAIL: $f: fs/pickle disagrees with torch.load"; exit 1
	fi
done

# 2. CRC-0 copies (torch >= 2.6 compute_crc32=False): we accept them, libzip
#    reports the same zero CRCs.
"$PYTHON" - "$fx/dict.pt" "$BFS_TEST_TMP/crc0.pt" <<'PY'
import struct, sys
import corrupt_zip
buf = bytearray(open(sys.argv[1], "rb").read())
for r in corrupt_zip.records(bytes(buf)):
    struct.pack_into("<I", buf, r.cd_off + 16, 0)
    if r.size:  # the data descriptor's CRC too
        struct.pack_into("<I", buf, r.data_off + r.size + 4, 0)
open(sys.argv[2], "wb").write(buf)
PY
"$bin/zipdiff" "$BFS_TEST_TMP/crc0.pt" | tee "$BFS_TEST_TMP/crc0.out"
grep -q "SAME .*(0 compared" "$BFS_TEST_TMP/crc0.out"
"$bin/zipcheck" "$BFS_TEST_TMP/crc0.pt" >/dev/null

# 3. > 4 GiB archive (ZIP64 sizes, offsets and torch's LFH field).
avail_kb=$(df -Pk "$BFS_TEST_TMP" | awk 'NR == 2 {print $4}')
if [ "$avail_kb" -lt $((1024 * 1024)) ]; then
	echo "big archive case skipped: less than 1 GiB free in $BFS_TEST_TMP"
else
	big="$BFS_TEST_TMP/big.pt"
	"$PYTHON" tests/lib/corrupt_zip.py big "$big" >/dev/null
	size=$(stat -c %s "$big")
	[ "$size" -gt 4294967296 ] || { echo "FAIL: big.pt is $size bytes"; exit 1; }
	"$bin/zipdiff" "$big"
	"$bin/zipcheck" "$big" | tee "$BFS_TEST_TMP/big.out"
	grep -qx "big uint8 1 0 \[4294967360\] \[1\]" "$BFS_TEST_TMP/big.out"
	grep -qx "tail int64 2 0 \[3\] \[1\]" "$BFS_TEST_TMP/big.out"
	rm -f "$big"
fi
echo "zip listing matches libzip on ${#archives[@]} fixtures + CRC-0 + big"
