// RecordSummary: what the user is told after a recording, the same whether hpctl or hpd recorded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpd::session {

struct RecordSummary {
  std::string mode = "local";  // "local" or "daemon": who recorded
  uint64_t samples = 0;
  uint64_t threads = 0;
  double seconds = 0;  // from the first on-CPU sample to the end (from the start when there was none)
  // From the request to the first on-CPU sample: time the targets ran unsampled; -1 when unknown.
  double unsampled_start_s = -1;
  // The CPU time the hypervisor took from the machine's CPUs during the recording (all CPUs, /proc/stat's
  // steal), which the sampling timer counts as the running threads'; -1 when unknown. Said in `notes`
  // when it is 0.5% of the CPU time or more.
  double host_steal_s = -1;
  std::string backend;
  uint64_t lost_records = 0;
  uint64_t throttle_events = 0;
  std::string call_graph;  // "cfi", "fp", "dwarf"
  uint32_t stack_copy_bytes = 0;
  std::string call_graph_reason;
  std::string backend_fallback_reason;
  bool capture = false;
  bool mip_enabled = false;
  uint64_t mip_snapshots_kept = 0;
  uint64_t mip_snapshots_taken = 0;
  int command_exit_status = 0;
  // Lines for the user beyond the fixed ones (MIP notes, a limit that ended the session).
  std::vector<std::string> notes;
};

}  // namespace hpd::session
