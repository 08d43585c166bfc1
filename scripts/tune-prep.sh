#!/usr/bin/env bash
# Here, with no GPU: build, then compile every candidate qjit-tune will time for the
# descriptors of cache/tune/descriptors.txt on sm_90a (their heuristics' kernels and the
# default and small-m sweeps) into tunecache/, to be carried to the GPU machine with
# build/ (scripts/tune-h100.sh), so that device time goes to measuring.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/device-prep.sh"
manifest="$(mktemp)"
grep -v '^#' "$root/cache/tune/descriptors.txt" | grep -v '^$' | while read -r d; do
  printf '%s arch=sm_90a\n%s arch=sm_90a sweep=default\n%s arch=sm_90a sweep=small-m\n' "$d" "$d" "$d"
done > "$manifest"
"$root/build/tools/qjit-precompile" --quiet --cache-dir "$root/tunecache" "$manifest"
rm -f "$manifest"
du -sh "$root/tunecache"
