#!/usr/bin/env bash
# Time from the request to the first sample, side by side with perf in one run, RUNS rounds, medians
# printed. Four modes:
#   (default) `--pid P -d 1` of a busy process: through hpd (its first recording after start, then warm
#       ones), hpctl recording in process (--local), and `perf record -p`.
#   --start   hpd started as systemd starts it (Type=notify): from hpd's exec to its READY=1, then
#       `--pid P -d 1` requested at once; and started by socket activation (hpd.socket), the request
#       being what starts it: from the request (and hpd's exec) to the first sample. `perf record -p`
#       beside them.
#   --cgroup  `--cgroup G -d 1` of a cgroup v2 holding the busy process, through hpd (the first --cgroup
#       recording after a --pid one, the next --cgroup one, a --pid one after those), against `perf
#       record -a -G G` (perf's --cgroup, which needs -a).
#   --command `record -- CMD` of a program that reads CLOCK_MONOTONIC first thing in main, writes it,
#       spins 0.3 s and exits: through a warm hpd, `--local`, and `perf record -- CMD`; both the
#       command's start (its main) and its first sample after the request.
#
# Usage (as root): bench/first_sample.sh [--start|--cgroup|--command] BUILD_DIR [RUNS=5] [WORKDIR=/tmp/hpd-first-sample]
#
# Each command is started by a wrapper that reads CLOCK_MONOTONIC just before it execs the command
# (hpctl or perf). The first sample's time is the recording's own: the Firefox profile's
# startTimeAsClockMonotonicNs plus the first on-CPU sample's time (threadCPUDelta > 0), and for perf
# `perf record -k CLOCK_MONOTONIC` and `perf script -F time`. The figure is their difference in ms.
# With HPD_TIMING=1 (set here for hpd and hpctl) both print where the time went ("hpd-timing STEP
# NS"); the medians of those steps, relative to the request, are printed after the table, with the
# first sample's as the last step. Each round's steps stay in WORKDIR/steps.warm and steps.local.
set -euo pipefail

MODE=pid
case "${1:-}" in
  --start | --cgroup | --command) MODE=${1#--}; shift ;;
esac
BUILD=${1:?usage: first_sample.sh [--start|--cgroup|--command] BUILD_DIR [RUNS] [WORKDIR]}
RUNS=${2:-5}
WORK=${3:-/tmp/hpd-first-sample}
source "$(dirname "$0")/private_hpd.sh"
private_hpd_paths "$BUILD"
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
  wait_hpd_answers "$SOCK" 200
}
# launch_hpd notify|activation: starts hpd as systemd would. notify: with $NOTIFY_SOCKET (hpd.service's
# Type=notify), returning once hpd sent READY=1, whose CLOCK_MONOTONIC is written to WORK/ready.hpd;
# activation (hpd.socket): returns once the socket listens; the first connection starts hpd with the
# socket passed as systemd's LISTEN_FDS (activated_hpd gives its pid). WORK/stamp.hpd: CLOCK_MONOTONIC
# just before hpd's fork and exec.
launch_hpd() {
  rm -f "$WORK/listening" "$WORK/hpd.pid"
  if [ "$1" = activation ]; then
    launcher "$1" > "$WORK/hpd.pid" &
    LAUNCHER=$!
    while [ ! -e "$WORK/listening" ]; do sleep 0.01; done
  else
    HPD_PID=$(launcher "$1")
  fi
}
activated_hpd() {
  wait "$LAUNCHER"
  HPD_PID=$(cat "$WORK/hpd.pid")
}
launcher() {
  python3 - "$1" "$HPD" "$WORK" "$SOCK" <<'EOF'
import os, select, socket, sys, time
mode, hpd, work, sock = sys.argv[1:5]
env = dict(os.environ, HPD_TIMING="1")
for stale in (sock, work + "/notify.sock"):
    try:
        os.unlink(stale)
    except FileNotFoundError:
        pass
notify = listener = None
if mode == "notify":
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(work + "/notify.sock")
    env["NOTIFY_SOCKET"] = work + "/notify.sock"
else:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock)
    listener.listen(64)
    open(work + "/listening", "w").close()
    select.select([listener], [], [], 120)  # systemd starts the service at the first connection
