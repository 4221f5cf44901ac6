#!/bin/sh
# `make check-all`: every test variant in turn (plain, ASan+UBSan, bindings, ThreadSanitizer, valgrind,
# fuzzing), each logged to build/check-all/<variant>.log. Adds up their closing "N passed, N failed"
# lines (a variant without one counts as one test, by its exit status) and prints the grand total.
MAKE=${MAKE:-make}
FUZZ_SECONDS=${FUZZ_SECONDS:-0}
logs=build/check-all
mkdir -p "$logs"
total_pass=0
total_fail=0
# A variant whose tool is missing is skipped visibly (.ci/run installs them all, so CI skips none).
missing_tool() {
  case "$1" in
    check-valgrind) command -v valgrind >/dev/null 2>&1 || echo "valgrind not found" ;;
    fuzz) { command -v clang++-14 || command -v clang++; } >/dev/null 2>&1 || echo "clang++ not found"
          ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
            echo "libFuzzer runtime (libclang-rt-dev) not found" ;;
  esac
}
for variant in check check-sanitize check-bindings check-tsan check-valgrind fuzz; do
  why=$(missing_tool "$variant" | head -n 1)
  if [ -n "$why" ]; then
    echo "SKIP $variant: $why"
    continue
  fi
  log="$logs/$variant.log"
  start=$(date +%s)
  $MAKE --no-print-directory "$variant" FUZZ_SECONDS="$FUZZ_SECONDS" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  summary=$(grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1 | sed 's/^[A-Za-z]*: //')
  if [ -n "$summary" ]; then
    p=$(echo "$summary" | sed 's/ passed.*//')
    f=$(echo "$summary" | sed 's/.* passed, \([0-9]*\) failed.*/\1/')
  else
    p=1; f=0
    summary="no count; exit $rc"
  fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then p=$((p > 0 ? p - 1 : 0)); f=1; fi
  if [ "$f" -ne 0 ]; then
    echo "FAIL $variant ($summary, exit $rc, ${secs}s); last lines of $log:"
    grep -E '^fuzz_capi: |^(==[0-9]+==)?ERROR|runtime error' "$log" | head -n 5 | sed 's/^/    /'
    tail -n 30 "$log" | sed 's/^/    /'
  else
    echo "ok   $variant ($summary, ${secs}s)"
  fi
  grep -E '^  \[.*\] SKIP|^SKIP' "$log" | sed "s/^/    [$variant] /"
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
