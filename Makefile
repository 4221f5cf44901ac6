# libkvblock build. `make` builds the shared and static library and the kvblock tool; `make check` runs
# every test; `make check-sanitize` does the same under ASan+UBSan. CUDA kernels are built when nvcc is
# found (force off with CUDA=0).

VERSION_MAJOR := $(shell sed -n 's/^\#define KVB_VERSION_MAJOR \([0-9]*\)/\1/p' abi/kvblock.h)
VERSION_MINOR := $(shell sed -n 's/^\#define KVB_VERSION_MINOR \([0-9]*\)/\1/p' abi/kvblock.h)
VERSION_PATCH := $(shell sed -n 's/^\#define KVB_VERSION_PATCH \([0-9]*\)/\1/p' abi/kvblock.h)
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

.DEFAULT_GOAL := all

BUILD    ?= build
CC       ?= gcc
CXX      ?= g++
OPT      ?= -O2 -g
SANITIZE ?=
WARN     := -Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter
CFLAGS_  := -std=c99 $(OPT) $(WARN) $(SANITIZE) $(CFLAGS)
XXHASH_CFLAGS := $(shell pkg-config --cflags libxxhash 2>/dev/null)
CXXFLAGS_:= -std=c++17 $(OPT) $(WARN) $(SANITIZE) -fPIC -fvisibility=hidden -fvisibility-inlines-hidden \
            -pthread $(XXHASH_CFLAGS) $(CXXFLAGS)
XXHASH_LIBS := $(strip $(shell pkg-config --libs libxxhash 2>/dev/null || echo -lxxhash))
LDLIBS_  := $(XXHASH_LIBS) -pthread
# What a program linking libkvblock.a needs besides it (kvblock.pc's Libs.private): the C++ runtime,
# since a C compiler does not add it, and the CUDA runtime under ${cudalibdir}, a variable of kvblock.pc
# that a machine with CUDA elsewhere overrides (pkg-config --define-variable=cudalibdir=DIR).
PC_LIBS_PRIVATE := $(XXHASH_LIBS) -lstdc++ -lm -pthread

PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
DESTDIR    ?=

# CUDA: auto-detected unless CUDA=0.
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(CUDA),0)
  NVCC :=
