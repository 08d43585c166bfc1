#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds and runs the README's consumer
# example (examples/offline.c: compile-only calls, no GPU) against it twice: with
# pkg-config and with CMake's find_package(qjit).  Usage: check_install.sh BUILD SOURCE
set -euo pipefail
build="$1"
src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/qjit-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
fail() { echo "FAIL: $*" >&2; exit 1; }
for f in include/qjit.h lib/libqjit.so lib/pkgconfig/qjit.pc lib/cmake/qjit/qjitConfig.cmake \
         bin/qjit-precompile bin/qjit-cache share/qjit/manifests/default.txt \
         share/doc/qjit/README.md share/doc/qjit/TEMPLATES.md; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
soname="$(objdump -p "$prefix/lib/libqjit.so" | awk '/SONAME/ {print $2}')"
[ "$soname" = "libqjit.so.0" ] || fail "soname is '$soname', not libqjit.so.0"
# the installed tools run from the prefix
"$prefix/bin/qjit-precompile" --help >/dev/null || fail "installed qjit-precompile does not run"
export QJIT_CACHE_DIR="$work/cache"

# 1. pkg-config (the README's three lines)
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion qjit)" = "$(sed -n 's/^project(qjit VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")" ] \
  || fail "pkg-config --modversion qjit: $(pkg-config --modversion qjit)"
cc "$src/examples/offline.c" $(pkg-config --cflags --libs qjit) -o "$work/offline-pc"
"$work/offline-pc" > "$work/pc.out" || fail "the pkg-config build failed to run: $(cat "$work/pc.out")"
grep -q "compiled into the cache" "$work/pc.out" || fail "pkg-config build: $(cat "$work/pc.out")"

# 2. CMake package
cmake -S "$src/examples" -B "$work/cm" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cm" >/dev/null
"$work/cm/offline" > "$work/cm.out" || fail "the CMake build failed to run: $(cat "$work/cm.out")"
# the same kernels again, from the cache the first build filled
grep -q "already in the cache" "$work/cm.out" || fail "CMake build: $(cat "$work/cm.out")"
[ -z "$(ldd "$work/cm/offline" | grep 'not found')" ] || fail "unresolved libraries: $(ldd "$work/cm/offline")"
echo "installed to a temporary prefix; pkg-config and CMake consumers built and ran"
echo "1 passed, 0 failed"
