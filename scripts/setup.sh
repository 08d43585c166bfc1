#!/usr/bin/env bash
# Installs what qjit needs to build (Debian packages, as root) and builds it into
# build/.  Sourced by run.sh and test.sh; safe to run again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
need=()
for pkg in liblua5.4-dev libxxhash-dev libsqlite3-dev cmake g++ make pkg-config; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "qjit setup: installing ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "qjit setup: need root to install ${need[*]} (apt-get)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cuda="${QJIT_CUDA_ROOT:-/usr/local/cuda}"
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "qjit setup: the CUDA toolkit was not found at $cuda (set QJIT_CUDA_ROOT)" >&2
  exit 1
fi
build="${QJIT_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DQJIT_CUDA_ROOT="$cuda" >/dev/null
cmake --build "$build" -j "$(nproc)"
