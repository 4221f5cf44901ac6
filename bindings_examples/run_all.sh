#!/bin/sh
# Builds and runs the four bindings examples' tests against $BUILD/lib/libkvblock.so (make check-bindings).
# A language whose toolchain is missing prints a SKIP line; any test that ran and failed makes this fail.
# Each language's test runner names every test it runs (pytest -v -rs: and every skip with its reason;
# cargo test; go test -v); the last line adds up tests, not languages: "bindings: N passed, N failed,
# N skipped (per language)", which check-all's total counts.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
BUILD=${BUILD:-build}
build=$(mkdir -p "$BUILD" && cd "$BUILD" && pwd)
KVBLOCK_LIB="$build/lib/libkvblock.so"
export KVBLOCK_LIB BUILD
[ -f "$KVBLOCK_LIB" ] || { echo "FAIL bindings: $KVBLOCK_LIB not built (make lib)"; exit 1; }

passed="" failed="" skipped=""
tests_passed=0 tests_failed=0 tests_skipped=0 per_language=""
logdir=$(mktemp -d "${TMPDIR:-/tmp}/kvblock-bindings.XXXXXX")
trap 'rm -rf "$logdir"' EXIT INT TERM
# n_of WORD LINE: the count before WORD in a summary line ("116 passed, 2 skipped" passed -> 116), else 0.
n_of() { n=$(echo "$2" | grep -Eo "[0-9]+ $1" | head -n 1 | cut -d' ' -f1); echo "${n:-0}"; }
# count NAME LOG RC: the tests one language ran, from its runner's summary: pytest's last line
# ("116 passed, 2 skipped in 9.1s"), cargo's "test result:" lines (summed), go test -v's "--- PASS/FAIL/
# SKIP" lines; the C example is one program (one test). A failure without a summary counts as one test.
count() {
  p=0 f=0 s=0
  case "$1" in
    python)
      line=$(grep -E '[0-9]+ (passed|failed|skipped|errors?)' "$2" | grep -E ' in [0-9.]+s' | tail -n 1)
      p=$(n_of passed "$line"); f=$(( $(n_of failed "$line") + $(n_of error "$line") + $(n_of errors "$line") ))
      s=$(n_of skipped "$line") ;;
    rust)
      for w in passed failed ignored; do
        n=$(grep -E '^test result:' "$2" | grep -Eo "[0-9]+ $w" | cut -d' ' -f1 | awk '{ t += $1 } END { print t + 0 }')
        case $w in passed) p=$n ;; failed) f=$n ;; ignored) s=$n ;; esac
      done ;;
    go)
      p=$(grep -c '^--- PASS' "$2"); f=$(grep -c '^--- FAIL' "$2"); s=$(grep -c '^--- SKIP' "$2") ;;
    c|python-sdist|python-lint) [ "$3" -eq 0 ] && p=1 ;;
    *) return ;;  # an install step: counted only if it fails (below)
  esac
  [ "$3" -ne 0 ] && [ "$f" -eq 0 ] && f=1
  tests_passed=$((tests_passed + p)) tests_failed=$((tests_failed + f)) tests_skipped=$((tests_skipped + s))
  per_language="$per_language${per_language:+; }$1 $p passed, $f failed, $s skipped"
}
# report NAME RC: a finished step's log, its tests counted, and its pass / fail.
report() {
  cat "$logdir/$1.log"
  count "$1" "$logdir/$1.log" "$2"
  if [ "$2" -eq 0 ]; then passed="$passed $1"; else
    echo "FAIL $1"; failed="$failed $1"
    case "$1" in python|python-sdist|python-lint|rust|go|c) ;; *) tests_failed=$((tests_failed + 1)) ;; esac
  fi
}
run() { # run NAME COMMAND...: one language's tests (output kept to count them, then shown in full)
  name=$1; shift
  echo "=== $name: $*"
  "$@" >"$logdir/$name.log" 2>&1
  report "$name" $?
}
# run_bg NAME COMMAND...: as run, but in the background (a step that leaves a core idle otherwise: the
# sdist's compile beside the single-threaded pytest); finish_bg NAME waits for it, then reports as run.
run_bg() {
  name=$1; shift
  echo "$*" >"$logdir/$name.cmd"
  ( "$@" >"$logdir/$name.log" 2>&1; echo $? >"$logdir/$name.rc" ) &
}
finish_bg() {
  wait
  echo "=== $1: $(cat "$logdir/$1.cmd")"
  report "$1" "$(cat "$logdir/$1.rc" 2>/dev/null || echo 1)"
}
skip() { echo "SKIP $1: $2"; skipped="$skipped $1"; }
have() { command -v "$1" >/dev/null 2>&1; }

