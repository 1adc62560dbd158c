#!/usr/bin/env bash
# Continuous mode's CPU per new process, two builds side by side: two `continuous_driver DIR 60 19`
# (one system-wide collection at 19 Hz, as hpd runs it) started together, A from BUILD_A and B from
# BUILD_B. Then ROUNDS rounds of: a quiet window (nothing spawned) and a spawn window of N processes
# (`ls /dev/null`: five files mapped and the vDSO, the shape of a build's tools), each window timed to
# its end plus a settle of 2 s so the drivers have read its records. Each driver's CPU (the sum of its
# threads' schedstat run time, ns) in each window; per new process = (spawn window - quiet window,
# scaled to the spawn window's length) / N. Prints each round and the medians, and the median of the
# rounds' B/A (other work on the machine starts processes too, in both windows: both drivers see it).
# Usage (as root): bench/continuous_new_processes.sh BUILD_A BUILD_B [N] [ROUNDS]
set -euo pipefail
a=$1/tests/daemon/continuous/continuous_driver
b=$2/tests/daemon/continuous/continuous_driver
n=${3:-2000}
rounds=${4:-5}
. "$(dirname "$0")/continuous_pair.sh"
start_pair "$a" -- "$b"
sleep 5 # the tables of what runs now compiled

cpu_ns() { # the run time of every thread of process $1, ns
  local sum=0 t
  for t in /proc/"$1"/task/*/schedstat; do sum=$((sum + $(cut -d' ' -f1 "$t"))); done
  echo "$sum"
}
now_ns() { date +%s%N; }
spawn() { local i; for ((i = 0; i < n; i++)); do ls /dev/null >/dev/null; done; }

per_a=()
per_b=()
ratio=()
for ((r = 1; r <= rounds; r++)); do
  # The spawn window first, then a quiet window as long.
  a0=$(cpu_ns "${pids[0]}") b0=$(cpu_ns "${pids[1]}") t0=$(now_ns)
  spawn
  sleep 2
  a1=$(cpu_ns "${pids[0]}") b1=$(cpu_ns "${pids[1]}") t1=$(now_ns)
  sleep "$(bc -l <<<"($t1 - $t0) / 1000000000")"
  a2=$(cpu_ns "${pids[0]}") b2=$(cpu_ns "${pids[1]}") t2=$(now_ns)
  scale=$(bc -l <<<"($t1 - $t0) / ($t2 - $t1)")
  pa=$(bc -l <<<"(($a1 - $a0) - ($a2 - $a1) * $scale) / $n / 1000")
  pb=$(bc -l <<<"(($b1 - $b0) - ($b2 - $b1) * $scale) / $n / 1000")
  per_a+=("$pa")
  per_b+=("$pb")
  ratio+=("$(bc -l <<<"$pb / $pa")")
  printf 'round %d: spawn window %.1f s; A %.1f us/process (spawn %.0f ms, quiet %.0f ms), B %.1f us/process (spawn %.0f ms, quiet %.0f ms); load %s\n' \
    "$r" "$(bc -l <<<"($t1 - $t0) / 1000000000")" "$pa" "$(bc -l <<<"($a1 - $a0) / 1000000")" \
    "$(bc -l <<<"($a2 - $a1) / 1000000")" "$pb" "$(bc -l <<<"($b1 - $b0) / 1000000")" \
    "$(bc -l <<<"($b2 - $b1) / 1000000")" "$(cut -d' ' -f1 /proc/loadavg)"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf 'median of %d rounds, CPU per new process: A (%s) %.1f us, B (%s) %.1f us; B/A per round, median %.2f\n' \
  "$rounds" "$1" "$(median "${per_a[@]}")" "$2" "$(median "${per_b[@]}")" "$(median "${ratio[@]}")"
kill -TERM "${pids[@]}"
wait
pids=()
grep -h samples "$tmp/a.out" "$tmp/b.out" || true
