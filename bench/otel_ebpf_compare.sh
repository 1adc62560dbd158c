#!/usr/bin/env bash
# hpd's continuous push beside opentelemetry-ebpf-profiler, on one machine at one time
# (docs/performance.md "Beside opentelemetry-ebpf-profiler"). Both run with their defaults (hpd: 19 Hz,
# 60 s chunks; the eBPF profiler: 20 Hz, a report every 5 s +-20%) while bench/push_workload.sh keeps
# the CPUs busy for SECONDS (default 360), and both push OTLP profiles over gRPC, without TLS, to one
# real collector (hpd-otelcol, file exporter), each through its own counting relay
# (bench/otlp_wire_count.py: TCP bytes, gRPC messages as sent and inflated). Every 60 s one line per
# profiler: the minute's bytes on the wire and gRPC message bytes (as sent; inflated: the protobuf),
# its CPU seconds in that minute (utime+stime of /proc/PID/stat) and its VmRSS; at the end VmHWM.
#
# OTEL_TREE is a work tree of github.com/open-telemetry/opentelemetry-ebpf-profiler outside hpd's tree
# (e.g. `git clone https://github.com/open-telemetry/opentelemetry-ebpf-profiler /tmp/otel-ebpf`);
# nothing of it is part of hpd. If OTEL_TREE/ebpf-profiler does not exist it is built there with Go
# (`go build -tags osusergo,netgo`, CGO off; its eBPF object support/ebpf/tracer.ebpf.* is in its tree).
# Where root cannot raise RLIMIT_MEMLOCK (no CAP_SYS_RESOURCE, as in these VMs) the profiler as
# published stops at start ("failed to set temporary rlimit: operation not permitted"); kernels >= 5.11
# charge eBPF memory to the memory cgroup instead, so before that build one line of OTEL_TREE's
# rlimit/rlimit.go is changed to treat EPERM as nothing to do (said on stderr). Its sched_process_free
# tracepoint needs tracefs: mounted at /sys/kernel/tracing if it is not.
# Then the collector is stopped for DOWN_SECONDS (default 600; 0: not) while the workload goes on:
# every 60 s both profilers' CPU and VmRSS, and hpd's chunks queued (hpctl status). The eBPF profiler
# needs its collector when it starts (it gives up after 5 tries), hence up first, then down.
# Usage: otel_ebpf_compare.sh HPD HPCTL OTELCOL OTEL_TREE [SECONDS [DOWN_SECONDS]]   (as root)
set -euo pipefail
hpd=${1:?usage}; hpctl=${2:?usage}; otelcol=${3:?usage}; otel_tree=${4:?usage}; seconds=${5:-360}
down=${6:-600}
source "$(dirname "$0")/push_setup.sh"

agent=$otel_tree/ebpf-profiler
if [ ! -x "$agent" ]; then
  if ! prlimit --pid $$ --memlock=unlimited:unlimited 2>/dev/null; then
    echo "otel_ebpf_compare: RLIMIT_MEMLOCK cannot be raised here: $otel_tree/rlimit/rlimit.go told to ignore EPERM" >&2
    python3 - "$otel_tree/rlimit/rlimit.go" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
old = '\t\treturn nil, fmt.Errorf("failed to set temporary rlimit: %w", err)'
if "err == unix.EPERM" not in s:
    assert old in s, "rlimit.go is not as expected"
    s = s.replace(old, "\t\tif err == unix.EPERM {\n\t\t\treturn func() {}, nil\n\t\t}\n" + old)
    open(p, "w").write(s)
PY
  fi
  (cd "$otel_tree" && CGO_ENABLED=0 go build -tags osusergo,netgo -o ebpf-profiler .)