log = open(work + "/hpd.log", "a")
start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
pid = os.fork()
if pid == 0:
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    if listener is not None:
        os.dup2(listener.fileno(), 3)
        env["LISTEN_FDS"] = "1"
        env["LISTEN_PID"] = str(os.getpid())
    os.execve(hpd, [hpd, "--config", work + "/hpd.conf", "--socket", sock], env)
open(work + "/stamp.hpd", "w").write(str(start))
if notify is not None:
    notify.settimeout(120)
    while b"READY=1" not in notify.recv(4096):
        pass
    open(work + "/ready.hpd", "w").write(str(time.clock_gettime_ns(time.CLOCK_MONOTONIC)))
print(pid)
EOF
}
stop_hpd() {
  [ -n "${HPD_PID:-}" ] || return 0
  kill "$HPD_PID" 2> /dev/null || true
  wait "$HPD_PID" 2> /dev/null || true  # a child of this shell (start_hpd)
  while kill -0 "$HPD_PID" 2> /dev/null; do sleep 0.05; done  # or of launch_hpd's python
  HPD_PID=
}
trap 'kill $SPIN 2>/dev/null || true; stop_hpd' EXIT

# What record_hpd records: the busy process by default.
TARGET=(--pid "$SPIN" -d 1)
record_hpd() {  # record_hpd NAME [--local]: ms from the request to the first sample
  local name=$1
  shift
  stamp "$WORK/stamp.$name" "$HPCTL" --socket "$SOCK" "$@" record -q -o "$WORK/$name.json.gz" \
    "${TARGET[@]}" > "$WORK/$name.out" 2>&1
  ms "$(hpd_first "$WORK/$name.json.gz")" "$(cat "$WORK/stamp.$name")"
}