endif
ifneq ($(NVCC),)
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
  # The architectures are per object (NVCC_ARCHS_): prefill_hopper.cu is sm_90a code only (wgmma,
  # setmaxnreg), built beside the portable kernels whatever CUDA_ARCHS says; the library runs it on
  # compute capability 9.0 devices only (kernels/prefill/prefill_hopper.cuh).
  NVCC_ARCHS_ = $(CUDA_ARCHS)
  NVCCFLAGS_ = -std=c++17 -O3 $(NVCC_ARCHS_) -Xcompiler -fPIC,-fvisibility=hidden -DKVB_WITH_CUDA=1 $(NVCCFLAGS)
  CXXFLAGS_  += -DKVB_WITH_CUDA=1
  LDLIBS_    += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
  PC_LIBS_PRIVATE += -L$${cudalibdir} -lcudart_static -ldl -lrt
  CUDA_SRCS  := $(wildcard kernels/*/*.cu)
endif

# Objects of a build with and without CUDA are compiled differently (KVB_WITH_CUDA): each has its own
# folder, and the library is linked again when the choice changes, so that `make CUDA=0` followed by
# `make` (or the reverse) never mixes them.
OBJ       := $(BUILD)/obj/$(if $(NVCC),cuda,cpu)
LIB_SRCS  := $(wildcard libkvblock/*.cpp) $(wildcard kernels/*/*.cpp)
LIB_OBJS  := $(LIB_SRCS:%.cpp=$(OBJ)/%.o) $(CUDA_SRCS:%.cu=$(OBJ)/%.cu.o)
LINK_STAMP:= $(BUILD)/obj/linked-from
TOOL_SRCS := $(wildcard tools/*.c)
TOOL_OBJS := $(TOOL_SRCS:%.c=$(OBJ)/%.o)

SONAME  := libkvblock.so.$(VERSION_MAJOR)
SHLIB   := $(BUILD)/lib/libkvblock.so.$(VERSION)
STLIB   := $(BUILD)/lib/libkvblock.a
TOOL    := $(BUILD)/bin/kvblock

# Tests: tests/c/*.c see only the public header and link the shared library; tests/cpp/*.cpp may use
# the internal C++ classes and link the static library. Each prints "N passed, N failed" last.
C_TESTS   := $(patsubst tests/c/%.c,$(BUILD)/tests/c_%,$(wildcard tests/c/*.c))
CPP_TESTS := $(patsubst tests/cpp/%.cpp,$(BUILD)/tests/cpp_%,$(wildcard tests/cpp/*.cpp))

.PHONY: all lib tool check check-sanitize tests install uninstall clean bench FORCE
FORCE:

# Quiet by default: one short line per step ("  CXX libkvblock/hash.cpp"); `make V=1` prints the full
# commands. Compiler warnings and errors are printed in full either way.
ifeq ($(V),1)
  Q :=
  say :=
else
  Q := @
  say = printf '  %-5s %s\n' '$(1)' '$(2)';
endif
all: lib tool cdef
lib: $(SHLIB) $(STLIB)
tool: $(TOOL)

# Dependency files name each object both as this make spells it and as an absolute path: the Python
# package's setup.py builds with an absolute BUILD, a user with a relative one, and a .d file that names
# only one spelling leaves the other build blind to header changes (stale objects, wrong struct layouts).
DEPFLAGS = -MMD -MP -MT '$@ $(abspath $@)'

# A fresh machine: xxhash.h is what the build needs beyond a C/C++ compiler and make. When the compiler
# cannot find it, tools/install_deps.sh installs the build part of its list (printing each package and
# why) before the first object is compiled; the check is one preprocessor run. XXHASH_HEADER and
# INSTALL_DEPS_FLAGS (--dry-run) let tests/scripts/install_deps.sh take the missing path here.
XXHASH_HEADER ?= xxhash.h
.PHONY: build-deps
build-deps:
	@echo '#include <$(XXHASH_HEADER)>' | $(CXX) $(XXHASH_CFLAGS) -E -x c++ - >/dev/null 2>&1 || \
	  CXX="$(CXX)" KVB_XXHASH_HEADER="$(XXHASH_HEADER)" sh tools/install_deps.sh $(INSTALL_DEPS_FLAGS) build

$(OBJ)/%.o: %.cpp | build-deps
	@mkdir -p $(dir $@)
	$(Q)$(call say,CXX,$<)$(CXX) $(CXXFLAGS_) $(DEPFLAGS) -c $< -o $@

# -MMD: a kernel is rebuilt when a header it includes changes (kernels/common/types.h: a stale object saw another
# layout of kvb::kern::Cache and indexed every layer past the first wrongly).
$(OBJ)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(Q)$(call say,NVCC,$<)$(NVCC) $(NVCCFLAGS_) $(DEPFLAGS) -c $< -o $@

$(OBJ)/kernels/prefill/prefill_hopper.cu.o: NVCC_ARCHS_ = -gencode arch=compute_90a,code=sm_90a

$(OBJ)/tools/%.o: tools/%.c | build-deps
	@mkdir -p $(dir $@)
	$(Q)$(call say,CC,$<)$(CC) $(CFLAGS_) -D_POSIX_C_SOURCE=200809L -Iabi $(XXHASH_CFLAGS) $(DEPFLAGS) -c $< -o $@

$(LINK_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(OBJ)' | cmp -s - $@ 2>/dev/null || echo '$(OBJ)' > $@

$(SHLIB): $(LIB_OBJS) abi/libkvblock.map $(LINK_STAMP)
	@mkdir -p $(dir $@)
	$(Q)$(call say,LD,$@)$(CXX) -shared $(SANITIZE) -Wl,-soname,$(SONAME) -Wl,--version-script=abi/libkvblock.map \
	  -Wl,--no-undefined -o $@ $(LIB_OBJS) $(LDLIBS_)
	$(Q)ln -sf libkvblock.so.$(VERSION) $(BUILD)/lib/$(SONAME)
	$(Q)ln -sf $(SONAME) $(BUILD)/lib/libkvblock.so

$(STLIB): $(LIB_OBJS) $(LINK_STAMP)
	@mkdir -p $(dir $@)
	$(Q)$(call say,AR,$@)rm -f $@ && ar rcs $@ $(LIB_OBJS)

# The tool is a plain C consumer of the shared library.
$(TOOL): $(TOOL_OBJS) $(SHLIB)
	@mkdir -p $(dir $@)
	$(Q)$(call say,LD,$@)$(CC) $(SANITIZE) -o $@ $(TOOL_OBJS) -L$(BUILD)/lib -lkvblock -Wl,-rpath,'$$ORIGIN/../lib' -lm -ldl -pthread

$(BUILD)/tests/c_%: tests/c/%.c tests/harness.h $(wildcard tests/c/*.h) abi/kvblock.h $(SHLIB)
	@mkdir -p $(dir $@)
	$(Q)$(call say,CC,$<)$(CC) $(CFLAGS_) -D_POSIX_C_SOURCE=200809L -Iabi -Itests -o $@ $< -L$(BUILD)/lib -lkvblock \
	  -Wl,-rpath,'$$ORIGIN/../lib' -lm -pthread

# -MMD: a test that includes library headers (kernels/*/*.h) is rebuilt when they change.
# TEST_SUPPORT: CUDA runtime helpers only the tests use (tests/support/devutil.cu), linked into each
# C++ test instead of shipping in the library.
TEST_SUPPORT := $(if $(NVCC),$(OBJ)/tests/support/devutil.cu.o)
.PRECIOUS: $(OBJ)/tests/support/%.cu.o
$(BUILD)/tests/cpp_%: tests/cpp/%.cpp tests/harness.h $(wildcard tests/cpp/*.h tests/cpp/*/*.h tests/support/*.h) $(STLIB) \
                      $(TEST_SUPPORT)
	@mkdir -p $(dir $@) $(BUILD)/obj/tests
	$(Q)$(call say,CXX,$<)$(CXX) $(CXXFLAGS_) -Iabi -Itests $(DEPFLAGS) -MF $(BUILD)/obj/tests/cpp_$*.d -o $@ $< \
	  $(TEST_SUPPORT) $(STLIB) $(LDLIBS_)

tests: all $(C_TESTS) $(CPP_TESTS)

# The measurement drivers of docs/perf/manager.md (the manager's miss, hit and decode loops alone, for
# callgrind and thread-CPU timings): `make perf-drivers` builds them in $(BUILD)/perf/; `make tests`
# builds them too, so that they keep compiling against the header.
PERF_DRIVERS := $(patsubst docs/perf/%.c,$(BUILD)/perf/%,$(wildcard docs/perf/*_driver.c))
.PHONY: perf-drivers
perf-drivers: $(PERF_DRIVERS)
tests: $(PERF_DRIVERS)
$(BUILD)/perf/%: docs/perf/%.c abi/kvblock.h $(SHLIB)
	@mkdir -p $(dir $@)
	$(Q)$(call say,CC,$<)$(CC) $(CFLAGS_) -D_POSIX_C_SOURCE=200809L -Iabi $(XXHASH_CFLAGS) -o $@ $< -L$(BUILD)/lib -lkvblock \
	  -Wl,-rpath,'$$ORIGIN/../lib' $(XXHASH_LIBS) -lm -pthread

check: tests
	@BUILD=$(BUILD) CC=$(CC) sh tests/run_tests.sh

# ASan + UBSan build of the library, tool and tests in a separate tree; the long randomized tests run
# their quick subsets (KVB_TEST_QUICK, 8 seeds per differential configuration instead of 60), as under
# valgrind: every code path still runs, and the plain `make check` runs every case.
check-sanitize:
	KVB_TEST_QUICK=1 KVB_DIFF_SEEDS=8 $(MAKE) BUILD=build-san CUDA=0 OPT="-O1 -g -fno-omit-frame-pointer" \
	  SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined" check

# Every variant (see tests/check_all.sh): the README's test command and what CI runs.
.PHONY: check-all
# Its first step installs what the tests need and this machine lacks (the test part of
# tools/install_deps.sh's list, each package printed with why); a package that cannot be installed (no
# root, no sudo) leaves its tests to SKIP, visibly.
check-all: all
	@sh tools/install_deps.sh $(INSTALL_DEPS_FLAGS) test || \
	  echo "check-all: some test dependencies could not be installed (above); the tests that need them SKIP"
	@MAKE="$(MAKE)" sh tests/check_all.sh

# Benchmarks: `kvblock bench` (the manager's hot paths, then the kernels against copy ceilings measured
# in the same run); bench-kernels runs its kernel section alone, on the CPU and on the GPU when one is
# usable. BENCH_ARGS="--device cuda --reps 20" etc. (kvblock bench --help).
.PHONY: bench-kernels
BENCH_ARGS ?= --device auto
bench: all
	$(TOOL) bench $(BENCH_ARGS)

bench-kernels: all
	$(TOOL) bench --only kernels $(BENCH_ARGS)

# Generated in the build tree on every install, so a PREFIX/LIBDIR change (or another build tree's
# install running at the same time) can never leave a stale kvblock.pc behind.
$(BUILD)/kvblock.pc: kvblock.pc.in abi/kvblock.h FORCE
	@mkdir -p $(dir $@)
	$(Q)$(call say,GEN,$@)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	  -e 's|@VERSION@|$(VERSION)|g' -e 's|@LIBS_PRIVATE@|$(PC_LIBS_PRIVATE)|g' \
	  -e 's|@CUDA_LIBDIR@|$(if $(NVCC),$(CUDA_HOME)/lib64)|g' -e '/^cudalibdir=$$/d' $< > $@

INSTALLED := $(INCLUDEDIR)/kvblock.h $(LIBDIR)/libkvblock.so.$(VERSION) $(LIBDIR)/$(SONAME) \
             $(LIBDIR)/libkvblock.so $(LIBDIR)/libkvblock.a $(LIBDIR)/pkgconfig/kvblock.pc $(BINDIR)/kvblock

# The installed tool is linked again with LIBDIR as its rpath (after $$ORIGIN/../lib, which is LIBDIR by
# default and keeps a moved prefix working), so it finds the installed library wherever LIBDIR is.
$(BUILD)/install/kvblock: $(TOOL_OBJS) $(SHLIB) FORCE
	@mkdir -p $(dir $@)
	$(Q)$(call say,LD,$@)$(CC) $(SANITIZE) -o $@ $(TOOL_OBJS) -L$(BUILD)/lib -lkvblock \
	  -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-rpath,'$(LIBDIR)' -lm -pthread

install: lib $(BUILD)/kvblock.pc $(BUILD)/install/kvblock
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR)
	install -m 755 $(BUILD)/install/kvblock $(DESTDIR)$(BINDIR)/kvblock
	install -m 644 abi/kvblock.h $(DESTDIR)$(INCLUDEDIR)/kvblock.h
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/libkvblock.so.$(VERSION)
	ln -sf libkvblock.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libkvblock.so
	install -m 644 $(STLIB) $(DESTDIR)$(LIBDIR)/libkvblock.a
	install -m 644 $(BUILD)/kvblock.pc $(DESTDIR)$(LIBDIR)/pkgconfig/kvblock.pc

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))

clean:
	rm -rf build build-san build-kern build-gpu kvblock.pc

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# Bindings examples (Python cffi, Rust, Go, C via pkg-config): build the library, run each example's tests.
.PHONY: check-bindings cdef
check-bindings: lib cdef
	+@BUILD=$(BUILD) CC=$(CC) MAKE=$(MAKE) sh bindings_examples/run_all.sh

# The cffi declarations (cc -E -P -DKVB_CDEF) for Python hosts without a C compiler; drift-checked by
# tests/scripts/bindings_cdef.sh.
cdef: $(BUILD)/kvblock_cdef.h
$(BUILD)/kvblock_cdef.h: abi/kvblock.h
	@mkdir -p $(dir $@)
	$(Q)$(call say,CPP,$@)$(CC) -E -P -DKVB_CDEF $< > $@.tmp && mv $@.tmp $@
tests: $(BUILD)/kvblock_cdef.h

# ---- One GPU run: built and packed here, run there -------------------------------------------------
# `make gpu-check [GPU_ARCH=sm_90]` builds the library, the tool and the CUDA tests for one architecture
# in build-gpu/ (never mixed with build/) and packs what a bare GPU machine needs into build-gpu/pack/
# (tools/gpu/pack.sh: stripped binaries, libxxhash, the Python package, cffi wheels, run.sh) and into
# build-gpu/pack.tar.xz (the folder is about 160 MiB, the archive about 4). There: `tar xJf pack.tar.xz`,
# then `bash pack/run.sh OUT_DIR [--quick]` (tools/gpu/run.sh says what it runs).
.PHONY: gpu-check
GPU_ARCH  ?= sm_90
GPU_BUILD := build-gpu
GPU_TESTS := c_prefill_bad_input $(patsubst tests/cpp/%.cpp,cpp_%,$(wildcard tests/cpp/kernels_*.cpp))
gpu-check:
	@test -n "$(NVCC)" || { echo "make gpu-check: needs nvcc (CUDA toolkit); none found" >&2; exit 1; }
	$(MAKE) BUILD=$(GPU_BUILD) CUDA_ARCHS="-gencode arch=compute_$(GPU_ARCH:sm_%=%),code=$(GPU_ARCH)" \
	  lib tool cdef $(GPU_TESTS:%=$(GPU_BUILD)/tests/%)
	sh tools/gpu/pack.sh $(GPU_BUILD) $(GPU_BUILD)/pack $(GPU_ARCH) $(GPU_TESTS)

# ---- Reliability variants: fuzzing, ThreadSanitizer, valgrind ----------------------------------------
# `make fuzz`: libFuzzer (clang, ASan+UBSan) over the C API (tests/fuzz/fuzz_capi.cpp), seeded from
# tests/fuzz/corpus; fails on any crash, leak, sanitizer report or invariant failure. By default a fixed
# number of inputs from fixed seeds (FUZZ_RUNS split over FUZZ_JOBS processes, FUZZ_SEED; tests/fuzz/run.sh),
# so that a run (CI's included) can be repeated exactly; `make fuzz FUZZ_SECONDS=N FUZZ_SEED=0` explores
# for N seconds from random seeds.
# `make check-tsan`: the library and the C tests under ThreadSanitizer (build-tsan).
# `make check-valgrind`: every test binary under valgrind memcheck (build-vg); KVB_TEST_QUICK=1 tells
# long randomized tests to shorten themselves (KVB_DIFF_SEEDS=1: one seed per differential config).
.PHONY: fuzz fuzz-build check-tsan check-valgrind tests-c
FUZZ_SECONDS ?= 0
FUZZ_RUNS    ?= 20000
FUZZ_SEED    ?= 1
FUZZ_JOBS    ?= 2
FUZZ_CXX     ?= $(shell command -v clang++-14 2>/dev/null || command -v clang++ 2>/dev/null || echo clang++)
FUZZ_DIR     := build-fuzz
FUZZ_BIN     := $(FUZZ_DIR)/fuzz_capi
FUZZ_COMMON  := -std=c++17 -O1 -g -fno-omit-frame-pointer -fno-sanitize-recover=undefined $(WARN) \
                -Wno-unknown-warning-option -pthread -Iabi -Itests $(shell pkg-config --cflags libxxhash 2>/dev/null)
FUZZ_FLAGS   := -fsanitize=fuzzer,address,undefined $(FUZZ_COMMON)
# The kernels (kvb_copy_slots runs a tree commit's slot pairs) are objects of their own, compiled once:
# the slot copy's with the fuzzer's instrumentation, the others (their per-ISA code is GCC's) plainly.
FUZZ_KERNEL_OBJS := $(patsubst %.cpp,$(FUZZ_DIR)/obj/%.o,$(wildcard kernels/*/*.cpp))
$(FUZZ_DIR)/obj/kernels/tree/%.o: kernels/tree/%.cpp
	@mkdir -p $(dir $@)
	$(Q)$(call say,CXX,$<)$(FUZZ_CXX) -fsanitize=fuzzer-no-link,address,undefined $(FUZZ_COMMON) $(DEPFLAGS) -c $< -o $@
