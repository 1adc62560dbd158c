#!/bin/sh
# CPU time of bench/pgo_interp.cpp built three ways: plain -O2, with -fprofile-sample-use from the
# LLVM sample profile hpd wrote of a recording at the default rate (hpctl --local record, hpctl
# convert --format llvm-sample), and with clang's instrumented PGO (-fprofile-instr-generate,
# llvm-profdata merge, -fprofile-instr-use) as the upper bound. The runs alternate between the
# builds; each figure is user + system seconds (/usr/bin/time), the median of RUNS.
#
#   bench/llvm_sample_pgo.sh HPCTL [RUNS] [ROUNDS]     (defaults: 7 runs, 400 rounds)
#
# Needs clang++-14, llvm-profdata (Debian: llvm-14) and root (or perf_event access) for the recording.
set -eu
HPCTL=${1:?usage: $0 HPCTL [RUNS] [ROUNDS]}
RUNS=${2:-7}
ROUNDS=${3:-400}
SRC=$(cd "$(dirname "$0")" && pwd)/pgo_interp.cpp
FLAGS="-O2 -gline-tables-only -fdebug-info-for-profiling"
W=$(mktemp -d /tmp/hpd-pgo-XXXXXX)
trap 'rm -rf "$W"' EXIT

clang++-14 $FLAGS "$SRC" -o "$W/plain"
"$HPCTL" --local record -q --no-report -o "$W/rec.hpr" -- "$W/plain" "$ROUNDS" >/dev/null
"$HPCTL" convert "$W/rec.hpr" -o "$W/app.prof" --format llvm-sample --binary "$W/plain"
clang++-14 $FLAGS -fprofile-sample-use="$W/app.prof" "$SRC" -o "$W/sample"
clang++-14 $FLAGS -fprofile-instr-generate "$SRC" -o "$W/generate"
LLVM_PROFILE_FILE="$W/run.profraw" "$W/generate" "$ROUNDS" >/dev/null
llvm-profdata merge -o "$W/run.profdata" "$W/run.profraw"
clang++-14 $FLAGS -fprofile-instr-use="$W/run.profdata" "$SRC" -o "$W/instr"

# The three builds do the same work.
expected=$("$W/plain" "$ROUNDS")
for b in sample instr; do
  [ "$("$W/$b" "$ROUNDS")" = "$expected" ] || { echo "$b computes something else" >&2; exit 1; }
done

i=0
while [ "$i" -lt "$RUNS" ]; do
  for b in plain sample instr; do
    /usr/bin/time -f "%U %S" -o "$W/time" "$W/$b" "$ROUNDS" >/dev/null
    awk '{ printf "%.3f\n", $1 + $2 }' "$W/time" >>"$W/$b.cpu"
  done
  i=$((i + 1))
done
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
p=$(median "$W/plain.cpu")
s=$(median "$W/sample.cpu")
n=$(median "$W/instr.cpu")
echo "pgo_interp $ROUNDS rounds, CPU seconds (median of $RUNS runs):"
echo "  plain -O2                       $p"
echo "  -fprofile-sample-use (hpd)      $s"
echo "  -fprofile-instr-use (upper)     $n"
awk -v p="$p" -v s="$s" -v n="$n" 'BEGIN {
  printf "  sample profile: %+.1f%% CPU vs plain; instrumented: %+.1f%%\n", (s - p) / p * 100, (n - p) / p * 100
  if (p - n > 0) printf "  share of instrumented PGO'"'"'s gain: %.0f%%\n", (p - s) / (p - n) * 100
  else print "  instrumented PGO gains nothing on this benchmark here"
}'
