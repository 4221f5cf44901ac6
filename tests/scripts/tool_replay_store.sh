#!/bin/sh
# kvblock replay --store-blocks: an in-memory model store as a third level below the host
# cache. With device and host pools too small for the sample trace's reuse, the store adds hits; the
# report splits hits by tier and the counts agree with each other.
. tests/scripts/tool_common.inc
SAMPLE=traces/sample_mooncake.jsonl

"$KVB" replay "$SAMPLE" --store-blocks 100 >/dev/null 2>"$TMP/o.err"
check "--store-blocks without --host-cache refused" [ $? -eq 2 ]
check "... and says why" grep -q -- "--store-blocks needs --host-cache" "$TMP/o.err"
"$KVB" replay "$SAMPLE" --mode timed --host-cache --store-blocks 100 >/dev/null 2>"$TMP/o.err"
check "--store-blocks in timed mode refused" [ $? -eq 2 ]

"$KVB" replay "$SAMPLE" --num-blocks 2000 --host-cache --num-host-blocks 2000 --json --quiet >"$TMP/two.json"
"$KVB" replay "$SAMPLE" --num-blocks 2000 --host-cache --num-host-blocks 2000 --store-blocks 20000 \
  --json --quiet --check >"$TMP/three.json"
check "three tiers: valid JSON (and invariants hold)" valid_json "$TMP/three.json"
two=$(json_field "$TMP/two.json" cached_tokens)
three=$(json_field "$TMP/three.json" cached_tokens)
dh=$(json_field "$TMP/three.json" device_hit_tokens)
hh=$(json_field "$TMP/three.json" host_hit_tokens)
sh=$(json_field "$TMP/three.json" store_hit_tokens)
put=$(json_field "$TMP/three.json" store_put_blocks)
got=$(json_field "$TMP/three.json" store_get_blocks)
fails=$(json_field "$TMP/three.json" store_get_failures)
check "the store adds hits ($two -> $three)" [ "$three" -gt "$two" ]
check "hits split by tier add up ($dh + $hh + $sh = $three)" [ $((dh + hh + sh)) -eq "$three" ]
check "every store hit token came with a get ($sh tokens, $got blocks of 16)" [ $((got * 16)) -eq "$sh" ]
check "evicted host blocks were put ($put)" [ "$put" -gt 0 ]
check "no get failed ($fails)" [ "$fails" -eq 0 ]
"$KVB" replay "$SAMPLE" --host-cache --store-exclusive >/dev/null 2>"$TMP/o.err"
check "--store-exclusive without --store-blocks refused" [ $? -eq 2 ]
"$KVB" replay "$SAMPLE" --num-blocks 2000 --host-cache --num-host-blocks 2000 --store-blocks 20000 --store-exclusive \
  --json --quiet --check >"$TMP/excl.json"
check "exclusive model store: valid JSON (and invariants hold)" valid_json "$TMP/excl.json"
ex=$(json_field "$TMP/excl.json" cached_tokens)
check "an exclusive store hits at least as much here ($ex >= $three)" [ "$ex" -ge "$three" ]
"$KVB" replay "$SAMPLE" --num-blocks 2000 --host-cache --num-host-blocks 2000 --store-blocks 20000 --quiet >"$TMP/h.txt"
check "human report names the store" grep -q "store hit tokens" "$TMP/h.txt"
finish
