#!/usr/bin/env bash
# Start-up cost of symbolizers for a handful of addresses in a binary with over 50 MB of DWARF:
# hpctl symbolize vs llvm-symbolizer, binutils addr2line and eu-addr2line, 5 addresses each.
#
# Usage: bench/symbolize_startup.sh HPCTL [WORKDIR=/tmp/hpd-bigdwarf] [RUNS=5]
#   Builds WORKDIR/bigdwarf once (four generated C++ units, g++ -O2 -g, about 72 MB of DWARF;
#   4 x ~1 min of CPU) and keeps it for later runs. Each tool then resolves the same 5 addresses
#   (uniform over the sized function symbols, seed 42) RUNS times, one fresh process per run (the
#   file in the page cache, so "cold" means no index built yet, not a cold disk). Prints the
#   median wall time, median CPU (user+sys) and peak RSS from /usr/bin/time, and whether each
#   tool's answers equal llvm-symbolizer's. Not committed: the binary and its sources.
set -euo pipefail

HPCTL=${1:?usage: symbolize_startup.sh HPCTL [WORKDIR] [RUNS]}
WORK=${2:-/tmp/hpd-bigdwarf}
RUNS=${3:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
BIN=$WORK/bigdwarf

if [ ! -x "$BIN" ]; then
  for i in 0 1 2 3; do
    python3 "$HERE/gen_big_dwarf.py" "$i" 40 > "$WORK/tu$i.cpp"
    [ -f "$WORK/tu$i.o" ] || g++ -O2 -g -c "$WORK/tu$i.cpp" -o "$WORK/tu$i.o"
  done
  cat > "$WORK/main.cpp" <<'EOF'
namespace tu0 { int run(int); } namespace tu1 { int run(int); } namespace tu2 { int run(int); } namespace tu3 { int run(int); }
int main(int argc, char**) { return (tu0::run(argc) + tu1::run(argc) + tu2::run(argc) + tu3::run(argc)) & 1; }
EOF
  g++ -O2 -g "$WORK/main.cpp" "$WORK"/tu[0-3].o -o "$BIN"
fi

python3 - "$BIN" 5 > "$WORK/addrs5" <<'EOF'
import bisect, random, subprocess, sys
path, n = sys.argv[1], int(sys.argv[2])
out = subprocess.run(["nm", "-S", "--defined-only", path], capture_output=True, text=True).stdout
spans = [(int(p[0], 16), int(p[1], 16)) for p in (l.split() for l in out.splitlines())
         if len(p) == 4 and p[2] in "TtWw" and int(p[1], 16) > 0]
cum, acc = [], 0
for _, s in spans:
    acc += s
    cum.append(acc)
rng = random.Random(42)
for _ in range(n):
    x = rng.randrange(acc)
    i = bisect.bisect_right(cum, x)
    print(hex(spans[i][0] + x - (cum[i] - spans[i][1])))
EOF

dwarf_mb=$(size -A "$BIN" | awk '/^\.debug/{s+=$2} END{printf "%.1f", s/1e6}')
echo "binary: $BIN ($dwarf_mb MB of DWARF sections), 5 addresses, median of $RUNS runs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-15s %8s %8s %9s %s\n' tool "wall s" "CPU s" "peak MiB" "answers = llvm-symbolizer's"
median() { sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
llvm-symbolizer --inlining --demangle "--obj=$BIN" < "$WORK/addrs5" > "$WORK/out.llvm"
for tool in hpctl llvm-symbolizer addr2line eu-addr2line; do
  case "$tool" in
    hpctl) cmd=("$HPCTL" symbolize --exe "$BIN") ;;
    llvm-symbolizer) cmd=(llvm-symbolizer --inlining --demangle "--obj=$BIN") ;;
    addr2line) cmd=(addr2line -f -i -C -e "$BIN") ;;
    eu-addr2line) cmd=(eu-addr2line -f -i -C -e "$BIN") ;;
  esac
  : > "$WORK/time.$tool"
  for _ in $(seq "$RUNS"); do
    /usr/bin/time -a -o "$WORK/time.$tool" -f "%e %U %S %M" "${cmd[@]}" < "$WORK/addrs5" > "$WORK/out.$tool"
  done
  wall=$(awk '{print $1}' "$WORK/time.$tool" | median)
  cpu=$(awk '{print $2 + $3}' "$WORK/time.$tool" | median)
  rss=$(awk '{print $4}' "$WORK/time.$tool" | median)
  same=$(cmp -s "$WORK/out.$tool" "$WORK/out.llvm" && echo yes || echo "no (other output format)")
  printf '%-15s %8.2f %8.2f %9.0f %s\n' "$tool" "$wall" "$cpu" "$(awk -v k="$rss" 'BEGIN{print k/1024}')" "$same"
done
