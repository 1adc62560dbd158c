# Sourced by the benches that record through an hpd of their own (bash): BUILD's hpd started on a
# private socket and state directory under WORK, never the system's.
# private_hpd_paths BUILD: sets HPCTL and HPD (BUILD's), or exits when either is missing.
private_hpd_paths() {
  HPCTL=$1/cli/hpctl
  HPD=$1/daemon/src/service/hpd
  [ -x "$HPCTL" ] || { echo "no $HPCTL" >&2; exit 2; }
  [ -x "$HPD" ] || { echo "no $HPD" >&2; exit 2; }
}
# start_private_hpd WORK: starts $HPD with WORK/state as its state directory and WORK/hpd.sock as its
# socket (its log WORK/hpd.log); sets SOCK and HPD_PID; returns once it answers `status`.
start_private_hpd() {
  SOCK=$1/hpd.sock
  mkdir -p "$1/state"
  printf 'state_directory = %s\n' "$1/state" > "$1/hpd.conf"
  rm -f "$SOCK"
  "$HPD" --config "$1/hpd.conf" --socket "$SOCK" >> "$1/hpd.log" 2>&1 &
  HPD_PID=$!
  wait_hpd_answers "$SOCK" 600
}
# wait_hpd_answers SOCKET TRIES: returns once the hpd on SOCKET answers `status` ($HPCTL's), tried
# every 50 ms, or exits.
wait_hpd_answers() {
  for _ in $(seq "$2"); do
    "$HPCTL" --socket "$1" status > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "hpd did not answer on $1" >&2
  exit 1
}
