// hpctl record's summary lines on stderr: samples, the file written, the call graph, notes.
#include "record_text.h"

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "hpd/session/record_pipeline.h"

namespace hpd::cli {

void print_record_summary(const session::RecordRequest& request, const session::RecordSummary& s) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(request.output, ec);
  std::fprintf(stderr, "hpctl: %llu samples (on- and off-CPU) from %llu threads in %.2f s (%s backend, %s)",
               static_cast<unsigned long long>(s.samples), static_cast<unsigned long long>(s.threads),
               s.seconds, s.backend.c_str(), s.mode == "daemon" ? "recorded by hpd" : "recorded locally");
  if (s.lost_records != 0 || s.throttle_events != 0) {
    std::fprintf(stderr, " (lost %llu records, %llu throttles)",
                 static_cast<unsigned long long>(s.lost_records),
                 static_cast<unsigned long long>(s.throttle_events));
  }
  if (s.unsampled_start_s >= 0)
    std::fprintf(stderr, "\nhpctl: first sample %.1f ms after the request (not sampled before it)",
                 s.unsampled_start_s * 1e3);
  if (s.capture) {
    std::fprintf(stderr, "\nhpctl: wrote %s (%s). Convert it with `hpctl convert %s -o profile.json.gz`.\n",
                 request.output.c_str(), session::human_bytes(ec ? 0 : size).c_str(), request.output.c_str());
  } else {
    std::fprintf(stderr, "\nhpctl: wrote %s (%s). Open it in the Firefox Profiler with `hpctl open %s`.\n",
                 request.output.c_str(), session::human_bytes(ec ? 0 : size).c_str(), request.output.c_str());
  }
  std::fprintf(stderr, "hpctl: call graph: %s", s.call_graph.c_str());
  if (s.call_graph == "dwarf") std::fprintf(stderr, " (%u-byte stack copies)", s.stack_copy_bytes);
  if (!s.call_graph_reason.empty()) std::fprintf(stderr, "; auto: %s", s.call_graph_reason.c_str());
  std::fprintf(stderr, "\n");
  if (!s.backend_fallback_reason.empty() && request.backend == Backend::kAuto) {
    std::fprintf(stderr, "hpctl: note: used perf_event, not eBPF: %s\n", s.backend_fallback_reason.c_str());
  }
  for (const std::string& note : s.notes) std::fprintf(stderr, "hpctl: %s\n", note.c_str());
  if (s.mip_enabled) {
    if (s.mip_snapshots_kept != 0) {
      std::fprintf(stderr,
                   "hpctl: MIP: %llu snapshot(s) kept of %llu taken; counts are the last taken before exit\n",
                   static_cast<unsigned long long>(s.mip_snapshots_kept),
                   static_cast<unsigned long long>(s.mip_snapshots_taken));
    } else if (request.mip == Switch::kOn) {
      std::fprintf(stderr, "hpctl: MIP: no target had a readable __llvm_mipraw section\n");
    }
  }
  if (s.samples == 0) {
    std::fprintf(stderr, "hpctl: warning: no samples were taken; the target used no CPU while recorded\n");
  }
  if (!request.target.command.empty() && s.command_exit_status != 0) {
    std::fprintf(stderr, "hpctl: note: the command exited with status %d\n", s.command_exit_status);
  }
}

}  // namespace hpd::cli
