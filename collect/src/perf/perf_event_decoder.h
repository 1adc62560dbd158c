// Decodes perf_event records (perf_records.h) into the builder's events (events.h): the CPU time of
// a sample from its counter, its callchain split into kernel and user frames with how the kernel's
// walk ended, and the side-band records. The perf_event half of "both backends feed one builder".
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "events.h"
#include "perf/perf_records.h"

namespace hpd {

using EventSink = std::function<void(const Event&)>;

struct PerfDecoderConfig {
  // Samples carry the per-thread counter value (PERF_SAMPLE_READ with inherit, Linux >= 6.12);
  // otherwise the CPU delta of a sample is its period.
  bool read_values = false;
  // The callchain depth limit the events were opened with (sample_max_stack).
  uint32_t max_stack = 127;
  // Samples carry user registers (this sample_regs_user mask) and a copy of the user stack top; in
  // dwarf mode the callchain holds only kernel frames and the user stack comes from them.
  bool dwarf = false;
  uint64_t regs_mask = 0;
};

class PerfEventDecoder {
 public:
  explicit PerfEventDecoder(PerfDecoderConfig config) : config_(config) {}

  // A thread attached directly after its process was already attached may also have inherited
  // events from its creator; only samples from its own events (these ids) are kept.
  void set_own_event_ids(int32_t tid, std::vector<uint64_t> ids);

  // Hands the events of `record` (of `bytes` bytes in the ring) to `sink`, in order.
  void decode(const PerfRecord& record, size_t bytes, const EventSink& sink);

  [[nodiscard]] uint64_t duplicate_samples() const { return duplicates_; }

 private:
  void decode_sample(const SampleRecord& s, size_t bytes, const EventSink& sink);
  uint64_t cpu_delta(const SampleRecord& s);

  PerfDecoderConfig config_;
  SplitCallchain split_;
  // Last counter value per thread and CPU: each (thread, CPU) pair has its own inherited event.
  std::unordered_map<int32_t, std::vector<uint64_t>> last_value_;
  std::unordered_map<int32_t, std::unordered_set<uint64_t>> own_ids_;
  uint64_t duplicates_ = 0;
  Event event_;  // the sample being decoded
};

// The event of an MMAP2 record of an executable mapping (also the eBPF backend's mmap watch);
// nullopt for other mappings.
std::optional<MmapEvent> mmap_event_of(const Mmap2Record& r);
// The time of a side-band record (0 when the events were opened without sample_id_all).
inline uint64_t time_of(const SampleId& id) {
  return id.present ? id.time : 0;
}

}  // namespace hpd
