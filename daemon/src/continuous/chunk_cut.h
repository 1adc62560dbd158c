// Cuts the RawProfile of one long-lived system-wide recording into chunks, each a RawProfile of its
// own that can be read and symbolized alone: the samples of its time span, and the processes,
// threads, modules and stacks those samples need, copied from the recording as it stands.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "hpd/base/proc_files.h"
#include "hpd/model/raw_profile.h"

namespace hpd::continuous {

class ChunkCut {
 public:
  // A chunk of `live` (the recording's profile) from monotonic instant `start_mono_ns` on. The
  // recording's losses until now are not the chunk's.
  ChunkCut(const RawProfile& live, uint64_t start_mono_ns);

  // Copies a sample of `live` (with its process, thread and stack, when first met) into the chunk.
  // Keeps no index into `live`: the collection renumbers its stacks and threads when it drops what
  // is over (RecordOptions::forget_before).
  void add(const RawSample& sample, const RawProfile& live);
  // Brings the copied processes and threads up to date with `live` (exits, new mappings, names) and
  // the chunk's lost counts; call before writing the chunk out.
  void refresh(const RawProfile& live);
  // The chunk's end; the first on-CPU sample's time when `requested_mono_ns` is not 0 (the first
  // chunk of a recording: its report says how long sampling took to begin).
  void end(uint64_t end_mono_ns, uint64_t requested_mono_ns);

  RawProfile& profile() { return chunk_; }
  [[nodiscard]] uint64_t start_mono_ns() const { return chunk_.info.start_mono_ns; }

 private:
  uint32_t module(uint32_t live_index, const RawProfile& live);
  void copy_process(const RawProcess& from, RawProcess& to, const RawProfile& live);

  RawProfile chunk_;
  LostCounts lost_before_;                                       // the recording's, at the chunk's start
  std::unordered_map<uint32_t, uint32_t> modules_;               // live index -> chunk index
  std::unordered_map<uint64_t, LostCounts> thread_lost_before_;  // pid << 32 | tid
  uint64_t first_on_cpu_ns_ = 0;
  HostStealMeter steal_;  // started when the chunk began
};

}  // namespace hpd::continuous
