#!/usr/bin/env bash
# Target slowdown of `hpctl record` end to end, side by side with perf in one run: the fixture doing
# fixed work (--rounds N) unprofiled, under `hpctl record` with default flags (eBPF, --call-graph auto:
# the in-kernel CFI walk), `hpctl record --call-graph fp`, `perf record -g` and
# `perf record --call-graph dwarf`, interleaved, RUNS times per rate. Prints medians of the fixture's
# own wall and CPU time and their ratios to the unprofiled run.
#
# The times are the fixture's own (clock_gettime around its work: "cpu_split: N rounds in W s, cpu C s"),
# so no recorder's start-up or post-processing is counted. The default fixture is cpu_split built as
# users build (-O2 -g, no frame-pointer flags: fixtures/cpu_split_nofp) over Debian's glibc, which has
# no frame pointers either; FIXTURE=path picks another program that prints the same line.
# The CPU time is the fixture's sum_exec_runtime, which holds the sampling interrupts and the eBPF
# program (Debian's kernel has no CONFIG_IRQ_TIME_ACCOUNTING): on a loaded machine the CPU ratio is the
# one to read, wall times also hold the waiting for a CPU.
# hpctl records in its own process (--local), so no daemon is needed; no other recording should run
# meanwhile (perf record misbehaves next to an `hpctl record --all`).
# Usage: [FIXTURE=path] bench/overhead.sh [BUILD_DIR] [RUNS] [ROUNDS] [RATES...]
set -euo pipefail
build=${1:-build}
runs=${2:-5}
rounds=${3:-3000}
shift $(( $# > 3 ? 3 : $# ))
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(999 4999)
fixture=${FIXTURE:-$build/fixtures/cpu_split_nofp}
hpctl="$build/cli/hpctl"
for f in "$fixture" "$hpctl"; do
  [ -x "$f" ] || { echo "missing $f: build the cpu_split_nofp and hpctl targets" >&2; exit 1; }
done
command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

timeit() {  # runs "$@" and prints the target's own wall and CPU time, as the fixture reports them
  local line
  line=$("$@" 2>/dev/null | sed -n 's/^cpu_split: .* rounds in \([0-9.]*\) s, cpu \([0-9.]*\) s.*$/\1 \2/p')
  [ -n "$line" ] || { echo "no time from: $*" >&2; exit 1; }
  echo "$line"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

names=("unprofiled" "hpctl record" "hpctl --call-graph fp" "perf record -g" "perf --call-graph dwarf")
run_column() {  # column index, rate
  case $1 in
    0) timeit "$fixture" --rounds "$rounds" ;;
    1) timeit "$hpctl" record --local -q --no-report -F "$2" -o "$tmp/h.hpr" -- "$fixture" --rounds "$rounds" ;;
    2) timeit "$hpctl" record --local -q --no-report --call-graph fp -F "$2" -o "$tmp/h.hpr" -- \
         "$fixture" --rounds "$rounds" ;;
    3) timeit perf record -q -g -F "$2" -o "$tmp/perf.data" -- "$fixture" --rounds "$rounds" ;;
    4) timeit perf record -q --call-graph dwarf -F "$2" -o "$tmp/perf.data" -- "$fixture" --rounds "$rounds" ;;
  esac
}

printf 'Target slowdown: %s --rounds %d, median of %d interleaved runs, load at start %s\n' \
  "$(basename "$fixture")" "$rounds" "$runs" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '(ratio = profiled / unprofiled; wall = the fixture'"'"'s run time, cpu = its CPU time)\n'
printf '%7s %4s' "rate Hz" ""
for name in "${names[@]}"; do printf '  %22s' "$name"; done
printf '\n'
for freq in "${rates[@]}"; do
  declare -a results=()
  for ((i = 0; i < runs; i++)); do
    # The columns' order turns from run to run, so that no column always follows the same one.
    for ((k = 0; k < ${#names[@]}; k++)); do
      c=$(( (k + i) % ${#names[@]} ))
      results[$c]+="$(run_column "$c" "$freq" | tr ' ' ,) "
    done
  done
  for field in 1 2; do
    # shellcheck disable=SC2086  # one word per run
    base=$(median $(printf '%s\n' ${results[0]} | cut -d, -f"$field"))
    printf '%7d %4s' "$freq" "$([ $field = 1 ] && echo wall || echo cpu)"
    for ((c = 0; c < ${#names[@]}; c++)); do
      # shellcheck disable=SC2086
      m=$(median $(printf '%s\n' ${results[$c]} | cut -d, -f"$field"))
      printf '  %9.3f s  x %7.4f' "$m" "$(echo "$m / $base" | bc -l)"
    done
    printf '\n'
  done
done
printf 'load at end %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
