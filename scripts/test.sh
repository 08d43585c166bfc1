#!/usr/bin/env bash
# Set up, build, and run the tests.  GPU tests (label "gpu") skip where no GPU is
# visible.  Extra arguments go to ctest (e.g. -L gpu).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
build="${QJIT_BUILD_DIR:-$root/build}"
cd "$build"
exec ctest --output-on-failure -j "$(nproc)" "$@"
