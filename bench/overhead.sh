#!/usr/bin/env bash
# Overhead of recording on the target: the cpu_split fixture doing fixed work (--rounds N),
# run unprofiled, under `hpctl record`, and under `perf record -g`, interleaved, RUNS times each.
# The time is the fixture's own (clock_gettime around its work), so the recorder's start-up and
# post-processing are not counted. Prints the median run time of each and the ratios to the unprofiled run.
# Usage: bench/overhead.sh [BUILD_DIR] [RUNS] [ROUNDS] [FREQ]
set -euo pipefail
build=${1:-build}
runs=${2:-7}
rounds=${3:-10000}
freq=${4:-999}
fixture="$build/fixtures/cpu_split"
hpctl="$build/cli/hpctl"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

timeit() {  # runs "$@" and prints the target's own run time, as the fixture reports it
  "$@" 2>/dev/null | sed -n 's/^cpu_split: .* rounds in \([0-9.]*\) s,.*$/\1/p'
}

declare -a base hp pf
for ((i = 0; i < runs; i++)); do
  base+=("$(timeit "$fixture" --rounds "$rounds")")
  hp+=("$(timeit "$hpctl" record -q --no-report -F "$freq" -o "$tmp/h.json.gz" -- "$fixture" --rounds "$rounds")")
  pf+=("$(timeit perf record -q -g -F "$freq" -o "$tmp/perf.data" -- "$fixture" --rounds "$rounds")")
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mb=$(median "${base[@]}")
mh=$(median "${hp[@]}")
mp=$(median "${pf[@]}")
printf 'runs=%d rounds=%d freq=%d Hz\n' "$runs" "$rounds" "$freq"
printf '%-28s %8.3f s  ratio %.3f\n' "unprofiled" "$mb" 1
printf '%-28s %8.3f s  ratio %.3f\n' "hpctl record" "$mh" "$(echo "$mh / $mb" | bc -l)"
printf '%-28s %8.3f s  ratio %.3f\n' "perf record -g" "$mp" "$(echo "$mp / $mb" | bc -l)"
