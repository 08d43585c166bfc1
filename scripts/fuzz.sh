#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz/ with clang (+ ASan, UBSan) into
# build-fuzz/ and runs each for a bounded time from its seed corpus in the repo
# (tests/fuzz/<name>/); new inputs go to a scratch corpus, never into the repo.
# A crash, leak, sanitizer report or broken property fails the run and leaves the input
# in build-fuzz/findings/.  QJIT_FUZZ_SECONDS (default 60) bounds each harness.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" >/dev/null
need=()
for pkg in clang libclang-rt-14-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "qjit fuzz: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
build="${QJIT_FUZZ_BUILD_DIR:-$root/build-fuzz}"
cuda="${QJIT_CUDA_ROOT:-/usr/local/cuda}"
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -g -O1"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQJIT_CUDA_ROOT="$cuda" -DQJIT_FUZZ=ON \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
seconds="${QJIT_FUZZ_SECONDS:-60}"
status=0
for src in "$root"/tests/fuzz/fuzz_*.c; do
  name="$(basename "$src" .c)"
  cmake --build "$build" -j "$(nproc)" --target "$name" >/dev/null
  seeds="$root/tests/fuzz/${name#fuzz_}"
  corpus="$build/corpus/$name"
  findings="$build/findings/$name"
  mkdir -p "$corpus" "$findings"
  log="$build/$name.log"
  echo "qjit fuzz: $name for ${seconds}s from $(ls "$seeds" | wc -l) seeds"
  if ! "$build/tests/$name" "$corpus" "$seeds" -max_total_time="$seconds" \
       -max_len=1024 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$findings/" >"$log" 2>&1; then
    status=1
    echo "qjit fuzz: $name FAILED; input(s) in $findings" >&2
    tail -40 "$log" >&2
  fi
  # "#N DONE cov: C ft: F corp: ..." and the final stats: executions and coverage
  grep -E "^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$log" \
    | sed "s/^/  $name: /" || true
done
exit $status
