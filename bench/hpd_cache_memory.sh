#!/usr/bin/env bash
# hpd's memory with COUNT distinct binaries' unwind tables cached: COUNT small C programs, each its own
# code (10, 20, ... generated functions, so a different build-id and table), built
# `-O2 -g -fomit-frame-pointer`; each run busy and recorded once through an hpd of BUILD started here
# on a private socket and state directory (`hpctl record --pid P -d 0.3 -o x.hpr --no-report`). Then:
# hpd's resident memory (VmRSS, RssAnon, RssFile, VmHWM), the kept tables (`hpctl status --json`: cfi.kept), the
# kernel memory of the eBPF maps hpd holds between recordings (the programs loaded ahead: memlock in
# /proc/HPD/fdinfo), the CFI maps of a recording while it runs (cfi.map_bytes, rows), and the unwind
# cache's size on disk (STATE/unwind-cache). The same before the programs (after one recording) too.
# Usage (as root): bench/hpd_cache_memory.sh BUILD_DIR [COUNT=50] [WORKDIR=/tmp/hpd-cache-memory]
set -euo pipefail
BUILD=${1:?usage: hpd_cache_memory.sh BUILD_DIR [COUNT] [WORKDIR]}
COUNT=${2:-50}
WORK=${3:-/tmp/hpd-cache-memory}
source "$(dirname "$0")/private_hpd.sh"
private_hpd_paths "$BUILD"
rm -rf "$WORK"
mkdir -p "$WORK/progs"

# Program i: 10 (i+1) generated functions called in turn until the given CPU seconds are spent.
for ((i = 0; i < COUNT; i++)); do
  {
    echo '#include <stdlib.h>'
    echo '#include <time.h>'
    echo 'static volatile unsigned long sink;'
    for ((f = 0; f < 10 * (i + 1); f++)); do
      echo "__attribute__((noinline)) unsigned long f$f(unsigned long x) { for (int k = 0; k < $((f % 7 + 3)); ++k) x = x * $((f * 2 + 3)) + $i; return x; }"
    done
    echo 'static double cpu(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec / 1e9; }'
    echo 'int main(int argc, char** argv) { double end = atof(argv[1]); unsigned long x = 1; while (cpu() < end) {'
    for ((f = 0; f < 10 * (i + 1); f++)); do echo "  x = f$f(x);"; done
    echo '  sink = x; } return 0; }'
  } > "$WORK/progs/p$i.c"
  cc -O2 -g -fomit-frame-pointer -o "$WORK/progs/p$i" "$WORK/progs/p$i.c"
done

HPD_PID=
BUSY=
trap '[ -z "$BUSY" ] || kill $BUSY 2>/dev/null || true; [ -z "$HPD_PID" ] || { kill $HPD_PID 2>/dev/null; wait $HPD_PID 2>/dev/null; } || true' EXIT
start_private_hpd "$WORK"

record() {  # record PROGRAM: one recording of it while it runs
  "$1" 30 &
  BUSY=$!
  sleep 0.05
  "$HPCTL" --socket "$SOCK" record -q --pid "$BUSY" -d 0.3 -o "$WORK/x.hpr" --no-report > /dev/null
  kill "$BUSY"
  wait "$BUSY" 2> /dev/null || true
  BUSY=
}

# report LABEL: one line of figures.
report() {
  sleep 1
  local rss anon file hwm kept tables memlock disk files
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$HPD_PID/status")
  anon=$(awk '/^RssAnon/ {print $2}' "/proc/$HPD_PID/status")
  file=$(awk '/^RssFile/ {print $2}' "/proc/$HPD_PID/status")
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$HPD_PID/status")
  read -r tables kept < <("$HPCTL" --socket "$SOCK" status --json |
    python3 -c 'import json, sys; k = json.load(sys.stdin)["cfi"]["kept"]; print(k["tables"], k["bytes"])')
  memlock=$(cat /proc/"$HPD_PID"/fdinfo/* 2> /dev/null | awk '/^memlock:/ {s += $2} END {print s + 0}')
  disk=$(du -sk "$WORK/state/unwind-cache" 2> /dev/null | cut -f1)
  files=$(find "$WORK/state/unwind-cache" -type f 2> /dev/null | wc -l)
  # A recording's own CFI maps, while it runs (the last program).
  "$WORK/progs/p$((COUNT - 1))" 30 &
  BUSY=$!
  "$HPCTL" --socket "$SOCK" record -q --pid "$BUSY" -d 2 -o "$WORK/y.hpr" --no-report > /dev/null &
  local rec=$! map=""
  for _ in $(seq 100); do
    sleep 0.1
    map=$("$HPCTL" --socket "$SOCK" status --json |
      python3 -c 'import json, sys; c = json.load(sys.stdin)["cfi"]; print(c["map_bytes"], c["rows"], c["row_capacity"]) if c["recordings"] else print("")')
    [ -z "$map" ] || break
  done
  wait $rec
  kill "$BUSY"
  wait "$BUSY" 2> /dev/null || true
  BUSY=
  printf '%-26s VmRSS %6.1f MiB  RssAnon %6.1f MiB  RssFile %6.1f MiB  VmHWM %6.1f MiB  kept %3d tables %7.2f MiB  held eBPF maps %6.1f MiB  disk %4d files %7.2f MiB  a recording'"'"'s CFI maps (bytes rows capacity) %s\n' \
    "$1" "$(bc -l <<<"$rss/1024")" "$(bc -l <<<"$anon/1024")" "$(bc -l <<<"$file/1024")" "$(bc -l <<<"$hwm/1024")" "$tables" \
    "$(bc -l <<<"$kept/1048576")" "$(bc -l <<<"$memlock/1048576")" "$files" "$(bc -l <<<"$disk/1024")" "$map"
}

record "$WORK/progs/p0"
report "after 1 program"
for ((i = 1; i < COUNT; i++)); do record "$WORK/progs/p$i"; done
report "after $COUNT programs"
