# tools/: subcommands linked into build/batchfs (pack, inspect, bench).
CLI_SRCS += $(sort $(wildcard tools/*.c))

# make bench: the side-by-side benchmark (tools/bench/bench.py), then the
# order engine's shuffle against torch.randperm (tools/bench/bench_order.sh,
# n = BENCH_ORDER_N, default 10^8); never part of `make check`.
# build/bench/nullfs is the null FUSE baseline server.
# BENCH_SCALE=0.25 shrinks the datasets; BENCH_REPS sets the repetitions.
BENCH_ORDER_N ?= 100000000
BENCH_NULLFS := $(BUILD)/bench/nullfs

$(BENCH_NULLFS): $(BUILD)/obj/tools/bench/nullfs.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(call pc_libs,fuse3) $(LDLIBS)

bench: deps-torch
	@$(MAKE) --no-print-directory $(BUILD)/batchfs $(BENCH_NULLFS)
	BATCHFS=$(abspath $(BUILD)/batchfs) NULLFS=$(abspath $(BENCH_NULLFS)) \
		$(PYTHON) tools/bench/bench.py
	PYTHON=$(PYTHON) tools/bench/bench_order.sh $(BENCH_ORDER_N)
