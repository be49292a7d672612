#!/usr/bin/env bash
# Uses libmkcache as a C user would, from an installed and then MOVED prefix:
#   1. install a build with `cmake --install BUILD --prefix $TMP/prefix`;
#   2. move the prefix elsewhere (nothing may point back at where it was);
#   3. compile consumer.c with `cc ... $(pkg-config --cflags --libs mkcache)`
#      and run it;
#   4. build the CMake project here (find_package(mkcache) +
#      target_link_libraries(... mkcache::mkcache)) and run it.
#
# Usage: bash tests/install/run.sh [BUILD_DIR]
#   BUILD_DIR: an existing, built, non-wheel CMake build of libmkcache. Without
#   it the library is configured and built here (oneDNN found as in the
#   README: CMAKE_PREFIX_PATH or the active Python's onednn-devel-cpu-iomp).
# Needs cmake, a C compiler and pkg-config (Debian's pkgconf, or PyPI's
# `pip install pkgconf`). KEEP=1 keeps the temporary directory.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

fail() { echo "tests/install: FAIL: $*" >&2; exit 1; }

command -v pkg-config >/dev/null ||
    fail "pkg-config not found: install it (apt-get install pkg-config, or pip install pkgconf)"
command -v cmake >/dev/null || fail "cmake not found (pip install cmake)"
CC=${CC:-cc}
command -v "$CC" >/dev/null || fail "no C compiler ($CC)"
GEN=()
if command -v ninja >/dev/null; then GEN=(-G Ninja); fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/mkcache-install.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "keeping $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi

if [ $# -ge 1 ]; then
    BUILD=$(cd "$1" && pwd)
    [ -f "$BUILD/cmake_install.cmake" ] || fail "$BUILD is not a configured CMake build"
else
    BUILD=$TMP/build
    PY=$(command -v python || command -v python3) || fail "no python to find oneDNN with"
    echo "-- configuring and building libmkcache in $BUILD"
    cmake -S "$ROOT" -B "$BUILD" ${GEN[@]+"${GEN[@]}"} -DCMAKE_BUILD_TYPE=Release \
          -DMKCACHE_BUILD_TESTS=OFF -DMKCACHE_BUILD_BENCH_HELPER=OFF \
          -DPython_EXECUTABLE="$PY" >"$TMP/configure.log" 2>&1 ||
        { cat "$TMP/configure.log"; fail "configuring libmkcache"; }
    cmake --build "$BUILD" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; fail "building libmkcache"; }
fi

# ------------------------------------------------------------- install, move
PREFIX=$TMP/prefix
echo "-- cmake --install $BUILD --prefix $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log" 2>&1 ||
    { cat "$TMP/install.log"; fail "cmake --install"; }
# One level deeper than before, so that paths relative to the wrong base fail.
MOVED=$TMP/elsewhere/deeper/mkcache
mkdir -p "$(dirname "$MOVED")"
mv "$PREFIX" "$MOVED"
echo "-- moved the prefix to $MOVED"

PC=$(find "$MOVED" -name mkcache.pc -path '*/pkgconfig/*')
[ -n "$PC" ] || fail "no mkcache.pc installed"
CFG=$(find "$MOVED" -name mkcacheConfig.cmake)
[ -n "$CFG" ] || fail "no mkcacheConfig.cmake installed"
LIB=$(find "$MOVED" -name 'libmkcache.so.*' -type f | head -n 1)
[ -n "$LIB" ] || fail "no libmkcache.so.* installed"

# Nothing installed may name the old prefix or the build tree.
for f in "$PC" "$(dirname "$CFG")"/*.cmake; do
    if grep -n -F -e "$PREFIX" -e "$BUILD" "$f"; then
        fail "$f names the install prefix or the build tree"
    fi
done
RPATHS=$(readelf -d "$LIB" | sed -n 's/.*(\(R[A-Z]*PATH\)).*\[\(.*\)\]/\1 \2/p')
echo "-- installed $(basename "$LIB"): ${RPATHS:-no RPATH}"
case "$RPATHS" in
    *"$BUILD"*|*"$PREFIX"*) fail "$LIB keeps an RPATH into the build tree or the old prefix" ;;
esac

# Only the moved prefix provides libmkcache from here on; libdnnl must be
# found by the installed library itself, not through the caller's environment.
unset LD_LIBRARY_PATH LD_PRELOAD

# ------------------------------------------------------------- pkg-config
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$PC")
FLAGS=$(pkg-config --cflags --libs mkcache) || fail "pkg-config --cflags --libs mkcache"
echo "-- pkg-config ($(pkg-config --version)) --cflags --libs mkcache: $FLAGS"
INCLUDEDIR=$(pkg-config --variable=includedir mkcache)
LIBDIR=$(pkg-config --variable=libdir mkcache)
[ -f "$INCLUDEDIR/mkcache/mkcache.h" ] || fail "pkg-config's includedir $INCLUDEDIR has no mkcache/mkcache.h"
[ -e "$LIBDIR/libmkcache.so" ] || fail "pkg-config's libdir $LIBDIR has no libmkcache.so"
[ "$(cd "$LIBDIR" && pwd -P)" = "$(cd "$(dirname "$LIB")" && pwd -P)" ] ||
    fail "pkg-config's libdir $LIBDIR is not the moved prefix's"

# shellcheck disable=SC2086  # FLAGS is a list of flags
"$CC" -std=c99 -Wall -Wextra -pedantic -Werror "$HERE/consumer.c" $FLAGS -o "$TMP/consumer-pc" ||
    fail "compiling consumer.c with pkg-config's flags"
echo "-- built consumer.c with pkg-config; running it (LD_LIBRARY_PATH=$LIBDIR)"
LD_LIBRARY_PATH=$LIBDIR ldd "$TMP/consumer-pc" | grep -E 'libmkcache|libdnnl|libiomp5' || true
if LD_LIBRARY_PATH=$LIBDIR ldd "$TMP/consumer-pc" | grep -q 'not found'; then
    fail "a library of consumer-pc is not found"
fi
LD_LIBRARY_PATH=$LIBDIR "$TMP/consumer-pc" || fail "consumer (pkg-config build) exited $?"

# ------------------------------------------------------------- CMake
echo "-- CMake consumer: find_package(mkcache) with CMAKE_PREFIX_PATH=$MOVED"
cmake -S "$HERE" -B "$TMP/consumer-cmake" ${GEN[@]+"${GEN[@]}"} -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$MOVED" >"$TMP/consumer-configure.log" 2>&1 ||
    { cat "$TMP/consumer-configure.log"; fail "configuring the CMake consumer"; }
FOUND_DIR=$(sed -n 's/^mkcache_DIR:[A-Z]*=//p' "$TMP/consumer-cmake/CMakeCache.txt")
case "$FOUND_DIR" in
    "$MOVED"/*) echo "-- mkcache_DIR=$FOUND_DIR" ;;
    *) fail "find_package(mkcache) found $FOUND_DIR, not the moved prefix" ;;
esac
cmake --build "$TMP/consumer-cmake" >"$TMP/consumer-build.log" 2>&1 ||
    { cat "$TMP/consumer-build.log"; fail "building the CMake consumer"; }
echo "-- built the CMake consumer; running it (no LD_LIBRARY_PATH)"
"$TMP/consumer-cmake/consumer" || fail "consumer (CMake build) exited $?"

echo "tests/install: the moved install works with pkg-config and find_package"
