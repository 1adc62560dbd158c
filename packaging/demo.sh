#!/usr/bin/env bash
# The README's first command: install what the demo needs, build hpd, hpctl and the bundled example
# (not the tests, fixtures, benchmarks nor the OpenTelemetry Collector the tests use: packaging/test.sh
# builds those), record the example for 3 seconds, write example.json.gz (Firefox Profiler format) and
# print the terminal report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HPD_BUILD_DIR:-$root/build}
"$root/packaging/install-deps.sh" --demo
# Tests and benchmarks OFF: their targets are not even generated. HPD_DEBUG_INFO=lines: hpd's C++
# code with line tables only (-g1), about 30% less compile CPU than full -g (the example keeps its own
# -O2 -g). packaging/build.sh (the test command) configures the same directory with tests ON and
# full debug info again.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPD_BUILD_TESTS=OFF \
  -DHPD_BUILD_BENCH=OFF -DHPD_DEBUG_INFO=lines
cmake --build "$build" -j"$(nproc)" --target hpd hpctl example
"$build/cli/hpctl" record --frequency 999 -o "$root/example.json.gz" -- "$build/examples/example" 3
echo
echo "Profile written to $root/example.json.gz: open it with $build/cli/hpctl open $root/example.json.gz"
echo "(the Firefox Profiler, with source and assembly), or load the file at https://profiler.firefox.com"
