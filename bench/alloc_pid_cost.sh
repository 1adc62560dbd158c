#!/bin/bash
# The cost per allocator call of `hpctl record --alloc --pid` (uprobes in session mode on malloc and
# free of a running process), side by side with the same calls unprobed: bench/alloc_pid_cost.c times
# 11 rounds of malloc(64)/free pairs on its thread's CPU clock before and after the attach and prints
# the medians per call. Repeated RUNS times; the median of each column is printed.
# Usage: bench/alloc_pid_cost.sh BUILD_DIR [RUNS] [CALLS_PER_ROUND] [MEAN]   (as root)
set -euo pipefail
build=${1:?usage: alloc_pid_cost.sh BUILD_DIR [RUNS] [CALLS_PER_ROUND] [MEAN]}
runs=${2:-5}
calls=${3:-200000}
mean=${4:-524288}
hpctl=$build/cli/hpctl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -o "$work/alloc_pid_cost" "$(dirname "$0")/alloc_pid_cost.c"
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

plain=() probed=()
for run in $(seq "$runs"); do
  rm -f "$work/ready" "$work/done"
  "$work/alloc_pid_cost" "$work" "$calls" > "$work/out" &
  target=$!
  while [ ! -e "$work/ready" ]; do sleep 0.05; done
  "$hpctl" --local record -q --no-report --alloc --alloc-mean "$mean" -o "$work/r.hpr" --pid "$target" \
    2> "$work/hpctl.err" &
  recorder=$!
  while [ ! -e "$work/done" ] && kill -0 "$target" 2> /dev/null; do sleep 0.05; done
  kill -INT "$recorder"
  wait "$recorder" || { cat "$work/hpctl.err"; exit 1; }
  wait "$target"
  read -r _ p _ q < "$work/out"
  plain+=("$p") probed+=("$q")
done
echo "malloc(64)/free, $calls pairs a round, 11 rounds, $runs runs; mean $mean B; $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
printf 'unprobed  %s ns per call (medians of runs: %s)\n' "$(printf '%s\n' "${plain[@]}" | median)" "${plain[*]}"
printf 'probed    %s ns per call (medians of runs: %s)\n' "$(printf '%s\n' "${probed[@]}" | median)" "${probed[*]}"
