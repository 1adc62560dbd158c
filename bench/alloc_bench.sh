#!/bin/bash
# The cost of `hpctl record --alloc` on an allocation-heavy program (bench/alloc_churn.c: malloc/free of
# 16 B - 4 KiB blocks in a loop), as the CPU time the program measures itself: alone, recorded without
# --alloc, and recorded with --alloc at the default mean (512 KiB) and at a dense one (4 KiB).
# Usage: bench/alloc_bench.sh BUILD_DIR [RUNS] [ROUNDS]    (as root: hpctl records locally)
set -euo pipefail
build=${1:?usage: alloc_bench.sh BUILD_DIR [RUNS] [ROUNDS]}
runs=${2:-5}
rounds=${3:-20000000}
hpctl=$build/cli/hpctl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -o "$work/alloc_churn" "$(dirname "$0")/alloc_churn.c"

cpu_ms() { sed -n 's/.*cpu_ms \([0-9.]*\).*/\1/p'; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

measure() {
  local label=$1; shift
  local values=()
  for _ in $(seq "$runs"); do
    values+=("$("$@" | cpu_ms)")
  done
  printf '%-34s %s ms (median of %s: %s)\n' "$label" "$(printf '%s\n' "${values[@]}" | median)" "$runs" "${values[*]}"
}

echo "alloc_churn $rounds allocations, $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
measure "alone" "$work/alloc_churn" "$rounds"
measure "hpctl record" "$hpctl" --local record -q --no-report -o "$work/a.hpr" -- "$work/alloc_churn" "$rounds"
measure "hpctl record --alloc (512 KiB)" "$hpctl" --local record -q --no-report --alloc -o "$work/b.hpr" -- \
  "$work/alloc_churn" "$rounds"
measure "hpctl record --alloc-mean 4096" "$hpctl" --local record -q --no-report --alloc --alloc-mean 4096 \
  -o "$work/c.hpr" -- "$work/alloc_churn" "$rounds"
