#!/usr/bin/env bash
# Continuous mode's CPU and memory, two collections side by side: two `continuous_driver DIR 60 19`
# processes (the library hpd runs: one system-wide collection at 19 Hz cut into 60 s chunks) started
# together, the second with ENV_B in its environment (default HPD_EH_FRAME_THROUGH_LIBDW=1: every
# unwind table compiled through libdw, as before the one-pass .eh_frame reader). Measured from their
# "started" for SECONDS: user and system CPU from /proc/PID/stat, peak RSS (VmHWM); then both are
# stopped and print their stats. The driver keeps no unwind tables on disk: a cold start.
# Usage (as root): [ENV_B=VAR=VALUE] bench/continuous_side_by_side.sh BUILD_DIR [SECONDS]
set -euo pipefail
driver=$1/tests/daemon/continuous/continuous_driver
seconds=${2:-150}
env_b=${ENV_B:-HPD_EH_FRAME_THROUGH_LIBDW=1}
. "$(dirname "$0")/continuous_pair.sh"
start_pair "$driver" -- env "$env_b" "$driver"
sleep "$seconds"
hz=$(getconf CLK_TCK)
printf 'load before stopping: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
for i in 0 1; do
  name=a
  [ "$i" = 1 ] && name="b ($env_b)"
  read -r user sys < <(awk '{print $14, $15}' "/proc/${pids[$i]}/stat")
  printf '%s: cpu %.2f s (user %.2f, sys %.2f) in %s s, %s\n' "$name" "$(bc -l <<<"($user + $sys) / $hz")" \
    "$(bc -l <<<"$user / $hz")" "$(bc -l <<<"$sys / $hz")" "$seconds" "$(grep VmHWM "/proc/${pids[$i]}/status")"
done
kill -TERM "${pids[@]}"
wait
pids=()
grep -h samples "$tmp/a.out" "$tmp/b.out"
