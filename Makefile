# libkvblock build. `make` builds the shared and static library and the kvblock tool; `make check` runs
# every test; `make check-sanitize` does the same under ASan+UBSan. CUDA kernels are built when nvcc is
# found (force off with CUDA=0).

VERSION_MAJOR := $(shell sed -n 's/^\#define KVB_VERSION_MAJOR \([0-9]*\)/\1/p' abi/kvblock.h)
VERSION_MINOR := $(shell sed -n 's/^\#define KVB_VERSION_MINOR \([0-9]*\)/\1/p' abi/kvblock.h)
VERSION_PATCH := $(shell sed -n 's/^\#define KVB_VERSION_PATCH \([0-9]*\)/\1/p' abi/kvblock.h)
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

BUILD    ?= build
CC       ?= gcc
CXX      ?= g++
OPT      ?= -O2 -g
SANITIZE ?=
WARN     := -Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter
CFLAGS_  := -std=c99 $(OPT) $(WARN) $(SANITIZE) $(CFLAGS)
CXXFLAGS_:= -std=c++17 $(OPT) $(WARN) $(SANITIZE) -fPIC -fvisibility=hidden -fvisibility-inlines-hidden \
            -pthread $(shell pkg-config --cflags libxxhash 2>/dev/null) $(CXXFLAGS)
LDLIBS_  := $(shell pkg-config --libs libxxhash 2>/dev/null || echo -lxxhash) -pthread

PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
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
  NVCCFLAGS_ := -std=c++17 -O3 $(CUDA_ARCHS) -Xcompiler -fPIC,-fvisibility=hidden -DKVB_WITH_CUDA=1 $(NVCCFLAGS)
  CXXFLAGS_  += -DKVB_WITH_CUDA=1
  LDLIBS_    += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
  CUDA_SRCS  := $(wildcard kernels/cuda/*.cu)
endif

LIB_SRCS  := $(wildcard libkvblock/*.cpp) $(wildcard kernels/*.cpp) $(wildcard kernels/cpu/*.cpp)
LIB_OBJS  := $(LIB_SRCS:%.cpp=$(BUILD)/obj/%.o) $(CUDA_SRCS:%.cu=$(BUILD)/obj/%.cu.o)
TOOL_SRCS := $(wildcard tools/*.c)
TOOL_OBJS := $(TOOL_SRCS:%.c=$(BUILD)/obj/%.o)

SONAME  := libkvblock.so.$(VERSION_MAJOR)
SHLIB   := $(BUILD)/lib/libkvblock.so.$(VERSION)
STLIB   := $(BUILD)/lib/libkvblock.a
TOOL    := $(BUILD)/bin/kvblock

# Tests: tests/c/*.c see only the public header and link the shared library; tests/cpp/*.cpp may use
# the internal C++ classes and link the static library. Each prints "N passed, N failed" last.
C_TESTS   := $(patsubst tests/c/%.c,$(BUILD)/tests/c_%,$(wildcard tests/c/*.c))
CPP_TESTS := $(patsubst tests/cpp/%.cpp,$(BUILD)/tests/cpp_%,$(wildcard tests/cpp/*.cpp))

.PHONY: all lib tool check check-sanitize tests install uninstall clean bench
all: lib tool
lib: $(SHLIB) $(STLIB)
tool: $(TOOL)

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS_) -c $< -o $@

$(BUILD)/obj/tools/%.o: tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_) -D_POSIX_C_SOURCE=200809L -Iabi -MMD -MP -c $< -o $@

$(SHLIB): $(LIB_OBJS) abi/libkvblock.map
	@mkdir -p $(dir $@)
	$(CXX) -shared $(SANITIZE) -Wl,-soname,$(SONAME) -Wl,--version-script=abi/libkvblock.map \
	  -Wl,--no-undefined -o $@ $(LIB_OBJS) $(LDLIBS_)
	ln -sf libkvblock.so.$(VERSION) $(BUILD)/lib/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/lib/libkvblock.so

$(STLIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The tool is a plain C consumer of the shared library.
$(TOOL): $(TOOL_OBJS) $(SHLIB)
	@mkdir -p $(dir $@)
	$(CC) $(SANITIZE) -o $@ $(TOOL_OBJS) -L$(BUILD)/lib -lkvblock -Wl,-rpath,'$$ORIGIN/../lib' -lm

$(BUILD)/tests/c_%: tests/c/%.c tests/harness.h abi/kvblock.h $(SHLIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_) -D_POSIX_C_SOURCE=200809L -Iabi -Itests -o $@ $< -L$(BUILD)/lib -lkvblock \
	  -Wl,-rpath,'$$ORIGIN/../lib' -lm -pthread

$(BUILD)/tests/cpp_%: tests/cpp/%.cpp tests/harness.h $(STLIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_) -Itests -o $@ $< $(STLIB) $(LDLIBS_)

tests: all $(C_TESTS) $(CPP_TESTS)

check: tests
	@BUILD=$(BUILD) CC=$(CC) sh tests/run_tests.sh

# ASan + UBSan build of the library, tool and tests in a separate tree.
check-sanitize:
	$(MAKE) BUILD=build-san CUDA=0 OPT="-O1 -g -fno-omit-frame-pointer" \
	  SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined" check

bench: all
	$(BUILD)/bin/kvblock bench

kvblock.pc: kvblock.pc.in abi/kvblock.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	  -e 's|@VERSION@|$(VERSION)|g' -e 's|@LIBS_PRIVATE@|$(LDLIBS_)|g' $< > $@

INSTALLED := $(INCLUDEDIR)/kvblock.h $(LIBDIR)/libkvblock.so.$(VERSION) $(LIBDIR)/$(SONAME) \
             $(LIBDIR)/libkvblock.so $(LIBDIR)/libkvblock.a $(LIBDIR)/pkgconfig/kvblock.pc

install: lib kvblock.pc
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 abi/kvblock.h $(DESTDIR)$(INCLUDEDIR)/kvblock.h
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/libkvblock.so.$(VERSION)
	ln -sf libkvblock.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libkvblock.so
	install -m 644 $(STLIB) $(DESTDIR)$(LIBDIR)/libkvblock.a
	install -m 644 kvblock.pc $(DESTDIR)$(LIBDIR)/pkgconfig/kvblock.pc
	rm -f kvblock.pc

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))

clean:
	rm -rf build build-san kvblock.pc

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
