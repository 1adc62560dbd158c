#!/usr/bin/env bash
# System-wide recording on a busy machine against `perf record -a -g` (issue 31): the recorder's CPU
# (user + system, /usr/bin/time) and peak RSS of `hpctl record --local --all -F FREQ -d SECONDS` with a
# warm unwind-table cache (a directory filled by one recording first) and a cold one (a new, empty
# directory each run), to `-o x.hpr --no-report` and to the default output (a Firefox profile, the
# report printed), beside `perf record -a -g -F FREQ` of the same length; runs interleaved, RUNS rounds.
# LOAD processes of bench/busy_threads (THREADS threads each) run beside all of them, the same load
# for every recorder. Prints per kind and length the medians of CPU, wall, peak RSS and samples, and
# of hpctl's own counts: on-CPU stacks complete, samples walked by frame pointer for want of their
# tables, samples walked again, lost records; PERF_SCRIPT=1 adds `perf script`'s CPU to perf's.
# Usage: bench/all_rate.sh HPCTL [RUNS] [SECONDS...]
# Kind hpd: `hpctl record --all -o x.hpr --no-report` through a warm hpd of the same build (started here
# on a private socket and state directory, warmed by one recording): its CPU is the client's plus hpd's
# over the recording and SETTLE (1.5) seconds after (the reset of its programs for the next one), from
# /proc/PID/stat; its peak is hpd's high-water mark since its start.
# Environment: FREQ (4999), LOAD (2), THREADS (1), COMPILERS (0: loops of `g++ -O2` compiling
# bench/compile_load.cpp, one after the other, beside the busy threads: a build machine, whose new
# processes and deep, varied stacks a recording of the whole machine meets), KINDS ("hpr-warm hpr-cold
# json-warm perf"; also json-cold and hpd), PERF_SCRIPT (0), KEEP (a directory to keep each run's
# stderr in), BEFORE (another hpctl: each hpctl kind is also run with it, as KIND@before, in the same
# rounds; its warm cache and its hpd are its own).
set -euo pipefail
hpctl=$(realpath "$1")
runs=${2:-3}
shift $(($# < 2 ? $# : 2))
lengths=("$@")
[ ${#lengths[@]} -eq 0 ] && lengths=(10 60)
freq=${FREQ:-4999}
load=${LOAD:-2}
threads=${THREADS:-1}
read -r -a kinds <<<"${KINDS:-hpr-warm hpr-cold json-warm perf}"
before=${BEFORE:+$(realpath "$BEFORE")}
if [ -n "$before" ]; then
  with_before=()
  for k in "${kinds[@]}"; do
    with_before+=("$k")
    [ "$k" != perf ] && with_before+=("$k@before")
  done
  kinds=("${with_before[@]}")
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
busy=()
cleanup() {
  for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
cc -O2 -g -pthread -o "$tmp/busy_threads" "$here/busy_threads.c"
for ((i = 0; i < load; i++)); do
  "$tmp/busy_threads" 86400 "$threads" >/dev/null &
  busy+=($!)
done
for ((i = 0; i < ${COMPILERS:-0}; i++)); do
  (while :; do g++ -O2 -c "$here/compile_load.cpp" -o "$tmp/compile_load-$i.o"; done) >/dev/null 2>&1 &
  busy+=($!)
done

# The hpd kinds' daemons: each build's own, on a private socket and state directory.
declare -A hpd_pid hpd_sock
start_hpd() {  # start_hpd NAME HPCTL
  local dir=$tmp/hpd-$1 daemon
  daemon=$(dirname "$2")/../daemon/src/service/hpd
  [ -x "$daemon" ] || { echo "no $daemon" >&2; exit 2; }
  mkdir -p "$dir/state"
  printf 'state_directory = %s\n' "$dir/state" >"$dir/hpd.conf"
  "$daemon" --config "$dir/hpd.conf" --socket "$dir/hpd.sock" >>"$dir/hpd.log" 2>&1 &
  hpd_pid[$1]=$!
  busy+=($!)
  hpd_sock[$1]=$dir/hpd.sock
  for _ in $(seq 600); do
    "$2" --socket "$dir/hpd.sock" status >/dev/null 2>&1 && break
    sleep 0.05
  done
  "$2" --socket "$dir/hpd.sock" record -q --all -F "$freq" -d 5 -o "$dir/warm.hpr" --no-report >/dev/null
}
hpd_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for k in "${kinds[@]}"; do
  [ "$k" = hpd ] && start_hpd now "$hpctl"
  [ "$k" = hpd@before ] && start_hpd before "$before"
done

# One run: prints "CPU WALL PEAK_KIB SAMPLES COMPLETE% FP_WALKED% REWALKED LOST".
measure() {  # measure KIND SECONDS RUN
  local kind=$1 s=$2 run=$3 out home cpu wall peak n complete pending rewalked lost script_cpu
  local binary=$hpctl base=${1%@before} warm=$tmp/warm
  [ "$base" != "$kind" ] && binary=$before warm=$tmp/warm-before
  cd "$tmp"
  case $base in
    hpr-* | json-*)
      home=$warm
      [ "${base#*-}" = cold ] && home=$tmp/cold-$run-$s && mkdir -p "$home"
      local output=(-o "$tmp/x.hpr" --no-report)
      [ "${base%-*}" = json ] && output=()  # the default: profile.json.gz, the report printed
      out=$( { XDG_CACHE_HOME=$home /usr/bin/time -f 'cpu %U %S wall %e peak %M' "$binary" record --local --all \
        -F "$freq" -d "$s" "${output[@]}"; } 2>&1 >/dev/null)
      [ "${base#*-}" = cold ] && rm -rf "$home"
      ;;
    hpd)
      local name=now ticks0 ticks1 hz
      [ "$base" != "$kind" ] && name=before
      hz=$(getconf CLK_TCK)
      ticks0=$(hpd_ticks "${hpd_pid[$name]}")
      out=$( { /usr/bin/time -f 'cpu %U %S wall %e peak %M' "$binary" --socket "${hpd_sock[$name]}" record --all \
        -F "$freq" -d "$s" -o "$tmp/x.hpr" --no-report; } 2>&1 >/dev/null)
      sleep "${SETTLE:-1.5}"
      ticks1=$(hpd_ticks "${hpd_pid[$name]}")
      # The client's CPU plus hpd's; hpd's peak.
      out=$(sed "s/^cpu \([0-9.]*\) \([0-9.]*\) wall \([0-9.]*\) peak [0-9]*$/cpu \1 \2 + $((ticks1 - ticks0)) \/ $hz wall \3 peak $(awk '/^VmHWM/ {print $2}' "/proc/${hpd_pid[$name]}/status")/" <<<"$out")
      ;;
    perf)
      out=$( { /usr/bin/time -f 'cpu %U %S wall %e peak %M' perf record -a -g -F "$freq" -o "$tmp/perf.data" \
        -- sleep "$s"; } 2>&1 >/dev/null)
      if [ "${PERF_SCRIPT:-0}" = 1 ]; then
        script_cpu=$( { /usr/bin/time -f 'cpu %U %S' perf script -i "$tmp/perf.data" >/dev/null; } 2>&1 |
          sed -n 's/^cpu \([0-9.]*\) \([0-9.]*\)$/\1 + \2/p' | bc -l)
        out+=$'\n'"script $script_cpu"
      fi
      ;;
  esac
  if [ -n "${KEEP:-}" ]; then printf '%s\n' "$out" >"$KEEP/$kind-$s-$run.txt"; fi
  rm -rf "$tmp"/x.hpr* "$tmp"/profile.json.gz* "$tmp"/perf.data*
  cpu=$(sed -n 's/^cpu \([0-9.]*\) \(.*\) wall.*/\1 + \2/p' <<<"$out" | bc -l)
  [ -n "${script_cpu:-}" ] && cpu=$(echo "$cpu + $script_cpu" | bc -l)
  wall=$(sed -n 's/^cpu .* wall \([0-9.]*\) peak.*/\1/p' <<<"$out")
  peak=$(sed -n 's/^cpu .* peak \([0-9]*\)$/\1/p' <<<"$out")
  if [ "$kind" = perf ]; then
    n=$(sed -n 's/.*(\([0-9]*\) samples).*/\1/p' <<<"$out")
  else
    n=$(sed -n 's/^hpctl: \([0-9]*\) samples .*/\1/p' <<<"$out")
  fi
  complete=$(sed -n 's/.*complete stacks: on-CPU \([0-9.]*\)%.*/\1/p' <<<"$out")
  pending=$(sed -n 's/.*samples (\([0-9.]*\)%) were walked by frame pointer: a table they needed.*/\1/p' <<<"$out")
  rewalked=$(sed -n 's/^.*cfi: \([0-9]*\) samples taken before the tables.*/\1/p' <<<"$out")
  lost=$(grep -o '[0-9]* records lost\|lost [0-9]* records\|[0-9]* lost records' <<<"$out" | grep -o '[0-9]*' | head -1 || true)
  echo "$cpu $wall $peak ${n:-0} ${complete:--1} ${pending:-0} ${rewalked:-0} ${lost:-0}"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# The warm caches: one recording of the busy machine fills each.
mkdir -p "$tmp/warm" "$tmp/warm-before"
for k in "${kinds[@]}"; do
  if [ "${k#*-}" = warm ]; then
    measure hpr-warm 10 0 >/dev/null
    [ -n "$before" ] && measure hpr-warm@before 10 0 >/dev/null
    break
  fi
done

declare -A col
names=(cpu wall peak samples complete fpwalked rewalked lost)
for ((i = 1; i <= runs; i++)); do
  for s in "${lengths[@]}"; do
    for k in "${kinds[@]}"; do
      read -r -a v < <(measure "$k" "$s" "$i")
      for j in "${!names[@]}"; do col[$k,$s,${names[$j]}]+="${v[$j]} "; done
      printf 'run %d %-16s %3ss: cpu %.2f s wall %.1f s peak %.1f MiB samples %d complete %s%% fp-walked %s%% rewalked %s lost %s (load %s)\n' \
        "$i" "$k" "$s" "${v[0]}" "${v[1]}" "$(echo "${v[2]} / 1024" | bc -l)" "${v[3]}" "${v[4]}" "${v[5]}" "${v[6]}" \
        "${v[7]}" "$(cut -d' ' -f1 /proc/loadavg)" >&2
    done
  done
done

printf 'freq=%d Hz, %d rounds, load: %d busy_threads x %d threads; medians\n' "$freq" "$runs" "$load" "$threads"
printf '%-16s %4s %8s %8s %10s %9s %9s %9s %9s %6s\n' kind s "cpu s" "wall s" "peak MiB" samples \
  "complete" "fp-walk%" rewalked lost
for s in "${lengths[@]}"; do
  for k in "${kinds[@]}"; do
    # shellcheck disable=SC2086
    printf '%-16s %4s %8.2f %8.1f %10.1f %9.0f %8s%% %8s%% %9.0f %6.0f\n' "$k" "$s" "$(median ${col[$k,$s,cpu]})" \
      "$(median ${col[$k,$s,wall]})" "$(echo "$(median ${col[$k,$s,peak]}) / 1024" | bc -l)" \
      "$(median ${col[$k,$s,samples]})" "$(median ${col[$k,$s,complete]})" "$(median ${col[$k,$s,fpwalked]})" \
      "$(median ${col[$k,$s,rewalked]})" "$(median ${col[$k,$s,lost]})"
  done
done
