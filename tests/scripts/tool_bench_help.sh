#!/bin/sh
# kvblock bench --quick (JSON shape, sane numbers) and the manual pages (--help of every command).
. tests/scripts/tool_common.inc

"$KVB" bench --quick --json --prompt-tokens 1024 --decode-seqs 8 >"$TMP/b.json"
check "bench --quick --json: exit 0" [ $? -eq 0 ]
check "bench json: valid" valid_json "$TMP/b.json"
for k in hash kvb_hash_tokens miss hit decode fork cow swap batch targets config kernels cpu \
         ceiling_memcpy attention_4x256 attention_8x256 attention_fp8_8x256 attention_bf16_8x256 write_kv copy_blocks swap_out swap_in \
         extend_plain_2x64 extend_tree_2x64 copy_slots; do
  check "bench json: has $k" grep -q "\"$k\": {" "$TMP/b.json"
done
check "bench json: copy_blocks_runs" grep -q '"copy_blocks_runs": {' "$TMP/b.json"
for k in median_per_call cow_fork_position batch_seqs batch_tokens gbps of_ceiling median_us; do
  check "bench json: has $k" grep -q "\"$k\": " "$TMP/b.json"
done
check "bench json: kernel GB/s positive" sh -c "! grep -q '\"gbps\": 0.000[,}]' '$TMP/b.json'"
check "bench json: device cpu" grep -q '"device": "cpu"' "$TMP/b.json"
# A case run alone (--only) has no baseline: its ratio columns read "-", never 0.00x.
"$KVB" bench --quick --only miss --prompt-tokens 256 >"$TMP/om.txt"
check "bench --only miss: exit 0" [ $? -eq 0 ]
check "bench --only miss: ratios '-' without the hash case" \
  grep -Eq '^  miss: allocate\+commit\+free +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% +- +-  ns/block$' "$TMP/om.txt"
check "bench --only miss: no 0.00x" sh -c "! grep -q '0\.00x' '$TMP/om.txt'"
check "bench --only miss: says why" grep -q 'where the baseline case did not run (--only)' "$TMP/om.txt"
"$KVB" bench --quick --only miss --prompt-tokens 256 --json >"$TMP/om.json"
check "bench --only miss --json: no ratio without its baseline" sh -c "! grep -q ratio_to '$TMP/om.json'"
check "bench json (all cases): miss has its ratios" grep -q '"ratio_to_hash": ' "$TMP/b.json"
check "bench --only miss: no target without its ratio" sh -c "! grep -q 'target <=' '$TMP/om.txt'"
# With its baseline, the miss and hit rows carry their design goal beside the ratio;
# a --quick run is too short to judge it.
"$KVB" bench --quick --prompt-tokens 256 --decode-seqs 8 >"$TMP/q.txt"
check "bench: miss row has its target" \
  grep -Eq '^  miss: allocate\+commit\+free .* [0-9.]+x +[0-9.]+x  ns/block  target <= 4\.0x: not judged \(--quick\)$' "$TMP/q.txt"
