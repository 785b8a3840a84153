# loader/: the companion library (built by its own rules below).
#
#   build/libbatchfs_loader.a, build/libbatchfs_loader.so   (part of `make`)
#   make install        header, libraries, batchfs_loader.pc under
#                       $(DESTDIR)$(PREFIX) (then ldconfig, or an rpath in
#                       the .pc file: see loader_ldconfig), and the Python side
#                       (loader/python: batchfs_loader.py, the batchfs
#                       package) into $(DESTDIR)$(PYTHON_SITE), told where
#                       the library and the command were installed
#   make bench-loader   CPU-mode throughput vs plain read(), and the GPU part
#                       (P, Pp, E, Rf, T_c, step) when a GPU is present;
#                       BENCH_LOADER_MB, _BATCH_MB, _ARGS (loader/README.md)
#
# Objects are position-independent and built with -fvisibility=hidden: only
# the BFS_LOADER_API functions of loader/batchfs_loader.h are exported
# (tests/loader/test_loader_symbols.sh checks it). The CUDA backend is
# compiled against the toolkit's cuda.h when present; nothing links libcuda.
# fs/safetensors.c (the batch-format parser, the only fs/ code the loader
# uses; it depends on libc alone) is compiled again here with the loader's
# flags, into $(BUILD)/obj/loader/fs/. Its bfs_st_* functions are hidden in
# the .so; in the .a they are global but identical to libbatchfs_core.a's,
# so a program may link both archives.
LOADER_SRCS := loader/log.c loader/st_header.c loader/gpu_cuda.c \
	loader/files.c loader/loader.c loader/open.c fs/safetensors.c
LOADER_OBJS := $(patsubst %.c,$(BUILD)/obj/loader/%.o,\
	$(LOADER_SRCS:loader/%=%))
LOADER_A := $(BUILD)/libbatchfs_loader.a
LOADER_SO := $(BUILD)/libbatchfs_loader.so
LOADER_SONAME := libbatchfs_loader.so.0
LOADER_LIBS := -pthread -ldl
LOADER_VERSION := $(VERSION)
ifeq ($(HAVE_CUDA_H),1)
LOADER_CUDA_FLAGS := -DBFS_HAVE_CUDA_H -I$(CUDA_HOME)/include
endif

$(BUILD)/obj/loader/%.o: loader/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(LOADER_CUDA_FLAGS) $(CFLAGS) -fPIC \
		-fvisibility=hidden -c $< -o $@

$(BUILD)/obj/loader/fs/%.o: fs/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(LOADER_A): $(LOADER_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LOADER_SO): $(LOADER_OBJS)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(LOADER_SONAME) -Wl,-z,defs \
		-o $@ $^ $(LOADER_LIBS)

BUILD_ALL += $(LOADER_A) $(LOADER_SO)

# Where programs find the installed library. A directory the dynamic
# linker searches by itself (/usr/local/lib: tools/scripts/ld_searched.sh)
# needs its cache updated after make install and uninstall: ldconfig,
# except for a DESTDIR= staging tree, which is not this machine's (its
# package runs ldconfig where it is installed). Any other directory (a
# PREFIX of one's own) gets an rpath in the pkg-config file's Libs, so a
# program built with `pkg-config --libs batchfs_loader` runs as it is;
# make install prints the LD_LIBRARY_PATH for others
# (tools/scripts/install_notes.sh).
define loader_ldconfig
@if [ -z "$(DESTDIR)" ] && tools/scripts/ld_searched.sh $(LIBDIR); then \
	echo ldconfig; \
	$$(command -v ldconfig || echo /sbin/ldconfig) || \
	echo "make: ldconfig failed: run it as root, or programs will not" \
		"find $(LOADER_SONAME) in $(LIBDIR)" >&2; \
fi
endef

