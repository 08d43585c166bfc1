#!/usr/bin/env bash
# The main job: set up, build, and fill the default kernel cache from the shipped
# manifest with qjit-precompile (no GPU needed).  Extra arguments go to qjit-precompile.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
build="${QJIT_BUILD_DIR:-$root/build}"
exec "$build/tools/qjit-precompile" "$@" "$root/cache/manifests/default.txt"