check "bench: hit row has its target" grep -Eq '^  hit: allocate\+free \(cached\) .*  target <= 3\.0x: ' "$TMP/q.txt"
check "bench: decode row has no ratio target" sh -c "! grep -E '^  decode: .*target' '$TMP/q.txt'"
check "bench json: target judged only on a full run" sh -c "! grep -q target_met '$TMP/b.json'"
"$KVB" bench --quick --only hash --prompt-tokens 256 >"$TMP/oh.txt"
check "bench --only hash: its own ratio 1.00x" grep -Eq '^  bare XXH64 of one block .* 1\.00x +-  ns/block$' "$TMP/oh.txt"
# --only cascade: the kernel section's shared-prefix rows alone (wall and process CPU time), no other kernel row.
"$KVB" bench --quick --only cascade >"$TMP/oc.txt"
check "bench --only cascade: exit 0" [ $? -eq 0 ]
check "bench --only cascade: the shared-prefix rows" grep -q 'seqs share .* own tokens .*x[0-9]' "$TMP/oc.txt"
check "bench --only cascade: CPU time row" grep -q 'process CPU time' "$TMP/oc.txt"
check "bench --only cascade: no other kernel row" sh -c "! grep -Eq 'write_kv|copy_blocks|prefill' '$TMP/oc.txt'"
# The sweep (plain, grouped as the cost model decides, every group) and the decode rows of an extend call.
check "bench --only cascade: sweep rows" grep -Eq '^  16 seqs share 32 \+ 544 own +[0-9.]+ +[0-9.]+ x[0-9.]+ +[0-9.]+ x[0-9.]+' "$TMP/oc.txt"
check "bench --only cascade: decode rows row" grep -Eq '^  16 seqs x 576 tokens, q_len 1 +[0-9.]+ +[0-9.]+ x[0-9.]+' "$TMP/oc.txt"
check "bench json: tree extend against the plain one" grep -q '"of_plain_extend": ' "$TMP/b.json"
# --only tree-kernels: the token-tree rows alone (tree-masked extend against the plain one, copy_slots).
"$KVB" bench --quick --only tree-kernels >"$TMP/ot.txt"
check "bench --only tree-kernels: exit 0" [ $? -eq 0 ]
check "bench --only tree-kernels: extend rows" grep -Eq '^  extend fp16 2x64 over 192, tree mask .*x the plain extend' "$TMP/ot.txt"
check "bench --only tree-kernels: copy_slots row" grep -Eq '^  copy_slots 2 layers x [0-9]+ pairs .* of memcpy$' "$TMP/ot.txt"
check "bench --only tree-kernels: no other kernel row" sh -c "! grep -Eq 'write_kv|copy_blocks|paged_attention|^  prefill' '$TMP/ot.txt'"
# --only attention: the decode rows alone, with the CPU code path they ran on; KVB_CPU_ISA narrows it.
KVB_CPU_ISA=baseline "$KVB" bench --quick --only attention >"$TMP/oa.txt"
check "bench --only attention: exit 0" [ $? -eq 0 ]
check "bench --only attention: the path forced" grep -q '^  CPU code path: baseline ' "$TMP/oa.txt"
check "bench --only attention: bf16 row" grep -Eq '^  paged_attention bf16 8 seqs x 256 +[0-9.]+ ' "$TMP/oa.txt"
check "bench --only attention: no other kernel row" sh -c "! grep -Eq 'write_kv|copy_blocks|prefill|share' '$TMP/oa.txt'"
"$KVB" bench --quick --only attention --json >"$TMP/oa.json"
check "bench --only attention --json: the path" grep -Eq '"cpu_path": "(avx512bf16|avx512|avx2|baseline)(\+amx)?"' "$TMP/oa.json"
check "bench --only attention: the section names its path" grep -q '^  decode attention: CPU path baseline, AMX-BF16 tiles off$' "$TMP/oa.txt"
check "bench --only attention: rows against the same run's read ceiling" \
  grep -Eq '^  paged_attention 8 seqs x 256 tokens .* of [0-9]+-thread read$' "$TMP/oa.txt"
check "bench --only cascade: the section names its path" \
  grep -Eq '^  shared-prefix decode: CPU path (avx512bf16|avx512|avx2|baseline)(\+amx)?, AMX-BF16 tiles (on|off)$' "$TMP/oc.txt"
# --only prefill: the prefill rows alone, each against the peaks of the path that ran (named in the
# section's line): fp32 multiply-add chains of its vector width, and AMX-BF16 tile products where the
# path ends in +amx (else a line saying why not). KVB_TEST_QUICK=1 (the sanitizer run): the default path
# only (the plain run forces the other two).
isas="baseline avx2 default"
[ "${KVB_TEST_QUICK:-}" = 1 ] && isas=default
for isa in $isas; do
  if [ $isa = default ]; then
    "$KVB" bench --quick --only prefill >"$TMP/op.txt"
  else
    KVB_CPU_ISA=$isa "$KVB" bench --quick --only prefill >"$TMP/op.txt"
  fi
  check "bench --only prefill ($isa): exit 0" [ $? -eq 0 ]
  path=$(sed -n 's/^  prefill attention: CPU path \([a-z0-9+]*\), AMX-BF16 tiles \(on\|off\)$/\1/p' "$TMP/op.txt")
  check "bench --only prefill ($isa): the section names its path" [ -n "$path" ]
  case $isa in # a forced path runs unless the CPU lacks it (then the best narrower one: baseline)
    baseline) check "bench --only prefill ($isa): the path forced" [ "$path" = baseline ] ;;
    avx2) check "bench --only prefill ($isa): the path forced" sh -c "[ '$path' = avx2 ] || [ '$path' = baseline ]" ;;
  esac
  case $path in
    avx512*) fma='AVX-512 FMA' ;;
    avx2*) fma='AVX2 FMA' ;;
    *) fma='8-wide mul\+add' ;;
  esac
  check "bench --only prefill ($isa): the FMA peak of path $path" \
    grep -Eq "^  ceiling: fp32 FMA peak +[0-9.]+ GFLOP/s \\($fma, [0-9]+ threads?\\)$" "$TMP/op.txt"
  check "bench --only prefill ($isa): rows against it" grep -Eq "^  prefill fp16 1x256 over 0 .* of $fma peak" "$TMP/op.txt"
  check "bench --only prefill ($isa): every row" [ "$(grep -Ec "^  prefill (fp16|bf16|fp8_e4m3) .* of $fma peak" "$TMP/op.txt")" -eq 9 ]
  case $path in
    *+amx)
      check "bench --only prefill ($isa): AMX peak" grep -Eq '^  ceiling: AMX-BF16 peak +[0-9.]+ GFLOP/s' "$TMP/op.txt"
      check "bench --only prefill ($isa): rows against both" \
        [ "$(grep -Ec "of $fma peak, [0-9.]+% of AMX-BF16 peak$" "$TMP/op.txt")" -eq 9 ] ;;
    *)
      check "bench --only prefill ($isa): AMX peak skipped, why" \
        grep -q "^  ceiling: AMX-BF16 peak .* not measured: the CPU path $path does not use AMX tiles$" "$TMP/op.txt"
      check "bench --only prefill ($isa): no AMX fraction" sh -c "! grep -q 'of AMX-BF16 peak' '$TMP/op.txt'" ;;
  esac
  check "bench --only prefill ($isa): no other kernel row" sh -c "! grep -Eq 'write_kv|copy_blocks|paged_attention|share|extend' '$TMP/op.txt'"
