// The user-facing summary of a call-counting run.
#include "hpd/calls/call_stats.h"

#include <cstdio>

namespace hpd {

namespace {

std::string duration(uint64_t ns) {
  char buf[48];
  if (ns >= 1000000000ull)
    std::snprintf(buf, sizeof buf, "%.2f s", double(ns) / 1e9);
  else if (ns >= 1000000)
    std::snprintf(buf, sizeof buf, "%.1f ms", double(ns) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", double(ns) / 1e3);
  return buf;
}

// The in-process runtime: calls counted and timed, what it could not, and where it ran.
void describe_runtime(const CallCountStats& stats, std::vector<std::string>& out) {
  const RuntimeCallStats& r = stats.runtime;
  std::string line = "call counts (hpd's runtime, in-process): " + std::to_string(r.calls) + " calls, " +
                     std::to_string(stats.edges) + " caller->callee edges, " + std::to_string(r.calls_timed) +
                     " calls timed; " + std::to_string(r.processes) + " process start(s), " +
                     std::to_string(r.threads) + " thread(s)";
  if (r.sites_patched != 0) line += ", " + std::to_string(r.sites_patched) + " NOP sites patched into calls";
  out.push_back(line);
  if (r.calls_untimed != 0 || r.frames_abandoned != 0) {
    out.push_back("call counts: " + std::to_string(r.calls_untimed) +
                  " calls counted but not timed (tail calls, too deep, too many functions), " +
                  std::to_string(r.frames_abandoned) +
                  " left without a return (longjmp, exceptions, still running at the end)");
  }
  if (r.sites_unpatched != 0)
    out.push_back("call counts: " + std::to_string(r.sites_unpatched) +
                  " NOP sites could not be patched (their calls are not counted)");
  if (r.threads_refused != 0)
    out.push_back("call counts: " + std::to_string(r.threads_refused) +
                  " threads found no free slot in the call table; their calls are not counted");
  if (stats.calls_not_counted != 0)
    out.push_back(
        "call counts: " + std::to_string(stats.calls_not_counted) +
        " calls were not counted (a thread's edge table was full, or a signal handler ran inside the hook)");
  for (const std::string& m : stats.messages) out.push_back(m);
}

}  // namespace

std::vector<std::string> describe_call_counts(const CallCountStats& stats) {
  std::vector<std::string> out;
  if (!stats.enabled) {
    for (const std::string& m : stats.messages) out.push_back(m);
    return out;
  }
  if (stats.counter == "runtime") {
    describe_runtime(stats, out);
    return out;
  }
  std::string line = "call counts (uprobes): " + std::to_string(stats.hits()) + " probe hits, " +
                     std::to_string(stats.edges) + " caller->callee edges, " +
                     std::to_string(stats.modules_instrumented) + " instrumented module(s)";
  std::string by_point;
  for (const CallProbeHits& p : stats.probe_points) {
    if (p.sites == 0) continue;
    by_point += (by_point.empty() ? "" : ", ") + p.probe_point + ": " + std::to_string(p.sites) + " sites, " +
                std::to_string(p.hits) + " hits" +
                (p.ns_per_hit != 0 ? " x ~" + std::to_string(p.ns_per_hit) + " ns" : "");
  }
  if (!by_point.empty()) line += " (" + by_point + ")";
  out.push_back(line);
  if (stats.hits() != 0 && stats.overhead_measured()) {
    out.push_back("call counts: the probes added about " + duration(stats.estimated_overhead_ns()) +
                  " to the targets (hits x cost per hit, measured on this machine); attaching took " +
                  duration(stats.attach_ns));
  } else if (stats.hits() != 0) {
    out.push_back("call counts: attaching took " + duration(stats.attach_ns));
  }
  if (stats.other_process_hits != 0) {
    out.push_back("call counts: " + std::to_string(stats.other_process_hits) +
                  " probe hits of other processes running the same files (not counted, but slowed)");
  }
  if (stats.calls_not_counted != 0) {
    out.push_back("call counts: " + std::to_string(stats.calls_not_counted) +
                  " calls were not counted (edge map full, or the caller could not be read)");
  }
  if (stats.calls_not_timed != 0) {
    out.push_back("call latency: " + std::to_string(stats.calls_not_timed) +
                  " calls were counted but not timed (the latency maps were full)");
  }
  for (const std::string& m : stats.messages) out.push_back(m);
  return out;
}

}  // namespace hpd
