#!/usr/bin/env bash
# The Python package as a user gets it: `pip install .` into a fresh virtual environment
# (the C library built by scikit-build-core and bundled), then tests/python against the
# installed copy, with no build-tree variables.  torch is installed too (PyPI's wheel; no
# GPU here), so that argument checks on tensors, the torch.library ops and their fakes
# under torch.compile are tested; the GPU tests skip.  At least QJIT_PY_MIN_RUN tests must
# run (not skip): 18 that need only the package (the layout check skips: no abi_dump
# here), 3 numpy and 8 torch ones (the benchmark scripts' --help among them); fewer means
# numpy or torch went missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" >/dev/null     # the Debian packages the build needs
work="${QJIT_PY_DIR:-$root/build-py}"
rm -rf "$work"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --no-cache-dir "$root" numpy torch
cd "$work"
rc=0
env -u PYTHONPATH -u QJIT_LIBRARY QJIT_CACHE_DIR="$work/cache" \
  "$work/venv/bin/python" "$root/tests/python/run_tests.py" --min-run "${QJIT_PY_MIN_RUN:-29}" \
  2>&1 | tail -30 || rc=$?
cd "$root"
[ "${QJIT_PY_KEEP:-0}" = 1 ] || rm -rf "$work"
exit "$rc"