done
for k in decode_cpu_path cascade_cpu_path prefill_cpu_path fma_peak_gflops fma_peak_kind of_fma_peak; do
  check "bench json: has $k" grep -q "\"$k\": " "$TMP/b.json"
done
check "bench json: AMX peak or why not" grep -Eq '"amx_peak_(gflops|skipped)": ' "$TMP/b.json"
# Each new case alone: its row only, no kernels.
for c in fork cow swap batch; do
  "$KVB" bench --quick --only $c --prompt-tokens 512 --decode-seqs 8 --json >"$TMP/o_$c.json"
  check "bench --only $c: exit 0" [ $? -eq 0 ]
  check "bench --only $c: valid json" valid_json "$TMP/o_$c.json"
  check "bench --only $c: has $c" grep -q "\"$c\": {" "$TMP/o_$c.json"
  check "bench --only $c: no other case, no kernels" sh -c "! grep -Eq '\"(hit|miss|kernels)\": ' '$TMP/o_$c.json'"
done
"$KVB" bench --quick --only kernels >"$TMP/k.txt"
check "bench --only kernels: exit 0" [ $? -eq 0 ]
check "bench --only kernels: table" grep -Eq '^  paged_attention 4 seqs x 256 tokens +[0-9.]+ ' "$TMP/k.txt"
check "bench --only kernels: ceiling row" grep -Eq '^  ceiling: memcpy 32 MiB +[0-9.]+ .* 100\.0% of memcpy' "$TMP/k.txt"
check "bench --only kernels: no manager table" sh -c "! grep -q 'hit: allocate' '$TMP/k.txt'"
for r in write_kv copy_blocks 'copy_blocks .* adjacent ids' 'swap_blocks out' 'swap_blocks in' \
         'paged_attention 4 seqs' 'paged_attention 8 seqs'; do
  check "bench --only kernels: $r" grep -q "^  $r" "$TMP/k.txt"
done
# --device: cuda without a usable GPU fails with a message; auto notes the skip and succeeds.
if "$KVB" bench --quick --only kernels --device cuda --json >"$TMP/c.json" 2>"$TMP/c.err"; then
  check "bench --device cuda (GPU present): valid json" valid_json "$TMP/c.json"
  check "bench --device cuda (GPU present): cuda section" grep -q '"cuda": {' "$TMP/c.json"
else
  check "bench --device cuda without GPU: exit 1" [ $? -eq 1 ]
  check "bench --device cuda without GPU: message" grep -q 'device cuda: no usable GPU' "$TMP/c.err"
  check "bench --device cuda without GPU: nothing on stdout" [ ! -s "$TMP/c.json" ]
  "$KVB" bench --quick --device auto --only kernels --json >"$TMP/a.json"
  check "bench --device auto without GPU: exit 0" [ $? -eq 0 ]
  check "bench --device auto without GPU: skip noted" grep -q '"cuda_skipped": "' "$TMP/a.json"
  check "bench --device auto without GPU: valid json" valid_json "$TMP/a.json"
