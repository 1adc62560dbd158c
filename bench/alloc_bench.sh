#!/bin/bash
# The cost of `hpctl record --alloc` on two allocation-heavy programs, beside heaptrack's on the same
# programs in the same run:
#   alloc_churn (bench/alloc_churn.c): malloc/free of 16 B - 4 KiB blocks in a loop, 64 live;
#   map_churn (bench/alloc_map_churn.cpp): std::map inserts and erases (operator new and delete of
#   48-byte nodes), about 4,096 live.
# Each program measures its own CPU time (CLOCK_PROCESS_CPUTIME_ID, the "cpu_ms" it prints): alone,
# recorded without --alloc, with --alloc at the default mean (512 KiB), and under heaptrack; the
# configurations take turns within each run (alone, record, --alloc, heaptrack, alone, ...) so that a
# drift of the machine's speed hits them alike. Printed per configuration: the median of the program's
# CPU, the median of its per-run ratio to the run's "alone", and the median CPU of all the processes of
# the run (user + sys of the command and its children: hpctl, or heaptrack's interpreter and
# compressor, beside the program).
# Usage: bench/alloc_bench.sh BUILD_DIR [RUNS] [CHURN_ROUNDS] [MAP_ROUNDS]   (as root: hpctl records locally)
#   ALLOC_BENCH_DENSE=1 adds `--alloc --alloc-mean 4096` (alloc_churn: 2 million samples, the cost of a sample).
#   ALLOC_BENCH_OTHER_RUNTIME=PATH adds `--alloc` with the runtime PATH (HPD_CALLS_RUNTIME, e.g. another
#   build's libhpdcalls.so): two runtimes A/B in the same runs.
set -euo pipefail
build=${1:?usage: alloc_bench.sh BUILD_DIR [RUNS] [CHURN_ROUNDS] [MAP_ROUNDS]}
runs=${2:-5}
churn_rounds=${3:-10000000}
map_rounds=${4:-5000000}
hpctl=$build/cli/hpctl
here=$(dirname "$0")
command -v heaptrack >/dev/null || { echo "alloc_bench: heaptrack is missing (packaging/install-deps.sh installs it)" >&2; exit 1; }
[ -x "$hpctl" ] || { echo "alloc_bench: no hpctl at $hpctl (build the hpctl target)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -o "$work/alloc_churn" "$here/alloc_churn.c"
g++ -O2 -g -o "$work/map_churn" "$here/alloc_map_churn.cpp"

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

labels=("alone" "hpctl record" "hpctl record --alloc (512 KiB)" "heaptrack")
[ "${ALLOC_BENCH_DENSE:-0}" = 1 ] && labels+=("hpctl record --alloc-mean 4096")
other_runtime=${ALLOC_BENCH_OTHER_RUNTIME:-}
if [ -n "$other_runtime" ]; then
  [ -f "$other_runtime" ] || { echo "alloc_bench: no runtime at $other_runtime" >&2; exit 1; }
  labels+=("--alloc, other runtime")
fi

# run_config INDEX PROGRAM ARGS...: prints "PROGRAM_CPU_MS ALL_CPU_S" of one run of the configuration.
run_config() {
  local i=$1; shift
  local cmd
  case $i in
    0) cmd=("$@") ;;
    1) cmd=("$hpctl" --local record -q --no-report -o "$work/r.hpr" -- "$@") ;;
    2) cmd=("$hpctl" --local record -q --no-report --alloc -o "$work/a.hpr" -- "$@") ;;
    3) cmd=(heaptrack -o "$work/ht" "$@") ;;
    4) cmd=("$hpctl" --local record -q --no-report --alloc --alloc-mean 4096 -o "$work/d.hpr" -- "$@") ;;
  esac
  [ "${labels[$i]}" = "--alloc, other runtime" ] &&
    cmd=(env HPD_CALLS_RUNTIME="$other_runtime" "$hpctl" --local record -q --no-report --alloc -o "$work/o.hpr" -- "$@")
  /usr/bin/time -f 'all_cpu %U %S' -o "$work/time" "${cmd[@]}" >"$work/out" 2>"$work/err" ||
    { cat "$work/err" >&2; exit 1; }
  rm -f "$work"/ht.* "$work"/*.hpr
  local ms
  ms=$(sed -n 's/.*cpu_ms \([0-9.]*\).*/\1/p' "$work/out")
  [ -n "$ms" ] || { echo "alloc_bench: no cpu_ms from ${cmd[*]}" >&2; cat "$work/out" "$work/err" >&2; exit 1; }
  echo "$ms $(awk '/all_cpu/ {printf "%.3f", $2 + $3}' "$work/time")"
}

bench() {
  local name=$1; shift
  local r i
  for r in $(seq "$runs"); do
    for i in "${!labels[@]}"; do
      run_config "$i" "$@" >"$work/$name.$i.$r"
    done
  done
  echo "$name ${*: -1} rounds: median of $runs runs"
  printf '  %-32s %12s %10s %14s\n' "" "program CPU" "x alone" "all processes"
  for i in "${!labels[@]}"; do
    local cpu ratio all
    cpu=$(for r in $(seq "$runs"); do cut -d' ' -f1 "$work/$name.$i.$r"; done | median)
    ratio=$(for r in $(seq "$runs"); do
      echo "$(cut -d' ' -f1 "$work/$name.$i.$r") $(cut -d' ' -f1 "$work/$name.0.$r")" | awk '{printf "%.4f\n", $1 / $2}'
    done | median)
    all=$(for r in $(seq "$runs"); do cut -d' ' -f2 "$work/$name.$i.$r"; done | median)
    printf '  %-32s %9s ms %9sx %12s s\n' "${labels[$i]}" "$cpu" "$ratio" "$all"
    echo "    program CPU ms per run: $(for r in $(seq "$runs"); do cut -d' ' -f1 "$work/$name.$i.$r"; done | tr '\n' ' ')"
  done
}

echo "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(heaptrack --version 2>&1 | head -1)"
bench alloc_churn "$work/alloc_churn" "$churn_rounds"
bench map_churn "$work/map_churn" "$map_rounds"
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
