#!/usr/bin/env bash
# Bytes hpd's continuous push sends per host-minute on a busy host: hpd with the continuous defaults
# (19 Hz, 60 s chunks) pushes every chunk over OTLP/HTTP to the real collector (hpd-otelcol, built by
# the test setup, with its file exporter) twice, to two receivers of it: gzip-compressed (the
# default) and uncompressed (push_compression.plain = none), while bench/push_workload.sh keeps the
# CPUs busy, for SECONDS (default 390: 6 chunks). Polls hpctl status --json every 5 s; each time both
# endpoints sent a further chunk, one line: the chunk's request bytes with gzip (the delta of
# bytes_sent: the body on the wire, without HTTP headers), the same request uncompressed as the gzip
# endpoint counted it (bytes_uncompressed) and as the other endpoint sent it (bytes_sent), and hpd's
# CPU seconds so far (both pushes included). The chunk files are kept in KEEP_DIR (for bench of the
# export's CPU).
# Usage: push_wire.sh HPD HPCTL OTELCOL KEEP_DIR [SECONDS]   (as root)
set -euo pipefail
hpd=${1:?usage}; hpctl=${2:?usage}; otelcol=${3:?usage}; keep=${4:?usage}; seconds=${5:-390}
source "$(dirname "$0")/push_setup.sh"
# Two receivers: the gzip pushes to one, the uncompressed to the other.
plain_port=$(free_port)
start_otelcol "$otelcol" http "$port" "$plain_port"
mkdir -p "$keep"
cat >"$tmp/hpd.conf" <<CONF
continuous = on
state_directory = $keep
otlp_endpoint = http://127.0.0.1:$port
otlp_endpoint.plain = http://127.0.0.1:$plain_port
push_compression.plain = none
CONF
"$hpd" --config "$tmp/hpd.conf" --socket "$tmp/hpd.sock" >"$tmp/hpd.log" 2>&1 &
pid=$!
"$here/push_workload.sh" "$seconds" "$tmp/busy_threads" &
hz=$(getconf CLK_TCK)
echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# seconds chunks_sent gzip_bytes uncompressed_bytes plain_bytes hpd_cpu_s"
start=$(date +%s); last_chunks=0; last_gzip=0; last_raw=0; last_plain=0
while :; do
  t=$(( $(date +%s) - start ))
  # Both endpoints' counts; the chunks sent are the fewer of the two.
  read -r chunks gzip raw plain < <("$hpctl" --socket "$tmp/hpd.sock" status --json 2>/dev/null | python3 -c 'import json,sys
c=json.load(sys.stdin).get("continuous") or {}
p=(c.get("push") or [])+[{},{}]; g,n=p[0],p[1]
same=g.get("chunks_sent",0)==n.get("chunks_sent",0)
print(g.get("chunks_sent",0) if same else 0, g.get("bytes_sent",0), g.get("bytes_uncompressed",0), n.get("bytes_sent",0))' 2>/dev/null || echo "0 0 0 0")
  if [ "$chunks" -gt "$last_chunks" ]; then
    cpu=$(awk -v hz="$hz" '{printf "%.2f", ($14+$15)/hz}' /proc/$pid/stat)
    n=$(( chunks - last_chunks ))
    echo "$t $chunks $(( (gzip - last_gzip) / n )) $(( (raw - last_raw) / n )) $(( (plain - last_plain) / n )) $cpu"
    last_chunks=$chunks; last_gzip=$gzip; last_raw=$raw; last_plain=$plain
  fi
  [ "$t" -ge "$seconds" ] && break
  sleep 5
done
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg); collector file: $(stat -c %s "$tmp/received.json" 2>/dev/null || echo 0) bytes of JSON"
kill -TERM $pid; wait $pid || true