INSTALL_PARTS += install-loader install-python
.PHONY: install-loader uninstall-loader install-python uninstall-python
install-loader: $(LOADER_A) $(LOADER_SO)
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 loader/batchfs_loader.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(LOADER_A) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(LOADER_SO) \
		$(DESTDIR)$(LIBDIR)/libbatchfs_loader.so.$(LOADER_VERSION)
	ln -sf libbatchfs_loader.so.$(LOADER_VERSION) \
		$(DESTDIR)$(LIBDIR)/$(LOADER_SONAME)
	ln -sf $(LOADER_SONAME) $(DESTDIR)$(LIBDIR)/libbatchfs_loader.so
	if tools/scripts/ld_searched.sh $(LIBDIR); then rpath=; \
	else rpath='-Wl,-rpath,$${libdir} '; fi; \
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@VERSION@|$(LOADER_VERSION)|' \
		-e 's|^libdir=.*|libdir=$(LIBDIR)|' \
		-e 's|^includedir=.*|includedir=$(INCLUDEDIR)|' \
		-e "s|@RPATH@|$$rpath|" loader/batchfs_loader.pc.in \
		>$(DESTDIR)$(LIBDIR)/pkgconfig/batchfs_loader.pc
	$(loader_ldconfig)
uninstall-loader:
	rm -f $(DESTDIR)$(INCLUDEDIR)/batchfs_loader.h \
		$(DESTDIR)$(LIBDIR)/libbatchfs_loader.a \
		$(DESTDIR)$(LIBDIR)/libbatchfs_loader.so.$(LOADER_VERSION) \
		$(DESTDIR)$(LIBDIR)/$(LOADER_SONAME) \
		$(DESTDIR)$(LIBDIR)/libbatchfs_loader.so \
		$(DESTDIR)$(LIBDIR)/pkgconfig/batchfs_loader.pc
	$(loader_ldconfig)

