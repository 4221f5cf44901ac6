#!/bin/sh
# Runs every test binary in $BUILD/tests and every tests/scripts/*.sh, adds up their closing
# "N passed, N failed" lines and prints the total. A binary that dies without that line counts as failed.
BUILD=${BUILD:-build}
export BUILD
total_pass=0
total_fail=0
log=$(mktemp)
for t in "$BUILD"/tests/* tests/scripts/*.sh; do
  [ -f "$t" ] || continue
  case "$t" in *.sh) cmd="sh $t" ;; *) [ -x "$t" ] || continue; cmd="$t" ;; esac
  name=$(basename "$t")
  $cmd >"$log" 2>&1
  rc=$?
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  grep -E '^(FAIL|SKIP) ' "$log" | sed "s|^|  [$name] |"
  if [ -z "$summary" ]; then
    echo "FAIL $name: exited $rc without a summary line; last output:"
    tail -n 20 "$log" | sed 's/^/    /'
    total_fail=$((total_fail + 1))
    continue
  fi
  p=$(echo "$summary" | sed 's/ passed.*//')
  f=$(echo "$summary" | sed 's/.* passed, \([0-9]*\) failed.*/\1/')
  if [ "$f" -ne 0 ] || [ "$rc" -ne 0 ]; then
    echo "FAIL $name ($summary, exit $rc):"
    grep -v '^ok ' "$log" | tail -n 40 | sed 's/^/    /'
    [ "$f" -eq 0 ] && f=1
  else
    echo "ok   $name ($summary)"
  fi
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
done
rm -f "$log"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
