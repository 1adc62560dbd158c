#!/usr/bin/env bash
# Builds hpd-otelcol, the OpenTelemetry Collector hpd's OTLP tests push profiles to, from its Go
# modules (packaging/otelcol: the core OTLP receiver and contrib's file exporter, versions pinned in
# go.mod and go.sum). Usage: build-otelcol.sh OUTPUT_BINARY
# Go comes from PATH or /usr/local/go/bin (this machine kind ships Go 1.26; Debian 12's golang-go is
# too old for the collector). Modules are fetched through the Go module proxy into $GOMODCACHE
# (default $HOME/go/pkg/mod) and checked against go.sum; the build cache is Go's own ($GOCACHE).
set -euo pipefail

out=${1:?usage: build-otelcol.sh OUTPUT_BINARY}
src=$(cd "$(dirname "$0")/otelcol" && pwd)

# $GO: the go command CMake found; else PATH, then /usr/local/go/bin.
go=${GO:-go}
if ! command -v "$go" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  go=/usr/local/go/bin/go
fi
if ! command -v "$go" >/dev/null 2>&1; then
  echo "build-otelcol: 'go' not found (PATH and /usr/local/go/bin): the OTLP tests need Go >= 1.26 (go.mod)" \
    "to build the OpenTelemetry Collector from its modules; install Go and run again" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")  # the build runs in $src
cd "$src"
# -mod=readonly: go.mod and go.sum say exactly what is built; nothing is upgraded on the way.
# -trimpath: the binary does not depend on where the module cache is.
GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
  "$go" build -trimpath -ldflags=-s -o "$out.tmp" .
mv -f "$out.tmp" "$out"
echo "build-otelcol: built $out"
