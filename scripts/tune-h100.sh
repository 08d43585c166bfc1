#!/usr/bin/env bash
# On the lent H100, over a carried build/ and a cache that qjit-precompile filled here with
# every candidate (scripts/tune-prep.sh): qjit-tune measures and records the candidates of
# the descriptors in cache/tune/descriptors.txt over the Llama 3 layer shapes, the small-m
# sweep at M <= 64 and the default sweep above, each run under a time limit so that one
# slow descriptor cannot take the lease.  The tables go to $OUT/tune.txt, the cache to
# $OUT/tunecache.tgz (its tuning rows become cache/tune/h100.db, see docs/BENCH.md).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
cache="${QJIT_TUNE_CACHE:-$root/tunecache}"
out="${OUT:-/tmp/qjit-out}"
nk="${QJIT_TUNE_NK:-6144x4096,4096x4096,28672x4096,4096x14336}"
limit="${QJIT_TUNE_LIMIT:-60}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$build:$build/deps:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
grep -v '^#' "$root/cache/tune/descriptors.txt" | grep -v '^$' | while read -r d; do
  for sweep in small-m default; do
    if [ "$sweep" = small-m ]; then m=1,16,64; else m=128,256,1024,4096; fi
    echo "== $d ($sweep, M $m)"
    timeout "$limit" "$build/tools/qjit-tune" --reps 10 --sweep "$sweep" --cache-dir "$cache" \
      --nk "$nk" --m "$m" "$d" 2>&1 | grep -v '^\[' | tee -a "$out/tune.txt" | tail -n 16
  done
done
tar czf "$out/tunecache.tgz" -C "$(dirname "$cache")" "$(basename "$cache")"
