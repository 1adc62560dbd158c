#!/bin/sh
# Compares the Firefox JSON two builds write for the same inputs, byte for byte: each capture or
# profile given is converted by both builds' hpctl, and export_bench's synthetic profile (seeded, so
# the same in both) is written by both builds' bench. For a writer change that must not change output.
# Usage: bench/firefox_output_compare.sh REFERENCE_BUILD BUILD [SAMPLES] [INPUT.hpr|INPUT.json ...]
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 REFERENCE_BUILD BUILD [SAMPLES] [INPUT ...]" >&2
  exit 2
fi
ref=$1
new=$2
shift 2
samples=200000
case "${1:-}" in
  '' | *[!0-9]*) ;;
  *) samples=$1; shift ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
same() {  # NAME REFERENCE_FILE NEW_FILE
  if cmp -s "$2" "$3"; then
    echo "same:      $1 ($(wc -c <"$2") bytes)"
  else
    echo "DIFFERENT: $1: $(cmp "$2" "$3" 2>&1 | head -1)"
    status=1
  fi
}
for input in "$@"; do
  name=$(basename "$input")
  "$ref/cli/hpctl" convert -q "$input" -o "$work/ref-$name.json"
  "$new/cli/hpctl" convert -q "$input" -o "$work/new-$name.json"
  same "$name" "$work/ref-$name.json" "$work/new-$name.json"
done
for build in ref new; do
  dir="$work/$build-bench"
  mkdir "$dir"
  eval "\"\$$build/bench/export_bench\"" --keep --samples "$samples" --dir "$dir" >/dev/null
  mv "$dir"/export_bench-*.json "$work/$build-bench.json"
done
same "export_bench --samples $samples" "$work/ref-bench.json" "$work/new-bench.json"
exit $status
