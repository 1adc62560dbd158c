#!/usr/bin/env bash
# The README's first command: install what the demo needs, build hpd, hpctl and the bundled example
# (not the tests, fixtures, benchmarks nor the OpenTelemetry Collector the tests use: packaging/test.sh
# builds those), record the example for 3 seconds, write example.json.gz (Firefox Profiler format) and
# print the terminal report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HPD_BUILD_DIR:-$root/build}
"$root/packaging/install-deps.sh" --demo
# Tests and benchmarks OFF: their targets are not even generated. packaging/build.sh (the test
# command) configures the same directory with them ON again.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPD_BUILD_TESTS=OFF \
  -DHPD_BUILD_BENCH=OFF
cmake --build "$build" -j"$(nproc)" --target hpd hpctl example
"$build/cli/hpctl" record --frequency 999 -o "$root/example.json.gz" -- "$build/examples/example" 3
echo
echo "Profile written to $root/example.json.gz: open it with $build/cli/hpctl open $root/example.json.gz"
echo "(the Firefox Profiler, with source and assembly), or load the file at https://profiler.firefox.com"
