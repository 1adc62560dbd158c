#!/usr/bin/env bash
# The unwind-table cache on disk: the recorder's CPU (user + system, /usr/bin/time) for
# `hpctl record --all -d SECONDS -o x.hpr` with a cold cache (a new, empty cache directory each run) and
# with a warm one (a directory filled by WARMUPS recordings first), runs interleaved, RUNS times each;
# prints the medians, the share of samples walked by frame pointer for want of their tables (not in
# the eBPF maps yet when they were taken, and not walked again),
# and the warm cache's size on disk. KINDS (default "cold warm") may add cold-libdw: cold, with every
# .eh_frame compiled through libdw one pc at a time (HPD_EH_FRAME_THROUGH_LIBDW=1, the compiler before
# its one-pass reader), as the anchor of the compile's cost.
# Usage: [KINDS="cold cold-libdw warm"] bench/unwind_cache.sh HPCTL [RUNS] [SECONDS] [WARMUPS]
set -euo pipefail
hpctl=$1
runs=${2:-5}
seconds=${3:-2}
warmups=${4:-3}
kinds=${KINDS:-cold warm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One recording: prints "CPU_SECONDS WALL_SECONDS PENDING_PERCENT".
measure() {  # measure CACHE_HOME [ENV=VALUE]
  local out cpu wall pending
  out=$( { env XDG_CACHE_HOME="$1" ${2:-} /usr/bin/time -f 'cpu %U %S wall %e' "$hpctl" record --all -d "$seconds" \
    -o "$tmp/x.hpr" --no-report; } 2>&1 >/dev/null)
  rm -f "$tmp/x.hpr"
  cpu=$(sed -n 's/^cpu \([0-9.]*\) \([0-9.]*\) wall.*/\1 + \2/p' <<<"$out" | bc -l)
  wall=$(sed -n 's/^cpu .* wall \([0-9.]*\)$/\1/p' <<<"$out")
  pending=$(sed -n 's/.*samples (\([0-9.]*\)%) were walked by frame pointer: a table they needed.*/\1/p' <<<"$out")
  echo "$cpu $wall ${pending:-0}"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

mkdir -p "$tmp/warm"
for ((i = 0; i < warmups; i++)); do measure "$tmp/warm" >/dev/null; done

declare -A cpu wall pending
for ((i = 0; i < runs; i++)); do
  for kind in $kinds; do
    home=$tmp/warm
    extra=
    [ "$kind" != warm ] && home=$tmp/$kind-$i
    [ "$kind" = cold-libdw ] && extra=HPD_EH_FRAME_THROUGH_LIBDW=1
    read -r c w p < <(measure "$home" $extra)
    cpu[$kind]+="$c "
    wall[$kind]+="$w "
    pending[$kind]+="$p "
  done
done

printf 'hpctl record --all -d %s, %d runs each (medians)\n' "$seconds" "$runs"
printf '%-10s %12s %12s %28s\n' cache "cpu s" "wall s" "samples fp-walked (tables)"
for kind in $kinds; do
  # shellcheck disable=SC2086
  printf '%-10s %12.2f %12.2f %27.1f%%\n' "$kind" "$(median ${cpu[$kind]})" "$(median ${wall[$kind]})" \
    "$(median ${pending[$kind]})"
done
printf 'warm cache on disk: %s in %d files\n' "$(du -sh "$tmp/warm/hpd" | cut -f1)" \
  "$(find "$tmp/warm/hpd" -name '*.cfi' | wc -l)"
