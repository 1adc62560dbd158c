#!/usr/bin/env bash
# Time from the request to the first sample of `--pid P -d 1` of a busy process: through hpd (its
# first recording after start, then warm ones), hpctl recording in process (--local), and
# `perf record -p`, side by side in one run, RUNS rounds, medians printed.
#
# Usage (as root): bench/first_sample.sh BUILD_DIR [RUNS=5] [WORKDIR=/tmp/hpd-first-sample]
#
# Each command is started by a wrapper that reads CLOCK_MONOTONIC just before it execs the command
# (hpctl or perf). The first sample's time is the recording's own: the Firefox profile's
# startTimeAsClockMonotonicNs plus the first on-CPU sample's time (threadCPUDelta > 0), and for perf
# `perf record -k CLOCK_MONOTONIC` and `perf script -F time`. The figure is their difference in ms.
# With HPD_TIMING=1 (set here for hpd and hpctl) both print where the time went ("hpd-timing STEP
# NS"); the medians of those steps, relative to the request, are printed after the table, with the
# first sample's as the last step. Each round's steps stay in WORKDIR/steps.warm and steps.local.
set -euo pipefail

BUILD=${1:?usage: first_sample.sh BUILD_DIR [RUNS] [WORKDIR]}
RUNS=${2:-5}
WORK=${3:-/tmp/hpd-first-sample}
HPCTL=$BUILD/cli/hpctl
HPD=$BUILD/daemon/src/service/hpd
[ -x "$HPCTL" ] || { echo "no $HPCTL" >&2; exit 2; }
[ -x "$HPD" ] || { echo "no $HPD" >&2; exit 2; }
command -v perf > /dev/null || { echo "perf is not installed" >&2; exit 2; }
mkdir -p "$WORK"
rm -f "$WORK"/*.json.gz "$WORK"/*.data "$WORK"/stamp.* "$WORK"/hpd.log

# The target: one thread on the CPU until killed.
cat > "$WORK/spin.c" <<'EOF'
#include <stdint.h>
static volatile uint64_t sink;
__attribute__((noinline)) static uint64_t step(uint64_t x) { return x * 6364136223846793005ULL + 1; }
int main(void) { uint64_t x = 1; for (;;) { x = step(x); sink = x; } }
EOF
cc -O2 -g -fno-omit-frame-pointer "$WORK/spin.c" -o "$WORK/spin"

# stamp FILE CMD...: writes CLOCK_MONOTONIC (ns) to FILE, then execs CMD; and the stamp's own CPU time
# (ns) to FILE.cpu, which the command's process CPU time (kept across the exec) starts from.
stamp() {
  python3 -c 'import os, sys, time
open(sys.argv[1] + ".cpu", "w").write(str(time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID)))
open(sys.argv[1], "w").write(str(time.clock_gettime_ns(time.CLOCK_MONOTONIC)))
os.execvp(sys.argv[2], sys.argv[2:])' "$@"
}

# hpd_first PROFILE: CLOCK_MONOTONIC ns of the first on-CPU sample of a Firefox profile.
hpd_first() {
  python3 - "$1" <<'EOF'
import gzip, json, sys
p = json.load(gzip.open(sys.argv[1]))
base = p["meta"]["startTimeAsClockMonotonicNanosecondsSinceBoot"]
first = None
for t in p["threads"]:
    s = t["samples"]
    times = s.get("time")
    if times is None:
        acc, times = 0.0, []
        for d in s["timeDeltas"]:
            acc += d
            times.append(acc)
    cpu = s.get("threadCPUDelta") or [1] * len(times)
    for tm, c in zip(times, cpu):
        if c and c > 0:
            first = tm if first is None else min(first, tm)
            break
print(int(base + first * 1e6) if first is not None else "none")
EOF
}

perf_first() {
  perf script -i "$1" -F time 2> /dev/null | head -1 | tr -d ' :' | awk '{printf "%.0f\n", $1 * 1e9}'
}

ms() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "none") print "none"; else printf "%.1f\n", (a - b) / 1e6 }'; }

"$WORK/spin" &
SPIN=$!
SOCK=$WORK/hpd.sock
: > "$WORK/hpd.conf"
start_hpd() {
  rm -f "$SOCK"
  HPD_TIMING=1 "$HPD" --config "$WORK/hpd.conf" --socket "$SOCK" >> "$WORK/hpd.log" 2>&1 &
  HPD_PID=$!
  for _ in $(seq 200); do
    "$HPCTL" --socket "$SOCK" status > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "hpd did not answer on $SOCK" >&2
  exit 1
}
stop_hpd() { kill "$HPD_PID" 2> /dev/null || true; wait "$HPD_PID" 2> /dev/null || true; }
trap 'kill $SPIN 2>/dev/null || true; stop_hpd' EXIT

record_hpd() {  # record_hpd NAME [--local]: ms from the request to the first sample
  local name=$1
  shift
  stamp "$WORK/stamp.$name" "$HPCTL" --socket "$SOCK" "$@" record --pid "$SPIN" -d 1 -q \
    -o "$WORK/$name.json.gz" > "$WORK/$name.out" 2>&1
  ms "$(hpd_first "$WORK/$name.json.gz")" "$(cat "$WORK/stamp.$name")"
}

record_perf() {
  stamp "$WORK/stamp.perf" perf record -q -k CLOCK_MONOTONIC -F 999 -g -p "$SPIN" -o "$WORK/perf.data" \
    -- sleep 1 > "$WORK/perf.out" 2>&1
  ms "$(perf_first "$WORK/perf.data")" "$(cat "$WORK/stamp.perf")"
}

steps() {  # steps NAME LOG_LINE: "STEP MS CPU_MS" after the stamp, one per line; CPU_MS: the CPU time of
  # the process that marked the step, hpctl's since its exec, hpd's since its first mark of this request
  local t0 cpu0
  t0=$(cat "$WORK/stamp.$1")
  cpu0=$(cat "$WORK/stamp.$1.cpu")
  { grep '^hpd-timing' "$WORK/$1.out" | sed 's/^/hpctl /' || true
    tail -n +"$2" "$WORK/hpd.log" | grep '^hpd-timing' | sed 's/^/hpd /' || true; } |
    awk -v t0="$t0" -v cpu0="$cpu0" '{ if (!($1 in base)) base[$1] = ($1 == "hpctl") ? cpu0 : $5
                       printf "%s %.1f %.1f\n", $3, ($4 - t0) / 1e6, ($5 - base[$1]) / 1e6 }' | sort -k2 -g
}

: > "$WORK/results"
: > "$WORK/steps.warm"
: > "$WORK/steps.local"
for round in $(seq "$RUNS"); do
  start_hpd
  cold=$(HPD_TIMING=1 record_hpd "hpd-cold")
  line=$(($(wc -l < "$WORK/hpd.log") + 1))
  warm=$(HPD_TIMING=1 record_hpd "hpd-warm")
  { steps hpd-warm "$line"; echo "first-sample $warm"; } >> "$WORK/steps.warm"
  stop_hpd
  line=$(($(wc -l < "$WORK/hpd.log") + 1))
  local_ms=$(HPD_TIMING=1 record_hpd "local" --local)
  { steps local "$line"; echo "first-sample $local_ms"; } >> "$WORK/steps.local"
  perf_ms=$(record_perf)
  echo "$cold $warm $local_ms $perf_ms" >> "$WORK/results"
done

median() { sort -g | awk '{v[NR] = $1} END {print (NR ? v[int((NR + 1) / 2)] : "none")}'; }
echo "request to first sample, ms, median of $RUNS rounds (min-max); load: $(cut -d' ' -f1-3 /proc/loadavg)"
col=1
for what in "hpd, first recording after start" "hpd, next recording (warm)" "hpctl --local" "perf record -p"; do
  values=$(awk -v c=$col '{print $c}' "$WORK/results")
  printf '%-36s %8s   (%s-%s)\n' "$what" "$(echo "$values" | median)" \
    "$(echo "$values" | sort -g | head -1)" "$(echo "$values" | sort -g | tail -1)"
  col=$((col + 1))
done

# Where the time went: each step's median, ms after the request (hpctl started), and the median CPU
# time of the process that marked it (hpctl: since its exec; hpd: since its first mark of the request).
for kind in warm local; do
  echo
  echo "steps of the ${kind} recordings (ms after hpctl started; CPU ms of the marking process; median of $RUNS):"
  awk '{n[$1]++; v[$1, n[$1]] = $2; c[$1, n[$1]] = ($3 == "" ? -1 : $3)
        if (!($1 in first)) { first[$1] = NR; order[++k] = $1 } }
       function median(arr, s, m,    a, b, t, x) {  # by insertion sort of the few values
         for (a = 1; a <= m; a++) x[a] = arr[s, a]
         for (a = 2; a <= m; a++) { t = x[a]; b = a - 1; while (b >= 1 && x[b] > t) { x[b + 1] = x[b]; b-- } x[b + 1] = t }
         return x[int((m + 1) / 2)] }
       END { for (i = 1; i <= k; i++) { s = order[i]; cpu = median(c, s, n[s])
               printf "  %-22s %8.1f %8s\n", s, median(v, s, n[s]), cpu < 0 ? "" : sprintf("%.1f", cpu) } }' "$WORK/steps.$kind"
done
