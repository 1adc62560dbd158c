#!/usr/bin/env bash
# The unit tests built with AddressSanitizer + UndefinedBehaviorSanitizer (gcc's, -DHPD_ENABLE_ASAN=ON)
# into ./build-asan (or $HPD_ASAN_BUILD_DIR), then run; a sanitizer report anywhere (a test, or a
# program a test started) fails the run. packaging/test.sh runs this after the normal suite; see
# docs/testing.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HPD_ASAN_BUILD_DIR:-$root/build-asan}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPD_ENABLE_ASAN=ON -DHPD_BUILD_BENCH=OFF
cmake --build "$build" -j"$(nproc)" --target hpd_unit_tests

# Reports go to files (printed below), so that one from a child process whose exit status no test
# checks still fails the run. abort_on_error: a report ends the process with SIGABRT; UBSan halts at
# the first report (the build also says -fno-sanitize-recover=undefined).
logs=$build/sanitizer-reports
rm -rf "$logs"
mkdir -p "$logs"
supp=$root/packaging/sanitizer
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:check_initialization_order=1:log_path=$logs/asan:log_exe_name=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp:log_path=$logs/ubsan:log_exe_name=1"

# Not run here: the libFuzzer targets (*_fuzz_bounded: clang-built with their own ASan+UBSan, and
# run by the normal suite), and the checks of man pages, bash completion, the Debian package and the
# systemd units, which read hpctl's and hpd's --help or the package and test no code of ours. Nor the
# tests whose subject the instrumented build itself changes (they run in the normal suite):
# FramePointerProbe.* and SelfUnwindTest.FramelessLeaf* need a test binary built without frame
# pointers (ASan adds -fno-omit-frame-pointer); HeapPages.* test glibc's brk heap, which ASan's
# allocator replaces; SelfUnwindTest.LibcPc* needs glibc's memmove, which ASan intercepts.
instrumented='FramePointerProbe\.|HeapPages\.|SelfUnwindTest\.FramelessLeaf|SelfUnwindTest\.LibcPc'
cd "$build"
status=0
ctest -L unit -E "_fuzz_bounded\$|_cover|debian_package|hpd_units_verify|$instrumented" --output-on-failure -j2 \
  --timeout 900 || status=$?
if [ -n "$(ls -A "$logs")" ]; then
  echo "asan-unit-tests: sanitizer reports:" >&2
  for report in "$logs"/*; do
    echo "--- $report" >&2
    cat "$report" >&2
  done
  status=1
fi
exit "$status"