# The Python side: batchfs_loader.py with the installed library's path
# written in, the batchfs package with the installed command's
# (batchfs/_installed.py).
PY_PKG := $(DESTDIR)$(PYTHON_SITE)/batchfs
install-python:
	install -d $(PY_PKG)
	install -m 644 loader/python/batchfs/*.py $(PY_PKG)/
	printf '"""Written by make install."""\nBATCHFS = "%s"\nVERSION = "%s"\n' \
		'$(BINDIR)/batchfs' '$(VERSION)' >$(PY_PKG)/_installed.py
	sed 's|^_INSTALLED_LIB = None.*|_INSTALLED_LIB = "$(LIBDIR)/$(LOADER_SONAME)"|' \
		loader/python/batchfs_loader.py \
		>$(DESTDIR)$(PYTHON_SITE)/batchfs_loader.py
uninstall-python:
	rm -rf $(PY_PKG)
	rm -f $(DESTDIR)$(PYTHON_SITE)/batchfs_loader.py \
		$(DESTDIR)$(PYTHON_SITE)/__pycache__/batchfs_loader.*.pyc

# ---- tests (tests/loader/, tests/gpu/) ----
# Test programs link the static library plus a batch-file writer.
LOADER_TEST_CFLAGS = $(CPPFLAGS) $(CFLAGS)
LOADER_ST_WRITE := tests/loader/st_write.c
# A program built from several sources in one command gets no usable .d
# file, so the headers it may include are listed here.
LOADER_TEST_DEPS = $(LOADER_A) $(LOADER_ST_WRITE) $(wildcard tests/loader/*.h) \
	loader/batchfs_loader.h loader/bench/spin_ptx.h

# One rule for them all: the cmocka program test_loader_host and the small
# programs that test scripts run (probe of the mode; GPU check).
$(BUILD)/tests/loader/%: tests/loader/%.c $(LOADER_TEST_DEPS)
	@mkdir -p $(@D)
	$(CC) $(LOADER_TEST_CFLAGS) $(LOADER_CUDA_FLAGS) $(LDFLAGS) -o $@ $< \
		$(LOADER_ST_WRITE) $(LOADER_A) $(call pc_libs,cmocka) \
		$(LOADER_LIBS)

# The benchmark (loader/bench/; `make bench-loader` below). Built by
# check-build too: tests/loader/test_bench_loader_fake.sh runs its GPU part
# against the fake driver.
BENCH_LOADER := $(BUILD)/bench/bench_loader
BENCH_LOADER_SRCS := loader/bench/bench_loader.c loader/bench/bench_gpu.c
$(BENCH_LOADER): $(BENCH_LOADER_SRCS) loader/bench/bench.h \
		$(LOADER_TEST_DEPS)
	@mkdir -p $(@D)
	$(CC) $(LOADER_TEST_CFLAGS) $(LOADER_CUDA_FLAGS) $(LDFLAGS) -o $@ \
		$(BENCH_LOADER_SRCS) $(LOADER_ST_WRITE) $(LOADER_A) \
		$(LOADER_LIBS)
BENCH_LOADER_MB ?= 1024
BENCH_LOADER_BATCH_MB ?= 64
BENCH_LOADER_ARGS ?=

LOADER_TEST_BINS := $(BUILD)/tests/loader/loader_probe $(BENCH_LOADER)
TEST_PROGS += $(BUILD)/tests/loader/test_loader_host
TEST_SCRIPTS += tests/loader/test_loader_symbols.sh \
	tests/loader/test_loader_nodriver.sh \
	tests/loader/test_loader_python.py

ifeq ($(HAVE_CUDA_H),1)
# The fake driver: a libcuda.so.1 that performs copies with memcpy and
# records every call (selected with LD_LIBRARY_PATH by the test script).
LOADER_FAKE_CUDA := $(BUILD)/tests/fake/libcuda.so.1
$(LOADER_FAKE_CUDA): tests/loader/fake_libcuda.c tests/loader/fake_model.c \
		tests/loader/fake_libcuda.h tests/loader/fake_model.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(LOADER_CUDA_FLAGS) $(CFLAGS) -fPIC -shared \
		-Wl,-soname,libcuda.so.1 -o $@ $(filter %.c,$^) -pthread
# Tests that play the loader's CUDA user link the fake (and cuda_util.c);
# the loader's dlopen("libcuda.so.1") then finds that same instance.
LOADER_FAKE_TESTS := $(patsubst %,$(BUILD)/tests/loader/%,test_fake_libcuda \
	test_loader_cuda test_loader_cuda_faults)
$(LOADER_FAKE_TESTS): $(BUILD)/tests/loader/%: tests/loader/%.c \
		tests/loader/cuda_util.c $(LOADER_TEST_DEPS) $(LOADER_FAKE_CUDA)
	@mkdir -p $(@D)
	$(CC) $(LOADER_TEST_CFLAGS) $(LOADER_CUDA_FLAGS) $(LDFLAGS) -o $@ $< \
		tests/loader/cuda_util.c $(LOADER_ST_WRITE) $(LOADER_A) \
		-L$(BUILD)/tests/fake -l:libcuda.so.1 $(call pc_libs,cmocka) \
		$(LOADER_LIBS)
LOADER_TEST_BINS += $(LOADER_FAKE_CUDA) $(LOADER_FAKE_TESTS) \
	$(BUILD)/tests/loader/gpu_loader_check
TEST_SCRIPTS += tests/loader/test_fake_libcuda.sh \
	tests/loader/test_loader_cuda_fake.sh \
	tests/loader/test_loader_cuda_faults.sh \
	tests/loader/test_gpu_check_fake.sh \
	tests/loader/test_loader_python_fake.py \
	tests/loader/test_bench_loader_fake.sh
endif

check-build: $(LOADER_TEST_BINS)

# ---- benchmark ----
bench-loader: $(BENCH_LOADER)
	$(BENCH_LOADER) --total-mb $(BENCH_LOADER_MB) \
		--batch-mb $(BENCH_LOADER_BATCH_MB) $(BENCH_LOADER_ARGS)
