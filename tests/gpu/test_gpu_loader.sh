#!/bin/bash
# Real GPU: the loader's CUDA mode puts the files' exact bytes in device
# memory (copied back with cuMemcpyDtoH). Skips (77) without driver/GPU.
set -u
prog="$BUILD/tests/loader/gpu_loader_check"
if [ ! -x "$prog" ]; then
	echo "skip: built without cuda.h (no CUDA backend)"
	exit 77
fi
exec "$prog" "$BFS_TEST_TMP"
