#!/bin/bash
# bench_loader's GPU part (P, Pp, Rf, E, T_c with the PTX spin kernel, step)
# runs to the end against the fake driver build/tests/fake/libcuda.so.1,
# prints every metric with a number, copies sampled batches back with
# cuMemcpyDtoH and finds the files' bytes there, and leaves no driver object
# behind and no misuse. A fake that corrupts copies must make it fail. The
# spin kernel's PTX must assemble with ptxas when the toolkit has one.
# No timing assertions: the fake's rates mean nothing.
set -u
fake="$BUILD/tests/fake"
prog="$BUILD/bench/bench_loader"
if [ ! -x "$prog" ] || [ ! -f "$fake/libcuda.so.1" ]; then
	echo "skip: built without cuda.h (no CUDA backend to test)"
	exit 77
fi
export LD_LIBRARY_PATH="$(cd "$fake" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export BATCHFS_LOADER_LIBCUDA= FAKE_LIBCUDA_REPORT=1
args=(--total-mb 9 --batch-mb 1 --dir "$BFS_TEST_TMP/files" --reps 1
	--peak-mb 4 --peak-copies 4 --verify-every 4)
fail=0
bad() {
	echo "FAIL: $*"
	fail=1
}

"$prog" "${args[@]}" >"$BFS_TEST_TMP/out" 2>"$BFS_TEST_TMP/err"
rc=$?
cat "$BFS_TEST_TMP/out" "$BFS_TEST_TMP/err"
[ $rc -eq 0 ] || bad "bench exited $rc"
num='[0-9]+\.[0-9]+'
for re in "^plain read\(\) .* $num GB/s" "^loader CPU mode, next\.\.EOF: .* $num GB/s" \
	"^GPU part: device 0 " \
	"^P  pinned HtoD peak, 4 MiB x 4 +$num GB/s" \
	"^Pp pageable HtoD, 4 MiB x 8 +$num GB/s" "^P / Pp +$num " \
	"^Rf read-only, loader CPU mode +$num GB/s" \
	"^E  file->device, loader CUDA mode +$num GB/s" \
	"^E / min\(Rf, P\) +$num \(target >= 0\.9\)" "^E / P +$num " \
	"^T_c spin kernel alone, 6 x $num ms +$num ms" \
	"^step next\+kernel\+release, 6 x +$num ms" \
	"^step / T_c +$num \(target <= 1\.05\)" \
	"^next\(\) when ready, p50 +$num us" "^next\(\) when ready, p99 +$num us" \
	"^copy thread CPU in step, % of a core +$num \(G10: <= 5\)"; do
	grep -Eq "$re" "$BFS_TEST_TMP/out" || bad "no line matching /$re/"
done
grep -q "skipped" "$BFS_TEST_TMP/out" && bad "GPU part skipped"
# batches 0, 4, 8 (every 4th) and the last (8): 3 copied back
grep -q "^verify: 3 of 9 batches copied back (cuMemcpyDtoH), all match the files$" \
	"$BFS_TEST_TMP/out" || bad "no verify line"
rep=$(grep '^fake libcuda:' "$BFS_TEST_TMP/err")
for kv in violations=0 ctx_retained=0 streams=0 events=0 allocs=0 \
	registered=0 modules=0; do
	[[ " $rep " == *" $kv "* ]] || bad "fake driver: want $kv in: $rep"
done
# 1 warm-up launch, T_c: 6 (the window: 9 batches less 3 warm-up), step: 9,
# ready (one kernel per batch, each waited for): 9
[[ " $rep " == *" launches=25 "* ]] || bad "fake driver: want launches=25 in: $rep"

# The copy-back check compares for real: a corrupting driver fails it.
FAKE_LIBCUDA_CORRUPT=1 "$prog" "${args[@]}" >"$BFS_TEST_TMP/out2" 2>&1
rc=$?
[ $rc -ne 0 ] || bad "bench passed with corrupted copies"
grep -q "^verify: batch_0: device bytes differ from the file (first mismatch at offset $(((1 << 20) - 1)))" \
	"$BFS_TEST_TMP/out2" || { cat "$BFS_TEST_TMP/out2"; bad "no mismatch line"; }
grep -q "^GPU part: FAILED" "$BFS_TEST_TMP/out2" || bad "no FAILED line"

# The PTX spin kernel assembles for the GPUs it is meant for.
ptxas=${CUDA_HOME:-/usr/local/cuda}/bin/ptxas
if [ -x "$ptxas" ]; then
	"$prog" --print-ptx >"$BFS_TEST_TMP/spin.ptx"
	for arch in sm_75 sm_80 sm_90; do
		"$ptxas" -arch=$arch "$BFS_TEST_TMP/spin.ptx" \
			-o "$BFS_TEST_TMP/spin_$arch.cubin" ||
			bad "ptxas -arch=$arch rejects the spin kernel"
	done
else
	echo "note: no ptxas at $ptxas, PTX not assembled"
fi
exit $fail
