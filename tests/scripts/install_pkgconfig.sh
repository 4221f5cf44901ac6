#!/bin/sh
# `make install` into a temporary PREFIX, build a C consumer with `pkg-config --cflags --libs kvblock`,
# run it (with LD_LIBRARY_PATH, and with an rpath as the README says), run the installed kvblock tool
# (it finds the installed library by itself, also with LIBDIR elsewhere), link it statically through
# `pkg-config --static` (against libkvblock.a alone too), check that the shared library exports only
# kvb_* symbols, then `make uninstall` and check that only empty directories are left. Uses the build
# tree under test ($BUILD) and its CUDA setting, so nothing is rebuilt.
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
# The library was last linked with CUDA objects or without (the Makefile records which object folder in
# obj/linked-from); install with the same setting.
cuda_arg="CUDA=0"
case "$(cat "$BUILD/obj/linked-from" 2>/dev/null)" in */cuda) cuda_arg="" ;; esac

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
for f in include/kvblock.h lib/libkvblock.so lib/libkvblock.a lib/pkgconfig/kvblock.pc bin/kvblock; do
  [ -e "$prefix/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "installed files present" || bad "missing after install:$missing"

# The tool is installed with the library and finds it without LD_LIBRARY_PATH.
if out=$(env -u LD_LIBRARY_PATH "$prefix/bin/kvblock" --version 2>&1) && echo "$out" | grep -q '^kvblock '; then
  ok "installed tool runs without LD_LIBRARY_PATH ($out)"
else
  bad "installed tool: $out"
fi
if env -u LD_LIBRARY_PATH ldd "$prefix/bin/kvblock" 2>/dev/null | grep -q "$prefix/bin/../lib/libkvblock.so\|$prefix/lib/libkvblock.so"; then
  ok "installed tool loads the installed library"
else
  bad "installed tool does not load $prefix/lib/libkvblock.so.*: $(ldd "$prefix/bin/kvblock" 2>&1 | grep kvblock)"
fi
# LIBDIR outside PREFIX/lib (lib64, a distribution's multiarch folder): the tool's rpath names it.
prefix2=$(mktemp -d)
if $MAKE -s BUILD="$BUILD" $cuda_arg PREFIX="$prefix2" LIBDIR="$prefix2/lib64" install >"$work/install2.log" 2>&1 &&
   out=$(env -u LD_LIBRARY_PATH "$prefix2/bin/kvblock" replay tests/scripts/data/tiny_mooncake.jsonl 2>&1) &&
   env -u LD_LIBRARY_PATH ldd "$prefix2/bin/kvblock" | grep -q "$prefix2/lib64/libkvblock.so"; then
  ok "LIBDIR=PREFIX/lib64: the installed tool finds its library"
else
  bad "LIBDIR=PREFIX/lib64: $(tail -n 5 "$work/install2.log") $out"
fi
$MAKE -s BUILD="$BUILD" $cuda_arg PREFIX="$prefix2" LIBDIR="$prefix2/lib64" uninstall >/dev/null 2>&1
left2=$(find "$prefix2" ! -type d)
[ -z "$left2" ] && ok "LIBDIR=PREFIX/lib64: uninstall leaves nothing" || bad "left after uninstall: $left2"
rm -rf "$prefix2"

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

# The README's command for a prefix the loader does not search: an rpath from pkg-config's libdir.
# shellcheck disable=SC2086
if $CC -std=c99 $san -o "$work/consumer_rpath" "$work/consumer.c" $flags \
     -Wl,-rpath,"$(pkg-config --variable=libdir kvblock)" 2>"$work/cc.log" &&
   out=$(env -u LD_LIBRARY_PATH "$work/consumer_rpath") && echo "$out" | grep -q "consumer ok"; then
  ok "with -Wl,-rpath,\$(pkg-config --variable=libdir kvblock) it runs without LD_LIBRARY_PATH"
else
  bad "rpath consumer: $(cat "$work/cc.log") $out"
fi

# Static linking: --static adds Libs.private, what libkvblock.a needs besides itself (the C++ runtime
# for a C compiler, xxHash, and with CUDA the static CUDA runtime from ${cudalibdir}).
sflags=$(pkg-config --static --cflags --libs kvblock)
missing=""
for l in -lkvblock -lxxhash -lstdc++ -lm -pthread; do
  echo " $sflags " | grep -q -- " $l " || missing="$missing $l"
done
[ -z "$missing" ] && ok "pkg-config --static --libs: $sflags" || bad "pkg-config --static --libs lacks$missing: $sflags"
if [ -z "$cuda_arg" ]; then
  echo "$sflags" | grep -q -- "-lcudart_static" && ok "--static: the CUDA runtime" || bad "--static lacks -lcudart_static"
  over=$(pkg-config --static --define-variable=cudalibdir=/opt/cuda-elsewhere/lib64 --libs kvblock)
  echo "$over" | grep -q -- "-L/opt/cuda-elsewhere/lib64 -lcudart_static" &&
    ok "cudalibdir can be overridden" || bad "--define-variable=cudalibdir ignored: $over"
else
  echo "$sflags" | grep -q cuda && bad "CUDA in a CUDA=0 kvblock.pc: $sflags" || ok "--static: nothing of CUDA in a CUDA=0 build"
fi
# The issue's command, as written, against the installed prefix.
# shellcheck disable=SC2086
if $CC -std=c99 $san -o "$work/consumer_s1" "$work/consumer.c" $sflags 2>"$work/cc.log" &&
   LD_LIBRARY_PATH="$prefix/lib" "$work/consumer_s1" | grep -q "consumer ok"; then
  ok "cc app.c \$(pkg-config --static --cflags --libs kvblock) links and runs"
else
  bad "static-flags consumer: $(cat "$work/cc.log")"
fi
# Where only libkvblock.a is installed, the same command links it in: no libkvblock.so needed at run time.
mkdir -p "$work/static_only"
cp "$prefix/lib/libkvblock.a" "$work/static_only/"
sflags2=$(pkg-config --static --define-variable=libdir="$work/static_only" --cflags --libs kvblock)
# shellcheck disable=SC2086
if $CC -std=c99 $san -o "$work/consumer_static" "$work/consumer.c" $sflags2 2>"$work/cc.log"; then
  ok "static link against libkvblock.a alone"
  if out=$(env -u LD_LIBRARY_PATH "$work/consumer_static") && echo "$out" | grep -q "consumer ok"; then
    ok "statically linked consumer runs ($out)"
  else
    bad "statically linked consumer failed: $out"
  fi
  if ldd "$work/consumer_static" 2>/dev/null | grep -q libkvblock; then
    bad "statically linked consumer still loads libkvblock.so"
  else
    ok "statically linked consumer needs no libkvblock.so"
  fi
else
  bad "static link failed ($sflags2):"
  cat "$work/cc.log"
fi

# The version nodes of libkvblock.map (KVB_0.1, ...) show as absolute symbols: not functions.
syms=$(nm -D --defined-only "$prefix/lib/libkvblock.so" | awk 'NF >= 3 && !($2 == "A" && $3 ~ /^KVB_[0-9.]+$/) {print $3}')
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
