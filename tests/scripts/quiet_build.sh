#!/bin/sh
# The build is quiet by default: one short line per step ("  CXX   libkvblock/error.cpp"),
# the full compiler command with V=1, and a compiler warning shown in full either way. Builds one small
# object into a scratch tree (CUDA=0: a few seconds), never the tree under test.
. tests/scripts/tool_common.inc
MAKE=${MAKE:-make}
# Run from `make check`: the outer make's flags (-j, its jobserver) would change what the inner one prints.
unset MAKEFLAGS MFLAGS MAKELEVEL
obj="$TMP/qb/obj/cpu/libkvblock/error.o"
$MAKE --no-print-directory BUILD="$TMP/qb" CUDA=0 "$obj" >"$TMP/quiet.txt" 2>&1
check "quiet build: exit 0" [ $? -eq 0 ]
check "quiet build: one line for the object" [ "$(wc -l <"$TMP/quiet.txt")" -eq 1 ]
check "quiet build: that line is short and names the source" \
  grep -Eq '^  CXX +libkvblock/error\.cpp$' "$TMP/quiet.txt"
rm -f "$obj"
$MAKE --no-print-directory BUILD="$TMP/qb" CUDA=0 V=1 "$obj" >"$TMP/verbose.txt" 2>&1
check "V=1: exit 0" [ $? -eq 0 ]
check "V=1: the full compiler command" grep -Eq -- ' -c .*libkvblock/error\.cpp|libkvblock/error\.cpp.* -o ' "$TMP/verbose.txt"
check "V=1: no short step line" sh -c "! grep -Eq '^  CXX ' '$TMP/verbose.txt'"
# A warning still reaches the terminal in full on a quiet build.
rm -f "$obj"
$MAKE --no-print-directory BUILD="$TMP/qb" CUDA=0 WARN="-Wall -Wextra -Wpadded" "$obj" >"$TMP/warn.txt" 2>&1
check "quiet build: a warning is printed in full" grep -Eq 'error\.(cpp|h):[0-9]+:[0-9]+: warning: .*\[-Wpadded\]' "$TMP/warn.txt"
finish
