#!/bin/sh
# Cross-checks kvb_hash_tokens with the xxhsum tool: $BUILD/tests/c_hash_vectors --dump writes the
# documented byte layout of each vector (parent u64 LE + tokens i64 LE) and its kvb_hash_tokens value;
# `xxhsum -H1` (XXH64, seed 0) must print the same digest. Skipped when xxhsum is not installed.
BUILD=${BUILD:-build}
bin="$BUILD/tests/c_hash_vectors"
if ! command -v xxhsum >/dev/null 2>&1; then
  echo "SKIP hash_xxhsum: xxhsum not installed"
  echo "0 passed, 0 failed"
  exit 0
fi
if [ ! -x "$bin" ]; then
  echo "FAIL hash_xxhsum: $bin not built"
  echo "0 passed, 1 failed"
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if ! "$bin" --dump "$dir" >"$dir/expected"; then
  echo "FAIL hash_xxhsum: $bin --dump failed"
  echo "0 passed, 1 failed"
  exit 1
fi
pass=0
fail=0
while read -r name want; do
  got=$(xxhsum -H1 "$dir/$name.bin" 2>/dev/null | awk '{print $1}')
  if [ "$got" = "$want" ]; then
    pass=$((pass + 1))
  else
    echo "FAIL hash_xxhsum $name: xxhsum says '$got', kvb_hash_tokens says '$want'"
    fail=$((fail + 1))
  fi
done <"$dir/expected"
[ $((pass + fail)) -gt 0 ] || { echo "FAIL hash_xxhsum: no vectors"; fail=1; }
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
