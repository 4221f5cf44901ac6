#!/bin/sh
# tools/install_deps.sh, the one list of what the build and the tests need, read in its --list and
# --dry-run modes (nothing is installed): its build part is what `make` installs when xxhash.h is
# missing, and only that; its test part covers every tool and Python module the test scripts, check-all
# and check-bindings look for; .ci/run and the README's two first commands run it and each other's
# commands (the README's lines are what CI runs).
cd "$(dirname "$0")/../.." || exit 1
. tests/scripts/tool_common.inc
deps="sh tools/install_deps.sh"

$deps --list build >"$TMP/build" 2>&1
$deps --list test >"$TMP/test" 2>&1
$deps --list all >"$TMP/all" 2>&1
check "--list build names libxxhash-dev with a reason" grep -Eq '^build apt +libxxhash-dev +[a-z].{20,}' "$TMP/build"
check "--list build holds build rows only, and no Python package" sh -c "! grep -v '^build apt ' '$TMP/build'"
check "--list test holds test rows only" sh -c "! grep -v '^test ' '$TMP/test'"
check "--list all is build then test" sh -c "cat '$TMP/build' '$TMP/test' | cmp -s - '$TMP/all'"
check "every row has a reason" sh -c "! awk 'NF < 6' '$TMP/all' | grep ."
check "a usage error for an unknown part" sh -c "! $deps --list tests >/dev/null 2>&1"

# The missing paths, without installing: a header nobody has, a python3 that imports nothing.
KVB_XXHASH_HEADER=kvb_no_such_header.h $deps --dry-run build >"$TMP/dry" 2>&1
check "--dry-run build with xxhash.h missing: libxxhash-dev, why, and the apt-get line" sh -c "
  grep -Eq '^install_deps: apt +libxxhash-dev +the library hashes' '$TMP/dry' &&
  grep -Eq '^install_deps: would run: .*apt-get install -y libxxhash-dev$' '$TMP/dry'"
check "--dry-run build never names a test package" sh -c "! grep -Eq 'torch|pytest|valgrind|pip' '$TMP/dry'"
$deps --dry-run build >"$TMP/present" 2>&1
check "--dry-run build on this machine (it built): all present" grep -q '^install_deps: build: all 2 present$' \
  "$TMP/present"
PYTHON=false $deps --dry-run test >"$TMP/nopy" 2>&1
for pkg in cffi numpy pytest ruff mypy torch transformers safetensors tokenizers; do
  check "--dry-run test with no Python package importable: pip $pkg" \
    grep -Eq "^install_deps: pip +([^ ]+ )*$pkg( |$)" "$TMP/nopy"
done
check "--dry-run test: one pip line installs the required ones" \
  grep -Eq '^install_deps: would run: false -m pip install .* torch transformers safetensors tokenizers( |$)' "$TMP/nopy"

# The Makefile's path to it: the object rules run build-deps, which runs the script when the header is missing.
${MAKE:-make} --no-print-directory -s build-deps XXHASH_HEADER=kvb_no_such_header.h INSTALL_DEPS_FLAGS=--dry-run \
  >"$TMP/make" 2>&1
check "make build-deps with xxhash.h missing runs the script's build part" sh -c "
  grep -Eq '^install_deps: apt +libxxhash-dev' '$TMP/make' && ! grep -q torch '$TMP/make'"
check "make: every object rule waits for build-deps" sh -c "
  grep -q '^\$(OBJ)/%.o: %.cpp | build-deps\$' Makefile && grep -q '^\$(OBJ)/tools/%.o: tools/%.c | build-deps\$' Makefile"
check "make check-all first runs the script's test part" sh -c "
  sed -n '/^check-all:/,/^\$/p' Makefile | sed -n 2p | grep -q 'sh tools/install_deps.sh .* test'"

# Coverage: every command the test scripts look for, every Python module they import or skip without,
# is in the list (a row's check or one of its packages). Not listed on purpose: clang++-14 (clang++'s
# versioned name), objdump (binutils, which g++ brings), nvcc (the CUDA toolkit: optional, GPU only).
grep -v '^ *#' tests/check_all.sh tests/scripts/*.sh bindings_examples/run_all.sh bindings_examples/*/*.sh \
    bindings_examples/python/tests/*.sh 2>/dev/null |
  grep -oE '(command -v|have) [A-Za-z0-9+_.-]+' | cut -d' ' -f2- | sed 's/^-v //' >"$TMP/cmds"
grep -rhoE 'shutil\.which\("[^"]+"\)' bindings_examples/python | sed 's/.*("\(.*\)")/\1/' >>"$TMP/cmds"
sort -u "$TMP/cmds" | grep -vxE 'clang\+\+-14|objdump|nvcc' >"$TMP/cmds.u"
check "commands found in the test scripts (at least 8)" [ "$(wc -l <"$TMP/cmds.u")" -ge 8 ]
sed -n "s/^LIST='//; /^[a-z]*|/p" tools/install_deps.sh >"$TMP/rows"
while read -r c; do
  check "command $c is in the list" grep -qF "|cmd:$c|" "$TMP/rows"
done <"$TMP/cmds.u"
{
  grep -v '^ *#' bindings_examples/run_all.sh | grep -oE "import [a-z_, ]+'" | sed "s/^import //; s/'//; s/,/ /g" | tr ' ' '\n'
  grep -v '^ *#' bindings_examples/run_all.sh | grep -oE 'python3? -m [a-z_]+' | sed 's/.* -m //'
  grep -rhoE 'importorskip\("[a-z_.]+"' bindings_examples/python/tests | sed 's/.*("//; s/"$//'
} | grep . | sort -u | grep -vxE 'kvblock|venv' >"$TMP/mods"
check "Python modules found (at least 12)" [ "$(wc -l <"$TMP/mods")" -ge 12 ]
while read -r m; do
  check "Python module $m is in the list" sh -c "grep -qF '|py:$m|' '$TMP/rows' ||
    cut -d'|' -f3 '$TMP/rows' | tr ' ' '\n' | grep -qx '$m'"
done <"$TMP/mods"
pin=$(sed -n 's/^PINNED_VERSION = "\(.*\)"/\1/p' bindings_examples/python/examples/indexer_client.py)
check "the Dynamo pin ($pin) is the list's" grep -qF "ai-dynamo-runtime==$pin|pyver:ai-dynamo-runtime==$pin|" "$TMP/rows"

# .ci/run and the README: CI runs the whole list, then the README's two commands; it installs nothing itself.
readme1=$(grep -m1 '^    make -j2 && ' README.md | sed 's/^    //; s/ *#.*//')
readme2=$(grep -m1 '^    make -j2 check-all' README.md | sed 's/^    //; s/ *#.*//')
check "README line 3 is the build-and-replay command" [ "$(sed -n 3p README.md | sed 's/^    //; s/ *#.*//')" = "$readme1" ]
check "README line 4 is the test command" [ "$(sed -n 4p README.md | sed 's/^    //; s/ *#.*//')" = "make -j2 check-all" ]
check ".ci/run runs the script's whole list" grep -qx 'sh tools/install_deps.sh all' .ci/run
check ".ci/run builds with the README's first make" grep -qx "${readme1%% &&*}" .ci/run
check ".ci/run ends with the README's test command" [ "$(grep -v '^ *\(#\|fi\|$\)' .ci/run | tail -n 1)" = "$readme2" ]
check ".ci/run installs nothing itself (one list)" sh -c "! grep -Eq 'apt-get|pip install' .ci/run"
finish
