#!/usr/bin/env bash
# Symbolization throughput, peak memory and start-up cost: hpctl symbolize vs llvm-symbolizer,
# binutils addr2line and eu-addr2line, on the same uniformly spread .text addresses.
#
# Usage: bench/symbolize_bench.sh HPCTL BINARY [ADDRESSES=100000] [RUNS=5]
#   cold: one fresh process resolves the list once (open, index, resolve; file pages in the page cache)
#   warm: the extra time of a second pass over the same list in the same process
#         (t(list twice) - t(list once)), i.e. with everything the tool caches already built
#   Each figure is the median of RUNS runs; peak RSS is that of the cold run.
# Also prints how many answers (one block per address) equal llvm-symbolizer's, and the start-up
# cost of 5 addresses. Needs python3 and the tools above (packaging/install-deps.sh).
set -euo pipefail

HPCTL=${1:?usage: symbolize_bench.sh HPCTL BINARY [ADDRESSES] [RUNS]}
BIN=${2:?usage: symbolize_bench.sh HPCTL BINARY [ADDRESSES] [RUNS]}
N=${3:-100000}
RUNS=${4:-5}
TMP=$(mktemp -d /tmp/hpd-symbench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# Uniformly spread addresses inside the sized function symbols (PLT and data excluded), seeded.
python3 "$(dirname "$0")/gen_addresses.py" "$BIN" "$N" > "$TMP/addrs"
cat "$TMP/addrs" "$TMP/addrs" > "$TMP/addrs2"
# eu-addr2line (elfutils 0.188) resolves a few hundred addresses per second: it gets the first
# EU_N of them, and its rates are computed over that many.
EU_N=$(( N < 2000 ? N : 2000 ))
head -n "$EU_N" "$TMP/addrs" > "$TMP/eu"
cat "$TMP/eu" "$TMP/eu" > "$TMP/eu2"
head -5 "$TMP/addrs" > "$TMP/addrs5"

# run NAME INPUT: seconds and peak RSS (KiB) of one run of tool NAME over INPUT.
run() {
  local cmd
  case "$1" in
    hpctl) cmd=("$HPCTL" symbolize --exe "$BIN") ;;
    llvm) cmd=(llvm-symbolizer --inlining --demangle "--obj=$BIN") ;;
    addr2line) cmd=(addr2line -f -i -C -e "$BIN") ;;
    eu-addr2line) cmd=(eu-addr2line -f -i -C -e "$BIN") ;;
  esac
  python3 - "$2" "${cmd[@]}" <<'EOF'
import resource, subprocess, sys, time
with open(sys.argv[1]) as f:
    t = time.perf_counter()
    subprocess.run(sys.argv[2:], stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    dt = time.perf_counter() - t
print(f"{dt:.4f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
EOF
}

median() { sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }

dwarf_mb=$(size -A "$BIN" | awk '/^\.debug/{s+=$2} END{printf "%.1f", s/1e6}')
echo "binary: $BIN ($dwarf_mb MB of DWARF sections), $N addresses, median of $RUNS runs"
echo "(eu-addr2line: the first $EU_N addresses only)"
printf '%-13s %9s %12s %9s %12s %10s %10s\n' tool "cold s" "cold addr/s" "warm s" "warm addr/s" "peak MiB" "5 addr s"
for tool in hpctl llvm addr2line eu-addr2line; do
  cold=() warm=() rss=() small=()
  list=addrs n=$N
  if [ "$tool" = eu-addr2line ]; then list=eu n=$EU_N; fi
  for _ in $(seq "$RUNS"); do
    read -r t1 m1 < <(run "$tool" "$TMP/$list")
    read -r t2 _ < <(run "$tool" "$TMP/${list}2")
    read -r t5 _ < <(run "$tool" "$TMP/addrs5")
    cold+=("$t1")
    warm+=("$(awk -v a="$t2" -v b="$t1" 'BEGIN{d=a-b; if (d < 0.0001) d=0.0001; print d}')")
    rss+=("$m1")
    small+=("$t5")
  done
  c=$(printf '%s\n' "${cold[@]}" | median)
  w=$(printf '%s\n' "${warm[@]}" | median)
  m=$(printf '%s\n' "${rss[@]}" | median)
  s=$(printf '%s\n' "${small[@]}" | median)
  printf '%-13s %9.3f %12.0f %9.3f %12.0f %10.0f %10.3f\n' "$tool" "$c" "$(awk -v n="$n" -v t="$c" 'BEGIN{print n/t}')" \
    "$w" "$(awk -v n="$n" -v t="$w" 'BEGIN{print n/t}')" "$(awk -v k="$m" 'BEGIN{print k/1024}')" "$s"
done

# Agreement with llvm-symbolizer, address by address (one blank-line-separated block each).
"$HPCTL" symbolize --exe "$BIN" < "$TMP/addrs" > "$TMP/hpd.out" 2>/dev/null
llvm-symbolizer --inlining --demangle "--obj=$BIN" < "$TMP/addrs" > "$TMP/llvm.out"
python3 - "$TMP/hpd.out" "$TMP/llvm.out" <<'EOF'
import re, sys
a = open(sys.argv[1]).read().split("\n\n")
b = [re.sub(r"::h[0-9a-f]{16}$", "", x, flags=re.M) for x in open(sys.argv[2]).read().split("\n\n")]
same = sum(1 for x, y in zip(a, b) if x == y)
print(f"identical answers to llvm-symbolizer (legacy Rust hashes removed): {same - 1} of {len(b) - 1}")
EOF
