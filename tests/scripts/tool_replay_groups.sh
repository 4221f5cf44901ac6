#!/bin/sh
# kvblock replay --groups (issue 17): KV cache groups of a hybrid model in the sequential replay.
# One full group is the plain replay; two full groups on twice the pool behave the same; a window group
# never holds more than the full group; bad specs are usage errors.
. tests/scripts/tool_common.inc
SAMPLE=traces/sample_mooncake.jsonl

"$KVB" replay "$SAMPLE" --num-blocks 3000 --json --quiet >"$TMP/plain.json"
"$KVB" replay "$SAMPLE" --num-blocks 3000 --groups full --json --quiet --check >"$TMP/one.json"
"$KVB" replay "$SAMPLE" --num-blocks 6000 --groups full,full --json --quiet --check >"$TMP/two.json"
"$KVB" replay "$SAMPLE" --num-blocks 6000 --groups full,window:256:4 --json --quiet --check >"$TMP/hyb.json"
check "valid JSON" valid_json "$TMP/hyb.json"
p=$(json_field "$TMP/plain.json" cached_tokens)
o=$(json_field "$TMP/one.json" cached_tokens)
t=$(json_field "$TMP/two.json" cached_tokens)
h=$(json_field "$TMP/hyb.json" cached_tokens)
check "one full group = no groups ($p, $o cached tokens)" [ "$p" = "$o" ]
check "two full groups on twice the pool = one ($p, $t)" [ "$p" = "$t" ]
check "hybrid finds hits ($h)" [ "$h" -gt 0 ]
f0=$(json_field "$TMP/hyb.json" peak_blocks_group0)
w1=$(json_field "$TMP/hyb.json" peak_blocks_group1)
check "window group holds no more than the full group ($w1 <= $f0)" [ "$w1" -le "$f0" ]
"$KVB" replay "$SAMPLE" --groups full,window:256 --quiet >"$TMP/h.txt"
check "human report names the groups" grep -q "peak blocks, group 1 .*(window 256, sinks 0)" "$TMP/h.txt"
for bad in "" "full," "window:0" "window:x" "full,sliding" "window:8:" "full;full"; do
  "$KVB" replay "$SAMPLE" --groups "$bad" --quiet >/dev/null 2>"$TMP/e.txt"
  check "--groups '$bad' is a usage error" [ $? -eq 2 ]
done
"$KVB" replay "$SAMPLE" --groups full --mode timed --preempt swap --quiet >/dev/null 2>&1
check "--groups refused with --preempt swap" [ $? -eq 2 ]
"$KVB" replay "$SAMPLE" --mode timed --num-blocks 3000 --json --quiet >"$TMP/t_plain.json"
"$KVB" replay "$SAMPLE" --mode timed --num-blocks 3000 --groups full --json --quiet --check >"$TMP/t_one.json"
check "timed: one full group = no groups" [ "$(json_field "$TMP/t_plain.json" cached_tokens)" = \
  "$(json_field "$TMP/t_one.json" cached_tokens)" ]
"$KVB" replay "$SAMPLE" --mode timed --num-blocks 6000 --groups full,window:256 --json --quiet --check >"$TMP/t_hyb.json"
check "timed hybrid: valid JSON" valid_json "$TMP/t_hyb.json"
"$KVB" replay "$SAMPLE" --groups full --host-cache --quiet >/dev/null 2>&1
check "--groups refused with --host-cache" [ $? -eq 2 ]
finish
