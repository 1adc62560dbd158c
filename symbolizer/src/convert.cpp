// symbolize_profile: RawProfile -> Profile, resolving each unique (module, offset) once.
#include "hpd/symbolizer/convert.h"

#include <stdexcept>
#include <unordered_set>

#include "converter.h"

namespace hpd::conversion {

bool records_named_processes(const RecordingInfo& info) {
  return (info.backend == "perf" || info.backend == "bpf") &&
         target_scope(info.target) == TargetScope::kNamed;
}

Profile Converter::run() {
  out_.meta.recording = raw_.info;
  out_.meta.lost = raw_.lost;
  index_processes();
  std::vector<uint32_t> sum_instance;
  std::vector<uint32_t> sample_instance = collect_instances(sum_instance);
  std::vector<std::pair<uint32_t, uint32_t>> edge_addresses = collect_call_edges();
  std::vector<uint32_t> latency_addresses = collect_call_latency();
  std::vector<uint32_t> allocation_instance = collect_allocations();
  resolve_all();
  for (StackInstance& inst : instances_) build_stack(inst);
  build_threads(sample_instance, sum_instance);
  build_call_edges(edge_addresses);
  build_call_latency(latency_addresses);
  build_allocations(allocation_instance);
  build_mip_counts();
  return std::move(out_);
}

}  // namespace hpd::conversion

namespace hpd {

using conversion::Converter;
using conversion::records_named_processes;

Profile symbolize_profile(const RawProfile& raw, Symbolizer& symbolizer, const ConvertOptions& options) {
  // Their samples would be counted without a place: the capture they were written to has the stacks.
  if (raw.released_stacks_forgotten) {
    throw std::logic_error(
        "the recording let go of its released samples' stacks (they are in the capture it wrote): "
        "symbolize the capture instead");
  }
  return Converter(raw, symbolizer, options).run();
}

size_t profile_thread_count(const RawProfile& raw) {
  // As build_threads and build_mip_counts decide: every (pid, tid) with samples, sums of released
  // samples or (for a RawThread) lost data, or every RawThread of a recording of named processes,
  // then a main thread for each process with MIP counts and none of those.
  std::unordered_set<uint64_t> threads;
  std::unordered_set<int32_t> pids;
  const auto add = [&](int32_t pid, int32_t tid) {
    threads.insert(static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32 | static_cast<uint32_t>(tid));
    pids.insert(pid);
  };
  for (const RawSample& s : raw.samples) add(s.pid, s.tid);
  for (const RawSampleSum& s : raw.released) add(s.pid, s.tid);
  const bool keep_unsampled = records_named_processes(raw.info);
  for (const RawThread& t : raw.threads) {
    if (keep_unsampled || t.lost.lost_records != 0 || t.lost.throttle_events != 0 ||
        t.lost.stack_failures != 0 || t.lost.truncated_stacks != 0)
      add(t.pid, t.tid);
  }
  size_t count = threads.size();
  for (const RawMipSnapshot& s : raw.mip_snapshots) {
    if (s.module < raw.modules.size() && pids.insert(s.pid).second) ++count;
  }
  return count;
}

}  // namespace hpd
