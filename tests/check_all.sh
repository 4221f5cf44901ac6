#!/bin/sh
# `make check-all`: every test variant in turn (plain, ASan+UBSan, bindings, ThreadSanitizer, valgrind,
# fuzzing), each logged to build/check-all/<variant>.log. Adds up their closing "N passed, N failed[, N
# skipped]" lines, which count tests (the bindings' line adds up every Python, Rust and Go test and the C
# example), and prints the grand total. The fuzz run has no such line: its thousands of inputs count as
# one test, and its line says so with the number of inputs libFuzzer ran.
MAKE=${MAKE:-make}
FUZZ_SECONDS=${FUZZ_SECONDS:-0}
logs=build/check-all
mkdir -p "$logs"
total_pass=0
total_fail=0
total_skip=0
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
  s=0
  if [ -n "$summary" ]; then
    # The counts at the start of the line (the bindings' line goes on with the same words per language).
    p=$(echo "$summary" | sed 's/^\([0-9]*\) passed.*/\1/')
    f=$(echo "$summary" | sed 's/^[0-9]* passed, \([0-9]*\) failed.*/\1/')
    case "$summary" in [0-9]*" passed, "[0-9]*" failed, "[0-9]*" skipped"*)
      s=$(echo "$summary" | sed 's/^[0-9]* passed, [0-9]* failed, \([0-9]*\) skipped.*/\1/') ;; esac
  elif [ "$variant" = fuzz ]; then
    p=1; f=0
    runs=$(sed -n 's/^Done \([0-9]*\) runs in.*/\1/p' "$log" | tail -n 1)
    summary="${runs:-no} inputs run, counted as 1 test; exit $rc"
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
  if [ "$variant" = check-bindings ]; then
    # What ran, in CI's log too (the line above has the counts per language): the Python tests per file
    # (pytest -v names each in the variant's log; the SKIPPED lines above say why a test was skipped).
    grep -Eo '^[^ ]*\.py::[^ ]* (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)' "$log" |
      awk '{ split($1, a, "::"); n = split(a[1], p, "/"); f = p[n]; c[f]++; if ($2 != "PASSED") o[f] = o[f] " " $2 }
           END { for (f in c) printf "    [check-bindings] python %s: %d test%s%s\n", f, c[f], c[f] == 1 ? "" : "s", o[f] }' | sort
  fi
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
  total_skip=$((total_skip + s))
done
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
