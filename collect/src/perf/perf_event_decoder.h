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
  // Off-CPU intervals shorter than this are not kept (--off-cpu-min-us).
  uint64_t off_cpu_min_ns = 0;
};

class PerfEventDecoder {
 public:
  explicit PerfEventDecoder(PerfDecoderConfig config) : config_(config) {}

  // A thread attached directly after its process was already attached, or a child process of a
  // target attached at the start, may also have inherited events from its creator; only samples from
  // its own events (these ids) are kept, for it and for the tasks it creates (their fork records pass
  // the rule on; an exit record ends it).
  void set_own_event_ids(int32_t tid, std::vector<uint64_t> ids);

  // Whether a kernel address lies in a system-call entry (SchedulerFrames::is_syscall_entry), to tell
  // what the user leaf of a sample taken in the kernel is: the outermost frame of its kernel chain is
  // where the thread entered. Without it (kallsyms unreadable) such leaves are left to the builder.
  void set_syscall_entries(std::function<bool(uint64_t)> is_syscall_entry) {
    is_syscall_entry_ = std::move(is_syscall_entry);
  }

  // Hands the events of `record` (of `bytes` bytes in the ring) to `sink`, in order. Switch records
  // are held until end_of_pass().
  void decode(const PerfRecord& record, size_t bytes, const EventSink& sink);

  // After every ring has been read once: pairs the switch records read so far into off-CPU intervals,
  // each a sample (blocked, or waiting for a CPU when the switch-out left the thread runnable) from
  // the switch-out to the next switch-in of its thread. The recorder hands the records over in time
  // order (perf/record_ordering.h); for the few it counts as out of order (and callers that feed
  // records as they come), a pass's switches are sorted by time, and a switch-in read before its
  // switch-out waits for the next pass.
  void end_of_pass(const EventSink& sink);
  // When the recording ends: threads still off the CPU get an interval up to `end_ns`.
  void finish_off_cpu(uint64_t end_ns, const EventSink& sink);

  [[nodiscard]] uint64_t duplicate_samples() const { return duplicates_; }

 private:
  void decode_sample(const SampleRecord& s, size_t bytes, const EventSink& sink);
  uint64_t cpu_delta(const SampleRecord& s);
  bool from_own_event(int32_t tid, uint64_t id);
  void emit_off_cpu(int32_t pid, int32_t tid, uint32_t cpu, uint64_t out_ns, uint64_t in_ns, bool runnable,
                    const EventSink& sink);

  // Per thread, what the switch records left unpaired.
  struct SwitchState {
    int32_t pid = 0;
    uint64_t out_ns = 0;  // a switch-out waiting for its switch-in (0: none)
    uint32_t out_cpu = 0;
    bool out_runnable = false;
    uint64_t in_ns = 0;  // a switch-in read before any switch-out it could end (0: none)
  };

  PerfDecoderConfig config_;
  std::function<bool(uint64_t)> is_syscall_entry_;
  SplitCallchain split_;
  // Last counter value per thread and CPU: each (thread, CPU) pair has its own inherited event.
  std::unordered_map<int32_t, std::vector<uint64_t>> last_value_;
  std::unordered_map<int32_t, std::unordered_set<uint64_t>> own_ids_;
  uint64_t duplicates_ = 0;
  Event event_;                         // the sample being decoded
  std::vector<SwitchRecord> switches_;  // of the current pass
  std::unordered_map<int32_t, SwitchState> switch_state_;
};

// The event of an MMAP2 record of an executable mapping (also the eBPF backend's mmap watch);
// nullopt for other mappings.
std::optional<MmapEvent> mmap_event_of(const Mmap2Record& r);
// The time of a side-band record (0 when the events were opened without sample_id_all).
inline uint64_t time_of(const SampleId& id) {
  return id.present ? id.time : 0;
}

}  // namespace hpd
