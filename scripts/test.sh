#!/usr/bin/env bash
# Set up, build, and run the tests.  GPU tests (label "gpu") skip where no GPU is
# visible.  Extra arguments go to ctest (e.g. -L gpu).  The tests run with a TMPDIR of
# their own, which must be empty again when they are done: a test that leaves files
# behind fails the run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
build="${QJIT_BUILD_DIR:-$root/build}"
cd "$build"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/qjit-ctest.XXXXXX")"
rc=0
TMPDIR="$tmp" ctest --output-on-failure -j "$(nproc)" "$@" || rc=$?
left="$(ls -A "$tmp")"
if [ -n "$left" ]; then
  echo "qjit test: the tests left these in TMPDIR ($tmp):" >&2
  echo "$left" | sed 's/^/  /' >&2
  rc=1
else
  rmdir "$tmp"
fi
exit "$rc"
