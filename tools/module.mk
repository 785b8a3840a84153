# tools/: the batchfs command (main, mount, umount, status, pack, inspect,
# bench) linked into build/batchfs, its bash completion, the benchmark
# harness and the build's scripts. `batchfs mount` is two files:
# cmd_mount.c its command line, mount_compose.c what it builds and runs.
CLI_SRCS += $(sort $(wildcard tools/*.c))
DIR_CPPFLAGS_tools/bench = $(call pc_cflags,fuse3)

# make demo: the README's first command. Installs what is missing, builds,
# packs a demo dataset, mounts it, shows it, reads a batch, checks epoch 0
# against DataLoader (tools/scripts/demo_check.py), unmounts.
demo: deps-test
	@$(MAKE) --no-print-directory build-all
	@BUILD=$(BUILD) tools/scripts/demo.sh

# make bench: the side-by-side benchmark (tools/bench/bench.py, its results
# merged into tools/bench/results.json), their figures redrawn from those
# (tools/bench/fig-<part>.png by tools/bench/figures.py, also when a part
# failed; skipped without matplotlib), then the order engine's shuffle
# against torch.randperm (tools/bench/bench_order.sh, n = BENCH_ORDER_N,
# default 10^8); never part of `make check`.
# build/bench/nullfs is the null FUSE baseline server; build/bench/cache_sim
# the cache's simulation (the remote part's bound on hits).
# BENCH_SCALE=0.25 shrinks the datasets; BENCH_REPS sets the repetitions.
# The remote part runs only when BENCH_ONLY names it (BENCH_ONLY=remote):
# it installs its servers and peers first (tools/scripts/deps.sh bench;
# moto's S3 server for s3fs: tools/scripts/venv.sh s3).
BENCH_ORDER_N ?= 100000000
BENCH_NULLFS := $(BUILD)/bench/nullfs
BENCH_CACHE_SIM := $(BUILD)/bench/cache_sim

$(BENCH_NULLFS): $(BUILD)/obj/tools/bench/nullfs.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(call pc_libs,fuse3) $(LDLIBS)

$(BENCH_CACHE_SIM): $(BUILD)/obj/tools/bench/cache_sim.o \
		$(BUILD)/libbatchfs_core.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(call pc_libs,$(PKGS)) $(LDLIBS) -lm
# tests/cli/test_bench_cache_sim.py checks it on sequences worked by hand
check-build: $(BENCH_CACHE_SIM)

bench: deps-torch
	@case ",$(BENCH_ONLY)," in *remote*|*ranks*|,,) tools/scripts/deps.sh bench && \
		tools/scripts/venv.sh s3 ;; esac
	@$(MAKE) --no-print-directory $(BUILD)/batchfs $(BENCH_NULLFS) \
		$(BENCH_CACHE_SIM)
	BATCHFS=$(abspath $(BUILD)/batchfs) NULLFS=$(abspath $(BENCH_NULLFS)) \
		CACHE_SIM=$(abspath $(BENCH_CACHE_SIM)) \
		$(PYTHON) tools/bench/bench.py; rc=$$?; \
		$(PYTHON) tools/bench/figures.py $${BENCH_JSON:-}; exit $$rc
	PYTHON=$(PYTHON) tools/bench/bench_order.sh $(BENCH_ORDER_N)

# make bench-gather: a worker's gather against numpy's x[idx], per row size.
.PHONY: bench-gather
bench-gather: deps-test
	@$(MAKE) --no-print-directory $(BUILD)/tests/bin/gather_bench
	GATHER_BENCH=$(abspath $(BUILD)/tests/bin/gather_bench) \
		$(PYTHON) tools/bench/gather_numpy.py

# make install: the command, its man page (tools/batchfs.1, the version
# from tools/version.h) and its bash completion (tools/batchfs-completion.bash,
# where bash-completion looks for the completion of command batchfs).
BASH_COMPLETION_DIR ?= $(PREFIX)/share/bash-completion/completions
INSTALL_PARTS += install-bin
.PHONY: install-bin uninstall-bin
install-bin: $(BUILD)/batchfs
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(BASH_COMPLETION_DIR)
	install -m 755 $(BUILD)/batchfs $(DESTDIR)$(BINDIR)/batchfs
	sed 's/@VERSION@/$(VERSION)/' tools/batchfs.1 \
		>$(DESTDIR)$(MANDIR)/man1/batchfs.1
	install -m 644 tools/batchfs-completion.bash \
		$(DESTDIR)$(BASH_COMPLETION_DIR)/batchfs
uninstall-bin:
	rm -f $(DESTDIR)$(BINDIR)/batchfs $(DESTDIR)$(MANDIR)/man1/batchfs.1 \
		$(DESTDIR)$(BASH_COMPLETION_DIR)/batchfs
