#!/usr/bin/env bash
# The unit tests, and hpd's own integration and security tests, built with AddressSanitizer + UBSan
# (gcc's, -DHPD_ENABLE_ASAN=ON) into ./build-asan (or $HPD_ASAN_BUILD_DIR), then run; a sanitizer
# report anywhere (a test, hpd, hpctl, or a program either started) fails the run. The daemon tests
# need root, as in the normal suite; see docs/testing.md.
# Usage: asan-tests.sh [build|run-daemon|run-unit|run]: every step when none is named. `build` builds
# the daemon's tests first and then says so ($build/daemon-tests-built), then the unit tests;
# packaging/test.sh runs it beside the normal suite at the lowest priority, then hpd's tests as soon
# as their programs are built (beside the rest of the build), then the unit tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HPD_ASAN_BUILD_DIR:-$root/build-asan}
step=${1:-all}
case "$step" in
  build | run-daemon | run-unit | run | all) ;;
  *)
    echo "usage: $0 [build|run-daemon|run-unit|run]" >&2
    exit 2
    ;;
esac
if [ "$step" = build ] || [ "$step" = all ]; then
  rm -f "$build/daemon-tests-built"
  # -O1 (ASan's own advice: "-O1 or higher") and line tables only (HPD_DEBUG_INFO=lines, -g1): the
  # reports' file and line of every frame, at about half the compile CPU of -O2 with full debug info
  # (with ASan, export's views.cpp: 40 s of CPU at -O1 -g1, 62 s at -O2 -g1; a test file: 18 s at -O2
  # -g1, 24 s at -O2 -g). The fixture programs keep their own flags (-O2 -g).
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPD_ENABLE_ASAN=ON \
    -DHPD_BUILD_BENCH=OFF -DHPD_DEBUG_INFO=lines -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG"
  # Only what is run below: the unit tests, and the daemon's tests with the hpd, hpctl and fixture
  # programs they start (their dependencies), all instrumented.
  # hpdcalls: the call runtime hpctl preloads into a --calls command (built without the sanitizers, so
  # that it can be preloaded into programs that are not instrumented); the daemon's calls tests need it.
  cmake --build "$build" -j"$(nproc)" --target daemon_integration_test daemon_security_test hpdcalls
  touch "$build/daemon-tests-built"
  cmake --build "$build" -j"$(nproc)" --target hpd_unit_tests
fi
[ "$step" = build ] && exit 0

# Reports go to files (printed below), so that one from a child process whose exit status no test
# checks still fails the run: hpd, and hpctl run by the daemon tests as other users (the directory is
# writable by all, sticky). abort_on_error: a report ends the process with SIGABRT; UBSan halts at the
# first report (the build also says -fno-sanitize-recover=undefined).
# One directory per run step, so that one step's start does not remove the other's reports.
logs=$build/sanitizer-reports/$step
rm -rf "$logs"
mkdir -p "$logs"
chmod 1777 "$build/sanitizer-reports"
chmod 1777 "$logs"
supp=$root/packaging/sanitizer
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:check_initialization_order=1:log_path=$logs/asan:log_exe_name=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp:log_path=$logs/ubsan:log_exe_name=1"

# Unit tests not run here: the libFuzzer targets (*_fuzz_bounded: clang-built with their own ASan+UBSan,
# and run by the normal suite), libfuzzer_runtime_required (a configuration check), and the checks of
# man pages, bash completion, the Debian package and the systemd units, which read hpctl's and hpd's
# --help or the package and test no code of ours. Nor the tests whose subject the instrumented build
# itself changes (they run in the normal suite): FramePointerProbe.* and SelfUnwindTest.FramelessLeaf*
# need a test binary built without frame pointers (ASan adds -fno-omit-frame-pointer); HeapPages.* test
# glibc's brk heap, which ASan's allocator replaces; SelfUnwindTest.LibcPc* needs glibc's memmove,
# which ASan intercepts.
instrumented='FramePointerProbe\.|HeapPages\.|SelfUnwindTest\.FramelessLeaf|SelfUnwindTest\.LibcPc'
cd "$build"
status=0
if [ "$step" != run-daemon ]; then
  echo "--- unit tests"
  ctest -L unit -E "_fuzz_bounded\$|libfuzzer_runtime_required|_cover|debian_package|hpd_units_verify|$instrumented" \
    --output-on-failure -j2 --timeout 900 || status=$?
fi

# hpd and hpctl under the sanitizers: tests/daemon's integration and security tests (real users, other
# uids, malformed requests, signals), hpd started by the tests with this environment. Not run here
# (they run in the normal suite), each because the instrumented build changes what it measures:
# Hpd.FirstSampleOfACommandComesAtOnce asks for the first sample within 10 ms of the launched
# fixture's main(), which the instrumented fixture's slower start (ASan maps its shadow memory) would
# decide; RealUsers.AnnouncedFramesCost... and RealUsers.HugeJitMapKeepsHpdWithinItsMemoryBound bound
# hpd's RSS, which ASan's shadow memory and quarantine of freed blocks inflate (the JIT map's growth
# was 77 MiB under ASan, against 9-21 MiB uninstrumented); daemon_load_test (HpdLoad.*, not built here) bounds hpd's RSS under load
# likewise, and runs for over a minute.
daemon_timing='Hpd\.FirstSampleOfACommandComesAtOnce$|RealUsers\.AnnouncedFramesCostNoMemoryBeforeTheirBytes$|RealUsers\.HugeJitMapKeepsHpdWithinItsMemoryBound$'
if [ "$step" != run-unit ]; then
  echo "--- hpd and hpctl: tests/daemon"
  ctest -L privileged -R '^(Hpd|Hpctl|RealUsers)\.' -E "$daemon_timing" --output-on-failure --timeout 900 ||
    status=$?
fi

if [ -n "$(ls -A "$logs")" ]; then
  echo "asan-tests: sanitizer reports:" >&2
  for report in "$logs"/*; do
    echo "--- $report" >&2
    cat "$report" >&2
  done
  status=1
fi
exit "$status"
