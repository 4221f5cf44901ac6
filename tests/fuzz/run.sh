#!/bin/sh
# `make fuzz`: runs the libFuzzer harness ($1) as FUZZ_JOBS processes side by side, so that a 2-core
# machine fuzzes twice as many inputs in the same time. With FUZZ_SECONDS=0 each job runs
# FUZZ_RUNS / FUZZ_JOBS inputs from seed FUZZ_SEED + its index, in a corpus folder of its own: the
# run is the same every time (CI's included). Otherwise each job explores for FUZZ_SECONDS seconds
# (FUZZ_SEED=0: random seeds). Fails when any job fails; prints each job's log, then one line
# "Done N runs" with the total, which tests/check_all.sh reports.
bin=$1 dir=$2
jobs=${FUZZ_JOBS:-2} runs=${FUZZ_RUNS:-20000} seconds=${FUZZ_SECONDS:-0} seed=${FUZZ_SEED:-1}
mkdir -p "$dir/artifacts"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
pids=""
j=1
while [ "$j" -le "$jobs" ]; do
  mkdir -p "$dir/corpus$j"
  if [ "$seconds" = 0 ]; then
    budget="-runs=$(( (runs + jobs - j) / jobs ))"
  else
    budget="-max_total_time=$seconds"
  fi
  s=$seed
  [ "$seed" != 0 ] && s=$((seed + j - 1))
  "$bin" $budget -seed="$s" -print_final_stats=1 -max_len=600 -len_control=0 -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/artifacts/" "$dir/corpus$j" tests/fuzz/corpus >"$dir/job$j.log" 2>&1 &
  pids="$pids $!"
  j=$((j + 1))
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
total=0
j=1
while [ "$j" -le "$jobs" ]; do
  echo "---- fuzz job $j (log $dir/job$j.log)"
  cat "$dir/job$j.log"
  n=$(sed -n 's/^Done \([0-9]*\) runs in.*/\1/p' "$dir/job$j.log" | tail -n 1)
  total=$((total + ${n:-0}))
  j=$((j + 1))
done
echo "Done $total runs in $jobs jobs"
exit $rc
