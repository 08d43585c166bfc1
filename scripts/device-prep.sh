#!/usr/bin/env bash
# On the CPU machine: build into build/ and copy the shared libraries that the device
# machine lacks (Lua, xxHash, SQLite) into build/deps, so build/ can be carried there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
mkdir -p "$root/build/deps"
for l in liblua5.4.so.0 libxxhash.so.0 libsqlite3.so.0; do
  cp -L "$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')" "$root/build/deps/"
done
du -sh "$root/build"
