#!/bin/bash
# Real GPU: the loader's CUDA mode (gpu_loader_check): the files' exact
# bytes in device memory, a slow consumer cloning each batch on its stream,
# on the legacy stream and on a side stream with 2 slots (clones compared
# with the files at the end), refused misuse, one pinning across epochs,
# a global-mode graph capture in another thread. The same program runs
# against the fake driver in tests/loader/test_gpu_check_fake.sh. Prints
# the copy thread's CPU time. Skips (77) without driver/GPU.
set -u
prog="$BUILD/tests/loader/gpu_loader_check"
if [ ! -x "$prog" ]; then
	echo "skip: built without cuda.h (no CUDA backend)"
	exit 77
fi
exec "$prog" "$BFS_TEST_TMP"
