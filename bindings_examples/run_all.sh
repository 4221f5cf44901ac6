#!/bin/sh
# Builds and runs the four bindings examples' tests against $BUILD/lib/libkvblock.so (make check-bindings).
# A language whose toolchain is missing prints a SKIP line; any test that ran and failed makes this fail.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
BUILD=${BUILD:-build}
build=$(mkdir -p "$BUILD" && cd "$BUILD" && pwd)
KVBLOCK_LIB="$build/lib/libkvblock.so"
export KVBLOCK_LIB BUILD
[ -f "$KVBLOCK_LIB" ] || { echo "FAIL bindings: $KVBLOCK_LIB not built (make lib)"; exit 1; }

passed="" failed="" skipped=""
run() { # run NAME COMMAND...: one language's tests
  name=$1; shift
  echo "=== $name: $*"
  if "$@"; then passed="$passed $name"; else echo "FAIL $name"; failed="$failed $name"; fi
}
skip() { echo "SKIP $1: $2"; skipped="$skipped $1"; }
have() { command -v "$1" >/dev/null 2>&1; }

# Python: the kvblock package (cffi ABI mode). pip-installed into a venv under the build dir, reusing this
# build tree (make is incremental: nothing is rebuilt), then its tests run from outside the source tree
# against the bundled library. Without setuptools/wheel the tests run in-tree against $KVBLOCK_LIB.
pydir="$root/bindings_examples/python"
# The torch engine's checkpoint tests need torch, safetensors and transformers (never installed here: GBs).
if have python3 && ! python3 -c 'import torch, safetensors, transformers' 2>/dev/null; then
  echo "SKIP python torch engine: torch, safetensors or transformers not importable (tests/test_engine_torch.py skips)"
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
  run python env OPENBLAS_NUM_THREADS=1 sh -c "cd '$build' && env -u KVBLOCK_LIB '$venv/bin/python' -m kvblock --version &&
    env -u KVBLOCK_LIB '$venv/bin/python' -m pytest -q -p no:cacheprovider '$pydir/tests'"
else
  echo "note python: setuptools/wheel or venv missing; testing the package in-tree against $KVBLOCK_LIB"
  run python env PYTHONPATH="$pydir" python3 -m pytest -q -p no:cacheprovider "$pydir/tests"
fi

# Rust: cargo, offline, no dependencies; target dir under the build dir.
if ! have cargo; then
  skip rust "cargo not found"
else
  run rust env CARGO_TARGET_DIR="$build/cargo-target" cargo test --offline -q \
    --manifest-path bindings_examples/rust/Cargo.toml
fi

# Go: cgo + dlopen; caches under the build dir when $HOME cannot hold them.
if ! have go; then
  skip go "go not found (apt-get install golang-go)"
else
  if [ -z "${HOME:-}" ] || [ ! -w "${HOME:-/nonexistent}" ]; then
    export GOCACHE="${GOCACHE:-$build/go-cache}" GOPATH="${GOPATH:-$build/go-path}"
  fi
  run go sh -c 'cd bindings_examples/go && CGO_ENABLED=1 GOFLAGS=-mod=mod GOPROXY=off go test -count=1 ./...'
fi

# C: make install into a temporary prefix, build with pkg-config only, run.
if ! have pkg-config; then
  skip c "pkg-config not found"
else
  run c sh bindings_examples/c/test.sh
fi

echo "bindings: passed:${passed:- none}; failed:${failed:- none}; skipped:${skipped:- none}"
count() { set -- $1; echo $#; }
echo "bindings: $(count "$passed") passed, $(count "$failed") failed, $(count "$skipped") skipped"
[ -z "$failed" ]
