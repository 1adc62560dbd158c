#!/usr/bin/env bash
# The eBPF backend's own cost per sample, measured by the kernel: with kernel.bpf_stats_enabled=1 the
# kernel times every run of every BPF program, and hpd_record_driver prints the sampling program's
# run count and ns per run (and the sched_switch program's) from bpf_prog_info.
#
# The figure is a per-run average, so the runs should be target samples: the cpu_split fixture runs
# pinned to CPU 1 at SCHED_FIFO priority 10 (it then owns that CPU except for the kernel's 5% RT
# reserve), so a busy machine neither starves it nor mixes other tasks' cheap filtered-out runs into
# the average. CPU 0 still runs the program for whatever runs there (about half the runs, at the cost
# of the filter only, ~0.2 us). "ns/sample" is all the program's time over the target's samples
# (ns_per_run * runs / samples, medians), so it includes that filtering on the other CPU.
#
# Variants are passed as hpd_record_driver options; runs are interleaved; medians and minimums of
# ns per run are printed. The sysctl is restored on exit.
# FIXTURE=path runs another program (argument: seconds) instead of cpu_split, e.g. the cfi tests'
# sort_format (glibc's qsort and snprintf under a frame-pointer program) to compare call graphs:
#   FIXTURE=build/tests/bpf/cfi/sort_format bench/overhead_bpf_programs.sh build 5 999 2 \
#     -- --call-graph fp -- --call-graph cfi -- --call-graph dwarf
# or bench/deep_chain.cpp's C++ chains of 10, 40 and 90 frames (build/bench/deep_chain_40, ...) for
# the walks' cost against depth.
# "bytes/sample" is the ring bytes per on-CPU sample (records read over samples).
# A variant whose first word is driver=PATH runs that hpd_record_driver (another build's) instead, for an
# A/B of two builds in one run.
# Usage: bench/overhead_bpf_programs.sh [BUILD_DIR] [RUNS] [RATE] [SECONDS] [-- OPTIONS ...]...
#   e.g. bench/overhead_bpf_programs.sh build 5 4999 2 -- -- --no-kernel -- --ring-pages 2048
#        bench/overhead_bpf_programs.sh build 5 4999 2 -- driver=/work/old/hpd_record_driver --
set -euo pipefail
build=${1:-build}
runs=${2:-5}
rate=${3:-4999}
seconds=${4:-2}
shift $(( $# > 4 ? 4 : $# ))
variants=()
current=""
started=0
for arg in "$@"; do
  if [ "$arg" = "--" ]; then
    ((started)) && variants+=("$current")
    current="" started=1
  else
    current+="${current:+ }$arg"
  fi
done
((started)) && variants+=("$current")
[ ${#variants[@]} -eq 0 ] && variants=("")
fixture="${FIXTURE:-$build/fixtures/cpu_split}"
driver="$build/tests/bpf/hpd_record_driver"
for f in "$fixture" "$driver"; do
  [ -x "$f" ] || { echo "missing $f: build the cpu_split and hpd_record_driver targets" >&2; exit 1; }
done
[ "$(nproc)" -ge 2 ] || { echo "needs two CPUs (the target is pinned to CPU 1)" >&2; exit 1; }
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled="$old_stats"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1

per_run=() samples_of=() runs_of=() bytes_of=()
for ((i = 0; i < runs; i++)); do
  for k in "${!variants[@]}"; do
    v=${variants[$k]}
    run_driver=$driver
    if [[ $v == driver=* ]]; then
      run_driver=${v%% *}
      run_driver=${run_driver#driver=}
      [[ $v == *" "* ]] && v=${v#* } || v=""
    fi
    # shellcheck disable=SC2086  # the variant's options are words
    line=$("$run_driver" --backend bpf -F "$rate" --no-off-cpu --call-graph fp $v -- \
      taskset -c 1 chrt -f 10 "$fixture" "$seconds" 2>&1 >/dev/null | grep '^hpd_record_driver:')
    get() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
    per_run[$k]+="$(get bpf_sample_ns_per_run) "
    samples_of[$k]+="$(get samples) "
    runs_of[$k]+="$(get bpf_sample_runs) "
    bytes_of[$k]+="$(get bytes_per_sample) "
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf 'hpd_on_cpu at %d Hz, %s pinned to CPU 1 (SCHED_FIFO), %d interleaved runs, load: %s\n' \
  "$rate" "$(basename "$fixture")" "$runs" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-36s %10s %10s %10s %10s %10s %12s\n' options "ns/run med" "ns/run min" samples runs ns/sample \
  bytes/sample
for k in "${!variants[@]}"; do
  v=${variants[$k]}
  # shellcheck disable=SC2086
  ns=$(median ${per_run[$k]}) n=$(median ${samples_of[$k]}) r=$(median ${runs_of[$k]})
  printf '%-36s %10.1f %10.1f %10s %10s %10.0f %12.0f\n' "${v:-(default)}" "$ns" \
    "$(printf '%s\n' ${per_run[$k]} | sort -g | head -1)" "$n" "$r" "$(echo "$ns * $r / $n" | bc -l)" \
    "$(median ${bytes_of[$k]})"
done
