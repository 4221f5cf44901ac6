#!/bin/sh
# kvblock replay: what a first-time user reads. Timed-mode options refused in sequential mode with the
# reason; --svg checked before the run and named after it; skipped / cut-short requests explained and
# their notes summarised; the trace's size beside the requests replayed; trace expansion timed apart
# from the manager; the chart's ticks, hit-ratio axis and title.
. tests/scripts/tool_common.inc
SAMPLE=traces/sample_mooncake.jsonl
BURST="$TMP/burst.jsonl"
awk 'BEGIN { for (r = 0; r < 12; r++) { printf "{\"timestamp\": %d, \"prompt\": [", r;
  for (i = 0; i < 64; i++) printf "%s%d", (i ? ", " : ""), (i < 32 ? i + 1 : 1000 + r * 100 + i);
  printf "], \"output_length\": 150}\n" } }' >"$BURST"

# Every timed-mode option is refused in sequential mode (exit 2), naming the option and why.
for a in "--speed 2" "--max-seqs 4" "--max-batch-tokens 64" "--preempt recompute" "--preempt swap" \
         "--watermark 0.1" "--step-base-us 1" "--step-prefill-us 1" "--step-decode-us 1" \
         "--step-kv-us 1" "--svg $TMP/s.svg" "--svg-points 10" "--speed=2"; do
  # shellcheck disable=SC2086
  "$KVB" replay "$BURST" $a >"$TMP/o.txt" 2>"$TMP/o.err"
  rc=$?
  name=${a%% *}
  name=${name%%=*}
  if [ $rc -eq 2 ] && grep -q -- "$name applies only to --mode timed: the sequential replay runs one request" "$TMP/o.err" &&
     [ ! -s "$TMP/o.txt" ]; then
    ok "sequential refuses $a"
  else
    fail "sequential refuses $a (exit $rc: $(cat "$TMP/o.err"))"
  fi
done
# ... also when --mode sequential is given explicitly after it, and they are accepted with --mode timed.
"$KVB" replay "$BURST" --speed 2 --mode sequential >/dev/null 2>&1
check "--speed before --mode sequential refused" [ $? -eq 2 ]
"$KVB" replay "$BURST" --speed 2 --max-seqs 4 --watermark 0 --mode timed --quiet >/dev/null
check "timed options accepted with --mode timed" [ $? -eq 0 ]
# Options of both modes stay accepted in sequential mode.
"$KVB" replay "$BURST" --check --quiet --block-size 8 --num-blocks 400 --format tokens --json >/dev/null
check "common options in sequential mode" [ $? -eq 0 ]

# --svg: an unwritable path is refused before the trace is even read (the trace here does not exist).
"$KVB" replay "$TMP/no-such-trace.jsonl" --mode timed --svg /nonexistent-dir/x.svg >"$TMP/sv.out" 2>"$TMP/sv.err"
check "--svg bad folder: exit 1" [ $? -eq 1 ]
check "--svg bad folder: names the folder" grep -q 'folder /nonexistent-dir does not exist' "$TMP/sv.err"
check "--svg bad folder: checked before reading the trace" sh -c "! grep -q 'no-such-trace' '$TMP/sv.err'"
check "--svg bad folder: no report" [ ! -s "$TMP/sv.out" ]
"$KVB" replay "$BURST" --mode timed --svg "$TMP" >/dev/null 2>"$TMP/sd.err"
check "--svg a folder: refused" grep -q 'is a folder, not a file' "$TMP/sd.err"
"$KVB" replay "$BURST" --mode timed --num-blocks 48 --watermark 0 --svg "$TMP/c.svg" >"$TMP/c.txt"
check "--svg: report says where" grep -Eq "^  chart written to +$TMP/c.svg\$" "$TMP/c.txt"
(cd "$TMP" && "$OLDPWD/$KVB" replay burst.jsonl --mode timed --num-blocks 48 --svg rel.svg --quiet >/dev/null)
check "--svg relative path in the current folder" [ -s "$TMP/rel.svg" ]

# The chart: ticks at 1-2-5 values, hit ratio scaled to its data, title with mode and counts.
# Labels of one axis (x of text elements with text-anchor end = left axis; etc.).
left=$(sed -n 's/.*text-anchor="end">\([0-9.,]*\)<\/text>/\1/p' "$TMP/c.svg" | tr -d ',' | tr '\n' ' ')
check "chart: left ticks 0 10 20 30 40, pool size 48 on top ($left)" [ "$left" = "0 10 20 30 40 48 " ]
right=$(sed -n 's/.*<text x="[0-9.]*" y="[0-9.]*">\([0-9.]*\)%<\/text>/\1/p' "$TMP/c.svg" | tr '\n' ' ')
hmax=$(echo "$right" | awk '{print $NF}')
hit=$(sed -n 's/^  hit ratio, all lookups *\([0-9.]*\)%$/\1/p' "$TMP/c.txt")
check "chart: hit axis ($right) scaled to the data ($hit%)" awk -v m="$hmax" -v h="$hit" 'BEGIN { exit !(m >= h && m < 100 && m <= 2.5 * h + 1) }'
check "chart: hit ticks are 1-2-5 steps" awk -v s="$right" 'BEGIN { n = split(s, a, " "); d = a[2] - a[1];
  e = d; while (e >= 10) e /= 10; while (e < 1) e *= 10; exit !(n >= 3 && (e == 1 || e == 2 || e == 5)) }'
check "chart: title names recompute and preemptions" grep -q '48 blocks, preempt recompute: [1-9][0-9]* preemptions' "$TMP/c.svg"
"$KVB" replay "$BURST" --mode timed --num-blocks 48 --watermark 0 --preempt swap --num-host-blocks 200 \
  --svg "$TMP/w.svg" --quiet >/dev/null
