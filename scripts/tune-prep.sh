#!/usr/bin/env bash
# Here, with no GPU: build, then fill tunecache/ for the GPU machine: every candidate
# qjit-tune will time for the descriptors of cache/tune/descriptors.txt on sm_90a (their
# heuristics' kernels and the default and small-m sweeps), the shipped tuning records
# (cache/tune/*.db.tar.xz, as the build unpacked them into build/tune/),
# and every kernel an auto handle of the default manifest's sm_90a lines
# and of the benchmarks' pairs loads with those records (tools/bench_step.py,
# bench_grid.py, probe_decode.py).  Carried to the GPU machine with the library
# (scripts/tune.sh, the benchmarks with QJIT_CACHE_DIR=tunecache), it leaves device
# time to measuring.  With every descriptor it is about 90 MB; it is also written as
# tunecache.tar.xz (about 3 MB), which a device call carries where the directory would not fit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/device-prep.sh"
cache="${QJIT_PREP_CACHE:-$root/tunecache}" # (QJIT_PREP_CACHE: another directory)
manifest="$(mktemp)"
# QJIT_TUNE_MATCH (as scripts/tune.sh takes it): only those descriptors' candidates,
# to keep one call's carry small when the list is tuned over several calls.
grep -v '^#' "$root/cache/tune/descriptors.txt" | grep -v '^$' | grep -E -- "${QJIT_TUNE_MATCH:-.}" |
while read -r d; do
  printf '%s arch=sm_90a\n%s arch=sm_90a sweep=default\n%s arch=sm_90a sweep=small-m\n' "$d" "$d" "$d"
done > "$manifest"
# the shipped records first, so that the descriptors' lines compile their tuned winners too;
# the records a cache already holds are deleted first (a merge keeps rows the shipped file
# dropped; QJIT_PREP_CACHE is meant for a scratch directory, never a cache of one's own)
mkdir -p "$cache"
if [ -f "$cache/qjit.db" ]; then
  python3 - "$cache/qjit.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
if db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'tuning'").fetchone()[0]:
    db.execute("DELETE FROM tuning")
    db.commit()
db.close()
PY
fi
for t in "$root"/build/tune/*.db; do
  [ -e "$t" ] && "$root/build/tools/qjit-cache" --db "$cache/qjit.db" merge "$t"
done
if [ "${QJIT_PREP_LEAN:-0}" = 1 ]; then
  # QJIT_PREP_LEAN=1: only what tuning and bench_grid need for those descriptors (the
  # records, their auto kernels with the tuned winners, their sweeps) and the quantizers
  # of tools/bench_quantize.py: 17-30 MB for three descriptors, where the full cache of two
  # passes 50 MB and with the tracked tree leaves no room in a call's 64 MB
  for o in "out=s8 scale=row" "out=s4 scale=row" "out=e4m3 scale=row" "out=s8 scale=tensor" \
           "out=e4m3 scale=tensor" "out=e4m3 scale=block" "out=e4m3 scale=mx rule=floor" \
           "out=e4m3 scale=mx rule=rceil" "out=e2m1 scale=mx rule=rceil" \
           "out=e4m3 scale=mx rule=rceil layout=cols"; do
    echo "quant in=bf16 $o arch=sm_90a"
  done >> "$manifest"
fi
"$root/build/tools/qjit-precompile" --quiet --cache-dir "$cache" "$manifest"
if [ "${QJIT_PREP_LEAN:-0}" = 1 ]; then
  rm -f "$manifest"
  "$root/build/tools/qjit-cache" --db "$cache/qjit.db" vacuum > /dev/null
  du -sh "$cache"
  echo "carry: build/libqjit.so build/libqjit.so.0 build/libqjit.so.0.1.0 build/deps build/tools $(basename "$cache")"
  exit 0
fi
# the auto handles' kernels, tuned winners included (precompile reads the merged records)
{
  grep 'arch=sm_90a' "$root/cache/manifests/default.txt"
  python3 - "$root/tools/bench_step.py" <<'PY'
import re, sys
for d in re.findall(r'"(gemm a=[^"]+)"', open(sys.argv[1]).read()):
    print(d + " arch=sm_90a")
PY
} > "$manifest"
"$root/build/tools/qjit-precompile" --quiet --cache-dir "$cache" "$manifest"
rm -f "$manifest"
"$root/build/tools/qjit-cache" --db "$cache/qjit.db" vacuum > /dev/null
du -sh "$cache"
# Cubins compress about thirty to one: the full cache (about 90 MB with every descriptor)
# travels as a 3 MB archive, so one call carries it beside build/ (30 MB) and the tree.
tar -C "$(dirname "$cache")" -cJf "$cache.tar.xz" "$(basename "$cache")"
du -sh "$cache.tar.xz"
echo "carry for tuning and benchmarks: build (or build/libqjit.so* build/deps build/tools) and $(basename "$cache").tar.xz; first on the GPU machine: tar xJf $(basename "$cache").tar.xz"
echo "carry for the GPU tests: build (they make their own caches)"
