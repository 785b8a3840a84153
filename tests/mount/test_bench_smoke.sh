#!/bin/bash
# `batchfs bench` keeps working: --memcpy, --read (a file and a directory,
# two read sizes) and --pagecache each print a "GB/s=<number>" line and
# count exactly the bytes they were given; --rows reads each row once. No
# timing assertions.
set -eu
: "${BATCHFS:?}" "${BFS_TEST_TMP:?}"
cd "$BFS_TEST_TMP"

fail() { echo "FAIL: $*" >&2; exit 1; }
gbps_line() { # MODE OUTPUT BYTES: one line per run, each with GB/s and bytes
	local n
	n=$(printf '%s\n' "$2" | grep -cE "^$1 bytes=$3 seconds=[0-9.]+ GB/s=[0-9]+\.[0-9]+" || true)
	[ "$n" -ge 1 ] || fail "$1: no GB/s line for $3 bytes in: $2"
}

out=$("$BATCHFS" bench --memcpy 8M --repeat 2)
gbps_line memcpy "$out" 8388608
[ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ] || fail "--repeat 2 gave: $out"

mkdir d
head -c 3000000 /dev/urandom >d/batch_0
head -c 1000 /dev/urandom >d/batch_1
head -c 5 /dev/urandom >d/batch_10
out=$("$BATCHFS" bench --read d/batch_0)
gbps_line read "$out" 3000000
out=$("$BATCHFS" bench --bs 128K --read d)
gbps_line read "$out" 3001005
printf '%s\n' "$out" | grep -q 'files=3 bs=131072' || fail "dir read: $out"
out=$("$BATCHFS" bench --pagecache d/batch_0 d/batch_1)
gbps_line pagecache "$out" 3001000

# --rows reads every sample's rows once (the demo's: 3072 + 8 bytes),
# through the page cache or with O_DIRECT, from any number of threads or
# from one io_uring at any depth (more in flight than there are reads, too).
"$BATCHFS" pack --demo 100 -o demo.pt >/dev/null
for opts in "--threads 3" "--threads 1 --direct" "--depth 1" "--depth 7 --direct" "--depth 512"; do
	out=$("$BATCHFS" bench $opts --rows demo.pt)
	printf '%s\n' "$out" | grep -qE "^rows samples=100 bytes=308000 seconds=[0-9.]+ samples/s=[0-9.]+ threads=" ||
		fail "--rows $opts: $out"
done

# Bad usage exits 2, a missing file exits 1.
rc=0; "$BATCHFS" bench --read >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "no paths: exit $rc, want 2"
rc=0; "$BATCHFS" bench --depth 0 --rows demo.pt >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "--depth 0: exit $rc, want 2"
rc=0; "$BATCHFS" bench --read missing >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "missing file: exit $rc, want 1"
"$BATCHFS" bench --help | grep -q -- --memcpy || fail "--help"
echo "bench smoke: ok"