record_perf() {  # record_perf [TARGET...]: `perf record -p` of the busy process by default
  [ $# -gt 0 ] || set -- -p "$SPIN" -- sleep 1
  stamp "$WORK/stamp.perf" perf record -q -k CLOCK_MONOTONIC -F 999 -g -o "$WORK/perf.data" "$@" \
    > "$WORK/perf.out" 2>&1
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

# Where the time went: print_steps KIND prints each step's median, ms after the request (hpctl
# started), and the median CPU time of the process that marked it (hpctl: since its exec; hpd: since
# its first mark of the request), from WORK/steps.KIND.
print_steps() {
  local kind=$1
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
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR ? v[int((NR + 1) / 2)] : "none")}'; }
# table TITLE...: the median (min-max) of each column of WORK/results, one row per title.
table() {
  echo "request to first sample, ms, median of $RUNS rounds (min-max); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  local col=1 what values
  for what in "$@"; do
    values=$(awk -v c=$col '{print $c}' "$WORK/results")
    printf '%-52s %8s   (%s-%s)\n' "$what" "$(echo "$values" | median)" \
      "$(echo "$values" | sort -g | head -1)" "$(echo "$values" | sort -g | tail -1)"
    col=$((col + 1))
  done
}

: > "$WORK/results"
: > "$WORK/steps.cgroup"
if [ "$MODE" = start ]; then
  for round in $(seq "$RUNS"); do
    launch_hpd notify
    ready=$(ms "$(cat "$WORK/ready.hpd")" "$(cat "$WORK/stamp.hpd")")
    first=$(HPD_TIMING=1 record_hpd "hpd-first")
    stop_hpd
    launch_hpd activation
    activated=$(HPD_TIMING=1 record_hpd "hpd-activated")
    activated_hpd
    from_exec=$(ms "$(hpd_first "$WORK/hpd-activated.json.gz")" "$(cat "$WORK/stamp.hpd")")
    stop_hpd
    echo "$ready $first $activated $from_exec $(record_perf)" >> "$WORK/results"
  done
  table "hpd's exec to READY=1 (Type=notify)" "after READY=1: first recording, request to sample" \
    "socket activated: request (starts hpd) to sample" "socket activated: hpd's exec to sample" \
    "perf record -p"
  exit 0
fi

if [ "$MODE" = cgroup ]; then
  CGROUP_ROOT=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
  [ -n "$CGROUP_ROOT" ] || { echo "no cgroup v2 mount" >&2; exit 2; }
  CGROUP=hpd-first-sample
  mkdir -p "$CGROUP_ROOT/$CGROUP"
  echo "$SPIN" > "$CGROUP_ROOT/$CGROUP/cgroup.procs"
  trap 'kill $SPIN 2>/dev/null || true; stop_hpd; sleep 0.2; rmdir "$CGROUP_ROOT/$CGROUP" 2>/dev/null || true' EXIT
  launch_hpd notify
  HPD_TIMING=1 record_hpd "hpd-pid0" > /dev/null  # hpd's first recording: a --pid one
  for round in $(seq "$RUNS"); do
    TARGET=(--cgroup "$CGROUP" -d 1)
    line=$(($(wc -l < "$WORK/hpd.log") + 1))
    after_pid=$(HPD_TIMING=1 record_hpd "hpd-cgroup")
    steps hpd-cgroup "$line" >> "$WORK/steps.cgroup"
    echo "first-sample $after_pid" >> "$WORK/steps.cgroup"
    next=$(HPD_TIMING=1 record_hpd "hpd-cgroup-next")
    TARGET=(--pid "$SPIN" -d 1)
    pid_after=$(HPD_TIMING=1 record_hpd "hpd-pid")
    perf_ms=$(record_perf -a -e cpu-clock -G "$CGROUP" -- sleep 1)
    echo "$after_pid $next $pid_after $perf_ms" >> "$WORK/results"
  done
  table "hpd --cgroup, after a --pid recording" "hpd --cgroup, the next (after a --cgroup one)" \
    "hpd --pid, after the --cgroup ones" "perf record -a -e cpu-clock -G"
  print_steps cgroup
  exit 0
fi

if [ "$MODE" = command ]; then
  # The launched program: CLOCK_MONOTONIC first thing in main, written to argv[1]; then 0.3 s of CPU.
  cat > "$WORK/short.c" << 'EOF'
#include <stdio.h>
#include <time.h>
static long long ns(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static volatile unsigned long long sink;
int main(int argc, char** argv) {
  const long long start = ns(CLOCK_MONOTONIC);
  FILE* f = fopen(argv[1], "w");
  if (!f) return 1;
  fprintf(f, "%lld\n", start);
  fclose(f);
  while (ns(CLOCK_PROCESS_CPUTIME_ID) < 300000000LL) sink = sink * 6364136223846793005ULL + 1;
  return argc > 2;
}
EOF
  cc -O2 -g -fno-omit-frame-pointer "$WORK/short.c" -o "$WORK/short"
  launch_hpd notify
  HPD_TIMING=1 record_hpd "hpd-pid0" > /dev/null  # hpd's first recording: a --pid one
  # launched NAME [--local]: "MAIN_MS FIRST_SAMPLE_MS" after the request
  launched() {
    local name=$1 first
    shift
    TARGET=(-- "$WORK/short" "$WORK/main.$name")
    first=$(HPD_TIMING=1 record_hpd "$name" "$@")
    echo "$(ms "$(cat "$WORK/main.$name")" "$(cat "$WORK/stamp.$name")") $first"
  }
  for round in $(seq "$RUNS"); do
    after_pid=$(launched hpd-command)
    next=$(launched hpd-command-next)
    local_ms=$(launched local-command --local)
    perf_ms=$(record_perf -- "$WORK/short" "$WORK/main.perf")
    echo "$after_pid $next $local_ms $(ms "$(cat "$WORK/main.perf")" "$(cat "$WORK/stamp.perf")") $perf_ms" \
      >> "$WORK/results"
  done
  table "hpd, after a --pid recording: the command's main" "hpd, after a --pid recording: first sample" \
    "hpd, the next command: main" "hpd, the next command: first sample" "hpctl --local: main" \
    "hpctl --local: first sample" "perf record -- CMD: main" "perf record -- CMD: first sample"
  exit 0
fi

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

table "hpd, first recording after start" "hpd, next recording (warm)" "hpctl --local" "perf record -p"

for kind in warm local; do print_steps "$kind"; done