$(FUZZ_DIR)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(Q)$(call say,CXX,$<)$(CXX) -std=c++17 -O1 -g -pthread $(XXHASH_CFLAGS) $(DEPFLAGS) -c $< -o $@
-include $(FUZZ_KERNEL_OBJS:.o=.d)
$(FUZZ_BIN): tests/fuzz/fuzz_capi.cpp $(wildcard tests/fuzz/*.h) tests/kvbt_state.h abi/kvblock.h $(wildcard libkvblock/*.cpp libkvblock/*.h) \
	  $(FUZZ_KERNEL_OBJS)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -o $@ tests/fuzz/fuzz_capi.cpp $(wildcard libkvblock/*.cpp) $(FUZZ_KERNEL_OBJS) \
	  $(shell pkg-config --libs libxxhash 2>/dev/null || echo -lxxhash)
fuzz-build: $(FUZZ_BIN)
fuzz: $(FUZZ_BIN)
	FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) \
	  sh tests/fuzz/run.sh $(FUZZ_BIN) $(FUZZ_DIR)

tests-c: lib $(C_TESTS)
check-tsan:
	$(MAKE) BUILD=build-tsan CUDA=0 OPT="-O1 -g" SANITIZE="-fsanitize=thread" tests-c
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" BUILD=build-tsan sh tests/run_tests.sh 'c_*'

VALGRIND ?= valgrind -q --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect,possible \
            --soname-synonyms=somalloc=nouserintercepts \
            --errors-for-leak-kinds=definite,indirect,possible
check-valgrind:
	$(MAKE) BUILD=build-vg CUDA=0 OPT="-O1 -g" tests
	KVB_TEST_QUICK=1 KVB_DIFF_SEEDS=1 BUILD=build-vg sh tests/run_tests.sh '*' $(VALGRIND)
