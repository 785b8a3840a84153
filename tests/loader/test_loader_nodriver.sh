#!/bin/bash
# Without a usable CUDA driver, AUTO falls back to CPU mode with one log
# line saying why, and mode CUDA fails cleanly (-ENOSYS / -ENODEV):
#  1. no libcuda.so.1 at all (BATCHFS_LOADER_LIBCUDA points nowhere);
#  2. the toolkit's stub libcuda.so linked as libcuda.so.1 (cuInit -> 34).
set -u
probe="$BUILD/tests/loader/loader_probe"
fail() { echo "FAIL: $*"; exit 1; }
run() { # name env... -- mode
	local name=$1 mode=$2; shift 2
	mkdir -p "$BFS_TEST_TMP/$name-$mode"
	env "$@" "$probe" "$mode" "$BFS_TEST_TMP/$name-$mode" \
		>"$BFS_TEST_TMP/out" 2>"$BFS_TEST_TMP/err" || fail "$name $mode crashed"
	out=$(cat "$BFS_TEST_TMP/out") err=$(cat "$BFS_TEST_TMP/err")
	echo "$name/$mode: $out | $err"
}

run none auto BATCHFS_LOADER_LIBCUDA=/nonexistent/libcuda.so.1
[ "$out" = "mode=cpu rc=0 read=ok" ] || fail "no driver, auto: $out"
[ "$(echo "$err" | grep -c .)" = 1 ] || fail "want one log line: $err"
echo "$err" | grep -q '^batchfs\[loader\]: CPU mode: CUDA unavailable: no CUDA driver' ||
	fail "log line: $err"
run none cuda BATCHFS_LOADER_LIBCUDA=/nonexistent/libcuda.so.1
[ "$out" = "mode=none rc=-38" ] || fail "no driver, cuda: $out"   # -ENOSYS
run none cpu BATCHFS_LOADER_LIBCUDA=/nonexistent/libcuda.so.1
[ "$out" = "mode=cpu rc=0 read=ok" ] || fail "cpu: $out"
[ -z "$err" ] || fail "cpu mode logged: $err"

stub="${CUDA_HOME:-/usr/local/cuda}/lib64/stubs/libcuda.so"
if [ ! -f "$stub" ]; then
	echo "no CUDA toolkit stub ($stub): stub part skipped"
	exit 0
fi
mkdir -p "$BFS_TEST_TMP/stub"
ln -sf "$stub" "$BFS_TEST_TMP/stub/libcuda.so.1"
run stub auto LD_LIBRARY_PATH="$BFS_TEST_TMP/stub" BATCHFS_LOADER_LIBCUDA=
[ "$out" = "mode=cpu rc=0 read=ok" ] || fail "stub, auto: $out"
echo "$err" | grep -q 'CPU mode: CUDA unavailable: cuInit failed: .*(34)' ||
	fail "stub log line: $err"
run stub cuda LD_LIBRARY_PATH="$BFS_TEST_TMP/stub" BATCHFS_LOADER_LIBCUDA=
[ "$out" = "mode=none rc=-19" ] || fail "stub, cuda: $out"   # -ENODEV
echo "ok"
