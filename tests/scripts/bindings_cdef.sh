#!/bin/sh
# The cffi view of abi/kvblock.h, as the Python bindings example uses it: $BUILD/kvblock_cdef.h (make cdef)
# has not drifted from `cc -E -P -DKVB_CDEF`, cffi accepts it, the functions it declares are exactly the
# library's exports, and the example loads through that file when no C compiler is available.
BUILD=${BUILD:-build}
CC=${CC:-cc}
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import cffi' 2>/dev/null; then
  echo "SKIP bindings_cdef: python3 with cffi not found"
  echo "0 passed, 0 failed"
  exit 0
fi
pass=0 fail=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1"; fail=$((fail + 1)); }
cdef="$BUILD/kvblock_cdef.h"
lib="$BUILD/lib/libkvblock.so"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

if [ ! -f "$cdef" ]; then
  ko "cdef: $cdef missing (make cdef)"
elif ! command -v "$CC" >/dev/null 2>&1; then
  echo "SKIP cdef drift: no C compiler ($CC)"
elif "$CC" -E -P -DKVB_CDEF abi/kvblock.h >"$tmp" && cmp -s "$tmp" "$cdef"; then
  ok "cdef: $cdef matches $CC -E -P -DKVB_CDEF abi/kvblock.h"
else
  ko "cdef: $cdef differs from abi/kvblock.h (make cdef); diff:"
  diff "$tmp" "$cdef" | head -20
fi

if [ -f "$lib" ] && ldd "$lib" 2>/dev/null | grep -q 'lib[at]san'; then
  # A sanitizer runtime must be the first library of the process, which python3's is not.
  echo "SKIP cdef load checks: $lib is built with a sanitizer (python3 cannot load it)"
elif [ -f "$cdef" ] && [ -f "$lib" ]; then
  if python3 - "$cdef" "$lib" <<'PY'
import re, subprocess, sys
import cffi
text = open(sys.argv[1]).read()
ffi = cffi.FFI()
ffi.cdef(text)
lib = ffi.dlopen(sys.argv[2])
declared = set(re.findall(r"\b(kvb_\w+)\s*\(", text))
missing = sorted(n for n in declared if not hasattr(lib, n))
nm = subprocess.run(["nm", "-D", "--defined-only", sys.argv[2]], capture_output=True, text=True)
# nm shows versioned names (kvb_x@@KVB_0.1, abi/libkvblock.map): the symbol is the part before the '@'
exported = {l.split()[-1].split("@")[0] for l in nm.stdout.splitlines() if l.split()[-1].startswith("kvb_")}
undeclared = sorted(exported - declared) if nm.returncode == 0 else []
if missing or undeclared:
    print("declared, not exported:", missing, "exported, not declared:", undeclared)
    sys.exit(1)
print(len(declared), "functions")
PY
  then ok "cdef: cffi accepts it; declarations = exports of $lib"; else ko "cdef: cffi or symbol check"; fi

  if CC=/nonexistent/cc KVBLOCK_CDEF="$cdef" KVBLOCK_LIB="$lib" PYTHONPATH=bindings_examples/python \
     PYTHONDONTWRITEBYTECODE=1 python3 -c '
import kvblock
assert kvblock._lib.CDEF_SOURCE.endswith("kvblock_cdef.h"), kvblock._lib.CDEF_SOURCE
with kvblock.Manager(num_blocks=4) as m:
    assert m.allocate(1, [1, 2, 3]) == 0
'; then ok "python example loads through the cdef file without a C compiler"
  else ko "python example without a C compiler"; fi
else
  ko "cdef: $cdef or $lib missing"
fi
echo "$pass passed, $fail failed"
