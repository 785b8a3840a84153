# batchfs — one non-recursive Makefile. Each folder adds its sources and tests
# in its own module.mk; everything is built under build/.
#
#   make              build/batchfs, build/libbatchfs_core.a, the loader libraries
#   make check        build and run every test (exit 77 = skipped);
#                     TESTS_FILTER=regex runs the tests whose path matches,
#                     TORCH_VERSIONS="2.13.0 2.14.1" the order tests
#                     against those torch releases too (venvs from PyPI)
#   make demo         the demo from README.md
#   make fuzz         libFuzzer targets (clang), FUZZ_SECONDS each
#   make bench        side-by-side benchmark (not part of check)
#   make install      bin/batchfs, its man page and bash completion, the
#                     loader library, header and pkg-config file, the
#                     Python package, under $(DESTDIR)$(PREFIX)
#                     (PYTHON_SITE: the system Python's site directory for
#                     PREFIX); make uninstall removes them
#   SANITIZE=address,undefined make ...   any target under ASan/UBSan
#   WERROR=1 (default in CI) turns warnings into errors

CC ?= cc
BUILD ?= build
PYTHON ?= /usr/bin/python3
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PYTHON_SITE ?= $(shell $(PYTHON) tools/scripts/python_site.py $(PREFIX))
VERSION := $(shell sed -n 's/^\#define BFS_VERSION "\(.*\)"/\1/p' \
	tools/version.h)
WERROR ?= $(if $(CI),1,0)
# The torch versions the order tests run against besides Debian's 1.13,
# each from PyPI in a venv of its own (tools/scripts/venv.sh).
TORCH_VERSIONS ?= 2.13.0

PKGS := fuse3 libzip liburing libcurl libcrypto
CUDA_HOME ?= /usr/local/cuda
HAVE_CUDA_H := $(shell test -f $(CUDA_HOME)/include/cuda.h && echo 1)

CPPFLAGS += -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -DFUSE_USE_VERSION=314 -I.
# FUSE's include flags are added per folder (DIR_CPPFLAGS_<dir>, only
# mount/ and tools/): fs/ must not include a FUSE header.
CPPFLAGS += $(call pc_cflags,libzip)
CFLAGS ?= -O2 -g
CFLAGS += -std=gnu11 -Wall -Wextra -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wno-unused-parameter -fno-strict-aliasing \
	-pthread -MMD -MP
ifeq ($(WERROR),1)
CFLAGS += -Werror
endif
ifneq ($(SANITIZE),)
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif
LDLIBS += -pthread

# pkg-config is asked lazily (after `deps`) so a fresh machine works.
pc_cflags = $(shell pkg-config --cflags $(1) 2>/dev/null)
pc_libs = $(shell pkg-config --libs $(1) 2>/dev/null)

all: deps-build
	@$(MAKE) --no-print-directory build-all

.PHONY: all build-all deps-build deps-test deps-torch check check-build \
	clean demo fuzz bench bench-loader install uninstall format \
	format-check

deps-build:
	@tools/scripts/deps.sh build
deps-test:
	@tools/scripts/deps.sh test
deps-torch:
	@tools/scripts/deps.sh torch
	@tools/scripts/venv.sh $(TORCH_VERSIONS:%=torch-%) s3

# Every module.mk appends to these.
CORE_SRCS :=
CLI_SRCS :=
TEST_PROGS :=
TEST_SCRIPTS :=
BUILD_ALL :=
FUZZ_TARGETS :=
INSTALL_PARTS :=

include fs/module.mk
include tools/module.mk
include mount/module.mk
include loader/module.mk
include tests/module.mk

CORE_OBJS := $(CORE_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(DIR_CPPFLAGS_$(patsubst %/,%,$(dir $<))) \
		$(CFLAGS) -c $< -o $@

$(BUILD)/libbatchfs_core.a: $(CORE_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/batchfs: $(CLI_OBJS) $(BUILD)/libbatchfs_core.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/libbatchfs_core.a \
		$(call pc_libs,$(PKGS)) $(LDLIBS) -lm

build-all: $(BUILD)/batchfs $(BUILD)/libbatchfs_core.a $(BUILD_ALL)

# make install / uninstall: each module.mk adds its install-X rule (and
# uninstall-X) to INSTALL_PARTS. Unless staged (DESTDIR=): first the
# bash-completion package (it loads the completion installed), and at the
# end where the Python package went and what a PREFIX outside the search
# paths needs.
install: all
	@[ -n "$(DESTDIR)" ] || tools/scripts/deps.sh install
	@$(MAKE) --no-print-directory $(INSTALL_PARTS)
	@[ -n "$(DESTDIR)" ] || tools/scripts/install_notes.sh $(PYTHON) \
		$(BINDIR) $(LIBDIR) $(PYTHON_SITE)
uninstall: $(INSTALL_PARTS:install-%=uninstall-%)

# make check: build everything (tests included), then run every test.
check: deps-torch
	@$(MAKE) --no-print-directory check-build
	@BUILD=$(BUILD) PYTHON=$(PYTHON) tests/run.sh $(TEST_PROGS) $(TEST_SCRIPTS)

check-build: build-all $(TEST_PROGS)

clean:
	rm -rf $(BUILD)

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	@tools/scripts/deps.sh lint
	@clang-format --dry-run --Werror $(FORMAT_FILES)

.SECONDARY:

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
