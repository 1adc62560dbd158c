#!/usr/bin/env bash
# CPU time and page faults of hpctl symbolize against llvm-symbolizer on the same addresses, and
# optionally against another hpctl (a build from before a change), runs interleaved.
#
# Usage: bench/symbolize_cpu.sh BINARY [ADDRESSES=100000] [RUNS=7] HPCTL [HPCTL_BEFORE]
#   Each tool resolves the same list (bench/gen_addresses.py, seed 42) once per run, in a fresh
#   process (file in the page cache), with every inline level (llvm-symbolizer --inlining
#   --demangle). Prints, per tool, the median over RUNS of `perf stat` task-clock (user+sys CPU
#   ms) and page faults, and llvm-symbolizer's CPU time divided by the tool's; then whether each
#   hpctl's output equals llvm-symbolizer's, address by address. The same for 5 addresses
#   (start-up cost). CPU time, not wall time: the machine is shared and noisy.
#   Every hpctl run comes right after an llvm-symbolizer run (which is measured too), so that each
#   hpctl finds the memory as llvm-symbolizer leaves it: on this VM, memory another process has
#   just freed is much dearer to touch than memory the same program freed a moment ago, and an
#   hpctl run right after another hpctl run would measure 10-20% faster.
set -euo pipefail

BIN=${1:?usage: symbolize_cpu.sh BINARY [ADDRESSES] [RUNS] HPCTL [HPCTL_BEFORE]}
N=${2:-100000}
RUNS=${3:-7}
HPCTL=${4:?usage: symbolize_cpu.sh BINARY [ADDRESSES] [RUNS] HPCTL [HPCTL_BEFORE]}
BEFORE=${5:-}
TMP=$(mktemp -d /tmp/hpd-symcpu.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

python3 "$(dirname "$0")/gen_addresses.py" "$BIN" "$N" > "$TMP/addrs"
head -5 "$TMP/addrs" > "$TMP/addrs5"

tools=(hpctl llvm)
[ -n "$BEFORE" ] && tools=(hpctl before llvm)
command_of() {
  case "$1" in
    hpctl) echo "$HPCTL symbolize --exe $BIN" ;;
    before) echo "$BEFORE symbolize --exe $BIN" ;;
    llvm) echo "llvm-symbolizer --inlining --demangle --obj=$BIN" ;;
  esac
}
# measure TOOL LIST: "cpu_ms faults" of one run.
measure() {
  # shellcheck disable=SC2046
  perf stat -x, -e task-clock,page-faults -o "$TMP/stat" $(command_of "$1") < "$2" > /dev/null 2>&1
  awk -F, '/task-clock/{t=$1} /page-faults/{f=$1} END{print t, f}' "$TMP/stat"
}
median() { sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }

dwarf_mb=$(size -A "$BIN" | awk '/^\.debug/{s+=$2} END{printf "%.1f", s/1e6}')
echo "binary: $BIN ($dwarf_mb MB of DWARF sections); medians of $RUNS runs, each right after an llvm-symbolizer run"
for list in addrs addrs5; do
  n=$N
  [ "$list" = addrs5 ] && n=5
  for _ in $(seq "$RUNS"); do
    for tool in "${tools[@]}"; do
      [ "$tool" = llvm ] && continue
      measure llvm "$TMP/$list" >> "$TMP/llvm.$list"
      measure "$tool" "$TMP/$list" >> "$TMP/$tool.$list"
    done
  done
  llvm_ms=$(awk '{print $1}' "$TMP/llvm.$list" | median)
  printf '%s addresses:\n%-8s %10s %10s %14s\n' "$n" tool "CPU ms" faults "llvm CPU / CPU"
  for tool in "${tools[@]}"; do
    ms=$(awk '{print $1}' "$TMP/$tool.$list" | median)
    faults=$(awk '{print $2}' "$TMP/$tool.$list" | median)
    printf '%-8s %10.1f %10s %14.2f\n' "$tool" "$ms" "$faults" "$(awk -v a="$llvm_ms" -v b="$ms" 'BEGIN{print a/b}')"
  done
done

llvm-symbolizer --inlining --demangle "--obj=$BIN" < "$TMP/addrs" > "$TMP/llvm.out"
for tool in "${tools[@]}"; do
  [ "$tool" = llvm ] && continue
  # shellcheck disable=SC2046
  $(command_of "$tool") < "$TMP/addrs" > "$TMP/$tool.out" 2>/dev/null
  python3 - "$TMP/$tool.out" "$TMP/llvm.out" "$tool" <<'PY'
import re, sys
a = open(sys.argv[1]).read().split("\n\n")
b = [re.sub(r"::h[0-9a-f]{16}$", "", x, flags=re.M) for x in open(sys.argv[2]).read().split("\n\n")]
same = sum(1 for x, y in zip(a, b) if x == y)
print(f"{sys.argv[3]}: identical answers to llvm-symbolizer (legacy Rust hashes removed): {same - 1} of {len(b) - 1}")
PY
done
