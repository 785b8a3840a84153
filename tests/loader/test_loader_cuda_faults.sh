#!/bin/bash
# The CUDA backend against the fake driver when things go wrong or the
# process does more (captures, failures, fork, other contexts).
set -u
fake="$BUILD/tests/fake"
prog="$BUILD/tests/loader/test_loader_cuda_faults"
if [ ! -x "$prog" ] || [ ! -f "$fake/libcuda.so.1" ]; then
	echo "skip: built without cuda.h (no CUDA backend to test)"
	exit 77
fi
LD_LIBRARY_PATH="$(cd "$fake" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	BATCHFS_LOADER_LIBCUDA= exec "$prog"
