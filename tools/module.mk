# tools/: subcommands linked into build/batchfs (pack, inspect, bench).
CLI_SRCS += $(sort $(wildcard tools/*.c))

# make bench: the side-by-side benchmark (tools/bench/bench.py), never part
# of `make check`. build/bench/nullfs is its null FUSE baseline server.
# BENCH_SCALE=0.25 shrinks the datasets; BENCH_REPS sets the repetitions.
BENCH_NULLFS := $(BUILD)/bench/nullfs

$(BENCH_NULLFS): $(BUILD)/obj/tools/bench/nullfs.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(call pc_libs,fuse3) $(LDLIBS)

bench: deps-torch
	@$(MAKE) --no-print-directory $(BUILD)/batchfs $(BENCH_NULLFS)
	BATCHFS=$(abspath $(BUILD)/batchfs) NULLFS=$(abspath $(BENCH_NULLFS)) \
		$(PYTHON) tools/bench/bench.py
