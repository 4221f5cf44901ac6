#!/bin/sh
# What libkvblock needs from the system, in one list, and the installer the README's commands and CI use:
#   sh tools/install_deps.sh [--dry-run | --list] [build | test | all]
# build: what `make` needs (the Makefile runs this with `build` when xxhash.h is missing); test: what
# `make check-all` adds (its first step runs this with `test`); all: both (.ci/run). Each missing package is
# printed with why it is needed, then installed: apt-get (as root, else through `sudo -n`) and pip (into
# the python3 on PATH). --dry-run prints what would be installed and installs nothing; --list prints the
# whole list, installed or not. Exit status: 0 when every required package is present afterwards; the
# optional ones (marked so) may fail to install: the tests that use them then SKIP, visibly.
# Environment: CXX (the compiler xxhash.h must be visible to), KVB_XXHASH_HEADER (the header checked
# for, xxhash.h; tests point it at a missing one), PYTHON (python3), KVB_DEPS_NO_SUDO=1 (never sudo).
set -u
mode=install
case "${1:-}" in --dry-run) mode=dry; shift ;; --list) mode=list; shift ;; esac
part=${1:-build}
case "$part" in build | test | all) ;; *)
  echo "usage: sh tools/install_deps.sh [--dry-run | --list] [build | test | all]" >&2; exit 2 ;; esac
PYTHON=${PYTHON:-python3}
[ -x "$HOME/.cargo/bin/cargo" ] && PATH="$HOME/.cargo/bin:$PATH" && export PATH

