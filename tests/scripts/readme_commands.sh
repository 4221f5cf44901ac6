#!/bin/sh
# The README's commands, as a newcomer types them from the repository root: every
# indented command line outside code fences (the first two lines included) and every `backticked`
# command, split at &&. Tool commands (build/bin/kvblock ...) are run as written, with this build tree's
# tool and --svg into a scratch folder; `make` commands are checked, not run (they build or run every
# test): each target they name must exist. A command that starts with a bare `kvblock` fails: that is
# "command not found" before `make install`. Templates (an upper-case placeholder: TRACE, N, FILE) and
# the full `kvblock bench` (seconds of kernels) are listed and skipped.
cd "$(dirname "$0")/../.." || exit 1
. tests/scripts/tool_common.inc

# Indented lines outside ``` fences, and backticked spans, that start a command; "# ..." comments cut;
# headings name commands, they give none.
awk '
  /^```/ { fence = !fence; next }
  fence { next }
  /^#/ { next }
  /^    [^ ]/ { line = substr($0, 5); sub(/[ ]+#.*$/, "", line); print "indented\t" line; next }
  {
    rest = $0
    while (match(rest, /`[^`]+`/)) {
      span = substr(rest, RSTART + 1, RLENGTH - 2)
      if (span ~ /^(make|build\/bin\/kvblock|kvblock) /) print "inline\t" span
      rest = substr(rest, RSTART + RLENGTH)
    }
  }' README.md >"$TMP/lines"
check "README: commands found" [ -s "$TMP/lines" ]
head -n 2 "$TMP/lines" | cut -f2 >"$TMP/first2"
check "README: the first two lines are the build-and-replay and check-all commands" \
  sh -c "grep -q '^make -j2 && build/bin/kvblock replay traces/sample_mooncake.jsonl$' '$TMP/first2' &&
         grep -q '^make -j2 check-all$' '$TMP/first2'"

# Every target in the Makefile's database (make -p prints it without running anything: the goal is a
# file that cannot exist, and -q keeps make from building it).
${MAKE:-make} -pq -f Makefile BUILD="$BUILD" ./__readme_no_such_target__ 2>/dev/null |
  awk -F: '/^[A-Za-z0-9][^$#\/\t=]*:([^=]|$)/ { print $1 }' | sort -u >"$TMP/targets"

ran=0
cut -f2 "$TMP/lines" | sed 's/ && /\n/g' >"$TMP/cmds"
while IFS= read -r cmd; do
  [ -n "$cmd" ] || continue
  case "$cmd" in
    make|make\ *)
      missing=""
      for w in $cmd; do
        case "$w" in make|-*|*=*) ;; *) grep -qx "$w" "$TMP/targets" || missing="$missing $w" ;; esac
      done
      check "make command: $cmd (targets exist)" [ -z "$missing" ]
      ;;
    kvblock\ *)
      fail "bare kvblock (command not found before make install; write build/bin/kvblock): $cmd"
      ;;
    build/bin/kvblock\ *)
      if echo "$cmd" | grep -Eq '(^|[^A-Za-z0-9_-])[A-Z][A-Z_]*([^A-Za-z0-9_]|$)'; then
        echo "skip (template): $cmd"
      elif [ "$cmd" = "build/bin/kvblock bench" ]; then
        echo "skip (seconds of kernel benchmarks; tool_bench_help.sh runs --quick): $cmd"
      else
        run=$(echo "$cmd" | sed -e "s|^build/bin/kvblock|$KVB|" -e "s|--svg [^ ]*|--svg $TMP/chart.svg|")
        # shellcheck disable=SC2086 # the command's words, as the README writes them
        $run >"$TMP/out" 2>&1
        rc=$?
        check "ran from the repository root: $cmd" [ "$rc" -eq 0 ]
        [ "$rc" -eq 0 ] || tail -n 5 "$TMP/out"
        ran=$((ran + 1))
      fi
      ;;
  esac
done <"$TMP/cmds"
check "README: at least 4 tool commands ran ($ran)" [ "$ran" -ge 4 ]
check "README chart command wrote a chart" [ -s "$TMP/chart.svg" ]
finish
