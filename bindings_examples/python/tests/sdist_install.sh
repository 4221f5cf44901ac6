#!/bin/sh
# The sdist builds from itself (issue 21.5): `setup.py sdist` (the package, the demos, the tests, and the
# library's C sources under csrc/), then `pip install` of that tarball into a fresh venv in a temporary
# directory outside the repository, with no KVBLOCK_* variable: the build finds only the sdist's sources
# (pip unpacks it under $TMPDIR). The installed package must then load its own bundled library and cdef.
# Needs python3 with setuptools, wheel, cffi and numpy (the venv sees them: --system-site-packages, so no
# network), make, a C++17 compiler and libxxhash-dev. Run by bindings_examples/run_all.sh (make
# check-bindings); about two minutes on two cores (the library is compiled from scratch).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
for v in $(env | sed -n 's/^\(KVBLOCK_[A-Za-z_]*\)=.*/\1/p'); do unset "$v"; done
# Not a sub-make of `make check-bindings`: its jobserver descriptors do not survive pip (setup.py's -j2).
unset MAKEFLAGS MFLAGS MAKELEVEL
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvblock-sdist.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL sdist: $*"; exit 1; }

cd "$here"
python3 setup.py -q sdist -d "$tmp/dist" --formats=gztar >"$tmp/sdist.log" 2>&1 || { cat "$tmp/sdist.log"; fail "setup.py sdist"; }
rm -rf kvblock.egg-info
set -- "$tmp"/dist/kvblock-*.tar.gz
[ -f "$1" ] || fail "no kvblock-*.tar.gz in $tmp/dist"
sdist=$1
tar -tzf "$sdist" >"$tmp/contents"
for f in csrc/Makefile csrc/abi/kvblock.h csrc/abi/libkvblock.map \
         kvblock/__init__.py kvblock/py.typed kvblock/_version.py kvblock/engine/engine.py setup.py pyproject.toml; do
  grep -q "^kvblock-[^/]*/$f\$" "$tmp/contents" || fail "$f missing from $(basename "$sdist")"
done
for d in csrc/libkvblock csrc/kernels/common csrc/kernels/decode csrc/kernels/prefill; do
  grep -q "^kvblock-[^/]*/$d/[^/]*\.cpp\$" "$tmp/contents" || fail "no $d/*.cpp in $(basename "$sdist")"
done
! grep -q "libkvblock\.so\|kvblock_cdef\.h\|\.o\$" "$tmp/contents" || fail "build outputs in the sdist"
echo "ok sdist: $(basename "$sdist"), $(wc -l <"$tmp/contents") entries, C sources under csrc/"

python3 -m venv --system-site-packages "$tmp/venv" || fail "python3 -m venv"
cd "$tmp"
"$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-deps --disable-pip-version-check "$sdist" \
  >"$tmp/pip.log" 2>&1 || { tail -n 40 "$tmp/pip.log"; fail "pip install of the sdist"; }
echo "ok sdist: pip install $(basename "$sdist") in a fresh venv outside the repository"

out=$("$tmp/venv/bin/python" -m kvblock --version) || fail "python -m kvblock --version"
echo "$out"
site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
case "$out" in "kvblock "*" (libkvblock "*" at $site/kvblock/libkvblock.so)") ;;
  *) fail "--version does not name the venv's bundled library ($site/kvblock/libkvblock.so)" ;; esac
"$tmp/venv/bin/python" -c '
import kvblock
assert kvblock._lib.CDEF_SOURCE.endswith("site-packages/kvblock/kvblock_cdef.h"), kvblock._lib.CDEF_SOURCE
assert kvblock.__version__ == kvblock.library_version(), (kvblock.__version__, kvblock.library_version())
with kvblock.Manager(num_blocks=4, block_size=2) as m:
    assert m.allocate(1, [1, 2, 3]) == 0
    m.check_invariants()
' || fail "the installed package"
echo "ok sdist: the installed package loads its bundled library and cdef, version $("$tmp/venv/bin/python" -c 'import kvblock; print(kvblock.__version__)')"
