#!/usr/bin/env bash
# Installs the Debian 12 packages hpd needs to build, test and benchmark itself.
# Safe to run again: apt-get skips what is already installed.
set -euo pipefail

PACKAGES=(
  # build
  cmake ninja-build pkg-config g++ ccache clang llvm llvm-14-dev libclang-rt-14-dev bpftool
  # gcc 12 sanitizer runtimes for -DHPD_ENABLE_ASAN=ON builds (target hpd_unit_tests); libclang-rt-14-dev: libFuzzer
  libasan8 libubsan1
  # libraries
  libelf-dev libdw-dev libdebuginfod-dev libbpf-dev libzstd-dev zlib1g-dev
  libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libcapstone-dev libzydis-dev
  # hpctl push: OTLP/HTTP to a collector
  libcurl4-openssl-dev
  # tools the tests compare against or drive
  linux-perf binutils elfutils procps util-linux bc xz-utils libc6-dbg debuginfod
  protobuf-compiler mandoc
  # bench/calls_bench.sh compares the call counter with uftrace and the uprobe floor (bpftrace)
  uftrace bpftrace
  # JIT frames from /tmp/perf-PID.map: tests/cli/jit_test.cpp records node --perf-basic-prof
  nodejs
  # the Debian package: dpkg-shlibdeps for its Depends, lintian to check it
  lintian dpkg-dev
)

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

# Go is not a Debian package here: Debian 12's golang-go (1.19) is too old for the OpenTelemetry
# Collector the OTLP tests build from its modules (packaging/build-otelcol.sh); this machine kind ships
# Go 1.26 in /usr/local/go, whose `go tool pprof` also reads hpd's pprof heap columns
# (tests/collect/calls/alloc_record_test.cpp).
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
  echo "install-deps: error: 'go' is missing (not in PATH nor /usr/local/go/bin); the OTLP tests need Go" \
    ">= 1.26 to build the OpenTelemetry Collector (packaging/otelcol/go.mod)" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