fi
"$KVB" bench --device gpu 2>/dev/null
check "bench --device gpu refused" [ $? -eq 2 ]
"$KVB" bench --only nothing 2>/dev/null
check "bench --only unknown refused" [ $? -eq 2 ]
"$KVB" bench --quick --only cow --block-size 1 2>/dev/null
check "bench --only cow at block size 1 refused" [ $? -eq 2 ]
"$KVB" bench --quick --block-size 1 --prompt-tokens 64 --decode-seqs 4 --only batch >/dev/null
check "bench block size 1: batch runs" [ $? -eq 0 ]
# Block size 1: the host-hit case's filler prompt must not share a token (a whole block) with the prompt.
"$KVB" bench --quick --block-size 1 --prompt-tokens 64 --decode-seqs 4 --only hosthit >/dev/null
check "bench block size 1: hosthit loads every host block" [ $? -eq 0 ]
check "bench json: medians positive" sh -c "! grep -q '\"median\": 0.00[,}]' '$TMP/b.json'"
check "bench json: reps 3" grep -q '"reps": 3' "$TMP/b.json"
"$KVB" bench --quick --reps 2 --iters 4 --prompt-tokens 256 --decode-tokens 16 >"$TMP/b.txt"
check "bench human: exit 0" [ $? -eq 0 ]
check "bench human: table" grep -Eq '^  hit: allocate\+free \(cached\) +[0-9.]+ ' "$TMP/b.txt"
check "bench human: goals say what they mean" grep -q 'design goals (PERFORMANCE.md; the manager.s cost as a multiple of hashing the block' "$TMP/b.txt"
check "bench human: hit goal" grep -Eq '^    hit: +a prompt block found in the cache costs <= 3x its hash +[0-9.]+x  not judged$' "$TMP/b.txt"
check "bench human: miss goal" grep -Eq '^    miss: +a new prompt block \(hash, index, evict\) costs <= 4x +[0-9.]+x  not judged$' "$TMP/b.txt"
check "bench human: decode goal" grep -Eq '^    decode: one generated token \(append \+ commit\) costs <= 100 ns +[0-9.]+ ns  not judged$' "$TMP/b.txt"
check "bench human: no bare MISSED" sh -c "! grep -q MISSED '$TMP/b.txt'"
check "bench --quick: says why" grep -q '(--quick: too few, too short repetitions to judge the goals; run kvblock bench)' "$TMP/b.txt"
check "bench human: fork row" grep -Eq '^  fork: fork\+free \(shared\) +[0-9.]+ .*ns/block$' "$TMP/b.txt"
check "bench human: cow row" grep -Eq '^  cow: fork_at\+append\+drain\+free +[0-9.]+ .*ns/op$' "$TMP/b.txt"
check "bench human: swap row" grep -Eq '^  swap: swap_out\+swap_in +[0-9.]+ .*ns/block$' "$TMP/b.txt"
check "bench human: batch row" grep -Eq '^  batch: export decode step +[0-9.]+ .*ns/seq \([0-9]+ ns/call\)$' "$TMP/b.txt"
check "bench human: kernels section" grep -q '^kernels on the CPU' "$TMP/b.txt"
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
for o in NAME SYNOPSIS KERNELS --quick --reps --json --only --device fork cow swap batch kvb_paged_attention \
         kvb_write_kv kvb_copy_blocks kvb_swap_blocks ceiling 'EXIT STATUS'; do
  check "bench --help: $o" grep -q -- "$o" "$TMP/bh.txt"
done
"$KVB" help replay | cmp -s - "$TMP/r.txt"
check "help replay = replay --help" [ $? -eq 0 ]
check "bench --help: no second kernel benchmark" sh -c "! grep -q kernels_bench '$TMP/bh.txt'"
check "bench --help: make bench-kernels runs this" grep -q 'make bench-kernels. runs this section alone' "$TMP/bh.txt"
${MAKE:-make} -n -s bench-kernels BUILD="$BUILD" >"$TMP/mk.txt" 2>&1
check "make bench-kernels calls kvblock bench --only kernels" grep -q "$BUILD/bin/kvblock bench --only kernels --device auto" "$TMP/mk.txt"
"$KVB" --version >"$TMP/v.txt"
check "--version" grep -Eq '^kvblock [0-9]+\.[0-9]+\.[0-9]+ \(libkvblock [0-9.]+\)$' "$TMP/v.txt"
finish
