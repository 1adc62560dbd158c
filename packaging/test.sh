#!/usr/bin/env bash
# The README's test command (and CI's): set up, build, and run the whole test suite, privileged
# tests included (they need root: perf_event, BPF, uprobes and ptrace run for real); then the unit
# tests again, built with AddressSanitizer and UBSan (packaging/asan-unit-tests.sh).
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
# The sanitizer pass below runs even when a test failed here, so that one run shows both.
status=0
ctest --output-on-failure -j2 --timeout 900 || status=$?

echo
echo "=== Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer ($asan_build) ==="
"$root/packaging/asan-unit-tests.sh" || status=$?
exit "$status"
