#!/bin/sh
# Runs the test binaries $BUILD/tests/$PATTERN, each under an optional wrapper command (valgrind), and
# adds up their closing "N passed, N failed" lines like tests/run_tests.sh. Used by `make check-tsan`
# and `make check-valgrind`, which run the binaries only (no tests/scripts).
#   usage: sh tests/run_variant.sh BUILD PATTERN [WRAPPER ARGS...]
BUILD=$1
PATTERN=$2
shift 2
total_pass=0
total_fail=0
log=$(mktemp)
for t in "$BUILD"/tests/$PATTERN; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  name=$(basename "$t")
  start=$(date +%s)
  "$@" "$t" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  grep -E '^SKIP ' "$log" | sed "s|^|  [$name] |"
  if [ -z "$summary" ]; then
    echo "FAIL $name: exited $rc without a summary line; last output:"
    tail -n 30 "$log" | sed 's/^/    /'
    total_fail=$((total_fail + 1))
    continue
  fi
  p=$(echo "$summary" | sed 's/ passed.*//')
  f=$(echo "$summary" | sed 's/.* passed, \([0-9]*\) failed.*/\1/')
  if [ "$f" -ne 0 ] || [ "$rc" -ne 0 ]; then
    echo "FAIL $name ($summary, exit $rc, ${secs}s):"
    grep -v '^ok ' "$log" | tail -n 60 | sed 's/^/    /'
    [ "$f" -eq 0 ] && f=1
  else
    echo "ok   $name ($summary, ${secs}s)"
  fi
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
done
rm -f "$log"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
