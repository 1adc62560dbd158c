#!/usr/bin/env bash
# Peak memory of recording against its length: `hpctl record -F FREQ -o x.hpr` (and `-o x.json.gz`) of
# bench/busy_threads.c (THREADS threads on the CPU) for each of SECONDS..., with two hpctl builds (before,
# after) and `perf record -g` side by side, runs interleaved, RUNS times each. Peak RSS is the
# recorder's maximum resident set (/usr/bin/time %M; the target's own is far smaller). Prints the
# median peak RSS and the median sample count of each, and the bytes per sample between the lengths.
# Usage: bench/record_memory.sh HPCTL_BEFORE HPCTL_AFTER [RUNS] [FREQ] [THREADS] [SECONDS...]
# KINDS="before-hpr after-hpr" (environment) measures only those of: before-hpr after-hpr before-json
# after-json perf.
set -euo pipefail
before=$1
after=$2
runs=${3:-3}
freq=${4:-4999}
threads=${5:-4}
shift $(($# < 5 ? $# : 5))
lengths=("$@")
[ ${#lengths[@]} -eq 0 ] && lengths=(10 60)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -g -pthread -o "$tmp/busy_threads" "$here/busy_threads.c"

# One run: prints "PEAK_KIB SAMPLES"; samples from hpctl's summary or perf's own.
measure() {  # measure KIND SECONDS
  local kind=$1 s=$2 out peak n
  case $kind in
    before-hpr) out=$( { /usr/bin/time -f 'peak %M' "$before" record --no-report -F "$freq" -o "$tmp/x.hpr" -- "$tmp/busy_threads" "$s" "$threads"; } 2>&1 >/dev/null) ;;
    after-hpr) out=$( { /usr/bin/time -f 'peak %M' "$after" record --no-report -F "$freq" -o "$tmp/x.hpr" -- "$tmp/busy_threads" "$s" "$threads"; } 2>&1 >/dev/null) ;;
    before-json) out=$( { /usr/bin/time -f 'peak %M' "$before" record --no-report -F "$freq" -o "$tmp/x.json.gz" -- "$tmp/busy_threads" "$s" "$threads"; } 2>&1 >/dev/null) ;;
    after-json) out=$( { /usr/bin/time -f 'peak %M' "$after" record --no-report -F "$freq" -o "$tmp/x.json.gz" -- "$tmp/busy_threads" "$s" "$threads"; } 2>&1 >/dev/null) ;;
    perf) out=$( { /usr/bin/time -f 'peak %M' perf record -g -F "$freq" -o "$tmp/perf.data" -- "$tmp/busy_threads" "$s" "$threads"; } 2>&1 >/dev/null) ;;
  esac
  rm -f "$tmp"/x.hpr* "$tmp"/x.json.gz* "$tmp"/perf.data*
  peak=$(sed -n 's/^peak \([0-9]*\)$/\1/p' <<<"$out")
  if [ "$kind" = perf ]; then
    n=$(sed -n 's/.*(\([0-9]*\) samples).*/\1/p' <<<"$out")
  else
    n=$(sed -n 's/^hpctl: \([0-9]*\) samples .*/\1/p' <<<"$out")
  fi
  echo "$peak ${n:-0}"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

read -r -a kinds <<<"${KINDS:-before-hpr after-hpr before-json after-json perf}"
declare -A peaks samples
for ((i = 0; i < runs; i++)); do
  for s in "${lengths[@]}"; do
    for k in "${kinds[@]}"; do
      read -r p n < <(measure "$k" "$s")
      peaks[$k,$s]+="$p "
      samples[$k,$s]+="$n "
    done
  done
done

printf 'runs=%d freq=%d Hz threads=%d (median peak RSS, median samples)\n' "$runs" "$freq" "$threads"
printf '%-12s' ""
for s in "${lengths[@]}"; do printf ' %24s' "${s} s"; done
printf ' %18s\n' "B/sample ${lengths[0]}->${lengths[-1]} s"
for k in "${kinds[@]}"; do
  printf '%-12s' "$k"
  first_p=0 first_n=0 last_p=0 last_n=0
  for s in "${lengths[@]}"; do
    # shellcheck disable=SC2086
    p=$(median ${peaks[$k,$s]})
    # shellcheck disable=SC2086
    n=$(median ${samples[$k,$s]})
    printf ' %10.1f MiB %8d smp' "$(echo "$p / 1024" | bc -l)" "$n"
    if [ "$s" = "${lengths[0]}" ]; then first_p=$p first_n=$n; fi
    last_p=$p last_n=$n
  done
  if [ "$last_n" != "$first_n" ]; then
    printf ' %18.1f\n' "$(echo "($last_p - $first_p) * 1024 / ($last_n - $first_n)" | bc -l)"
  else
    printf ' %18s\n' "-"
  fi
done
