#!/usr/bin/env bash
# The fixed CPU cost of a recording through a warm hpd, against perf's: `hpctl record --pid P -d 1` of a
# busy process (tests/collect/spinner.c), RUNS times for each output (`-o x.hpr --no-report`, `-o x.hpr`
# with the report, `-o x.json.gz`), through an hpd of BUILD started here on a private socket and state
# directory, and warmed by one recording first; beside `perf record -g -F 999 -p P -- sleep 1` (its own
# CPU, and with `perf script` of its file).
#
# hpd's CPU per recording: its process CPU clock (every thread, the ended ones too; ns) over a window
# from just before hpctl's start to SETTLE seconds after hpctl's exit, less hpd's CPU over an idle window
# of the same length taken right after. The client's and perf's: the rusage of their process (wait4).
# Medians (min-max) of RUNS are printed, in ms.
#
# Usage (as root): bench/warm_fixed_cost.sh BUILD_DIR [RUNS=7] [WORKDIR=/tmp/hpd-warm-fixed]
# Environment: DURATION=1 (seconds recorded); SETTLE=1.5 (seconds after hpctl's exit counted as the
# recording's: the programs hpd loads for the next recording while this one records must be loaded by
# then, else their load is counted in the idle window instead); KINDS="noreport report json perf
# perf+script".
# With PERF_HPD=FILE, hpd itself is sampled by `perf record -g` over the hpd runs (FILE its perf.data).
set -euo pipefail
BUILD=${1:?usage: warm_fixed_cost.sh BUILD_DIR [RUNS] [WORKDIR]}
RUNS=${2:-7}
WORK=${3:-/tmp/hpd-warm-fixed}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/private_hpd.sh"
private_hpd_paths "$BUILD"
command -v perf > /dev/null || { echo "perf is not installed" >&2; exit 2; }
mkdir -p "$WORK"
cc -O2 -g -pthread -o "$WORK/spinner" "$HERE/../tests/collect/spinner.c"

"$WORK/spinner" 36000000 > /dev/null &
SPIN=$!
HPD_PID=
PERF_HPD_PID=
trap 'kill $SPIN 2>/dev/null || true; [ -z "$PERF_HPD_PID" ] || { kill -INT $PERF_HPD_PID; wait $PERF_HPD_PID || true; }; [ -z "$HPD_PID" ] || { kill $HPD_PID 2>/dev/null; wait $HPD_PID 2>/dev/null; } || true' EXIT
start_private_hpd "$WORK"
# Warm: one recording of the same kind first (the held programs, the kept tables, the disk cache).
"$HPCTL" --socket "$SOCK" record -q --pid "$SPIN" -d 1 -o "$WORK/warm.hpr" --no-report > /dev/null
sleep 1
if [ -n "${PERF_HPD:-}" ]; then
  perf record -q -g -F 999 -p "$HPD_PID" -o "$PERF_HPD" > /dev/null 2>&1 &
  PERF_HPD_PID=$!
  sleep 0.5
fi

python3 - "$HPCTL" "$SOCK" "$HPD_PID" "$SPIN" "$WORK" "$RUNS" "${DURATION:-1}" "${SETTLE:-1.5}" \
  "${KINDS:-noreport report json perf perf+script}" <<'EOF'
import os, statistics, subprocess, sys, time
hpctl, sock, hpd, spin, work, runs, duration, settle, kinds = sys.argv[1:10]
hpd, runs, settle = int(hpd), int(runs), float(settle)
kinds = kinds.split()
clock = (~hpd << 3) | 2  # the process CPU clock of hpd (CPUCLOCK_SCHED of its pid)

def hpd_cpu():
    return time.clock_gettime_ns(clock)

def run(argv):  # the command's own CPU (rusage), in ns; its output discarded
    with open(os.devnull, "w") as null:
        p = subprocess.Popen(argv, stdout=null, stderr=null)
        _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"{argv[0]} failed ({status}): {' '.join(argv)}")
    return int((ru.ru_utime + ru.ru_stime) * 1e9)

hpd_cmd = {
    "noreport": ["-o", f"{work}/x.hpr", "--no-report"],
    "report": ["-o", f"{work}/x.hpr"],
    "json": ["-o", f"{work}/x.json.gz"],
}
res = {k: {"hpd": [], "client": [], "idle": []} for k in kinds}
for _ in range(runs):
    for k in kinds:
        r = res[k]
        if k in hpd_cmd:
            c0, w0 = hpd_cpu(), time.monotonic()
            r["client"].append(run([hpctl, "--socket", sock, "record", "-q", "--pid", spin, "-d", duration]
                                   + hpd_cmd[k]))
            time.sleep(settle)
            used, wall = hpd_cpu() - c0, time.monotonic() - w0
            i0 = hpd_cpu()
            time.sleep(wall)
            idle = hpd_cpu() - i0
            r["idle"].append(idle)
            r["hpd"].append(used - idle)
        else:
            cpu = run(["perf", "record", "-q", "-g", "-F", "999", "-p", spin, "-o", f"{work}/perf.data",
                       "--", "sleep", duration])
            if k == "perf+script":
                cpu += run(["perf", "script", "-i", f"{work}/perf.data"])
            r["client"].append(cpu)

def fmt(v):
    if not v:
        return "-"
    return f"{statistics.median(v) / 1e6:.1f} ({min(v) / 1e6:.1f}-{max(v) / 1e6:.1f})"

print(f"runs={runs}, -d {duration}, CPU ms, median (min-max); load average {os.getloadavg()[0]:.1f}")
print(f"{'kind':<12} {'hpd':>24} {'client (or perf)':>24} {'total':>24} {'hpd idle in window':>22}")
for k in kinds:
    r = res[k]
    tot = [a + b for a, b in zip(r["hpd"], r["client"])] if r["hpd"] else r["client"]
    print(f"{k:<12} {fmt(r['hpd']):>24} {fmt(r['client']):>24} {fmt(tot):>24} {fmt(r['idle']):>22}")
EOF
