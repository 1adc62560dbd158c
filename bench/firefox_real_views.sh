#!/bin/bash
# hpd's Firefox export opened in the real Firefox Profiler: records three test fixtures that know
# their own truth, opens each recording with `hpctl open` in a Profiler web app served on 127.0.0.1,
# drives it in headless Chromium (bench/firefox_real_views.js) and checks what its call tree and
# marker table show against that truth:
#   - alloc_nofp (tests/collect/calls/alloc_fixture.c, `record --alloc --alloc-mean 4096`): the call
#     tree's data sources include the native allocation views; "Retained Memory" is led by leak_pages
#     with the bytes it leaked, "Allocated Memory" gives each function its bytes and share, "Deallocated
#     Memory" the freeing functions' bytes, within the sampling error the tests allow
#     (tests/support/alloc_truth.cpp);
#   - cpu_wait 1500 500 (tests/fixtures/cpu_wait.c): per thread, the samples with and without "Include
#     idle samples" against the thread's own CPU time, runqueue wait and the rest of its life; unticking
#     it removes every [blocked] / [waiting for CPU] node; no call node is grey;
#   - latency_fentry (tests/collect/calls/calls_latency.c, `record --calls`): the calls track's latency
#     markers against the calls, averages and 95th percentiles the program measured;
#   - tail_calls (tests/fixtures/tail_calls.c, built by gcc-12 -O2 -g, recorded into a capture and
#     converted): the thread's HpdTailCall marker main → spin against the samples the capture's report
#     marks [tail call], no marker for the ordinary edges, no call-tree node of hpd's for it;
# and that the page logged no error or warning. Prints "N passed, N failed"; exits 1 on a failure.
#
# Usage: bench/firefox_real_views.sh BUILD_DIR PROFILER_DIST [SHOTS_DIR]
#   as root (the recordings sample with perf_event/eBPF). BUILD_DIR: a build of hpd with the targets
#   hpctl, hpdcalls, cpu_wait and the calls fixtures alloc_nofp and latency_fentry
#   (tests/collect/calls/fixtures/...). SHOTS_DIR: write the docs' screenshots there
#   (firefox-profiler-retained-memory.png, firefox-profiler-allocations.png).
# Needs, none of which CI has (the Profiler is not an npm package):
#   - PROFILER_DIST: the dist/ folder of a production build of the Firefox Profiler's web app
#     (github.com/firefox-devtools/profiler; docs/images/README.md says which commit was checked);
#   - Node.js with the npm package playwright-core where node finds it (NODE_PATH=.../node_modules);
#   - gcc-12 (for the tail_calls fixture);
#   - Chromium at /usr/bin/chromium (Debian's package; CHROMIUM=PATH for another), run headless.
# Everything it serves listens on 127.0.0.1 only.
set -euo pipefail
build=$(realpath "${1:?usage: firefox_real_views.sh BUILD_DIR PROFILER_DIST [SHOTS_DIR]}")
dist=$(realpath "${2:?usage: firefox_real_views.sh BUILD_DIR PROFILER_DIST [SHOTS_DIR]}")
shots=${3:-}
hpctl=$build/cli/hpctl
calls=$build/tests/collect/calls/fixtures
for f in "$hpctl" "$build/fixtures/cpu_wait" "$calls/alloc_nofp" "$calls/latency_fentry" "$dist/index.html"; do
  [ -e "$f" ] || { echo "firefox_real_views.sh: $f is missing" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$hpctl" --local record -q --no-report --alloc --alloc-mean 4096 -o "$work/alloc.json.gz" -- \
  "$calls/alloc_nofp" truth "$work/alloc_truth.txt"
"$hpctl" --local record -q --no-report -o "$work/cpu.json.gz" -- "$build/fixtures/cpu_wait" 1500 500 \
  > "$work/cpu_truth.txt"
"$hpctl" --local record -q --no-report --calls -o "$work/latency.json.gz" -- \
  "$calls/latency_fentry" "$work/latency_truth.txt" > /dev/null
gcc-12 -O2 -g "$(dirname "$0")/../tests/fixtures/tail_calls.c" -o "$work/tail_calls"
"$hpctl" --local record -q --no-report -o "$work/tail.hpr" -- "$work/tail_calls" 1500 "$work/tail_truth.txt"
"$hpctl" convert "$work/tail.hpr" -o "$work/tail.json.gz" 2> /dev/null
"$hpctl" report --json --callers spin "$work/tail.hpr" > "$work/tail_report.json"

shot_args=()
if [ -n "$shots" ]; then
  mkdir -p "$shots"
  shot_args=(--shots "$(realpath "$shots")")
fi
node "$(dirname "$0")/firefox_real_views.js" --dist "$dist" --hpctl "$hpctl" "${shot_args[@]}" \
  --alloc "$work/alloc.json.gz" --alloc-truth "$work/alloc_truth.txt" --alloc-mean 4096 \
  --cpu "$work/cpu.json.gz" --cpu-truth "$work/cpu_truth.txt" \
  --calls "$work/latency.json.gz" --calls-truth "$work/latency_truth.txt" \
  --tail "$work/tail.json.gz" --tail-report "$work/tail_report.json"
