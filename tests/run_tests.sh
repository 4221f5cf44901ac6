#!/bin/sh
# Runs the test binaries in $BUILD/tests and adds up their closing "N passed, N failed" lines; prints
# the total. A binary that dies without that line counts as failed.
#   sh tests/run_tests.sh                      every binary and every tests/scripts/*.sh (make check)
#   sh tests/run_tests.sh PATTERN [WRAPPER...] binaries $BUILD/tests/PATTERN only, each run under the
#                                              wrapper command (valgrind), as check-tsan / check-valgrind do
BUILD=${BUILD:-build}
export BUILD
# The wrapper's words are split on spaces (valgrind's options have none).
if [ $# -gt 0 ]; then
  tests="$BUILD/tests/$1"
  shift
  wrapper="$*"
else
  tests="$BUILD/tests/* tests/scripts/*.sh"
  wrapper=""
fi
total_pass=0
total_fail=0
log=$(mktemp)
for t in $tests; do
  [ -f "$t" ] || continue
  case "$t" in *.sh) runner="sh" ;; *) [ -x "$t" ] || continue; runner="" ;; esac
  name=$(basename "$t")
  start=$(date +%s)
  $wrapper $runner "$t" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  grep -E '^(FAIL|SKIP) ' "$log" | sed "s|^|  [$name] |"
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
