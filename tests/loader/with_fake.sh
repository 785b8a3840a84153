#!/bin/bash
# Run build/tests/loader/NAME with the fake CUDA driver as libcuda.so.1
# (LD_LIBRARY_PATH, as a real driver would be found); skip (77) when the
# build has no CUDA backend. Usage: with_fake.sh NAME [ARG...]
set -u
fake="$BUILD/tests/fake"
prog="$BUILD/tests/loader/$1"
if [ ! -x "$prog" ] || [ ! -f "$fake/libcuda.so.1" ]; then
	echo "skip: built without cuda.h (no CUDA backend to test)"
	exit 77
fi
LD_LIBRARY_PATH="$(cd "$fake" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	BATCHFS_LOADER_LIBCUDA= exec "$prog" "${@:2}"
