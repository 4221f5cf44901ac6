#!/bin/sh
# kvblock bench --quick (JSON shape, sane numbers) and the manual pages (--help of every command).
. tests/scripts/tool_common.inc

"$KVB" bench --quick --json --prompt-tokens 1024 --decode-seqs 8 >"$TMP/b.json"
check "bench --quick --json: exit 0" [ $? -eq 0 ]
check "bench json: valid" valid_json "$TMP/b.json"
for k in hash kvb_hash_tokens miss hit decode targets config; do
  check "bench json: has $k" grep -q "\"$k\": {" "$TMP/b.json"
done
check "bench json: medians positive" sh -c "! grep -q '\"median\": 0.00[,}]' '$TMP/b.json'"
check "bench json: reps 3" grep -q '"reps": 3' "$TMP/b.json"
"$KVB" bench --quick --reps 2 --iters 4 --prompt-tokens 256 --decode-tokens 16 >"$TMP/b.txt"
check "bench human: exit 0" [ $? -eq 0 ]
check "bench human: table" grep -Eq '^  hit: allocate\+free \(cached\) +[0-9.]+ ' "$TMP/b.txt"
check "bench human: targets line" grep -q 'targets: hit <= 3x hash' "$TMP/b.txt"
"$KVB" bench --reps 0 2>/dev/null
check "bench --reps 0 refused" [ $? -eq 2 ]
"$KVB" bench --nope 2>/dev/null
check "bench unknown option" [ $? -eq 2 ]

"$KVB" --help >"$TMP/h.txt"
check "--help: exit 0" [ $? -eq 0 ]
check "--help: sections" sh -c "grep -q '^NAME' '$TMP/h.txt' && grep -q '^SYNOPSIS' '$TMP/h.txt' && grep -q '^EXAMPLES' '$TMP/h.txt'"
check "--help: lists commands" sh -c "grep -q 'kvblock replay TRACE' '$TMP/h.txt' && grep -q 'kvblock bench' '$TMP/h.txt'"
"$KVB" >/dev/null
check "no arguments: usage exit 2" [ $? -eq 2 ]
"$KVB" replay --help >"$TMP/r.txt"
check "replay --help: exit 0" [ $? -eq 0 ]
for s in NAME SYNOPSIS DESCRIPTION OPTIONS 'TIMED MODE' 'EXIT STATUS' EXAMPLES; do
  check "replay --help: $s" grep -q "^$s" "$TMP/r.txt"
done
check "replay --help: expansion rule" grep -q 'hash_ids\[i/512\]\*512 + i%512' "$TMP/r.txt"
check "replay --help: documents default pool" grep -q 'capped at 4194304' "$TMP/r.txt"
for o in --block-size --num-blocks --format --mode --json --quiet --check --speed --max-seqs \
         --max-batch-tokens --preempt --num-host-blocks --watermark --svg --step-base-us; do
  check "replay --help: $o" grep -q -- "$o" "$TMP/r.txt"
done
"$KVB" bench --help >"$TMP/bh.txt"
check "bench --help: exit 0" [ $? -eq 0 ]
for o in NAME SYNOPSIS --quick --reps --json; do
  check "bench --help: $o" grep -q -- "$o" "$TMP/bh.txt"
done
"$KVB" help replay | cmp -s - "$TMP/r.txt"
check "help replay = replay --help" [ $? -eq 0 ]
"$KVB" --version >"$TMP/v.txt"
check "--version" grep -Eq '^kvblock [0-9]+\.[0-9]+\.[0-9]+ \(libkvblock [0-9.]+\)$' "$TMP/v.txt"
finish