# Python: the kvblock package (cffi ABI mode). pip-installed into a venv under the build dir, reusing this
# build tree (make is incremental: nothing is rebuilt), then its tests run from outside the source tree
# against the bundled library. Without setuptools/wheel the tests run in-tree against $KVBLOCK_LIB.
pydir="$root/bindings_examples/python"
# The torch engine's checkpoint tests need torch, safetensors and transformers (make check-all installs them:
# tools/install_deps.sh test; about 3 GB).
if have python3 && ! python3 -c 'import torch, safetensors, transformers' 2>/dev/null; then
  echo "SKIP python torch engine: torch, safetensors or transformers not importable (tests/test_engine_torch*.py skip; sh tools/install_deps.sh test installs them)"
fi
if ! have python3; then
  skip python "python3 not found"
elif ! python3 -c 'import cffi, pytest, numpy' 2>/dev/null; then
  skip python "python3 lacks cffi, pytest or numpy (pip install cffi pytest numpy)"
elif python3 -c 'import setuptools, wheel' 2>/dev/null &&
     { [ -x "$build/py-venv/bin/python" ] || python3 -m venv --system-site-packages "$build/py-venv"; }; then
  venv="$build/py-venv"
  run python-install env KVBLOCK_BUILD_DIR="$build" "$venv/bin/python" -m pip install -q --no-build-isolation \
    --no-deps --force-reinstall --disable-pip-version-check "$pydir"
  # The sdist builds from itself: pip install of it in a fresh venv outside the repository (compiles the
  # library from the sdist's csrc/, about two minutes on two cores), beside the tests.
  run_bg python-sdist sh "$pydir/tests/sdist_install.sh"
  run python env OPENBLAS_NUM_THREADS=1 sh -c "cd '$build' && env -u KVBLOCK_LIB '$venv/bin/python' -m kvblock --version &&
    env -u KVBLOCK_LIB '$venv/bin/python' -m pytest -v -rs -p no:cacheprovider '$pydir/tests'"
  finish_bg python-sdist
else
  echo "note python: setuptools/wheel or venv missing; testing the package in-tree against $KVBLOCK_LIB"
  run python env PYTHONPATH="$pydir" python3 -m pytest -v -rs -p no:cacheprovider "$pydir/tests"
fi

# Python lint: ruff (pyflakes, pycodestyle, isort) and mypy (the package fully annotated, the demos checked),
# as configured in bindings_examples/python/pyproject.toml; caches under the build dir.
if ! have python3 || ! python3 -m ruff --version >/dev/null 2>&1 || ! python3 -m mypy --version >/dev/null 2>&1; then
  skip python-lint "python3 -m ruff or python3 -m mypy not available (pip install ruff mypy)"
else
  run python-lint sh -c "cd '$pydir' && python3 -m ruff check --no-cache . &&
    python3 -m mypy --cache-dir '$build/mypy-cache'"
fi

# Rust: cargo, offline, no dependencies; target dir under the build dir.
if ! have cargo; then
  skip rust "cargo not found"
else
  run rust env CARGO_TARGET_DIR="$build/cargo-target" cargo test --offline \
    --manifest-path bindings_examples/rust/Cargo.toml
fi

# Go: cgo + dlopen; caches under the build dir when $HOME cannot hold them.
if ! have go; then
  skip go "go not found (apt-get install golang-go)"
else
  if [ -z "${HOME:-}" ] || [ ! -w "${HOME:-/nonexistent}" ]; then
    export GOCACHE="${GOCACHE:-$build/go-cache}" GOPATH="${GOPATH:-$build/go-path}"
  fi
  run go sh -c 'cd bindings_examples/go && CGO_ENABLED=1 GOFLAGS=-mod=mod GOPROXY=off go test -v -count=1 ./...'
fi

# C: make install into a temporary prefix, build with pkg-config only, run.
if ! have pkg-config; then
  skip c "pkg-config not found"
else
  run c sh bindings_examples/c/test.sh
fi

echo "bindings: languages passed:${passed:- none}; failed:${failed:- none}; skipped:${skipped:- none}"
echo "bindings: $tests_passed passed, $tests_failed failed, $tests_skipped skipped (tests: ${per_language:-none ran})"
[ -z "$failed" ]
