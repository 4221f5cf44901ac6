#!/bin/sh
# kvblock replay --groups: KV cache groups of a hybrid model in the sequential replay.
# One full group is the plain replay; two full groups on twice the pool behave the same; a window group
# never holds more than the full group; bad specs are usage errors. With the host cache one full group is
# again the plain replay and the hybrid finds host hits; timed --preempt swap swaps hybrid sequences out
# and back (--check: kvb_check_invariants after every step).
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
"$KVB" replay "$SAMPLE" --mode timed --num-blocks 3000 --json --quiet >"$TMP/t_plain.json"
"$KVB" replay "$SAMPLE" --mode timed --num-blocks 3000 --groups full --json --quiet --check >"$TMP/t_one.json"
check "timed: one full group = no groups" [ "$(json_field "$TMP/t_plain.json" cached_tokens)" = \
  "$(json_field "$TMP/t_one.json" cached_tokens)" ]
"$KVB" replay "$SAMPLE" --mode timed --num-blocks 6000 --groups full,window:256 --json --quiet --check >"$TMP/t_hyb.json"
check "timed hybrid: valid JSON" valid_json "$TMP/t_hyb.json"
"$KVB" replay "$SAMPLE" --num-blocks 1000 --host-cache --num-host-blocks 3000 --json --quiet >"$TMP/hc_plain.json"
"$KVB" replay "$SAMPLE" --num-blocks 1000 --groups full --host-cache --num-host-blocks 3000 --json --quiet --check \
  >"$TMP/hc_one.json"
for k in cached_tokens host_hit_tokens loaded_blocks offloaded_blocks; do
  check "host cache: one full group = no groups ($k)" [ "$(json_field "$TMP/hc_plain.json" $k)" = \
    "$(json_field "$TMP/hc_one.json" $k)" ]
done
"$KVB" replay "$SAMPLE" --num-blocks 2000 --groups full,window:256:4 --host-cache --num-host-blocks 6000 --json \
  --quiet --check >"$TMP/hc_hyb.json"
check "host cache hybrid: exit 0" [ $? -eq 0 ]
check "host cache hybrid: host hits" [ "$(json_field "$TMP/hc_hyb.json" host_hit_tokens)" -gt 0 ]
BURST="$TMP/burst.jsonl"  # 12 requests at once, a shared 32-token prefix, 150 output tokens each
awk 'BEGIN { for (r = 0; r < 12; r++) { printf "{\"timestamp\": %d, \"prompt\": [", r;
  for (i = 0; i < 64; i++) printf "%s%d", (i ? ", " : ""), (i < 32 ? i + 1 : 1000 + r * 100 + i);
  printf "], \"output_length\": 150}\n" } }' >"$BURST"
"$KVB" replay "$BURST" --mode timed --num-blocks 96 --watermark 0 --groups full,window:16 --preempt swap \
  --num-host-blocks 400 --json --check >"$TMP/sw.json"
check "timed hybrid swap: exit 0" [ $? -eq 0 ]
check "timed hybrid swap: swap outs" [ "$(json_field "$TMP/sw.json" swap_outs)" -gt 0 ]
check "timed hybrid swap: every one came back" [ "$(json_field "$TMP/sw.json" swap_ins)" = \
  "$(json_field "$TMP/sw.json" swap_outs)" ]
check "timed hybrid swap: no recompute" [ "$(json_field "$TMP/sw.json" recomputes)" = 0 ]
check "timed hybrid swap: all tokens generated" [ "$(json_field "$TMP/sw.json" generated_tokens)" = 1800 ]
finish
