#!/usr/bin/env bash
# Overhead on the target of the eBPF backend, the perf_event backend and `perf record -g`, at several
# sampling rates, as ratios against an unprofiled run; then the recorder's own CPU per sample and peak
# memory at the highest rate with a target that keeps both CPUs busy.
#
# The target is the cpu_split fixture doing fixed work (--rounds N); its time is its own
# (clock_gettime around the work), so recorder start-up and post-processing are not counted. Runs are
# interleaved (unprofiled, bpf, perf backend, perf record) RUNS times per rate; medians are printed.
# The backends are driven through hpd_record_driver (tests/bpf), which calls hpd::record().
# The call graph is named, not left to --call-graph auto: CALL_GRAPH=fp (the default) compares the
# backends in fp mode with `perf record -g`, CALL_GRAPH=dwarf in dwarf mode with
# `perf record --call-graph dwarf` (both copy user stack per sample), CALL_GRAPH=cfi the eBPF backend's
# in-kernel CFI walk with `perf record -g` (the perf backend, which has no cfi mode, runs dwarf then).
# Usage: [CALL_GRAPH=fp|dwarf|cfi] bench/overhead_backends.sh [BUILD_DIR] [RUNS] [ROUNDS] [RATES...]
set -euo pipefail
call_graph=${CALL_GRAPH:-fp}
case "$call_graph" in
  fp) perf_call_graph=(-g) ;;
  dwarf) perf_call_graph=(--call-graph dwarf) ;;
  cfi) perf_call_graph=(-g) ;;
  *) echo "CALL_GRAPH must be fp, dwarf or cfi, not '$call_graph'" >&2; exit 2 ;;
esac
build=${1:-build}
runs=${2:-5}
rounds=${3:-3000}
shift $(( $# > 3 ? 3 : $# ))
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(99 999 4999)
fixture="$build/fixtures/cpu_split"
two_threads="$build/fixtures/threads"
driver="$build/tests/bpf/hpd_record_driver"
floor="$build/bench/timer_floor"
for f in "$fixture" "$two_threads" "$driver" "$floor"; do
  [ -x "$f" ] || { echo "missing $f: build the cpu_split, threads, hpd_record_driver and timer_floor targets" >&2; exit 1; }
done
have_perf=1
command -v perf >/dev/null || have_perf=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

timeit() {  # runs "$@" and prints the target's own run time and CPU time, as the fixture reports them
  "$@" 2>/dev/null | sed -n 's/^cpu_split: .* rounds in \([0-9.]*\) s, cpu \([0-9.]*\) s.*$/\1 \2/p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# The fixture's CPU time is its sum_exec_runtime, which also holds the interrupt handling done while it
# ran (the sampling, the eBPF program, the kernel's callchain walk) when the kernel is built without
# CONFIG_IRQ_TIME_ACCOUNTING, as Debian's is: the overhead on the target without the waiting for a CPU
# that makes wall times noisy on a busy machine.
printf 'Target overhead: cpu_split --rounds %d, --call-graph %s, median of %d interleaved runs, load %s\n' \
  "$rounds" "$call_graph" "$runs" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '(ratio = profiled / unprofiled; wall = the fixture'"'"'s run time, cpu = its CPU time)\n'
printf '%7s %5s  %10s  %16s  %16s  %16s\n' "rate Hz" "" "unprofiled" "bpf backend" "perf backend" "perf record ${perf_call_graph[*]}"
for freq in "${rates[@]}"; do
  base=() bpf=() pfb=() prec=()
  for ((i = 0; i < runs; i++)); do
    base+=("$(timeit "$fixture" --rounds "$rounds")")
    bpf+=("$(timeit "$driver" --quiet --backend bpf --call-graph "$call_graph" -F "$freq" -- "$fixture" --rounds "$rounds")")
    pfb+=("$(timeit "$driver" --quiet --backend perf --call-graph "${call_graph/cfi/dwarf}" -F "$freq" -- "$fixture" --rounds "$rounds")")
    if ((have_perf)); then
      prec+=("$(timeit perf record -q "${perf_call_graph[@]}" -F "$freq" -o "$tmp/perf.data" -- "$fixture" --rounds "$rounds")")
    fi
  done
  for column in 1 2; do
    pick() { for pair in "$@"; do cut -d' ' -f"$column" <<<"$pair"; done; }
    # shellcheck disable=SC2046  # one word per run
    mb=$(median $(pick "${base[@]}"))
    cell() { printf '%7.3f s %6.4f' "$1" "$(echo "$1 / $mb" | bc -l)"; }
    mp="n/a"
    # shellcheck disable=SC2046
    ((have_perf)) && mp=$(cell "$(median $(pick "${prec[@]}"))")
    # shellcheck disable=SC2046
    printf '%7d %5s  %8.3f s  %16s  %16s  %16s\n' "$freq" "$([ $column = 1 ] && echo wall || echo cpu)" "$mb" \
      "$(cell "$(median $(pick "${bpf[@]}"))")" "$(cell "$(median $(pick "${pfb[@]}"))")" "$mp"
  done
done

# The floor: a task-clock event that fires at the rate and records nothing (bench/timer_floor.c). No
# sampler can cost the target less per sample than the interrupt itself.
printf '\nFloor: the sampling interrupt alone (timer_floor, CPU-time ratio), median of %d runs\n' "$runs"
for freq in "${rates[@]}"; do
  # shellcheck disable=SC2046  # one word per run
  printf '%7d   %6.4f\n' "$freq" "$(median $("$floor" "$freq" 3000 "$runs" | cut -d' ' -f3))"
done

top=${rates[-1]}
printf '\nRecorder cost at %d Hz, target "threads 3 0" (two spinning threads, both CPUs), median of %d runs\n' \
  "$top" "$runs"
printf '%-14s %12s %16s %14s %12s\n' backend samples "us/sample(loop)" "total cpu ms" "peak RSS KiB"
for backend in bpf perf; do
  samples=() per=() cpu=() rss=()
  for ((i = 0; i < runs; i++)); do
    cg=$call_graph; [ "$backend" = perf ] && cg=${cg/cfi/dwarf}
    line=$("$driver" --backend "$backend" --call-graph "$cg" -F "$top" -- "$two_threads" 3 0 2>&1 >/dev/null | grep '^hpd_record_driver:')
    get() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
    samples+=("$(get samples)") per+=("$(get collection_us_per_sample)") cpu+=("$(get recorder_cpu_ms)")
    rss+=("$(get peak_rss_kb)")
  done
  printf '%-14s %12s %16s %14s %12s\n' "$backend" "$(median "${samples[@]}")" "$(median "${per[@]}")" \
    "$(median "${cpu[@]}")" "$(median "${rss[@]}")"
done
if ((have_perf)); then
  # perf record attached by pid, so that /usr/bin/time counts perf alone and not its target.
  cpu=() rss=()
  for ((i = 0; i < runs; i++)); do
    "$two_threads" 3 0 >/dev/null &
    target=$!
    out=$(/usr/bin/time -f 'TIME %U %S %M' perf record -q "${perf_call_graph[@]}" -F "$top" -o "$tmp/perf.data" -p "$target" 2>&1 >/dev/null | grep '^TIME' || true)
    wait "$target" || true
    cpu+=("$(awk '{print ($2 + $3) * 1000}' <<<"$out")") rss+=("$(awk '{print $4}' <<<"$out")")
  done
  printf '%-14s %12s %16s %14s %12s\n' "perf record" "-" "-" "$(median "${cpu[@]}")" "$(median "${rss[@]}")"
fi
