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

}  // namespace

std::vector<std::string> describe_call_counts(const CallCountStats& stats) {
  std::vector<std::string> out;
  if (!stats.enabled) {
    for (const std::string& m : stats.messages) out.push_back(m);
    return out;
  }
  std::string line = "call counts: " + std::to_string(stats.hits()) + " probe hits, " +
                     std::to_string(stats.edges) + " caller->callee edges, " +
                     std::to_string(stats.modules_instrumented) + " instrumented module(s)";
  std::string by_point;
  for (const CallProbeHits& p : stats.probe_points) {
    if (p.sites == 0) continue;
    by_point += (by_point.empty() ? "" : ", ") + p.probe_point + ": " + std::to_string(p.sites) + " sites, " +
                std::to_string(p.hits) + " hits x ~" + std::to_string(p.ns_per_hit) + " ns";
  }
  if (!by_point.empty()) line += " (" + by_point + ")";
  out.push_back(line);
  if (stats.hits() != 0) {
    out.push_back("call counts: the probes added about " + duration(stats.estimated_overhead_ns()) +
                  " to the targets (hits x measured cost per hit); attaching took " +
                  duration(stats.attach_ns));
  }
  if (stats.other_process_hits != 0) {
    out.push_back("call counts: " + std::to_string(stats.other_process_hits) +
                  " probe hits of other processes running the same files (not counted, but slowed)");
  }
  if (stats.calls_not_counted != 0) {
    out.push_back("call counts: " + std::to_string(stats.calls_not_counted) +
                  " calls were not counted (edge map full, or the caller could not be read)");
  }
  for (const std::string& m : stats.messages) out.push_back(m);
  return out;
}

}  // namespace hpd
