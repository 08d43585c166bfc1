#!/usr/bin/env bash
# Builds qjit with AddressSanitizer + UndefinedBehaviorSanitizer into build-san/ and runs
# the CPU tests there; any report fails the run.  Called by .ci/run after the plain suite.
# Extra arguments go to ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" >/dev/null       # packages (and the plain build)
build="${QJIT_SAN_BUILD_DIR:-$root/build-san}"
cuda="${QJIT_CUDA_ROOT:-/usr/local/cuda}"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQJIT_CUDA_ROOT="$cuda" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
# Leaks inside libraries we do not build (NVRTC's compiler state lives for the process)
# are not ours; everything else is reported.
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$build"
# check_install builds plain consumers and test_python loads the library into a plain
# Python: neither can host an ASan library (the runtime must come first)
ctest --output-on-failure -j "$(nproc)" -L cpu -E "check_install|test_python" "$@"
