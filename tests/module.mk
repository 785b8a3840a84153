# tests/: unit tests (cmocka, one program per tests/unit/test_*.c), mount,
# interop, remote-object and command-line tests (scripts), fuzz targets.
# tests/lib/ holds shared helpers (and the test servers: servers.py,
# faultproxy.py); tests/run.sh puts it, tests/mount (mountlib),
# tests/loader (loader_testlib) and loader/python on PYTHONPATH.
#
# Unit tests link the core library plus cmocka, libzip and libfuse.
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_PROGS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
TEST_LIB_SRCS := $(sort $(wildcard tests/lib/*.c))
TEST_LIB_OBJS := $(TEST_LIB_SRCS:%.c=$(BUILD)/obj/%.o)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_LIB_OBJS) $(BUILD)/libbatchfs_core.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(LDFLAGS_$*) -o $@ $< $(TEST_LIB_OBJS) $(BUILD)/libbatchfs_core.a \
		$(call pc_libs,cmocka $(PKGS)) $(LDLIBS) -lm

# test_order_calls counts the calls the other rooms make into fs/order:
# each of these goes through a wrapper of the test's (ld --wrap).
ORDER_WRAPPED := lanes ranked world_size rank_of_lane lane_of_rank epochs \
	positions has pos id locate locate_pos lane_of lane_end epoch_serial \
	epoch_of_serial len batch_rows batch describe batch_name
LDFLAGS_test_order_calls := $(foreach f,$(ORDER_WRAPPED),-Wl,--wrap=bfs_order_$(f))
# test_serve_ways hands fs/serve a counting table of each way of serving.
LDFLAGS_test_serve_ways := -Wl,--wrap=bfs_serve_ops_of
# test_object and test_source_file answer fs/remote/object's requests
# themselves: opens, range requests and the client's end go through the
# fake transport of tests/unit/fake_remote.c, linked into those two only
# (the object rides on their link flags; it defines the wrappers).
FAKE_REMOTE_OBJ := $(BUILD)/obj/tests/unit/fake_remote.o
FAKE_REMOTE := -Wl,--wrap=bfs_remote_open -Wl,--wrap=bfs_remote_submit \
	-Wl,--wrap=bfs_remote_destroy $(FAKE_REMOTE_OBJ)
$(BUILD)/tests/test_object $(BUILD)/tests/test_source_file: $(FAKE_REMOTE_OBJ)
# test_object also evicts what the store wrote before it lifts the
# in-flight marks (fs/object_fetch.c: unmark).
LDFLAGS_test_object := $(FAKE_REMOTE) -Wl,--wrap=bfs_cache_write
LDFLAGS_test_source_file := $(FAKE_REMOTE)

TEST_PROGS += $(UNIT_PROGS)
# fs/serve's files call one way (fs/serve_impl.h): read from its objects.
TEST_SCRIPTS += tests/unit/test_serve_calls_one_way.py
# Scripts: mount tests, then interop tests (real torch).
TEST_SCRIPTS += $(sort $(wildcard tests/mount/test_*.sh tests/mount/test_*.py))
TEST_SCRIPTS += $(sort $(wildcard tests/interop/test_*.sh tests/interop/test_*.py))
# The order tests again against each torch of TORCH_VERSIONS (Makefile), in
# venvs from PyPI (tools/scripts/venv.sh; tests/run.sh's FILE@VENV).
TORCH_ORDER_TESTS := tests/interop/test_order_golden.py \
	tests/interop/test_mount_samplers.py \
	tests/interop/test_mount_torch_parity.py \
	tests/interop/test_mount_ranks.py tests/interop/test_ddp.py \
	tests/interop/test_python_workers.py tests/interop/test_global_seed.py \
	tests/interop/test_mount_resume.py
TEST_SCRIPTS += $(foreach v,$(TORCH_VERSIONS),\
	$(TORCH_ORDER_TESTS:%=%@torch-$(v)))
# Remote objects (fs/remote) against nginx, moto's S3 server (its venv:
# tools/scripts/venv.sh s3) and the fault proxy.
TEST_SCRIPTS += $(sort $(wildcard tests/remote/test_*.py))
TEST_SCRIPTS += $(sort $(wildcard tests/gpu/test_*.sh tests/gpu/test_*.py))
# The command line, its documentation and make install; the layout of the
# source tree (test_layout_includes.sh: the remote wing's include rule).
TEST_SCRIPTS += $(sort $(wildcard tests/cli/test_*.sh tests/cli/test_*.py))

# Fuzz targets: tests/fuzz/fuzz_<name>.c, built with clang -fsanitize=fuzzer.
# make fuzz FUZZ_SECONDS=600 runs each for that long over its seed corpus.
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_CORE := $(filter-out fs/log.c,$(sort $(wildcard fs/*.c fs/remote/*.c))) fs/log.c

$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_CORE) $(TEST_LIB_SRCS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-o $@ $< $(FUZZ_CORE) $(TEST_LIB_SRCS) $(call pc_libs,$(PKGS)) -lm -pthread

fuzz:
	@tools/scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BINS)
	@for f in $(FUZZ_BINS); do \
		n=$$(basename $$f); c=$(BUILD)/fuzz/corpus-$$n; mkdir -p $$c; \
		echo "fuzz: $$n for $(FUZZ_SECONDS)s"; \
		$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$c tests/fuzz/seeds/$${n#fuzz_} \
			2>&1 | tail -n 12 || exit 1; \
	done

# Helper programs used by test scripts: tests/bin/<name>.c -> build/tests/bin/<name>
# (faultfs is a FUSE server: FUSE's include flags for the folder)
DIR_CPPFLAGS_tests/bin = $(call pc_cflags,fuse3)
TEST_BIN_SRCS := $(sort $(wildcard tests/bin/*.c))
TEST_BINS := $(TEST_BIN_SRCS:tests/bin/%.c=$(BUILD)/tests/bin/%)
$(BUILD)/tests/bin/%: $(BUILD)/obj/tests/bin/%.o $(TEST_LIB_OBJS) $(BUILD)/libbatchfs_core.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_LIB_OBJS) $(BUILD)/libbatchfs_core.a \
		$(call pc_libs,cmocka $(PKGS)) $(LDLIBS) -lm
check-build: $(TEST_BINS)
# crash_probe also links the daemon's fatal-signal handler.
CRASH_PROBE_OBJS := $(BUILD)/obj/tests/bin/crash_probe.o \
	$(BUILD)/obj/mount/postmortem.o $(TEST_LIB_OBJS)
$(BUILD)/tests/bin/crash_probe: $(CRASH_PROBE_OBJS) $(BUILD)/libbatchfs_core.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $(CRASH_PROBE_OBJS) \
		$(BUILD)/libbatchfs_core.a $(call pc_libs,$(PKGS)) $(LDLIBS) -lm

# make soak: the long run, never part of check. SOAK_SECONDS (default 600)
# of tests/mount/fuzz_mount.py with 8 readers (4 processes x 2 threads) in
# the default serve mode (auto), then SOAK_CYCLES (default 100) SIGTERM and
# SIGKILL cycles of tests/mount/test_mount_cycles.py; niced. The fuzz
# report (operations, errors by errno, wrong bytes, the daemon's RssAnon /
# RssShmem / fds / threads at start and end) is left in $(BUILD)/soak/;
# it fails on any unexpected answer or wrong byte, and when RssAnon or the
# open fds grow more than 2 % after the warm-up (a tenth of the run).
SOAK_SECONDS ?= 600
SOAK_CYCLES ?= 100
# soak runs the scripts without tests/run.sh: the PYTHONPATH it sets
SOAK_PYTHONPATH := $(CURDIR)/tests/lib:$(CURDIR)/tests/mount
SOAK_PYTHONPATH := $(SOAK_PYTHONPATH):$(CURDIR)/tests/loader:$(CURDIR)/loader/python
SOAK_ENV = BATCHFS=$(abspath $(BUILD)/batchfs) PYTHONPATH=$(SOAK_PYTHONPATH)
.PHONY: soak
soak: deps-torch
	@$(MAKE) --no-print-directory check-build
	@rm -rf $(BUILD)/soak && mkdir -p $(BUILD)/soak
	$(SOAK_ENV) nice $(PYTHON) tests/mount/fuzz_mount.py \
		--seconds $(SOAK_SECONDS) --readers 8 \
		--work $(abspath $(BUILD)/soak) \
		--report $(abspath $(BUILD)/soak/fuzz.json) --flat
	$(SOAK_ENV) BFS_TEST_TMP=$(abspath $(BUILD)/soak) \
		CYCLES=$(SOAK_CYCLES) nice $(PYTHON) tests/mount/test_mount_cycles.py
