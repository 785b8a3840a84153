#!/bin/bash
# Run every test given on the command line; print one line per test and a
# closing "N passed, N failed, N skipped" line. Exit status 1 if any failed.
#
# A test is an executable, a .sh (bash) or a .py (run with $PYTHON, the system
# python that has torch). FILE.py@VENV runs FILE.py with the python of
# $BFS_VENVS/VENV (tools/scripts/venv.sh; default build/venv), e.g.
# tests/interop/test_order_golden.py@torch-2.13.0 against torch 2.13; it
# is skipped where that venv is missing. Exit 0 = pass, 77 = skipped,
# anything else = fail.
# Each test gets its own work directory in $BFS_TEST_TMP (removed afterwards
# unless it failed; also its $XDG_RUNTIME_DIR, so the daemons' default log
# files land there) and finds the binaries through $BUILD / $BATCHFS.
# TESTS_FILTER=regex runs only the tests whose path matches.
# Python (each test and what it starts, venv pythons too) finds the tests'
# shared modules and this tree's batchfs package on PYTHONPATH, set here
# ahead of the caller's: tests/lib (fixtures, servers, memcg, ...),
# tests/mount (mountlib), tests/loader (loader_testlib), loader/python
# (batchfs, batchfs_loader). One test by hand: tests/run.sh FILE; a .py
# run directly (from the source tree) needs that PYTHONPATH,
#   PYTHONPATH=$PWD/tests/lib:$PWD/tests/mount:$PWD/tests/loader:$PWD/loader/python
# The tests of an installed package (test_pip_install.py,
# tests/cli/test_install*.sh, test_readme.py) run it without this path.
# Sanitizer reports (SANITIZE= builds) are written into the work directory,
# also those of daemons whose stderr is gone; any report fails the test.
set -u
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
export BUILD PYTHON
export BATCHFS="$(cd "$BUILD" && pwd)/batchfs"
export BFS_SRC="$(pwd)"
export BFS_VENVS="${BFS_VENVS:-$BFS_SRC/build/venv}"
pypath=$BFS_SRC/tests/lib:$BFS_SRC/tests/mount:$BFS_SRC/tests/loader
export PYTHONPATH="$pypath:$BFS_SRC/loader/python${PYTHONPATH:+:$PYTHONPATH}"
logdir="$BUILD/test-logs"
mkdir -p "$logdir"
pass=0 fail=0 skip=0 failed=""
for t in "$@"; do
	if [ -n "${TESTS_FILTER:-}" ] && ! [[ "$t" =~ $TESTS_FILTER ]]; then
		continue
	fi
	name=$(echo "$t" | sed 's|^\./||; s|/|_|g')
	log="$logdir/$name.log"
	work=$(mktemp -d /tmp/bfs-test.XXXXXX)
	start=$(date +%s.%N)
	case "$t" in
	*.py@*) cmd=("$BFS_VENVS/${t##*@}/bin/python" "${t%@*}")
		if ! [ -x "${cmd[0]}" ]; then
			skip=$((skip + 1))
			printf 'SKIP  %-55s %s\n' "$t" "no ${cmd[0]}: tools/scripts/venv.sh ${t##*@}"
			rm -rf "$work"
			continue
		fi ;;
	*.py) cmd=("$PYTHON" "$t") ;;
	*.sh) cmd=(bash "$t") ;;
	*) cmd=("$t") ;;
	esac
	ASAN_OPTIONS="log_path=$work/sanitizer-asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
	UBSAN_OPTIONS="log_path=$work/sanitizer-ubsan:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
	LSAN_OPTIONS="suppressions=$BFS_SRC/tests/lib/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
	TSAN_OPTIONS="log_path=$work/sanitizer-tsan${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
	BFS_TEST_TMP="$work" XDG_RUNTIME_DIR="$work" timeout --kill-after=10 "${TEST_TIMEOUT:-900}" \
		"${cmd[@]}" >"$log" 2>&1
	rc=$?
	secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
	# Leaked mounts under the work dir must never outlive a test.
	grep " $work" /proc/mounts | awk '{print $2}' | while read -r m; do
		fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
	done
	reports=$(ls "$work"/sanitizer-* 2>/dev/null)
	if [ -n "$reports" ] && [ "$rc" -ne 77 ]; then
		for r in $reports; do
			echo "=== sanitizer report $r" >>"$log"
			cat "$r" >>"$log"
		done
		[ "$rc" -eq 0 ] && rc=86
	fi
	case $rc in
	0) pass=$((pass + 1)); printf 'PASS  %-55s %6.1fs\n' "$t" "$secs"
	   rm -rf "$work" ;;
	77) skip=$((skip + 1)); printf 'SKIP  %-55s %s\n' "$t" \
		"$(grep -m1 -i 'skip' "$log" | cut -c1-60)"
	   rm -rf "$work" ;;
	*) fail=$((fail + 1)); failed="$failed $t"
	   printf 'FAIL  %-55s (exit %d, log %s, work %s)\n' "$t" "$rc" "$log" "$work"
	   tail -n 30 "$log" | sed 's/^/      | /' ;;
	esac
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
