#!/bin/bash
# The fake CUDA driver's model (streams, events, waits, failures, capture,
# contexts) against its own test, before any loader test relies on it.
set -u
fake="$BUILD/tests/fake"
prog="$BUILD/tests/loader/test_fake_libcuda"
if [ ! -x "$prog" ] || [ ! -f "$fake/libcuda.so.1" ]; then
	echo "skip: built without cuda.h (no fake driver)"
	exit 77
fi
LD_LIBRARY_PATH="$(cd "$fake" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	exec "$prog"
