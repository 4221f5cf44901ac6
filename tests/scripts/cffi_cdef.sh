#!/bin/sh
# The public header, preprocessed with -DKVB_CDEF, must be accepted by cffi's FFI.cdef() (abi/ABI.md;
# docs/ARCHITECTURE.md, "ABI rules").
# Skipped when python3 or cffi is missing.
CC=${CC:-cc}
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import cffi' >/dev/null 2>&1; then
  echo "SKIP cffi_cdef: python3 with cffi not available"
  echo "0 passed, 0 failed"
  exit 0
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if ! $CC -E -P -DKVB_CDEF abi/kvblock.h >"$out"; then
  echo "FAIL cffi_cdef: $CC -E -P -DKVB_CDEF abi/kvblock.h failed"
  echo "0 passed, 1 failed"
  exit 1
fi
if python3 - "$out" <<'PY'
import sys, cffi
text = open(sys.argv[1]).read()
ffi = cffi.FFI()
ffi.cdef(text)
# a few things bindings rely on are really there
assert ffi.sizeof("kvb_config") > 0 and ffi.sizeof("kvb_event") > 0
assert int(ffi.cast("kvb_status", -9)) == -9
for name in ("kvb_manager_create", "kvb_seq_allocate", "kvb_hash_tokens", "kvb_drain_events"):
    assert "kvb_" in name and name in text, name
PY
then
  echo "1 passed, 0 failed"
else
  echo "FAIL cffi_cdef: cffi.FFI().cdef() rejected the preprocessed header"
  echo "0 passed, 1 failed"
  exit 1
fi
