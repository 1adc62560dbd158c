#!/usr/bin/env bash
# The README's test command (and CI's): set up, build, and run the whole test suite, privileged
# tests included (they need root: perf_event, BPF, uprobes and ptrace run for real); then the unit
# tests and hpd's integration and security tests again, with hpd, hpctl and the tests built with
# AddressSanitizer and UBSan (packaging/asan-tests.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HPD_BUILD_DIR:-$root/build}
asan_build=${HPD_ASAN_BUILD_DIR:-$root/build-asan}
if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: the privileged tests need root; run: sudo $0" >&2
  exit 1
fi
# tracefs is where uprobes and tracepoints live; some machines boot with it unmounted.
if [ -d /sys/kernel/tracing ] && [ -z "$(ls -A /sys/kernel/tracing 2>/dev/null)" ]; then
  mount -t tracefs nodev /sys/kernel/tracing || true
fi
# Layers only point down (docs/architecture.md): checked on the sources, before spending a build.
python3 "$root/packaging/check-layers.py" "$root"
"$root/packaging/build.sh"
cd "$build"
# The sanitizer build goes on beside the normal suite, at the lowest CPU priority: the suite's
# privileged tests run one at a time and mostly wait, so the build takes what they leave, and the
# tests, made to pass with other work beside them, keep the CPU they ask for. Its output goes to
# $build/asan-build.log (printed when it fails). Its processes are found by walking down from it:
# ninja starts each compiler in a process group of its own, out of reach of a renice or kill of the
# build's group (a compiler started at nice 19 stayed there, beside four CPU hogs, for 40 minutes).
asan_log=$build/asan-build.log
nice -n 19 "$root/packaging/asan-tests.sh" build </dev/null >"$asan_log" 2>&1 &
asan_build_pid=$!
descendants() {
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}
# shellcheck disable=SC2046 # one pid per word
trap 'kill "$asan_build_pid" $(descendants "$asan_build_pid") 2>/dev/null || true' EXIT
# The sanitizer pass below runs even when a test failed here, so that one run shows both.
# Each pass's output is kept ($build/ctest.log, $build/asan-daemon.log, $build/asan-unit.log): its
# failures are summed up again at the very end, where a CI page that shows only the last lines still
# names the pass, the test and its first assertion.
status=0
ctest --output-on-failure -j2 --timeout 900 2>&1 | tee "$build/ctest.log" || status=$?
# The suite is done: the sanitizer build no longer has anything to yield to but other work, and at
# nice 19 beside other work at the normal priority it gets almost no CPU (about 1/70 of a normal
# task's share) and would not finish. Its processes, and those it starts from now on, go back to
# the normal priority.
# shellcheck disable=SC2046
renice -n 0 -p "$asan_build_pid" $(descendants "$asan_build_pid") >/dev/null 2>&1 || true

echo
echo "=== Unit tests and hpd's tests under AddressSanitizer + UndefinedBehaviorSanitizer ($asan_build) ==="
# hpd's tests as soon as their programs are built (they are built first): they are serial and mostly
# wait, so the rest of the build (the unit tests) goes on beside them.
while kill -0 "$asan_build_pid" 2>/dev/null && [ ! -e "$asan_build/daemon-tests-built" ]; do sleep 2; done
daemon_status=0
unit_status=0
if [ -e "$asan_build/daemon-tests-built" ]; then
  "$root/packaging/asan-tests.sh" run-daemon 2>&1 | tee "$build/asan-daemon.log" || daemon_status=$?
fi
asan_built=0
wait "$asan_build_pid" && asan_built=1
trap - EXIT # it has ended: its pid is no longer its own
if [ "$asan_built" = 1 ]; then
  "$root/packaging/asan-tests.sh" run-unit 2>&1 | tee "$build/asan-unit.log" || unit_status=$?
else
  echo "test.sh: the sanitizer build failed; the end of $asan_log:" >&2
  tail -n 60 "$asan_log" >&2
fi

# summary TITLE LOG: the failed tests of a pass's output LOG (ctest's "Test #N: NAME ***Failed" lines)
# and, for each, its first assertion lines (gtest's "Failure" line and what follows it), and the
# sanitizer reports the pass printed.
summary() {
  echo
  echo "=== test.sh: failed in $1 ($2 has their whole output) ==="
  awk '/Test +#[0-9]+: .*(\*\*\*|Timeout|Not Run)/ { on = 1; n = 0; print; next }
       /^ +Start +[0-9]+:/ || /^ *[0-9]+\/[0-9]+ Test +#/ { on = 0 }
       /^asan-tests: sanitizer reports:/ { print; r = 1; next }
       r && n < 20 { print "  " $0; n++; next }
       on && /Failure|error|Error|exception|Expected|Which is|Value of|Actual|timed out|what\(\)/ && n < 8 { print "  " $0; n++ }' \
    "$2" | head -n 60 || true
}
if [ "$status" -ne 0 ]; then summary "the main suite" "$build/ctest.log"; fi
if [ "$daemon_status" -ne 0 ]; then summary "hpd's tests under the sanitizers" "$build/asan-daemon.log"; fi
if [ "$unit_status" -ne 0 ]; then summary "the unit tests under the sanitizers" "$build/asan-unit.log"; fi
if [ "$asan_built" != 1 ]; then echo "=== test.sh: the sanitizer build failed ($asan_log) ==="; fi
for code in "$status" "$daemon_status" "$unit_status" "$((1 - asan_built))"; do
  if [ "$code" -ne 0 ]; then exit "$code"; fi
done
