#!/usr/bin/env bash
# The README's first command: set up, build, record the bundled example workload for 3 seconds,
# write example.json.gz (Firefox Profiler format) and print the terminal report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HPD_BUILD_DIR:-$root/build}
"$root/packaging/build.sh"
"$build/cli/hpctl" record --frequency 999 -o "$root/example.json.gz" -- "$build/examples/example" 3
echo
echo "Profile written to $root/example.json.gz: open it with $build/cli/hpctl open $root/example.json.gz"
echo "(the Firefox Profiler, with source and assembly), or load the file at https://profiler.firefox.com"
