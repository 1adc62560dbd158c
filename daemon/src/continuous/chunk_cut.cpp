// ChunkCut: one chunk of a long-lived recording as a self-contained RawProfile.
#include "chunk_cut.h"

namespace hpd::continuous {

namespace {

uint64_t thread_key(int32_t pid, int32_t tid) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32) | static_cast<uint32_t>(tid);
}

LostCounts minus(const LostCounts& a, const LostCounts& b) {
  auto sub = [](uint64_t x, uint64_t y) { return x > y ? x - y : 0; };
  return LostCounts{sub(a.lost_records, b.lost_records), sub(a.throttle_events, b.throttle_events),
                    sub(a.stack_failures, b.stack_failures), sub(a.truncated_stacks, b.truncated_stacks)};
}

}  // namespace

ChunkCut::ChunkCut(const RawProfile& live, uint64_t start_mono_ns) : lost_before_(live.lost) {
  chunk_.info = live.info;
  if (start_mono_ns >= live.info.start_mono_ns) {
    chunk_.info.start_unix_ns = live.info.start_unix_ns + (start_mono_ns - live.info.start_mono_ns);
  }
  chunk_.info.start_mono_ns = start_mono_ns;
  chunk_.info.end_mono_ns = 0;
  chunk_.info.requested_mono_ns = 0;
  chunk_.info.first_sample_mono_ns = 0;
  chunk_.info.host_steal_known = false;
  chunk_.info.host_steal_ns = 0;
  steal_.start();
  // The kernel image: its frames need it whichever processes the chunk holds.
  for (uint32_t i = 0; i < live.modules.size(); ++i) {
    if (live.modules[i].is_kernel) module(i, live);
  }
}

uint32_t ChunkCut::module(uint32_t live_index, const RawProfile& live) {
  if (live_index == kNoIndex || live_index >= live.modules.size()) return kNoIndex;
  const auto [it, added] = modules_.try_emplace(live_index, 0);
  if (added) {
    const RawModule& from = live.modules[live_index];
    it->second = chunk_.intern_module(from.path, from.build_id, from.is_kernel);
    RawModule& to = chunk_.modules[it->second];
    if (to.image.empty()) to.image = from.image;
    if (!to.file) to.file = from.file;
  }
  return it->second;
}

void ChunkCut::copy_process(const RawProcess& from, RawProcess& to, const RawProfile& live) {
  to.name = from.name;
  to.exe = from.exe;
  to.cmdline = from.cmdline;
  to.cgroup = from.cgroup;
  to.start_ns = from.start_ns;
  to.end_ns = from.end_ns;
  to.unfollowed_ns = from.unfollowed_ns;
  // Mappings are only ever appended, and an earlier one changes only when it ends (an exec).
  for (size_t m = 0; m < from.mappings.size(); ++m) {
    RawMapping mapping = from.mappings[m];
    mapping.module = module(mapping.module, live);
    if (m < to.mappings.size()) {
      to.mappings[m] = mapping;
    } else {
      to.mappings.push_back(mapping);
    }
  }
}

void ChunkCut::add(const RawSample& sample, const RawProfile& live) {
  if (chunk_.find_process(sample.pid) == nullptr) {
    RawProcess& process = chunk_.process(sample.pid);
    if (const RawProcess* from = live.find_process(sample.pid)) copy_process(*from, process, live);
  }
  if (chunk_.find_thread(sample.pid, sample.tid) == nullptr) {
    RawThread& thread = chunk_.thread(sample.pid, sample.tid);
    if (const RawThread* from = live.find_thread(sample.pid, sample.tid)) {
      thread.name = from->name;
      thread.start_ns = from->start_ns;
      thread.end_ns = from->end_ns;
      thread_lost_before_[thread_key(sample.pid, sample.tid)] = from->lost;
    }
  }
  RawSample copy = sample;
  if (sample.stack != kNoIndex && sample.stack < live.stacks.size()) {
    copy.stack =
        chunk_.stacks.intern(live.stacks.kernel_frames(sample.stack), live.stacks.user_frames(sample.stack),
                             live.stacks[sample.stack].user_leaf);
  } else {
    copy.stack = kNoIndex;
  }
  if (copy.kind == SampleKind::kOnCpu && (first_on_cpu_ns_ == 0 || copy.time_ns < first_on_cpu_ns_)) {
    first_on_cpu_ns_ = copy.time_ns;
  }
  chunk_.samples.push_back(copy);
}

void ChunkCut::refresh(const RawProfile& live) {
  for (RawProcess& process : chunk_.processes) {
    if (const RawProcess* from = live.find_process(process.pid)) copy_process(*from, process, live);
  }
  for (RawThread& thread : chunk_.threads) {
    const RawThread* from = live.find_thread(thread.pid, thread.tid);
    if (from == nullptr) continue;
    thread.name = from->name;
    thread.end_ns = from->end_ns;
    thread.lost = minus(from->lost, thread_lost_before_[thread_key(thread.pid, thread.tid)]);
  }
  chunk_.lost = minus(live.lost, lost_before_);
  // Fields the recorder fills in after its start; the chunk's own times stay.
  const RecordingInfo own = chunk_.info;
  chunk_.info = live.info;
  chunk_.info.start_unix_ns = own.start_unix_ns;
  chunk_.info.start_mono_ns = own.start_mono_ns;
  chunk_.info.end_mono_ns = own.end_mono_ns;
  chunk_.info.requested_mono_ns = own.requested_mono_ns;
  chunk_.info.first_sample_mono_ns = own.first_sample_mono_ns;
  chunk_.info.host_steal_known = own.host_steal_known;
  chunk_.info.host_steal_ns = own.host_steal_ns;
}

void ChunkCut::end(uint64_t end_mono_ns, uint64_t requested_mono_ns) {
  chunk_.info.end_mono_ns = end_mono_ns;
  chunk_.info.state_host_steal(steal_.since_start());
  if (requested_mono_ns != 0 && first_on_cpu_ns_ != 0) {
    chunk_.info.requested_mono_ns = requested_mono_ns;
    chunk_.info.first_sample_mono_ns = first_on_cpu_ns_;
  }
}

}  // namespace hpd::continuous
