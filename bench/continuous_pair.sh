# Sourced by the continuous-mode benches: start_pair A_COMMAND... -- B_COMMAND... starts two
# `continuous_driver DIR 60 19` collections (DIR appended: $tmp/a and $tmp/b) and waits until both say
# "started"; their pids are in ${pids[@]}, their output in $tmp/a.out and $tmp/b.out. Both are stopped
# and $tmp removed on exit.
tmp=$(mktemp -d)
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null || true; wait; rm -rf "$tmp"' EXIT
start_pair() {
  local a=() b=()
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  mkdir "$tmp/a" "$tmp/b"
  "${a[@]}" "$tmp/a" 60 19 >"$tmp/a.out" 2>&1 &
  pids+=($!)
  "${b[@]}" "$tmp/b" 60 19 >"$tmp/b.out" 2>&1 &
  pids+=($!)
  until grep -q started "$tmp/a.out" && grep -q started "$tmp/b.out"; do sleep 0.2; done
}
