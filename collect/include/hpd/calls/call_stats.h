// What a call-counting run did and cost: probe hits per probe point, attach time, messages for the user.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpd {

// Probe hits of the target processes by what was probed (see hpd::calls::SiteKind), with the added
// CPU per hit measured at the end of the recording on the machine it ran on (a probe of the same kind
// on hpd's own code, timed on hpd's thread CPU clock).
struct CallProbeHits {
  std::string probe_point;  // "nop5", "nop1", "call"; "nop5+return", "nop1+return" when timed
  uint64_t sites = 0;       // probe sites attached
  uint64_t hits = 0;
  uint64_t ns_per_hit = 0;  // measured added CPU of one hit; 0: not measured (no hits, or it failed)
};

// What hpd's in-process runtime (libhpdcalls.so) counted and could not.
struct RuntimeCallStats {
  uint64_t processes = 0;         // processes that counted into the table (each exec counts again)
  uint64_t threads = 0;           // thread slots used
  uint64_t calls = 0;             // calls counted
  uint64_t calls_timed = 0;       // of those, timed (returned through the hook)
  uint64_t calls_untimed = 0;     // counted but not timed: tail calls, shadow stack or table full
  uint64_t frames_abandoned = 0;  // timed calls left without a return (longjmp, exception, still running)
  uint64_t threads_refused = 0;   // threads that found no slot (their calls are not counted)
  uint64_t sites_patched = 0;     // NOP sites turned into calls at start-up or dlopen
  uint64_t sites_unpatched = 0;
  double ns_per_tick = 0;  // the TSC's scale, measured over the recording
};

struct CallCountStats {
  bool enabled = false;  // --calls was asked for and the counter was started
  // What counted: "runtime" (hpd's preloaded mcount/__fentry__), "uprobes", or both.
  std::string counter;
  RuntimeCallStats runtime;
  std::vector<CallProbeHits> probe_points;
  uint64_t other_process_hits = 0;  // hits of processes that run the same files but are not targets
  uint64_t calls_not_counted = 0;   // the edge map was full, or the caller could not be read
  bool timed = false;               // uprobes: functions probed at their entry are timed to their return
  uint64_t calls_not_timed = 0;     // uprobes: calls of timed functions whose latency was lost (map full)
  uint64_t edges = 0;
  uint64_t modules_instrumented = 0;
  uint64_t attach_ns = 0;  // wall time spent attaching probes, summed over modules
  // Things the user should know: a target without instrumentation (with the build flags to use), a
  // module whose instrumentation could not be probed.
  std::vector<std::string> messages;

  [[nodiscard]] uint64_t hits() const {
    uint64_t n = 0;
    for (const CallProbeHits& p : probe_points) n += p.hits;
    return n;
  }
  // Whether each kind of site that was hit has its cost measured.
  [[nodiscard]] bool overhead_measured() const {
    for (const CallProbeHits& p : probe_points)
      if (p.hits != 0 && p.ns_per_hit == 0) return false;
    return true;
  }
  // hits x measured cost per hit: the time the probes added to the targets.
  [[nodiscard]] uint64_t estimated_overhead_ns() const {
    uint64_t n = 0;
    for (const CallProbeHits& p : probe_points) n += p.hits * p.ns_per_hit;
    return n;
  }
};

// Lines for the user after a recording: the calls counted, probe hits by probe point with their
// estimated added cost, attach time, then the messages. Empty when counting was not asked for.
std::vector<std::string> describe_call_counts(const CallCountStats& stats);

}  // namespace hpd
