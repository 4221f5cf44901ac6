#!/bin/sh
# kvblock replay (sequential): the shipped sample trace, hand-written traces with known cached tokens,
# human and JSON output, pool-size effects. Run from the repository root with $BUILD set.
. tests/scripts/tool_common.inc
SAMPLE=traces/sample_mooncake.jsonl

# Sample trace, default pool (enough for the whole trace: 244,544 blocks), human output.
"$KVB" replay "$SAMPLE" >"$TMP/h.txt" 2>"$TMP/h.err"
check "sample human: exit 0" [ $? -eq 0 ]
check "sample human: requests" grep -Eq '^  requests replayed +300$' "$TMP/h.txt"
check "sample human: prompt tokens" grep -Eq '^  prompt tokens +3,853,165$' "$TMP/h.txt"
check "sample human: cached tokens" grep -Eq '^  cached prompt tokens +187,920$' "$TMP/h.txt"
check "sample human: hit ratio" grep -Eq '^  hit ratio +4\.88%$' "$TMP/h.txt"
check "sample human: evictions" grep -Eq '^  evictions +0 blocks$' "$TMP/h.txt"
check "sample human: default pool" grep -Eq '^  blocks +244,544 \(default\)$' "$TMP/h.txt"
check "sample human: blocks/s" grep -Eq '^  blocks/s +[0-9]+ \(manager time\)$' "$TMP/h.txt"
check "sample human: quiet stderr" [ ! -s "$TMP/h.err" ]

# JSON, smaller pools: 32768 blocks evicts; 4096 blocks cannot hold two of the requests.
"$KVB" replay "$SAMPLE" --json >"$TMP/j.json"
check "sample json: valid" valid_json "$TMP/j.json"
check "sample json: cached" [ "$(json_field "$TMP/j.json" cached_tokens)" = 187920 ]
check "sample json: generated" [ "$(json_field "$TMP/j.json" generated_tokens)" = 57331 ]
check "sample json: hit ratio" [ "$(json_field "$TMP/j.json" hit_ratio)" = 0.048770 ]
"$KVB" replay "$SAMPLE" --json --num-blocks 32768 --check >"$TMP/j2.json"
check "sample 32768: cached" [ "$(json_field "$TMP/j2.json" cached_tokens)" = 74240 ]
check "sample 32768: evictions" [ "$(json_field "$TMP/j2.json" evictions)" = 206906 ]
"$KVB" replay "$SAMPLE" --json --num-blocks 4096 >"$TMP/j3.json" 2>"$TMP/j3.err"
check "pool too small: exit 0" [ $? -eq 0 ]
check "pool too small: 2 skipped" [ "$(json_field "$TMP/j3.json" skipped_requests)" = 2 ]
check "pool too small: 298 replayed" [ "$(json_field "$TMP/j3.json" requests)" = 298 ]
check "pool too small: cached" [ "$(json_field "$TMP/j3.json" cached_tokens)" = 14336 ]
check "pool too small: listed with line" grep -q 'sample_mooncake.jsonl:190: request of 82831 prompt' "$TMP/j3.err"
"$KVB" replay "$SAMPLE" --json --num-blocks 4096 --quiet >/dev/null 2>"$TMP/q.err"
check "--quiet: no notes" [ ! -s "$TMP/q.err" ]

# Hand-written Mooncake trace (block size 16): 0 + 512 + 1008 (all but the last block) + 512 cached.
"$KVB" replay "$DATA/tiny_mooncake.jsonl" --json --check >"$TMP/t.json"
check "tiny mooncake: cached 2032" [ "$(json_field "$TMP/t.json" cached_tokens)" = 2032 ]
check "tiny mooncake: prompt 3568" [ "$(json_field "$TMP/t.json" prompt_tokens)" = 3568 ]
check "tiny mooncake: generated 7" [ "$(json_field "$TMP/t.json" generated_tokens)" = 7 ]
check "tiny mooncake: format" grep -q '"format": "mooncake"' "$TMP/t.json"
# Block size 512: one block per hash id; request 3 hits 1 of its 2 blocks, request 4 its first.
"$KVB" replay "$DATA/tiny_mooncake.jsonl" --json --block-size 512 >"$TMP/t5.json"
check "tiny mooncake bs512: cached" [ "$(json_field "$TMP/t5.json" cached_tokens)" = 1536 ]
# A pool of 40 blocks cannot hold the 64-block requests: skipped, not fatal.
"$KVB" replay "$DATA/tiny_mooncake.jsonl" --json --num-blocks 40 >"$TMP/t40.json" 2>"$TMP/t40.err"
check "tiny pool 40: exit 0" [ $? -eq 0 ]
check "tiny pool 40: skipped 3" [ "$(json_field "$TMP/t40.json" skipped_requests)" = 3 ]
check "tiny pool 40: stderr" grep -q 'does not fit in the pool: skipped' "$TMP/t40.err"
# Prompt fits, decode does not: cut short, counted.
printf '{"timestamp": 0, "prompt": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16], "output_length": 40}\n' >"$TMP/cut.jsonl"
"$KVB" replay "$TMP/cut.jsonl" --json --num-blocks 2 >"$TMP/cut.json" 2>/dev/null
check "decode cut: exit 0" [ $? -eq 0 ]
check "decode cut: counted" [ "$(json_field "$TMP/cut.json" decode_cut_requests)" = 1 ]
check "decode cut: generated 16" [ "$(json_field "$TMP/cut.json" generated_tokens)" = 16 ]

# Token-id format (CRLF line ends): 0 + 32 + 16 cached.
"$KVB" replay "$DATA/tiny_tokens.jsonl" --json --check >"$TMP/k.json"
check "tiny tokens: cached 48" [ "$(json_field "$TMP/k.json" cached_tokens)" = 48 ]
check "tiny tokens: format" grep -q '"format": "tokens"' "$TMP/k.json"
"$KVB" replay "$DATA/tiny_tokens.jsonl" --format tokens --json >/dev/null
check "--format tokens" [ $? -eq 0 ]
"$KVB" replay "$DATA/tiny_tokens.jsonl" --format mooncake >/dev/null 2>"$TMP/f.err"
check "--format mooncake on tokens: error" [ $? -eq 1 ]
check "--format mooncake: names hash_ids" grep -q 'tiny_tokens.jsonl:1:.*missing "hash_ids"' "$TMP/f.err"
# Standard input.
"$KVB" replay - --json <"$DATA/tiny_tokens.jsonl" >"$TMP/s.json"
check "stdin trace" [ "$(json_field "$TMP/s.json" cached_tokens)" = 48 ]
finish
