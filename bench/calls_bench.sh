#!/usr/bin/env bash
# Nanoseconds added per instrumented call by `hpctl record --calls`, with hpd's in-process runtime
# (counts and times every call) and with uprobes (counts only), against the unprobed run, uftrace
# (record) and the kernel's uprobe floor (bpftrace, an empty program on the nop5 of `callee`). Each fixture calls callee() N times; the fixture itself times its calls
# (HPD_CALLS_TIME=1 prints calls_ns), so start-up, attach and exit are not in the figures.
# Usage: bench/calls_bench.sh [BUILD_DIR] [RUNS] [N]     (as root; medians of RUNS runs)
# With HPD_BENCH_SOCKET=PATH (a running hpd) and HPD_BENCH_USER=NAME, a row more: the runtime through
# hpd, recorded by that user (hpctl --daemon, which preloads the runtime and hands hpd its table).
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-5}
N=${3:-200000}
FIX=$BUILD/tests/collect/calls/fixtures
HPCTL=$BUILD/cli/hpctl
TMP=$(mktemp -d)
chmod 1777 "$TMP"  # the HPD_BENCH_USER row writes there
trap 'rm -rf "$TMP"' EXIT
export HPD_CALLS_TIME=1

calls_ns() { grep -o 'calls_ns [0-9]*' "$1" | tail -1 | cut -d' ' -f2; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2] + a[NR/2+1]) / 2)}'; }
per_call() { awk -v t="$1" -v b="$2" -v n="$N" 'BEGIN {printf "%.0f", (t - b) / n}'; }

run_plain() { "$FIX/$1" "$N" 0 1 >/dev/null 2>"$TMP/err"; calls_ns "$TMP/err"; }
run_hpd() {  # FIXTURE COUNTER
  "$HPCTL" --local record --calls --calls-counter "$2" --no-report -q -F 10 -o "$TMP/p.json.gz" -- "$FIX/$1" "$N" 0 1 \
    >/dev/null 2>"$TMP/err"
  calls_ns "$TMP/err"
}
run_via_hpd() {  # FIXTURE: as $HPD_BENCH_USER through the hpd at $HPD_BENCH_SOCKET
  setpriv --reuid="$HPD_BENCH_USER" --regid="$HPD_BENCH_USER" --init-groups env HPD_CALLS_TIME=1 \
    "$HPCTL" --socket "$HPD_BENCH_SOCKET" --daemon record --calls --no-report -q -F 10 -o "$TMP/d.json.gz" \
    -- "$FIX/$1" "$N" 0 1 >/dev/null 2>"$TMP/err"
  calls_ns "$TMP/err"
}
run_uftrace() {
  uftrace record -d "$TMP/uftrace.data" "$FIX/$1" "$N" 0 1 >/dev/null 2>"$TMP/err"
  calls_ns "$TMP/err"
}
run_floor() {
  bpftrace -e "uprobe:$FIX/gcc_nop:callee { }" >/dev/null 2>&1 &
  local bt=$!
  sleep 3  # bpftrace attaches within a second or two on this machine
  "$FIX/gcc_nop" "$N" 0 1 >/dev/null 2>"$TMP/err"
  kill -INT $bt; wait $bt 2>/dev/null || true
  calls_ns "$TMP/err"
}

printf "%-14s %-26s %10s %10s\n" fixture probe "median ns" "+ns/call"
for fx in gcc_nop gcc_fentry gcc_pg clang_fentry clang_pg rust_mcount; do
  [ -x "$FIX/$fx" ] || continue
  base=$(for _ in $(seq "$RUNS"); do run_plain "$fx"; done | median)
  printf "%-14s %-26s %10s %10s\n" "$fx" "none" "$base" "-"
  t=$(for _ in $(seq "$RUNS"); do run_hpd "$fx" runtime; done | median)
  printf "%-14s %-26s %10s %10s\n" "$fx" "hpd runtime (in-process)" "$t" "$(per_call "$t" "$base")"
  if [ -n "${HPD_BENCH_SOCKET:-}" ] && [ -n "${HPD_BENCH_USER:-}" ]; then
    t=$(for _ in $(seq "$RUNS"); do run_via_hpd "$fx"; done | median)
    printf "%-14s %-26s %10s %10s\n" "$fx" "hpd runtime, user via hpd" "$t" "$(per_call "$t" "$base")"
  fi
  probe=$([ "$fx" = gcc_nop ] && echo "hpd uprobes nop5" || echo "hpd uprobes __mcount_int.")
  t=$(for _ in $(seq "$RUNS"); do run_hpd "$fx" uprobes; done | median)
  printf "%-14s %-26s %10s %10s\n" "$fx" "$probe" "$t" "$(per_call "$t" "$base")"
  if [ "$fx" != gcc_nop ] && command -v uftrace >/dev/null; then
    t=$(for _ in $(seq "$RUNS"); do run_uftrace "$fx"; done | median)
    printf "%-14s %-26s %10s %10s\n" "$fx" "uftrace record" "$t" "$(per_call "$t" "$base")"
  fi
  if [ "$fx" = gcc_nop ] && command -v bpftrace >/dev/null; then
    t=$(for _ in $(seq "$RUNS"); do run_floor; done | median)
    printf "%-14s %-26s %10s %10s\n" "$fx" "floor: bpftrace empty nop5" "$t" "$(per_call "$t" "$base")"
  fi
done
