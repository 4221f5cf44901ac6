#!/bin/sh
# Symbol versions (abi/ABI.md, "Symbol versions"): every kvb_* function the shared library exports carries
# version KVB_0.1 (abi/libkvblock.map), except the _init of the structs that grew after it
# (kvb_cache_desc_init, kvb_attention_args_init with FP8 caches, kvb_prefill_args_init with allow_tf32): KVB_0.2 by default
# (kvb_batch_init, grown with token trees: KVB_0.3), their KVB_0.1 versions kept, and a program linked against the library records KVB_0.1
# references, which is what lets a later release serve it the KVB_0.1 behaviour (the _init of a struct
# that grew writes the 0.1 size). Skipped without objdump.
BUILD=${BUILD:-build}
lib="$BUILD/lib/libkvblock.so"
consumer="$BUILD/tests/c_core_api"
if ! command -v objdump >/dev/null 2>&1; then
  echo "SKIP abi_symbols: objdump not installed"
  echo "0 passed, 0 failed"
  exit 0
fi
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   abi_symbols: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL abi_symbols: $1"; }
for f in "$lib" "$consumer"; do
  [ -f "$f" ] || { echo "FAIL abi_symbols: $f not built"; echo "0 passed, 1 failed"; exit 1; }
done
# objdump -T rows: ... FLAGS SECTION SIZE VERSION NAME; the version is "(V)" for a hidden one or a reference.
defined=$(objdump -T "$lib" | awk '$NF ~ /^kvb_/ && $0 !~ /\*UND\*/ {print $(NF-1), $NF}')
n=$(echo "$defined" | grep -c ' kvb_')
grown='kvb_cache_desc_init kvb_attention_args_init kvb_prefill_args_init kvb_stats_init kvb_batch_init'
is_grown() { case " $grown " in *" $1 "*) return 0;; esac; return 1; }
# The version a grown _init has by default: the node of the release that last grew its struct.
grown_version() { case "$1" in kvb_batch_init) echo KVB_0.3;; *) echo KVB_0.2;; esac; }
# The "version name" lines of stdin not at the version expected: a grown _init's default one, KVB_0.1 for
# the rest; $1 is "()" where objdump prints the versions in parentheses; with $2 set a grown _init may also
# be its hidden old version "(KVB_0.1)".
unexpected() {
  while read -r v name; do
    if is_grown "$name"; then want=$(grown_version "$name"); else want=KVB_0.1; fi
    [ "$1" = "()" ] && want="($want)"
    [ "$v" = "$want" ] || { [ -n "$2" ] && is_grown "$name" && [ "$v" = "(KVB_0.1)" ]; } || echo "$v $name"
  done
}
others=$(echo "$defined" | unexpected "" old)
if [ "$n" -gt 30 ] && [ -z "$others" ]; then
  ok "the library exports $n kvb_* functions, each at version KVB_0.1 (the grown _init at KVB_0.2 / 0.3)"
else
  bad "exported kvb_* functions not at KVB_0.1 (of $n): $(echo "$others" | head -n 5 | tr '\n' ';')"
fi
for name in $grown; do
  gv=$(grown_version "$name")
  if echo "$defined" | grep -q "^(KVB_0.1) $name\$" && echo "$defined" | grep -q "^$gv $name\$"; then
    ok "$name exists at $gv (default) and KVB_0.1 (for binaries linked before it grew)"
  else
    bad "$name is not at both $gv and KVB_0.1"
  fi
done
if objdump -T "$lib" | grep -q 'kvbv01_'; then bad "the KVB_0.1 _init bodies leak under their own names"; fi
refs=$(objdump -T "$consumer" | awk '$NF ~ /^kvb_/ && /\*UND\*/ {print $(NF-1), $NF}')
n=$(echo "$refs" | grep -c ' kvb_')
others=$(echo "$refs" | unexpected "()")
if [ "$n" -gt 10 ] && [ -z "$others" ]; then
  ok "a program linked against it ($consumer) records $n references, each to KVB_0.1 (grown _init: KVB_0.2)"
else
  bad "references of $consumer not to KVB_0.1 / KVB_0.2 as expected (of $n): $(echo "$others" | head -n 5 | tr '\n' ';')"
fi
if echo "$refs" | grep -q '(KVB_0.1) kvb_config_init$'; then
  ok "kvb_config_init@KVB_0.1 is among them"
else
  bad "kvb_config_init@KVB_0.1 is not referenced by $consumer"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
