#!/bin/bash
# One session on a lent GPU machine, in one call: the real-GPU tests, the
# loader's benchmark with its sweep, the torch checks and comparison, and
# the CPU benchmark's worker scaling where FUSE works. The machine starts
# bare and may lack a compiler and the libraries: everything runs from a
# build made elsewhere (build/, the daemon's shared libraries in $LIBS),
# nothing is installed. Each step is bounded so that the ones after it
# still run; the logs go to $LOGS and, after each step, into
# $OUT/logs.tgz (OUT default ./gpu-out).
#
# Usage: loader/bench/gpu_session.sh [seconds]   (default 450: the budget)
#   LIBS=dir    shared libraries (and bin/fusermount3) built against here
#   STEPS="tests sweep bench torch cpu"   which steps to run
#   BEST="--slots S --readers R"   bench_loader options of the 3 runs
#   TORCH_ARGS="..."               bench_torch.py options
set -u
budget=${1:-450}
start=$(date +%s)
OUT=${OUT:-$PWD/gpu-out}
LOGS=${LOGS:-/tmp/gpu-logs}
LIBS=${LIBS:-$PWD/.gpulibs}
STEPS=${STEPS:-tests sweep bench torch cpu}
mkdir -p "$OUT" "$LOGS"
export BUILD=build PYTHON=${PYTHON:-python3} PYTHONUNBUFFERED=1
[ -d "$LIBS" ] && export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	PATH="$LIBS/bin:$PATH"
files=/dev/shm/bfs-gpu

left() { echo $((budget - ($(date +%s) - start))); }
step() { # name seconds command...: bounded, logged to $LOGS/name.log
	local name=$1 secs=$2
	shift 2
	local l=$(left)
	[ "$secs" -gt "$l" ] && secs=$l
	if [ "$secs" -lt 10 ]; then
		echo "== $name: skipped (no time left)"
		return
	fi
	echo "== $name (at most ${secs}s, $(left)s left; load $(cut -d' ' -f1-3 /proc/loadavg))"
	timeout --kill-after=5 "$secs" "$@" >"$LOGS/$name.log" 2>&1
	echo "== $name: exit $? after $(($(date +%s) - start))s"
	pack
}
pack() {
	cp -r build/test-logs "$LOGS/" 2>/dev/null
	tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
}
want() { [[ " $STEPS " == *" $1 "* ]]; }

{
	nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
	echo "cores $(nproc), $(free -g | awk '/Mem/{print $2}') GiB, kernel $(uname -r)"
	$PYTHON -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
	ls -l /dev/fuse 2>&1
	df -h /dev/shm /tmp | tail -2
} 2>&1 | tee "$LOGS/env.log"

if want tests; then
	step tests 120 tests/run.sh build/tests/loader/test_loader_host \
		tests/loader/test_*.sh tests/loader/test_*.py tests/gpu/test_*
	tail -20 "$LOGS/tests.log"
fi

# The loader's benchmark: 8 GiB of 256 MiB batch files in /dev/shm (the
# page cache, without a disk under it), slots x readers swept once, then
# the default and the best three times.
bl=(build/bench/bench_loader --total-mb 8192 --batch-mb 256 --dir "$files"
	--peak-mb 256 --peak-copies 16)
if want sweep; then
	for s in 2 3 4; do
		for r in 1 4 8; do
			step "sweep-s$s-r$r" 60 "${bl[@]}" --reps 1 --slots $s --readers $r
			grep -E "^(plain|loader CPU mode, next|P |Pp|E |E / min|step / T_c|copy thread|next)" \
				"$LOGS/sweep-s$s-r$r.log" | sed "s/^/  s$s r$r  /"
		done
	done
fi
if want bench; then
	for i in 1 2 3; do
		step "bench-default-$i" 90 "${bl[@]}" --reps 3 ${BEST:-}
		cat "$LOGS/bench-default-$i.log"
	done
	# the sweep's best E (file -> device), three times, unless the default
	best=$(for f in "$LOGS"/sweep-s*-r*.log; do
		awk -v f="$f" '/^E  file->device/{print $(NF-1), f}' "$f"
	done | sort -rn | head -1 | sed -n 's/.*sweep-s\([0-9]*\)-r\([0-9]*\).log/--slots \1 --readers \2/p')
	echo "== sweep's best E: ${best:-none}"
	if [ -n "$best" ] && [ "$best" != "--slots 3 --readers 4" ]; then
		for i in 1 2 3; do
			step "bench-best-$i" 90 "${bl[@]}" --reps 3 $best
			grep -E "^(plain|loader CPU mode, next|P |Pp|Rf|E |E / |T_c|step|copy thread|next)" "$LOGS/bench-best-$i.log"
		done
	fi
fi
rm -rf "$files"

if want torch; then
	step torch 150 $PYTHON loader/bench/bench_torch.py /dev/shm/bfs-torch \
		--json "$LOGS/torch.json" ${TORCH_ARGS:-}
	cat "$LOGS/torch.log"
	rm -rf /dev/shm/bfs-torch /dev/shm/bfs-torch-small
fi

# The CPU benchmark's large rows, warm, every serve mode, with 1..16
# workers: how the mount scales with cores; then the readers part (the
# numpy gather's bound beside the readers) with 16.
cpu() { # workers part seconds
	BENCH_ONLY="large rows $2" BENCH_SCALE=${BENCH_SCALE:-0.5} \
	BENCH_REPS=${BENCH_REPS:-1} BENCH_DL_SECONDS=3 \
	BENCH_JSON="$LOGS/cpu-$2-w$1.json" BENCH_TMP=/dev/shm \
	BENCH_MOUNT_OPTS="--workers $1" \
		step "cpu-$2-w$1" "$3" $PYTHON tools/bench/bench.py
	sed -n '/(median of/,/^$/p' "$LOGS/cpu-$2-w$1.log" | head -45
}
if want cpu; then
	if [ -c /dev/fuse ]; then
		for w in 1 4 8 16; do
			cpu $w modes 80
		done
		cpu 16 readers 100
	else
		echo "== cpu: skipped (no /dev/fuse on this machine)"
	fi
fi
echo "== done after $(($(date +%s) - start))s"
