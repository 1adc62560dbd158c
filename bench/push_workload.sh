#!/usr/bin/env bash
# A busy host for the push benchmarks: a few processes that keep the CPU busy, each with stacks of its
# own (a C program's threads, gzip, sha256sum, a Python loop, sort), for SECONDS.
# Usage: push_workload.sh SECONDS BUSY_THREADS_BINARY
set -euo pipefail
seconds=${1:?usage: push_workload.sh SECONDS BUSY_THREADS_BINARY}
busy=${2:?usage: push_workload.sh SECONDS BUSY_THREADS_BINARY}
pids=()
"$busy" "$seconds" 2 & pids+=($!)
timeout "$seconds" sh -c 'gzip -1 </dev/urandom >/dev/null' & pids+=($!)
timeout "$seconds" sha256sum /dev/zero & pids+=($!)
timeout "$seconds" python3 -c 'import json
while True: json.loads(json.dumps([{"k": i, "v": str(i) * 3} for i in range(2000)]))' & pids+=($!)
timeout "$seconds" sh -c 'while :; do seq 1 200000 | sort -R >/dev/null; done' & pids+=($!)
wait "${pids[@]}" 2>/dev/null || true
