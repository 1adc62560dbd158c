#!/bin/bash
# The cost per call of `hpctl record --calls --pid` (uprobes on a running process's mcount/__fentry__
# NOP sites), three ways: "counted", the NOP after the prologue (-pg -mnop-mcount: one entry probe);
# "entry", the NOP at the function's first instruction (-pg -mfentry -mnop-mcount) recorded without
# --call-latency (one entry probe, counted only, the default); "timed", the same build recorded with
# --call-latency (entry and return probes, uprobe session). bench/calls_pid_cost.c times 11 rounds of
# calls of an empty function on its thread's CPU clock before and after the attach and prints the
# medians per call. Repeated RUNS times per way; the median of each column is printed, with the
# recording's "complete stacks" line of each run (the share of on-CPU samples whose stack reached its
# root: a pending return probe replaces a return address) and the load average before and after.
# Usage: bench/calls_pid_cost.sh BUILD_DIR [RUNS] [CALLS_PER_ROUND]   (as root)
set -euo pipefail
build=${1:?usage: calls_pid_cost.sh BUILD_DIR [RUNS] [CALLS_PER_ROUND]}
runs=${2:-5}
calls=${3:-200000}
hpctl=$build/cli/hpctl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$(dirname "$0")/calls_pid_cost.c"
# Compiled with the instrumentation, linked without -pg (glibc's gprof stays off, as in the tests).
gcc -O2 -g -pg -mfentry -mnop-mcount -mrecord-mcount -fno-pie -c -o "$work/timed.o" "$src"
gcc -O2 -g -pg -mnop-mcount -mrecord-mcount -fno-pie -c -o "$work/counted.o" "$src"
gcc -no-pie -o "$work/timed" "$work/timed.o"
gcc -no-pie -o "$work/counted" "$work/counted.o"
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "$calls calls a round, 11 rounds, $runs runs per build; $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
for way in counted entry timed; do
  build_kind=$way flags=()
  [ "$way" = counted ] || build_kind=timed
  [ "$way" = timed ] && flags=(--call-latency)
  plain=() probed=() added=() stacks=()
  for run in $(seq "$runs"); do
    rm -f "$work/ready" "$work/done"
    "$work/$build_kind" "$work" "$calls" > "$work/out" &
    target=$!
    while [ ! -e "$work/ready" ]; do sleep 0.05; done
    "$hpctl" --local record --no-report --calls "${flags[@]}" -o "$work/r.hpr" --pid "$target" 2> "$work/hpctl.err" &
    recorder=$!
    while [ ! -e "$work/done" ] && kill -0 "$target" 2> /dev/null; do sleep 0.05; done
    kill -INT "$recorder"
    wait "$recorder" || { cat "$work/hpctl.err"; exit 1; }
    wait "$target"
    read -r _ p _ q < "$work/out"
    plain+=("$p") probed+=("$q") added+=("$(awk -v p="$p" -v q="$q" 'BEGIN {printf "%.1f", q - p}')")
    stacks+=("$(tr '\r' '\n' < "$work/hpctl.err" | grep -o 'on-CPU [0-9.]*%' | head -1 | cut -d' ' -f2)")
  done
  printf '%-8s unprobed %s ns, probed %s ns, added %s ns per call (added, per run: %s); stacks complete, per run: %s\n' \
    "$way" "$(printf '%s\n' "${plain[@]}" | median)" "$(printf '%s\n' "${probed[@]}" | median)" \
    "$(printf '%s\n' "${added[@]}" | median)" "${added[*]}" "${stacks[*]}"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
