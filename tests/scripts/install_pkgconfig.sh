#!/bin/sh
# `make install` into a temporary PREFIX, build a C consumer with `pkg-config --cflags --libs kvblock`,
# run it, check that the shared library exports only kvb_* symbols, then `make uninstall` and check that
# only empty directories are left. Uses the build tree under test ($BUILD) and its CUDA setting, so
# nothing is rebuilt.
BUILD=${BUILD:-build}
CC=${CC:-cc}
MAKE=${MAKE:-make}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

if ! command -v pkg-config >/dev/null 2>&1; then
  echo "SKIP install_pkgconfig: pkg-config not installed"
  echo "0 passed, 0 failed"
  exit 0
fi
# The build tree was made with CUDA objects or without; install with the same setting.
cuda_arg="CUDA=0"
if [ -n "$(find "$BUILD/obj" -name '*.cu.o' 2>/dev/null | head -n 1)" ]; then cuda_arg=""; fi

prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT

if $MAKE -s BUILD="$BUILD" $cuda_arg PREFIX="$prefix" install >"$work/install.log" 2>&1; then
  ok "make install PREFIX=<tmp> BUILD=$BUILD $cuda_arg"
else
  bad "make install failed:"
  tail -n 20 "$work/install.log"
  finish
fi
missing=""
for f in include/kvblock.h lib/libkvblock.so lib/libkvblock.a lib/pkgconfig/kvblock.pc; do
  [ -e "$prefix/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "installed files present" || bad "missing after install:$missing"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
if flags=$(pkg-config --cflags --libs kvblock) && echo "$flags" | grep -q -- "-I$prefix/include" &&
   echo "$flags" | grep -q -- "-L$prefix/lib"; then
  ok "pkg-config --cflags --libs kvblock: $flags"
else
  bad "pkg-config gave '$flags' (want -I$prefix/include -L$prefix/lib)"
fi
[ "$(pkg-config --modversion kvblock)" = "$(sed -n 's/^#define KVB_VERSION_MAJOR //p' abi/kvblock.h).$(sed -n 's/^#define KVB_VERSION_MINOR //p' abi/kvblock.h).$(sed -n 's/^#define KVB_VERSION_PATCH //p' abi/kvblock.h)" ] &&
  ok "pkg-config --modversion matches the header" || bad "pkg-config --modversion is $(pkg-config --modversion kvblock)"

cat >"$work/consumer.c" <<'C'
#include <kvblock.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  int64_t t[5] = {1, 2, 3, 4, 5};
  size_t cached = 1, nfree = 0;
  kvb_config_init(&cfg);
  cfg.block_size = 4;
  cfg.num_blocks = 8;
  if (kvb_version() != KVB_VERSION_MAJOR * 10000 + KVB_VERSION_MINOR * 100 + KVB_VERSION_PATCH) return 1;
  if (kvb_manager_create(&cfg, &m) != KVB_OK) return 2;
  if (kvb_seq_allocate(m, 1, t, 5, &cached) != KVB_OK || cached != 0) return 3;
  if (kvb_num_free_blocks(m, &nfree) != KVB_OK || nfree != 6) return 4;
  if (kvb_check_invariants(m) != KVB_OK) return 5;
  kvb_manager_destroy(m);
  printf("consumer ok %s\n", kvb_version_string());
  return 0;
}
C
# A sanitized build tree (check-sanitize) needs the sanitizer runtime in the consumer too.
san=""
if nm -D "$prefix/lib/libkvblock.so" 2>/dev/null | grep -q '__asan_init'; then san="-fsanitize=address,undefined"; fi
# shellcheck disable=SC2086
if $CC -std=c99 -Wall -Wextra -Wpedantic -Werror $san -o "$work/consumer" "$work/consumer.c" $flags 2>"$work/cc.log"; then
  ok "compiled a consumer with pkg-config flags"
  if out=$(LD_LIBRARY_PATH="$prefix/lib" "$work/consumer") && echo "$out" | grep -q "consumer ok"; then
    ok "consumer runs against the installed library ($out)"
  else
    bad "consumer failed: $out"
  fi
  if LD_LIBRARY_PATH="$prefix/lib" ldd "$work/consumer" 2>/dev/null | grep -q "$prefix/lib/libkvblock.so"; then
    ok "consumer resolves libkvblock from the prefix"
  else
    bad "consumer does not load $prefix/lib/libkvblock.so.*"
  fi
else
  bad "consumer did not compile:"
  cat "$work/cc.log"
fi

syms=$(nm -D --defined-only "$prefix/lib/libkvblock.so" | awk 'NF >= 3 {print $3}')
others=$(echo "$syms" | grep -v '^kvb_' | grep -v '^$')
nkvb=$(echo "$syms" | grep -c '^kvb_')
if [ -z "$others" ] && [ "$nkvb" -gt 30 ]; then
  ok "nm -D --defined-only: only kvb_* symbols ($nkvb)"
else
  bad "exported symbols other than kvb_*: $(echo "$others" | head -n 10 | tr '\n' ' ') (kvb_* count $nkvb)"
fi
soname=$(objdump -p "$prefix/lib/libkvblock.so" 2>/dev/null | awk '/SONAME/ {print $2}')
case "$soname" in
  libkvblock.so.[0-9]*) ok "soname $soname" ;;
  *) bad "soname is '$soname'" ;;
esac

if $MAKE -s BUILD="$BUILD" $cuda_arg PREFIX="$prefix" uninstall >"$work/uninstall.log" 2>&1; then
  ok "make uninstall"
else
  bad "make uninstall failed:"
  tail -n 20 "$work/uninstall.log"
fi
left=$(find "$prefix" ! -type d)
[ -z "$left" ] && ok "nothing but empty directories left" || bad "left after uninstall: $left"
finish
