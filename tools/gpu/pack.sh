#!/bin/sh
# Packs what one GPU run needs into one folder (make gpu-check runs this after building BUILD for one
# architecture): the library and its libxxhash, the kvblock tool, the CUDA test binaries (stripped), the
# Python package with its cdef, the torch bench and the engine's bound check, cffi + pycparser wheels for
# CPython 3.12 x86-64 (the GPU machine has torch but not cffi), and run.sh. No symbolic links (copies
# under the sonames) and no path outside the folder: it is carried to a bare machine as it is.
#   sh tools/gpu/pack.sh BUILD PACK ARCH TESTS...
set -eu
build=$1 pack=$2 arch=$3
shift 3
rm -rf "$pack"
mkdir -p "$pack/lib" "$pack/bin" "$pack/tests" "$pack/python" "$pack/wheels"

strip -o "$pack/lib/libkvblock.so.0" "$build/lib/libkvblock.so.0"
cp "$build/kvblock_cdef.h" "$pack/lib/"
# libxxhash when the library links it (hash.cpp inlines xxHash today; a build against a shared one needs
# it beside the library: the GPU machine may not have it).
xxh=$(ldd "$build/lib/libkvblock.so.0" | awk '/libxxhash/ { print $3 }')
if [ -n "$xxh" ]; then cp -L "$xxh" "$pack/lib/$(basename "$xxh" | sed 's/\(\.so\.[0-9]*\).*/\1/')"; fi
# The runtime the tool dlopens for its D2D copy and GEMM ceilings (libcublas is too large to carry: the
# GPU machine's CUDA toolkit or torch's nvidia-cublas provides it; run.sh looks for both).
cudart=$(ls "${CUDA_HOME:-/usr/local/cuda}"/lib64/libcudart.so.[0-9]* 2>/dev/null | head -n 1 || true)
# Kept out of lib/ (on LD_LIBRARY_PATH): torch must keep loading its own runtime.
if [ -n "$cudart" ]; then mkdir -p "$pack/lib/cudart" && cp -L "$cudart" "$pack/lib/cudart/"; fi

strip -o "$pack/bin/kvblock" "$build/bin/kvblock"
for t in "$@"; do strip -o "$pack/tests/$t" "$build/tests/$t"; done

# The package (no caches, no bundled library: KVBLOCK_LIB and KVBLOCK_CDEF point at the packed ones).
cp -r bindings_examples/python/kvblock "$pack/python/kvblock"
find "$pack/python" -name __pycache__ -prune -exec rm -rf {} +
rm -f "$pack/python/kvblock/libkvblock.so" "$pack/python/kvblock/kvblock_cdef.h"
# The package's version as a literal, as setup.py writes it into a wheel (the pack has no header to read).
version=$(sed -n 's/^#define KVB_VERSION_[A-Z]* \([0-9]*\)$/\1/p' abi/kvblock.h | paste -sd. -)
printf '"""libkvblock'"'"'s version (abi/kvblock.h), written by tools/gpu/pack.sh."""\n__version__ = "%s"\n' \
  "$version" >"$pack/python/kvblock/_version.py"
mkdir -p "$pack/python/gpu"
cp tools/gpu/bench_torch.py tools/gpu/torch_cases.py tools/gpu/torch_timing.py tools/gpu/engine_bound.py "$pack/python/gpu/"

# Wheels: downloaded once into $build/wheels, then copied.
wheels="$build/wheels"
if ! ls "$wheels"/cffi-*cp312*.whl >/dev/null 2>&1 || ! ls "$wheels"/pycparser-*.whl >/dev/null 2>&1; then
  mkdir -p "$wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$wheels" cffi
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$wheels" pycparser
fi
cp "$wheels"/cffi-*cp312*.whl "$wheels"/pycparser-*.whl "$pack/wheels/"

cp tools/gpu/run.sh "$pack/run.sh"
chmod +x "$pack/run.sh"
{
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
  echo "architecture: $arch"
  echo "packed: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "tests: $*"
} > "$pack/BUILD_INFO.txt"
# Every CUDA test binary links the static library (about 9 MiB of kernels each), so the folder outgrows
# what a GPU machine may be sent (64 MiB). The binaries share most of their bytes (the same fatbins), which
# xz's 64 MiB window finds across files: 160 MiB -> about 4 (gzip's 32 KiB window: 46). xz is on every
# distribution tar is. There: `tar xJf pack.tar.xz` puts pack/ back, then `bash pack/run.sh OUT_DIR`.
command -v xz >/dev/null || { echo "pack.sh: needs xz (xz-utils) to pack" >&2; exit 1; }
rm -f "$pack.tar.xz"
tar cf - -C "$(dirname "$pack")" "$(basename "$pack")" | xz -9 -T0 >"$pack.tar.xz"
echo "packed $pack: $(du -sh "$pack" | cut -f1); to send: $pack.tar.xz, $(du -sh "$pack.tar.xz" | cut -f1)"
find "$pack" -type l -print | sed 's/^/  unexpected link: /'
