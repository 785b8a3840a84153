#!/bin/bash
# libbatchfs_loader.so exports exactly the functions that
# loader/batchfs_loader.h declares with BFS_LOADER_API (built with
# -fvisibility=hidden), and links neither libcuda nor libcudart.
set -eu
so="$BUILD/libbatchfs_loader.so"
hdr="$BFS_SRC/loader/batchfs_loader.h"
[ -f "$so" ] || { echo "FAIL: $so not built"; exit 1; }
want=$(tr '\n' ' ' <"$hdr" | grep -o 'BFS_LOADER_API[^(]*(' |
	grep -o 'bfs_loader_[a-z_]*' | sort -u)
have=$(nm -D --defined-only "$so" | awk '$2 == "T" || $2 == "D" || $2 == "B" || $2 == "W" || $2 == "V" || $2 == "i" {print $3}' | sort -u)
all=$(nm -D --defined-only "$so" | awk '{print $3}' | sort -u)
echo "documented: $(echo $want)"
echo "exported:   $(echo $all)"
[ "$(echo $want | wc -w)" -ge 9 ] || { echo "FAIL: header parse found too few"; exit 1; }
if [ "$want" != "$all" ]; then
	echo "FAIL: exported symbols differ from the documented API"
	diff <(echo "$want") <(echo "$all") || true
	exit 1
fi
[ "$want" = "$have" ] || { echo "FAIL: symbol kinds"; exit 1; }
if readelf -d "$so" | grep NEEDED | grep -E 'libcuda|libcudart'; then
	echo "FAIL: links the CUDA driver or runtime"
	exit 1
fi
echo "ok: $(echo $want | wc -w) symbols, no CUDA link"
