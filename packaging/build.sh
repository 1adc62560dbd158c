#!/usr/bin/env bash
# Installs the dependencies (Debian 12) and builds hpd into ./build (or $HPD_BUILD_DIR): everything,
# tests, fixtures and benchmarks included (packaging/test.sh). Extra arguments go to cmake's configure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HPD_BUILD_DIR:-$root/build}
"$root/packaging/install-deps.sh"
# Tests, benchmarks and full debug info are named: the demo (packaging/demo.sh) configures the same
# build directory with them OFF and line tables only, and CMake would otherwise keep that in its cache.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPD_BUILD_TESTS=ON \
  -DHPD_BUILD_BENCH=ON -DHPD_DEBUG_INFO=full "$@"
cmake --build "$build" -j"$(nproc)"
