# Sourced by push_memory.sh, push_wire.sh and otel_ebpf_compare.sh: $here (bench/), a temporary
# directory $tmp removed at exit with the jobs the script started, bench/busy_threads.c built in it,
# $port, a loopback port that was free a moment ago, free_port and wait_port PORT, and start_otelcol.
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/push-bench-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$tmp"' EXIT
cc -O2 -g -pthread -o "$tmp/busy_threads" "$here/busy_threads.c"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { until python3 -c "import socket; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null; do sleep 0.5; done; }
port=$(free_port)
# start_otelcol OTELCOL PROTOCOL PORT [PORT2]: the collector (hpd-otelcol) with its OTLP receiver for
# PROTOCOL (http or grpc) on 127.0.0.1:PORT (and a second one, otlp/plain, on PORT2) and its file
# exporter into $tmp/received.json, in the background ($otelcol_pid); returns once they accept
# connections.
start_otelcol() {
  local second="" receivers="otlp"
  if [ -n "${4:-}" ]; then
    second="  otlp/plain:
    protocols:
      $2:
        endpoint: 127.0.0.1:$4"
    receivers="otlp, otlp/plain"
  fi
  cat >"$tmp/otelcol.yaml" <<YAML
receivers:
  otlp:
    protocols:
      $2:
        endpoint: 127.0.0.1:$3
$second
exporters:
  file:
    path: $tmp/received.json
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [$receivers]
      exporters: [file]
YAML
  "$1" --config "$tmp/otelcol.yaml" >"$tmp/otelcol.log" 2>&1 &
  otelcol_pid=$!
  wait_port "$3"
  if [ -n "${4:-}" ]; then wait_port "$4"; fi
}
