#!/usr/bin/env bash
# Bytes hpd's continuous push sends per host-minute on a busy host: hpd with the continuous defaults
# (19 Hz, 60 s chunks) pushes over OTLP/HTTP to the real collector (hpd-otelcol, built by the test
# setup, with its file exporter) while bench/push_workload.sh keeps the CPUs busy, for SECONDS
# (default 390: 6 chunks). Polls hpctl status --json every 5 s; each time chunks_sent grows, one line:
# the chunk's request bytes (the delta of bytes_sent: the protobuf body, without HTTP headers) and
# hpd's CPU seconds so far. The chunk files are kept in KEEP_DIR (for bench of the export's CPU).
# Usage: push_wire.sh HPD HPCTL OTELCOL KEEP_DIR [SECONDS]   (as root)
set -euo pipefail
hpd=${1:?usage}; hpctl=${2:?usage}; otelcol=${3:?usage}; keep=${4:?usage}; seconds=${5:-390}
source "$(dirname "$0")/push_setup.sh"
start_otelcol "$otelcol" http "$port"
mkdir -p "$keep"
cat >"$tmp/hpd.conf" <<CONF
continuous = on
state_directory = $keep
otlp_endpoint = http://127.0.0.1:$port
CONF
"$hpd" --config "$tmp/hpd.conf" --socket "$tmp/hpd.sock" >"$tmp/hpd.log" 2>&1 &
pid=$!
"$here/push_workload.sh" "$seconds" "$tmp/busy_threads" &
hz=$(getconf CLK_TCK)
echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# seconds chunks_sent chunk_bytes hpd_cpu_s"
start=$(date +%s); last_chunks=0; last_bytes=0
while :; do
  t=$(( $(date +%s) - start ))
  read -r chunks bytes < <("$hpctl" --socket "$tmp/hpd.sock" status --json 2>/dev/null | python3 -c 'import json,sys
c=json.load(sys.stdin).get("continuous") or {}
p=(c.get("push") or [{}])[0]; print(p.get("chunks_sent",0), p.get("bytes_sent",0))' 2>/dev/null || echo "0 0")
  if [ "$chunks" -gt "$last_chunks" ]; then
    cpu=$(awk -v hz="$hz" '{printf "%.2f", ($14+$15)/hz}' /proc/$pid/stat)
    echo "$t $chunks $(( (bytes - last_bytes) / (chunks - last_chunks) )) $cpu"
    last_chunks=$chunks; last_bytes=$bytes
  fi
  [ "$t" -ge "$seconds" ] && break
  sleep 5
done
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg); collector file: $(stat -c %s "$tmp/received.json" 2>/dev/null || echo 0) bytes of JSON"
kill -TERM $pid; wait $pid || true
