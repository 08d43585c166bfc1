#!/usr/bin/env bash
# On a GPU machine (the H100 and the H200 so far), over a carried build/ and a cache that
# qjit-precompile filled on a CPU machine with every candidate (scripts/tune-prep.sh):
# qjit-tune measures and records the candidates of the descriptors in
# cache/tune/descriptors.txt over the Llama 3 layer shapes (its small-m
# sweep at M <= 64, the default sweep above), each descriptor under a time limit so that one
# slow descriptor cannot take the lease.  The tables go to $OUT/tune.txt; after each
# descriptor the records so far, this GPU's rows only, are exported to $OUT/tuned.db.xz
# (packed: every descriptor's rows pass the size a device call returns).  Their rows name
# the GPU they were measured on; merged into that GPU's shipped records with `qjit-cache
# merge` (the newer measurement of a candidate wins) and packed again, they ship with the
# repository as cache/tune/NAME.db.tar.xz (h100, h200; docs/BENCH.md).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
cache="${QJIT_TUNE_CACHE:-$root/tunecache}"
out="${OUT:-/tmp/qjit-out}"
nk="${QJIT_TUNE_NK:-4096x4096,6144x4096,14336x4096,28672x4096,4096x14336,10240x8192,8192x8192,57344x8192,8192x28672}" # Llama 3 8B and 70B (8B gate/up unfused and fused)
limit="${QJIT_TUNE_LIMIT:-150}" # seconds a descriptor (nine layers, ten M: 80-100 on the H100)
mkdir -p "$out"
# the cache as scripts/tune-prep.sh packed it (tunecache.tar.xz), where the directory did not travel
if [ ! -d "$cache" ] && [ -f "$cache.tar.xz" ]; then
  tar -C "$(dirname "$cache")" -xJf "$cache.tar.xz"
fi
export LD_LIBRARY_PATH="$build:$build/deps:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
m="${QJIT_TUNE_M:-1,4,8,16,32,64,128,256,1024,4096}" # one M per bucket (src/select.c)
# QJIT_TUNE_MATCH (an extended regular expression) keeps the descriptors it matches, to
# split the list over calls: e.g. 'a=bf16 b=bf16|b=s4' and then the rest with grep -v.
# QJIT_TUNE_PART=i/n keeps the i-th of n equal slices of the (matched) list, in order:
# 1/3, 2/3 and 3/3 are the whole list in three calls.
match="${QJIT_TUNE_MATCH:-.}"
part="${QJIT_TUNE_PART:-1/1}"
pi="${part%/*}" pn="${part#*/}"
if ! [[ "$pi" =~ ^[0-9]+$ && "$pn" =~ ^[0-9]+$ ]] || [ "$pn" -lt 1 ] || [ "$pi" -lt 1 ] || [ "$pi" -gt "$pn" ]; then
  echo "tune: QJIT_TUNE_PART is '$part' (must be i/n with 1 <= i <= n)" >&2
  exit 2
fi
start=$SECONDS
# the GPU's name as the records give it (cuDeviceGetName: "NVIDIA H200"); empty: keep every row
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -n 1)"
grep -v '^#' "$root/cache/tune/descriptors.txt" | grep -v '^$' | grep -E -- "$match" |
  awk -v i="$pi" -v n="$pn" '{ l[NR] = $0 } END { for (r = 1; r <= NR; r++) if (int((r - 1) * n / NR) + 1 == i) print l[r] }' |
  while read -r d; do
  t0=$SECONDS
  echo "== $d"
  timeout "$limit" "$build/tools/qjit-tune" --reps 10 --cache-dir "$cache" \
    --nk "$nk" --m "$m" "$d" 2>&1 | grep -v '^qjit-tune: \(compile\|time\)' |
    tee -a "$out/tune.txt" | tail -n 32
  # the records so far, tuning rows only (a later limit or a lost lease keeps them), and
  # only this GPU's (the cache also holds the shipped records of the others)
  python3 - "$cache/qjit.db" "$out/tuned.db" "$gpu" <<'PY' || echo "tune: could not copy the records"
import os, sqlite3, sys
if os.path.exists(sys.argv[2]):
    os.remove(sys.argv[2])
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.execute("DELETE FROM kernels")
if sys.argv[3]:
    dst.execute("DELETE FROM tuning WHERE gpu != ?", (sys.argv[3],))
dst.commit()
dst.execute("VACUUM")
dst.close()
PY
  xz -9f "$out/tuned.db" || echo "tune: could not pack the records"
  # the descriptor's seconds and the run's so far (the whole manifest's time, summed over
  # calls where a call's limit splits it with QJIT_TUNE_MATCH)
  echo "tune: $((SECONDS - t0)) s for this descriptor, $((SECONDS - start)) s so far" | tee -a "$out/tune.txt"
done
