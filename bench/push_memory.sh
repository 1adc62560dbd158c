#!/usr/bin/env bash
# hpd's resident memory while its push endpoint is down (or up): hpd in continuous mode with the
# defaults (19 Hz, 60 s chunks) pushes to a port nothing listens on (ENDPOINT down, the default) or to
# bench/otlp_sink.py, which answers 200 (ENDPOINT up), beside bench/push_workload.sh, for SECONDS
# (default 600); every STEP seconds (default 30) one line: seconds, VmRSS and VmHWM of hpd (KiB), its
# RssAnon and RssFile (KiB: the heap and anonymous mmaps, BPF maps included, against the binary's pages), the
# push status (chunks queued, chunks dropped, chunks sent), the chunk store's bytes on disk and the
# unwind tables kept (KiB: status cfi.kept.bytes, bounded by max_kept_unwind_tables_mb; RssAnon less
# them is what the collection and the chunk in progress hold) (hpctl status --json).
# Usage: push_memory.sh HPD HPCTL [SECONDS] [STEP] [down|up]   (as root)
set -euo pipefail
hpd=${1:?usage: push_memory.sh HPD HPCTL [SECONDS] [STEP] [down|up]}
hpctl=${2:?usage: push_memory.sh HPD HPCTL [SECONDS] [STEP] [down|up]}
seconds=${3:-600}
step=${4:-30}
endpoint=${5:-down}
source "$(dirname "$0")/push_setup.sh"
# $port: nothing listens on it, so every push is refused; or the sink, which accepts every push.
case "$endpoint" in
  down) ;;
  up) python3 "$here/otlp_sink.py" "$port" "$tmp/last-body.bin" & ;;
  *) echo "push_memory.sh: ENDPOINT is down or up, not '$endpoint'" >&2; exit 2 ;;
esac
cat >"$tmp/hpd.conf" <<CONF
continuous = on
state_directory = $tmp/state
otlp_endpoint = http://127.0.0.1:$port
CONF
mkdir -p "$tmp/state"
"$hpd" --config "$tmp/hpd.conf" --socket "$tmp/hpd.sock" >"$tmp/hpd.log" 2>&1 &
pid=$!
"$here/push_workload.sh" "$seconds" "$tmp/busy_threads" &
echo "# hpd pid $pid, endpoint http://127.0.0.1:$port ($endpoint), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# seconds rss_kib hwm_kib anon_kib file_kib chunks_queued chunks_dropped chunks_sent bytes_on_disk kept_kib"
start=$(date +%s)
while :; do
  t=$(( $(date +%s) - start ))
  rss=$(awk '/^VmRSS/{print $2}' /proc/$pid/status)
  hwm=$(awk '/^VmHWM/{print $2}' /proc/$pid/status)
  anon=$(awk '/^RssAnon/{print $2}' /proc/$pid/status)
  file=$(awk '/^RssFile/{print $2}' /proc/$pid/status)
  push=$("$hpctl" --socket "$tmp/hpd.sock" status --json 2>/dev/null |
         python3 -c 'import json,sys
s=json.load(sys.stdin); c=s.get("continuous") or {}
k=((s.get("cfi") or {}).get("kept") or {}).get("bytes")
p=(c.get("push") or [{}])[0]; print(p.get("chunks_queued","-"), p.get("chunks_dropped","-"), p.get("chunks_sent","-"), c.get("bytes_on_disk","-"), "-" if k is None else k >> 10)' 2>/dev/null || echo "- - - - -")
  echo "$t $rss $hwm $anon $file $push"
  [ "$t" -ge "$seconds" ] && break
  sleep "$step"
done
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
kill -TERM $pid; wait $pid || true
tail -n 3 "$tmp/hpd.log" | sed 's/^/# hpd log: /'