fi
[ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing

grpc_port=$port; otel_relay=$(free_port); hpd_relay=$(free_port)
start_otelcol "$otelcol" grpc "$grpc_port"
python3 "$here/otlp_wire_count.py" "$otel_relay" "$grpc_port" "$tmp/otel.json" &
relays=($!)
python3 "$here/otlp_wire_count.py" "$hpd_relay" "$grpc_port" "$tmp/hpd.json" &
relays+=($!)
wait_port "$otel_relay"; wait_port "$hpd_relay"

cat >"$tmp/hpd.conf" <<CONF
continuous = on
state_directory = $tmp/chunks
otlp_endpoint = grpc://127.0.0.1:$hpd_relay
CONF
"$hpd" --config "$tmp/hpd.conf" --socket "$tmp/hpd.sock" >"$tmp/hpd.log" 2>&1 &
hpd_pid=$!
"$agent" -collection-agent "127.0.0.1:$otel_relay" -disable-tls >"$tmp/agent.log" 2>&1 &
agent_pid=$!
# Both sample from here on; the eBPF profiler loads its programs in a few seconds.
until grep -q "Attached sched monitor" "$tmp/agent.log"; do
  kill -0 "$agent_pid" 2>/dev/null || { cat "$tmp/agent.log" >&2; exit 1; }
  sleep 0.5
done
"$here/push_workload.sh" "$((seconds + down + 30))" "$tmp/busy_threads" &

hz=$(getconf CLK_TCK)
cpu() { awk -v hz="$hz" '{printf "%.2f", ($14+$15)/hz}' "/proc/$1/stat"; }
mem() { awk -v k="$2:" '$1 == k {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
# RELAY_STATS: bytes_up grpc_message_bytes grpc_message_bytes_inflated grpc_messages
relay() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["bytes_up"], d["grpc_message_bytes"], d["grpc_message_bytes_inflated"], d["grpc_messages"])' "$1"
}
queued() {
  "$hpctl" --socket "$tmp/hpd.sock" status --json 2>/dev/null | python3 -c 'import json,sys
c=json.load(sys.stdin).get("continuous") or {}
print(((c.get("push") or [{}])[0]).get("chunks_queued", "?"))' 2>/dev/null || echo "?"
}
echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ); hpd pid $hpd_pid, eBPF profiler pid $agent_pid"
echo "# collector up: minute who wire_bytes msg_bytes_sent msg_bytes_inflated messages cpu_s VmRSS_MB"
declare -A c0 r0 cfirst rfirst
for who in otel hpd; do
  if [ $who = otel ]; then p=$agent_pid; else p=$hpd_pid; fi
  c0[$who]=$(cpu $p); r0[$who]=$(relay "$tmp/$who.json")
  cfirst[$who]=${c0[$who]}; rfirst[$who]=${r0[$who]}
done
per_minute() {  # WHO LABEL CPU0 CPU1 "RELAY0" "RELAY1" MINUTES EXTRA
  local a b; read -r -a a <<<"$5"; read -r -a b <<<"$6"
  awk -v l="$2" -v w="$1" -v c="$(awk -v x="$3" -v y="$4" 'BEGIN{print y - x}')" -v m="$7" -v e="$8" \
      -v u="$((b[0] - a[0]))" -v s="$((b[1] - a[1]))" -v i="$((b[2] - a[2]))" -v n="$((b[3] - a[3]))" \
      'BEGIN{printf "%s %s %d %d %d %.1f %.2f %s\n", l, w, u / m, s / m, i / m, n / m, c / m, e}'
}
for ((m = 1; m * 60 <= seconds; m++)); do
  sleep 60
  for who in otel hpd; do
    if [ $who = otel ]; then p=$agent_pid; else p=$hpd_pid; fi
    c1=$(cpu $p); r1=$(relay "$tmp/$who.json")
    per_minute $who $m "${c0[$who]}" "$c1" "${r0[$who]}" "$r1" 1 "$(mem $p VmRSS)"
    c0[$who]=$c1; r0[$who]=$r1
  done
done
echo "# collector up, per minute over $((m - 1)) (who wire msg_sent msg_inflated messages cpu_s VmHWM_MB):"
for who in otel hpd; do
  if [ $who = otel ]; then p=$agent_pid; else p=$hpd_pid; fi
  per_minute $who "# all" "${cfirst[$who]}" "${c0[$who]}" "${rfirst[$who]}" "${r0[$who]}" $((m - 1)) "$(mem $p VmHWM)"
done
if [ "$down" -gt 0 ]; then
  # The relays too: the profilers' connections are refused, as by a host whose collector is down.
  kill -TERM "$otelcol_pid" "${relays[@]}"; wait "$otelcol_pid" "${relays[@]}" || true
  echo "# collector stopped $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# collector down: minute eBPF_profiler(cpu_s VmRSS_MB VmHWM_MB) hpd(cpu_s VmRSS_MB VmHWM_MB chunks_queued)"
  for ((m = 1; m * 60 <= down; m++)); do
    sleep 60
    line="$m"
    for who in otel hpd; do
      if [ $who = otel ]; then p=$agent_pid; else p=$hpd_pid; fi
      c1=$(cpu $p)
      line+=" $(awk -v x="${c0[$who]}" -v y="$c1" 'BEGIN{printf "%.2f", y - x}') $(mem $p VmRSS) $(mem $p VmHWM)"
      c0[$who]=$c1
    done
    echo "$line $(queued)"
  done
fi
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
kill -INT "$agent_pid"; kill -TERM "$hpd_pid"; wait "$agent_pid" "$hpd_pid" || true
