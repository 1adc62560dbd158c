#!/usr/bin/env bash
# Installs the Debian 12 packages hpd needs. Safe to run again: apt-get skips what is already installed.
#   install-deps.sh          everything: build, test and benchmark hpd (packaging/test.sh, CI)
#   install-deps.sh --demo   only what building hpd, hpctl and the example needs (packaging/demo.sh)
set -euo pipefail

subset=all
case "${1:-}" in
  --demo) subset=demo ;;
  "") ;;
  *) echo "install-deps: unknown argument '$1' (usage: install-deps.sh [--demo])" >&2; exit 2 ;;
esac

# What building hpd, hpctl, libhpdcalls and the example needs (configured with -DHPD_BUILD_TESTS=OFF
# -DHPD_BUILD_BENCH=OFF); the demo installs only these.
BUILD_PACKAGES=(
  cmake ninja-build pkg-config g++ ccache
  # the eBPF programs (clang -target bpf, bpftool's skeletons, libbpf); LLVM's demangler (llvm-14-dev)
  clang llvm llvm-14-dev bpftool libbpf-dev
  libelf-dev libdw-dev libdebuginfod-dev libzstd-dev zlib1g-dev
  libcli11-dev nlohmann-json3-dev
  # hpctl open and annotate: Zydis decodes x86-64 (AVX-512 included), Capstone ARM64; hpctl push:
  # OTLP/HTTP to a collector
  libzydis-dev libcapstone-dev libcurl4-openssl-dev
)

# What the tests and benchmarks add (packaging/test.sh).
TEST_PACKAGES=(
  libgtest-dev libgmock-dev
  # gcc 12 sanitizer runtimes for -DHPD_ENABLE_ASAN=ON builds (target hpd_unit_tests); libclang-rt-14-dev: libFuzzer
  libasan8 libubsan1 libclang-rt-14-dev
  # lld: llvm_sample_integration_test links with --symbol-ordering-file (hpctl convert --format symbol-order)
  lld-14
  # tools the tests compare against or drive
  linux-perf binutils elfutils procps util-linux bc xz-utils libc6-dbg debuginfod
  protobuf-compiler mandoc
  # the push's TLS tests make a test CA and certificates with the openssl command
  openssl ca-certificates
  # bench/calls_bench.sh compares the call counter with uftrace and the uprobe floor (bpftrace)
  uftrace bpftrace
  # JIT frames from /tmp/perf-PID.map: tests/cli/jit_test.cpp records node --perf-basic-prof
  nodejs
  # --alloc of a program that brings its own allocator: fixtures linked with jemalloc, mimalloc and
  # tcmalloc (libtcmalloc_minimal), and each preloaded (alloc_record_test)
  libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev
  # --alloc side by side with heaptrack (heaptrack, heaptrack_print): alloc_record_test's
  # AllocRecord.EstimatesAgreeWithHeaptrack and bench/alloc_bench.sh
  heaptrack zstd
  # the Debian package: dpkg-shlibdeps for its Depends, lintian to check it
  lintian dpkg-dev
  # systemd-analyze: the units verified, and the unit's SystemCallFilter groups expanded for
  # Hpd.RunsUnderTheUnitsSystemCallFilter (systemd itself need not run)
  systemd
)

PACKAGES=("${BUILD_PACKAGES[@]}")
if [ "$subset" = all ]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

# Go is not a Debian package here: Debian 12's golang-go (1.19) is too old for the OpenTelemetry
# Collector the OTLP tests build from its modules (packaging/build-otelcol.sh); this machine kind ships
# Go 1.26 in /usr/local/go, whose `go tool pprof` also reads hpd's pprof heap columns
# (tests/collect/calls/alloc_record_test.cpp).
# The demo does not build the tests, so it does not need Go.
if [ "$subset" = all ] && ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
  echo "install-deps: error: 'go' is missing (not in PATH nor /usr/local/go/bin); the OTLP tests need Go" \
    ">= 1.26 to build the OpenTelemetry Collector (packaging/otelcol/go.mod)" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present ($subset)"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

