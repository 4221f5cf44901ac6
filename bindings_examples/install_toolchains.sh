#!/bin/sh
# Installs what `make check-bindings` needs and the machine lacks, so that no language is skipped:
# Python cffi + pytest + numpy (pip, else Debian packages), Rust (Debian rustc + cargo), Go (golang-go),
# pkg-config. Meant for .ci/run (Debian, run as root or with sudo available).
set -eu
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=""
command -v pkg-config >/dev/null 2>&1 || pkgs="$pkgs pkg-config"
command -v cargo >/dev/null 2>&1 || pkgs="$pkgs cargo rustc"
command -v go >/dev/null 2>&1 || pkgs="$pkgs golang-go"
command -v python3 >/dev/null 2>&1 || pkgs="$pkgs python3 python3-pip"
if [ -n "$pkgs" ]; then
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $pkgs
fi
if ! python3 -c 'import cffi, pytest, numpy' 2>/dev/null; then
  python3 -m pip install -q cffi pytest numpy 2>/dev/null ||
    python3 -m pip install -q --break-system-packages cffi pytest numpy 2>/dev/null || {
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        python3-cffi python3-pytest python3-numpy
    }
fi
python3 -c 'import cffi, pytest, numpy'