# THE list: part | installer | package(s) | how to tell it is there | why.
# installer: apt, pip (required), pip? (optional: a failed install leaves its tests to SKIP, visibly).
# The check: cmd:NAME (on PATH), header:NAME (the C++ compiler finds it), glob:PATTERN (a file exists),
# py:MODULE (python3 imports it), pyver:DIST==VERSION (that version installed).
LIST='
build|apt|g++|cmd:g++|the C++17 compiler that builds the library (and gcc, its C side, for the tool and the C tests)
build|apt|libxxhash-dev|header:xxhash.h|the library hashes token blocks with XXH64 (libkvblock/hash.cpp): header and -lxxhash
test|apt|pkg-config|cmd:pkg-config|the C binding example builds against the installed library through kvblock.pc
test|apt|xxhash|cmd:xxhsum|tests/scripts/hash_xxhsum.sh checks the block hashes against the xxhsum tool
test|apt|valgrind|cmd:valgrind|make check-valgrind runs every test binary under memcheck
test|apt|clang|cmd:clang++|make fuzz builds the C API fuzzer with clang (libFuzzer)
test|apt|libclang-rt-14-dev|glob:/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a|the libFuzzer runtime make fuzz links
test|apt|golang-go|cmd:go|the Go binding example (bindings_examples/go) and its tests
test|apt|cargo rustc|cmd:cargo|the Rust binding example (bindings_examples/rust) and its tests
test|apt|redis-server|cmd:redis-server|the store tier'"'"'s Redis tests start a redis-server on a loopback port
test|apt|libibverbs1|glob:/usr/lib/*-linux-gnu/libibverbs.so.1|the Mooncake Store wheel links libibverbs, even for TCP
test|apt|python3|cmd:python3|the Python package (bindings_examples/python), its tests and CI'"'"'s conformance check
test|apt|python3-pip|py:pip|installs the Python packages below
test|apt|python3-venv|py:ensurepip|make check-bindings installs the Python package into a venv under build/
test|pip|cffi|py:cffi|the Python package loads the library through cffi
test|pip|numpy|py:numpy|the Python package'"'"'s arrays and the numpy engine
test|pip|pytest|py:pytest|runs the Python tests
test|pip|setuptools wheel|py:wheel|pip-installs the Python package and builds its sdist in the tests
test|pip|ruff|py:ruff|lints the Python package (check-bindings)
test|pip|mypy|py:mypy|type-checks the Python package (check-bindings)
test|pip|xxhash|py:xxhash|CI'"'"'s conformance check (../shared/conformance) hashes blocks with it
test|pip|torch|py:torch|the torch engine and its parity tests (CPU; PyPI'"'"'s wheel also brings CUDA libraries, about 3 GB)
test|pip|transformers|py:transformers|the reference the torch engine is checked token for token against
test|pip|safetensors|py:safetensors|the torch engine reads checkpoints in safetensors files
test|pip|tokenizers|py:tokenizers|the engine CLI'"'"'s --text option (tokenizer.json)
test|pip|fastapi uvicorn|py:uvicorn|the OpenAI-compatible server (python -m kvblock.engine serve) and its tests
test|pip|jinja2|py:jinja2|the server'"'"'s chat completions render the checkpoint'"'"'s chat template
test|pip|openai|py:openai|the server'"'"'s tests drive it with the official openai client
test|pip?|pyzmq msgpack|py:zmq|KV events on the wire (kvblock/events.py) and their tests
test|pip?|redis>=4.2|py:redis|the store tier'"'"'s Redis back end (kvblock/store_redis.py)
test|pip?|mooncake-transfer-engine-non-cuda|py:mooncake.store|the store tier'"'"'s Mooncake back end (the wheel without CUDA)
test|pip?|ai-dynamo-runtime==1.6.1|pyver:ai-dynamo-runtime==1.6.1|the KV events compatibility tests against Dynamo'"'"'s KV indexer (pinned)
'

present() {
  how=${1%%:*} what=${1#*:}
  case "$how" in
    cmd) command -v "$what" >/dev/null 2>&1 ;;
    header)
      [ "$what" = xxhash.h ] && what=${KVB_XXHASH_HEADER:-xxhash.h}
      # shellcheck disable=SC2046 # pkg-config's flags are words
      echo "#include <$what>" | ${CXX:-c++} $(pkg-config --cflags libxxhash 2>/dev/null) -E -x c++ - \
        >/dev/null 2>&1 ;;
    glob) for f in $what; do [ -e "$f" ] && return 0; done; return 1 ;;
    py) "$PYTHON" -c "import $what" >/dev/null 2>&1 ;;
    pyver) "$PYTHON" -c "from importlib.metadata import version; assert version('${what%%==*}') == '${what#*==}'" \
             >/dev/null 2>&1 ;;
  esac
}

if [ "$(id -u)" -eq 0 ]; then SUDO=""
elif [ "${KVB_DEPS_NO_SUDO:-0}" != 1 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"
else SUDO="(as root)"; fi
# pip refuses a Debian python3's own site-packages (PEP 668) unless told: the tests need the packages
# where that python3 imports them.
pip_flags="-q --disable-pip-version-check"
stdlib=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))' 2>/dev/null)
[ -n "$stdlib" ] && [ -f "$stdlib/EXTERNALLY-MANAGED" ] && pip_flags="$pip_flags --break-system-packages"

apt_missing="" pip_missing="" optional_missing="" n=0
nl='
'
IFS_SAVED=$IFS
IFS=$nl
for row in $LIST; do
  IFS='|' read -r p inst pkgs check why <<EOF
$row
EOF
  [ "$part" = all ] || [ "$p" = "$part" ] || continue
  n=$((n + 1))
  if [ "$mode" = list ]; then
    printf '%-5s %-4s %-34s %s\n' "$p" "$inst" "$pkgs" "$why"
    continue
  fi
  present "$check" && continue
  printf 'install_deps: %-4s %-34s %s\n' "$inst" "$pkgs" "$why"
  case "$inst" in
    apt) apt_missing="$apt_missing $pkgs" ;;
    pip) pip_missing="$pip_missing $pkgs" ;;
    'pip?') optional_missing="$optional_missing$nl$pkgs" ;;
  esac
done
IFS=$IFS_SAVED
[ "$mode" = list ] && exit 0
if [ -z "$apt_missing$pip_missing$optional_missing" ]; then
  echo "install_deps: $part: all $n present"
  exit 0
fi
if [ "$mode" = dry ]; then
  [ -n "$apt_missing" ] && echo "install_deps: would run: ${SUDO:+$SUDO }apt-get install -y$apt_missing"
  [ -n "$pip_missing" ] && echo "install_deps: would run: $PYTHON -m pip install $pip_flags$pip_missing"
  [ -n "$optional_missing" ] && echo "install_deps: would run, one by one: $PYTHON -m pip install" \
    "$(echo "$optional_missing" | sed '/^$/d' | paste -sd ';' | sed 's/;/; pip install /g')"
  exit 0
fi

rc=0
if [ -n "$apt_missing" ] && [ "$SUDO" = "(as root)" ]; then
  echo "install_deps: not root and no sudo: run as root: apt-get install -y$apt_missing" >&2
  rc=1
elif [ -n "$apt_missing" ]; then
  echo "install_deps: running: ${SUDO:+$SUDO }apt-get install -y$apt_missing"
  # shellcheck disable=SC2086 # the package list is words
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $apt_missing >/dev/null; } ||
    { echo "install_deps: apt-get install failed:$apt_missing" >&2; rc=1; }
fi
if [ -n "$pip_missing" ]; then
  echo "install_deps: running: $PYTHON -m pip install $pip_flags$pip_missing"
  # shellcheck disable=SC2086
  "$PYTHON" -m pip install $pip_flags $pip_missing || { echo "install_deps: pip install failed:$pip_missing" >&2; rc=1; }
fi
IFS=$nl
for pkgs in $optional_missing; do
  IFS=$IFS_SAVED
  # shellcheck disable=SC2086
  "$PYTHON" -m pip install $pip_flags $pkgs || echo "SKIP $pkgs: pip could not install it; the tests that use it SKIP"
done
IFS=$IFS_SAVED
[ "$rc" -eq 0 ] && echo "install_deps: $part: installed what was missing"
exit $rc
