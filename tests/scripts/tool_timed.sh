#!/bin/sh
# kvblock replay --mode timed: every flag, on a generated burst trace (12 requests within 12 ms, a
# shared 32-token prefix, 150 output tokens each) and on the head of the sample trace.
. tests/scripts/tool_common.inc
BURST="$TMP/burst.jsonl"
awk 'BEGIN { for (r = 0; r < 12; r++) { printf "{\"timestamp\": %d, \"prompt\": [", r;
  for (i = 0; i < 64; i++) printf "%s%d", (i ? ", " : ""), (i < 32 ? i + 1 : 1000 + r * 100 + i);
  printf "], \"output_length\": 150}\n" } }' >"$BURST"
run() { out=$1; shift; "$KVB" replay "$@" --mode timed --json >"$out" 2>"$out.err"; }
f() { json_field "$1" "$2"; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'; }

# Small pool: preemptions by recompute; big pool: none. --check verifies the manager every step.
run "$TMP/a.json" "$BURST" --num-blocks 48 --watermark 0 --check
check "timed: exit 0" [ $? -eq 0 ]
check "timed: valid json" valid_json "$TMP/a.json"
check "timed: 12 requests" [ "$(f "$TMP/a.json" requests)" = 12 ]
check "timed: mode" grep -q '"mode": "timed"' "$TMP/a.json"
check "timed: preempts in 48 blocks" gt "$(f "$TMP/a.json" recomputes)" 0
check "timed: generated 1800" [ "$(f "$TMP/a.json" generated_tokens)" = 1800 ]
check "timed: first-admission hits (11 x 32)" [ "$(f "$TMP/a.json" cached_tokens)" = 352 ]
for k in hit_ratio tokens_per_s swap_outs peak_blocks_used mean_blocks_used ttft_p50_ms ttft_p90_ms \
         ttft_p99_ms manager_us_per_request simulated_s; do
  check "timed: reports $k" grep -q "\"$k\": " "$TMP/a.json"
done
check "timed: peak <= pool" [ "$(f "$TMP/a.json" peak_blocks_used)" -le 48 ]
run "$TMP/b.json" "$BURST" --num-blocks 400 --watermark 0 --check
check "timed: no preemption in 400 blocks" [ "$(f "$TMP/b.json" preemptions)" = 0 ]
check "timed: bigger pool finishes sooner" gt "$(f "$TMP/a.json" simulated_s)" "$(f "$TMP/b.json" simulated_s)"
"$KVB" replay "$BURST" --mode timed --num-blocks 48 --watermark 0 >"$TMP/h.txt" 2>/dev/null
check "timed human: preemptions line" grep -Eq '^  preemptions +[1-9]' "$TMP/h.txt"
check "timed human: TTFT p99 line" grep -Eq '^  TTFT p99 +[0-9.]+ ms$' "$TMP/h.txt"

# Swap: host tier takes the victims, they come back; no host blocks: recompute (with a warning).
run "$TMP/s.json" "$BURST" --num-blocks 48 --watermark 0 --preempt swap --num-host-blocks 200 --check
check "swap: swap outs" gt "$(f "$TMP/s.json" swap_outs)" 0
check "swap: every swap out came back" [ "$(f "$TMP/s.json" swap_ins)" = "$(f "$TMP/s.json" swap_outs)" ]
check "swap: no recompute" [ "$(f "$TMP/s.json" recomputes)" = 0 ]
check "swap: requests" [ "$(f "$TMP/s.json" requests)" = 12 ]
check "swap: reports preempt" grep -q '"preempt": "swap"' "$TMP/s.json"
run "$TMP/s0.json" "$BURST" --num-blocks 48 --watermark 0 --preempt swap --num-host-blocks 0
check "swap without host blocks: recompute" gt "$(f "$TMP/s0.json" recomputes)" 0
check "swap without host blocks: warning" grep -q 'falls back to recompute' "$TMP/s0.json.err"

# --max-seqs 1: one at a time, nothing to preempt, slower.
run "$TMP/m.json" "$BURST" --num-blocks 48 --watermark 0 --max-seqs 1
check "--max-seqs 1: no preemption" [ "$(f "$TMP/m.json" preemptions)" = 0 ]
check "--max-seqs 1: slower" gt "$(f "$TMP/m.json" simulated_s)" "$(f "$TMP/b.json" simulated_s)"
# --max-batch-tokens: a 16-token budget chunks every 64-token prompt into 4 steps at least.
run "$TMP/t.json" "$BURST" --num-blocks 400 --max-batch-tokens 16
check "--max-batch-tokens 16: more steps" gt "$(f "$TMP/t.json" steps)" "$(f "$TMP/b.json" steps)"
check "--max-batch-tokens 16: same work" [ "$(f "$TMP/t.json" generated_tokens)" = 1800 ]
# --speed: spreading arrivals 1000x apart removes all contention.
run "$TMP/sp.json" "$BURST" --num-blocks 48 --watermark 0 --speed 0.001
check "--speed 0.001: no preemption" [ "$(f "$TMP/sp.json" preemptions)" = 0 ]
check "--speed 0.001: longer run" gt "$(f "$TMP/sp.json" simulated_s)" 10
check "--speed reported" grep -q '"speed": 0.001' "$TMP/sp.json"
# --watermark: kept free at admission, reported.
run "$TMP/w.json" "$BURST" --num-blocks 48 --watermark 0.5
check "--watermark 0.5: runs" [ "$(f "$TMP/w.json" requests)" = 12 ]
check "--watermark reported" grep -q '"watermark": 0.500' "$TMP/w.json"
check "--watermark 0.5: fewer preemptions" [ "$(f "$TMP/w.json" preemptions)" -le "$(f "$TMP/a.json" preemptions)" ]
# Step-time model: base 10 ms per step and nothing else -> simulated time = 10 ms x steps (+ idle).
run "$TMP/st.json" "$BURST" --num-blocks 400 --step-base-us 10000 --step-prefill-us 0 --step-decode-us 0 --step-kv-us 0
st=$(f "$TMP/st.json" steps); sim=$(f "$TMP/st.json" simulated_s)
check "step model: base only" awk -v s="$st" -v t="$sim" 'BEGIN { exit !(t >= s * 0.01 - 1e-6 && t <= s * 0.01 + 0.012) }'
run "$TMP/st2.json" "$BURST" --num-blocks 400 --step-base-us 0 --step-prefill-us 1000 --step-decode-us 0 --step-kv-us 0
check "step model: prefill only" awk -v t="$(f "$TMP/st2.json" simulated_s)" -v p="$(f "$TMP/st2.json" prefill_tokens)" \
  'BEGIN { exit !(t >= p * 0.001 - 1e-6 && t <= p * 0.001 + 0.012) }'
run "$TMP/st3.json" "$BURST" --num-blocks 400 --step-base-us 0 --step-prefill-us 0 --step-decode-us 1000 --step-kv-us 0
check "step model: decode only" awk -v t="$(f "$TMP/st3.json" simulated_s)" 'BEGIN { exit !(t >= 1.8 - 1e-6 && t <= 1.812) }'
run "$TMP/st4.json" "$BURST" --num-blocks 400 --step-base-us 0 --step-prefill-us 0 --step-decode-us 0 --step-kv-us 1000
check "step model: kv term" gt "$(f "$TMP/st4.json" simulated_s)" 1

# SVG chart.
run "$TMP/g.json" "$BURST" --num-blocks 48 --watermark 0 --svg "$TMP/c.svg" --svg-points 10
check "--svg: written" [ -s "$TMP/c.svg" ]
check "--svg: svg root" grep -q '^<svg xmlns="http://www.w3.org/2000/svg"' "$TMP/c.svg"
check "--svg: three series" [ "$(grep -c '<polyline' "$TMP/c.svg")" = 3 ]
check "--svg: closed" grep -q '^</g>$' "$TMP/c.svg"
if command -v python3 >/dev/null 2>&1; then
  check "--svg: well-formed XML" python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$TMP/c.svg"
fi
check "--svg: legend says what cached-free blocks are" grep -q '>free blocks still holding a cached prefix<' "$TMP/c.svg"
check "--svg: says what the pool was" grep -q '>pool: 48 blocks of 16 tokens (768 tokens of K/V)' "$TMP/c.svg"
# Thousands separators in the ticks, the pool line and the title (a pool of 12,000 blocks).
run "$TMP/g2.json" "$BURST" --num-blocks 12000 --svg "$TMP/c2.svg"
check "--svg: block ticks with thousands separators" grep -q 'text-anchor="end">10,000</text>' "$TMP/c2.svg"
check "--svg: no tick of 4+ digits without a separator" sh -c "! grep -Eq '>[0-9]{4,}(\.[0-9]+)?</text>' '$TMP/c2.svg'"
check "--svg: pool line with separators" grep -q '>pool: 12,000 blocks of 16 tokens (192,000 tokens of K/V)' "$TMP/c2.svg"
check "--svg: title with separators" grep -q 'burst.jsonl, 12,000 blocks, preempt recompute' "$TMP/c2.svg"
pts=$(grep 'id="used"' "$TMP/c.svg" | tr ' ' '\n' | grep -c ',')
check "--svg-points 10: at most 20 points" [ "$pts" -le 20 ] && [ "$pts" -ge 2 ]
"$KVB" replay "$BURST" --svg "$TMP/x.svg" 2>/dev/null
check "--svg needs timed mode" [ $? -eq 2 ]
"$KVB" replay "$BURST" --mode timed --svg /nonexistent-dir/x.svg >/dev/null 2>"$TMP/e.err"
check "--svg unwritable: error" [ $? -eq 1 ]

# Progress line: forced with --progress, none with --quiet.
"$KVB" replay "$BURST" --mode timed --num-blocks 48 --progress >/dev/null 2>"$TMP/p.err"
check "--progress: line on stderr" grep -q 'timed replay: [0-9]*/12' "$TMP/p.err"
"$KVB" replay "$BURST" --mode timed --num-blocks 48 --progress --quiet >/dev/null 2>"$TMP/q.err"
check "--quiet: no progress" [ ! -s "$TMP/q.err" ]
"$KVB" replay "$BURST" --num-blocks 48 --progress >/dev/null 2>"$TMP/p2.err"
check "--progress sequential" grep -q 'replay: [0-9]*/12' "$TMP/p2.err"

# Formats and oversized requests.
run "$TMP/fm.json" "$BURST" --format tokens --num-blocks 400
check "--format tokens timed" [ "$(f "$TMP/fm.json" requests)" = 12 ]
run "$TMP/big.json" "$DATA/tiny_mooncake.jsonl" --num-blocks 40
check "timed: too-big requests skipped" [ "$(f "$TMP/big.json" skipped_requests)" = 3 ]
check "timed: too-big listed" grep -q 'does not fit in the pool' "$TMP/big.json.err"
printf '{"timestamp": 0, "prompt": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16], "output_length": 40}\n' >"$TMP/cut.jsonl"
run "$TMP/cut.json" "$TMP/cut.jsonl" --num-blocks 2 --watermark 0
check "timed: decode that never fits is cut" [ "$(f "$TMP/cut.json" decode_cut_requests)" = 1 ]

# Pool size on real data (head of the sample, arrivals 4x apart): more blocks, higher hit ratio.
head -n 150 traces/sample_mooncake.jsonl >"$TMP/s150.jsonl"
run "$TMP/p1.json" "$TMP/s150.jsonl" --num-blocks 4096 --speed 0.25 --watermark 0
run "$TMP/p2.json" "$TMP/s150.jsonl" --num-blocks 65536 --speed 0.25 --watermark 0
check "sample: more blocks, higher hit ratio" gt "$(f "$TMP/p2.json" hit_ratio)" "$(f "$TMP/p1.json" hit_ratio)"
check "sample: more blocks, no more preemptions" [ "$(f "$TMP/p2.json" preemptions)" -le "$(f "$TMP/p1.json" preemptions)" ]
"$KVB" replay "$BURST" --mode bogus 2>/dev/null
check "--mode bogus refused" [ $? -eq 2 ]
"$KVB" replay "$BURST" --mode timed --preempt maybe 2>/dev/null
check "--preempt maybe refused" [ $? -eq 2 ]
"$KVB" replay "$BURST" --mode timed --speed 0 2>/dev/null
check "--speed 0 refused" [ $? -eq 2 ]
finish
