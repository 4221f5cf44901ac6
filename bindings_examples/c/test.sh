#!/bin/sh
# Installs libkvblock into a temporary prefix, builds engine_loop.c with nothing but pkg-config, runs it.
# Run from anywhere; BUILD (default build) and CC are passed to make.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=$(mktemp -d "${TMPDIR:-/tmp}/kvblock-c.XXXXXX")
trap 'rm -rf "$prefix"' EXIT INT TERM
${MAKE:-make} -s -C "$root" BUILD="${BUILD:-build}" install PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config's flags are meant to be split
${CC:-cc} -std=c99 -Wall -Wextra -Werror -o "$prefix/engine_loop" "$here/engine_loop.c" \
  $(pkg-config --cflags --libs kvblock)
LD_LIBRARY_PATH="$prefix/lib" "$prefix/engine_loop"
