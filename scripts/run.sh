#!/usr/bin/env bash
# The main job: set up, build, merge the tuning records shipped in cache/tune/ (measured
# on the GPUs they name; a handle on another GPU ignores them), as the build unpacked them
# into build/tune/, into the cache, and fill it
# from the shipped manifest with qjit-precompile, the records' winners included (no GPU
# needed).  Extra arguments go to qjit-precompile.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
build="${QJIT_BUILD_DIR:-$root/build}"
# the cache qjit-precompile writes: --cache-dir DIR among the arguments, else the default
dir="" prev=""
for a in "$@"; do
  [ "$prev" = --cache-dir ] && dir="$a"
  case "$a" in --cache-dir=*) dir="${a#--cache-dir=}" ;; esac
  prev="$a"
done
if [ -n "$dir" ]; then db="$dir/qjit.db"; else db="$("$build/tools/qjit-cache" path)"; fi
mkdir -p "$(dirname "$db")"
for t in "$build"/tune/*.db; do
  [ -e "$t" ] && "$build/tools/qjit-cache" --db "$db" merge "$t"
done
exec "$build/tools/qjit-precompile" "$@" "$root/cache/manifests/default.txt"
