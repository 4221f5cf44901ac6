#!/bin/sh
# Runs the test binaries in $BUILD/tests and adds up their closing "N passed, N failed" lines; prints
# the total. A binary that dies without that line counts as failed.
#   sh tests/run_tests.sh                      every binary and every tests/scripts/*.sh (make check)
#   sh tests/run_tests.sh PATTERN [WRAPPER...] binaries $BUILD/tests/PATTERN only, each run under the
#                                              wrapper command (valgrind), as check-tsan / check-valgrind do
# Under a wrapper the binaries run TEST_JOBS at a time (default: the online CPUs): valgrind runs a
# process's threads one at a time, so one binary at a time left all but one core idle. Without one they
# run one at a time, since some scripts build and install into the shared build folder. Either way the
# report lists the tests in the same order.
BUILD=${BUILD:-build}
export BUILD
if [ "$1" = "--one" ]; then  # internal: run test $2 under $RUN_TESTS_WRAPPER, results beside prefix $3
  case "$2" in *.sh) runner="sh" ;; *) runner="" ;; esac
  start=$(date +%s)
  $RUN_TESTS_WRAPPER $runner "$2" >"$3.out" 2>&1
  echo $? >"$3.rc"
  echo $(( $(date +%s) - start )) >"$3.secs"
  exit 0
fi
# The wrapper's words are split on spaces (valgrind's options have none).
if [ $# -gt 0 ]; then
  tests="$BUILD/tests/$1"
  shift
  RUN_TESTS_WRAPPER="$*"
  jobs=${TEST_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
else
  tests="$BUILD/tests/* tests/scripts/*.sh"
  RUN_TESTS_WRAPPER=""
  jobs=1
fi
export RUN_TESTS_WRAPPER
dir=$(mktemp -d)
list="$dir/list"
: >"$list"
for t in $tests; do
  [ -f "$t" ] || continue
  case "$t" in *.sh) ;; *) [ -x "$t" ] || continue ;; esac
  echo "$t" >>"$list"
done
if [ "$jobs" -gt 1 ]; then
  while read -r t; do echo "$t $dir/$(basename "$t")"; done <"$list" |
    xargs -P "$jobs" -n 2 sh "$0" --one
else
  while read -r t; do sh "$0" --one "$t" "$dir/$(basename "$t")"; done <"$list"
fi
total_pass=0
total_fail=0
while read -r t; do
  name=$(basename "$t")
  log="$dir/$name.out"
  rc=$(cat "$dir/$name.rc" 2>/dev/null || echo 1)
  secs=$(cat "$dir/$name.secs" 2>/dev/null || echo 0)
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" 2>/dev/null | tail -n 1)
  grep -E '^(FAIL|SKIP) ' "$log" 2>/dev/null | sed "s|^|  [$name] |"
  if [ -z "$summary" ]; then
    echo "FAIL $name: exited $rc without a summary line; last output:"
    tail -n 30 "$log" 2>/dev/null | sed 's/^/    /'
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
done <"$list"
rm -rf "$dir"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