check "chart: title names swap and counts" grep -q 'preempt swap (200 host blocks): [1-9][0-9]* swap outs, 0 recomputes' "$TMP/w.svg"
"$KVB" replay "$SAMPLE" --mode timed --speed 0.05 --svg "$TMP/t.svg" --quiet >/dev/null
# Ticks carry thousands separators (1,000): dropped to compare the values.
times=$(sed -n 's/.*text-anchor="middle">\([0-9.,]*\)<\/text>/\1/p' "$TMP/t.svg" | tr -d ',' | tr '\n' ' ')
check "chart: time ticks at round values ($times)" awk -v s="$times" 'BEGIN { n = split(s, a, " "); d = a[2] - a[1];
  for (i = 2; i <= n; i++) if (a[i] - a[i-1] != d) exit 1; e = d; while (e >= 10) e /= 10; while (e < 1) e *= 10;
  exit !(n >= 4 && a[1] == 0 && (e == 1 || e == 2 || e == 5)) }'

# Skipped and cut-short requests: the first 5 listed, the rest in one summary line.
"$KVB" replay "$SAMPLE" --num-blocks 100 >"$TMP/n.txt" 2>"$TMP/n.err"
check "small pool: exit 0" [ $? -eq 0 ]
skipped=$(sed -n 's/^  skipped (out of blocks) *\([0-9,]*\)$/\1/p' "$TMP/n.txt" | tr -d ,)
cut=$(sed -n 's/^  cut short in decode *\([0-9,]*\) .*/\1/p' "$TMP/n.txt" | tr -d ,)
listed=$(grep -c 'request of .* tokens' "$TMP/n.err")
check "small pool: 5 listed" [ "$listed" -eq 5 ]
check "small pool: summary counts the rest" grep -q "^kvblock: \.\.\. and $((skipped + cut - 5)) more requests skipped or cut short" "$TMP/n.err"
check "small pool: cut short explained in the report" grep -Eq '^  cut short in decode +[0-9]+ \(replayed, generation stopped early\)$' "$TMP/n.txt"
"$KVB" replay --help >"$TMP/help.txt"
check "help explains cut short" grep -q 'cut short in decode  the prompt fitted, but a generated token found no free block' "$TMP/help.txt"
check "help explains the summary" grep -q '"... and 41 more"' "$TMP/help.txt"
"$KVB" replay "$DATA/tiny_mooncake.jsonl" --num-blocks 40 >/dev/null 2>"$TMP/few.err"
check "3 skipped: no summary line" sh -c "! grep -q 'more requests' '$TMP/few.err'"
"$KVB" replay "$SAMPLE" --mode timed --num-blocks 100 --quiet >/dev/null 2>"$TMP/tq.err"
check "timed small pool --quiet: nothing on stderr" [ ! -s "$TMP/tq.err" ]
"$KVB" replay "$SAMPLE" --mode timed --num-blocks 100 >/dev/null 2>"$TMP/tn.err"
check "timed small pool: summary line" grep -q '^kvblock: \.\.\. and [0-9]* more requests skipped' "$TMP/tn.err"

# Requests replayed beside the trace's size; elapsed = trace expansion + manager.
check "report: requests in trace" grep -Eq '^  requests in trace +300$' "$TMP/n.txt"
check "report: requests replayed" grep -Eq "^  requests replayed +$((300 - skipped))\$" "$TMP/n.txt"
"$KVB" replay "$SAMPLE" --json >"$TMP/j.json"
check "json: trace_requests" [ "$(json_field "$TMP/j.json" trace_requests)" = 300 ]
e=$(json_field "$TMP/j.json" elapsed_s); x=$(json_field "$TMP/j.json" expand_s); m=$(json_field "$TMP/j.json" manager_s)
check "json: elapsed = expansion + manager ($e = $x + $m)" awk -v e="$e" -v x="$x" -v m="$m" 'BEGIN { d = e - x - m; exit !(x > 0 && m > 0 && d < 0.0015 && d > -0.0015) }'
b=$(json_field "$TMP/j.json" blocks); bps=$(json_field "$TMP/j.json" blocks_per_s)
check "json: blocks/s from manager time" awk -v b="$b" -v m="$m" -v r="$bps" 'BEGIN { exit !(r > 0.98 * b / (m + 0.0005) && r < 1.02 * b / (m - 0.0005)) }'
"$KVB" replay "$BURST" --mode timed --num-blocks 400 --json >"$TMP/tj.json"
check "timed json: trace_requests" [ "$(json_field "$TMP/tj.json" trace_requests)" = 12 ]

# The README's sample output is the tool's current output (every line but the timings).
"$KVB" replay "$SAMPLE" >"$TMP/readme_run.txt"
awk '/^kvblock replay: traces\/sample_mooncake.jsonl$/ { on = 1; next } on && /^```/ { exit } on' README.md |
  sed 's/ *<-.*//' | grep -v -e '^  \.\.\.$' -e ' s$' -e ' s (' -e '(manager time)$' >"$TMP/readme_lines.txt"
stale=""
while IFS= read -r line; do
  grep -qxF -- "$line" "$TMP/readme_run.txt" || stale="$stale [$line]"
done <"$TMP/readme_lines.txt"
check "README sample output is current ($(wc -l <"$TMP/readme_lines.txt") lines)$stale" \
  sh -c "[ -z '$stale' ] && [ $(wc -l <"$TMP/readme_lines.txt") -ge 10 ]"
finish
