#!/usr/bin/env bash
# The Python package as a user gets it: `pip install .` into a fresh virtual environment
# (the C library built by scikit-build-core and bundled), then tests/python against the
# installed copy, with no build-tree variables.  Torch tests run where torch is installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" >/dev/null     # the Debian packages the build needs
work="${QJIT_PY_DIR:-$root/build-py}"
rm -rf "$work"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$root" numpy
cd "$work"
env -u PYTHONPATH -u QJIT_LIBRARY QJIT_CACHE_DIR="$work/cache" \
  "$work/venv/bin/python" -m unittest discover -v -s "$root/tests/python" 2>&1 | tail -30
