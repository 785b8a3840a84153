#!/bin/bash
# The real-GPU check (gpu_loader_check, run on a GPU by
# tests/gpu/test_gpu_loader.sh) against the fake driver: every check
# passes, and the fake saw no misuse, no broken capture, no implicit
# legacy-stream dependency and nothing left alive.
set -u
out="$BFS_TEST_TMP/out" err="$BFS_TEST_TMP/err"
mkdir -p "$BFS_TEST_TMP/files"
FAKE_LIBCUDA_REPORT=1 bash "$BFS_SRC/tests/loader/with_fake.sh" \
	gpu_loader_check "$BFS_TEST_TMP/files" >"$out" 2>"$err"
rc=$?
cat "$out" "$err"
[ $rc -eq 77 ] && exit 77
fail=0
[ $rc -eq 0 ] || { echo "FAIL: gpu_loader_check exited $rc"; fail=1; }
grep -q '^ok: all checks$' "$out" || { echo "FAIL: no 'ok: all checks'"; fail=1; }
[ "$(grep -c '^ok: ' "$out")" = 8 ] || { echo "FAIL: want 8 ok lines"; fail=1; }
rep=$(grep '^fake libcuda:' "$err")
for kv in violations=0 ctx_retained=0 streams=0 events=0 allocs=0 \
	registered=0 modules=0 implicit_deps=0 capture_violations=0; do
	[[ " $rep " == *" $kv "* ]] || { echo "FAIL: want $kv in: $rep"; fail=1; }
done
exit $fail
