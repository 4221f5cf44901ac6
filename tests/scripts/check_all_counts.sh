#!/bin/sh
# tests/check_all.sh adds up tests, not variants: run against a stand-in for make that
# prints each variant's closing line, in a scratch folder (its logs go to ./build/check-all there), the
# total must be the sum of the tests, the bindings' skipped tests counted, the fuzz run counted as one
# test with its number of inputs, and the Python tests listed per file.
. tests/scripts/tool_common.inc
root=$(pwd)
cat >"$TMP/make.sh" <<'FAKE'
#!/bin/sh
for a in "$@"; do
  case "$a" in
    check) echo "ok   c_core_api (13 passed, 0 failed, 0s)"; echo "700 passed, 0 failed" ;;
    check-sanitize) echo "650 passed, 0 failed" ;;
    check-bindings) echo "tests/test_a.py::test_one PASSED"; echo "tests/test_a.py::test_two SKIPPED"
                    echo "tests/test_b.py::test_three PASSED"
                    echo "bindings: 120 passed, 0 failed, 2 skipped (python 116 + 1 skipped, rust 3, go 1)" ;;
    check-tsan) echo "40 passed, 0 failed" ;;
    check-valgrind) echo "30 passed, 0 failed" ;;
    fuzz) echo "Done 123456 runs in 10 second(s)" ;;
  esac
done
FAKE
mkdir -p "$TMP/run"
(cd "$TMP/run" && MAKE="sh $TMP/make.sh" sh "$root/tests/check_all.sh") >"$TMP/out.txt" 2>&1
check "check-all (stand-in make): exit 0" [ $? -eq 0 ]
# Variants whose tool this machine lacks are skipped by name; the total counts what ran.
want_p=$((700 + 650 + 120 + 40)) ; want_s=2
grep -q '^SKIP check-valgrind' "$TMP/out.txt" || want_p=$((want_p + 30))
if grep -q '^SKIP fuzz' "$TMP/out.txt"; then :; else
  want_p=$((want_p + 1))
  check "fuzz: its inputs, counted as one test" grep -q '^ok   fuzz (123456 inputs run, counted as 1 test' "$TMP/out.txt"
fi
check "the total counts tests: $want_p passed, $want_s skipped" grep -qx "$want_p passed, 0 failed, $want_s skipped" "$TMP/out.txt"
check "bindings: its line's counts" grep -q '^ok   check-bindings (120 passed, 0 failed, 2 skipped' "$TMP/out.txt"
check "bindings: the Python tests per file, with the skipped" grep -q '\[check-bindings\] python test_a.py: 2 tests SKIPPED' "$TMP/out.txt"
check "logs in the scratch folder" [ -s "$TMP/run/build/check-all/check.log" ]
finish
