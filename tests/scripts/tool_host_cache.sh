#!/bin/sh
# kvblock replay --host-cache: host blocks as a second prefix-cache level in both modes.
# With a device pool too small for the sample trace's reuse, the host level adds hits; the report
# splits hits by tier and gives the blocks and bytes moved; the counts agree with each other.
. tests/scripts/tool_common.inc
SAMPLE=traces/sample_mooncake.jsonl

"$KVB" replay "$SAMPLE" --num-host-blocks 8 >"$TMP/o.txt" 2>"$TMP/o.err"
check "sequential refuses --num-host-blocks without --host-cache" [ $? -eq 2 ]
check "... and says why" grep -q -- "--num-host-blocks applies to --mode timed or to --host-cache" "$TMP/o.err"
"$KVB" replay "$SAMPLE" --host-cache --num-host-blocks 0 >/dev/null 2>"$TMP/o.err"
check "--host-cache with 0 host blocks refused" [ $? -eq 2 ]

"$KVB" replay "$SAMPLE" --num-blocks 64 --json --quiet >"$TMP/dev.json"
"$KVB" replay "$SAMPLE" --num-blocks 64 --host-cache --num-host-blocks 4096 --kv-bytes-per-block 1000000 \
  --json --quiet --check >"$TMP/tier.json"
check "tiered run: valid JSON" valid_json "$TMP/tier.json"
dev=$(json_field "$TMP/dev.json" cached_tokens)
tier=$(json_field "$TMP/tier.json" cached_tokens)
dh=$(json_field "$TMP/tier.json" device_hit_tokens)
hh=$(json_field "$TMP/tier.json" host_hit_tokens)
loaded=$(json_field "$TMP/tier.json" loaded_blocks)
off=$(json_field "$TMP/tier.json" offloaded_blocks)
gb=$(json_field "$TMP/tier.json" offloaded_gb)
check "host level adds hits ($dev -> $tier)" [ "$tier" -gt "$dev" ]
check "hits split by tier add up ($dh + $hh = $tier)" [ $((dh + hh)) -eq "$tier" ]
check "every host hit token came with a load ($hh tokens, $loaded blocks of 16)" [ $((loaded * 16)) -eq "$hh" ]
check "blocks were offloaded ($off)" [ "$off" -gt 0 ]
check "bytes moved follow --kv-bytes-per-block ($gb GB for $off blocks)" \
  awk -v g="$gb" -v n="$off" 'BEGIN { exit !(g - n * 0.001 < 0.1 && n * 0.001 - g < 0.1) }'
"$KVB" replay "$SAMPLE" --num-blocks 64 --host-cache --num-host-blocks 4096 --quiet >"$TMP/h.txt"
check "human report names the tiers" grep -q "host hit tokens" "$TMP/h.txt"

"$KVB" replay "$SAMPLE" --mode timed --speed 0.05 --num-blocks 128 --host-cache --num-host-blocks 4096 \
  --pcie-gbps 10 --json --quiet --check >"$TMP/timed.json"
check "timed tiered run: valid JSON" valid_json "$TMP/timed.json"
th=$(json_field "$TMP/timed.json" host_hit_tokens)
ts=$(json_field "$TMP/timed.json" transfer_s)
check "timed: host hits ($th) and transfer time charged ($ts s)" awk -v h="$th" -v t="$ts" 'BEGIN { exit !(h > 0 && t > 0) }'
finish
