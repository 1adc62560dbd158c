// Decodes perf_event records (perf_records.h) into the builder's events (events.h): the CPU time of
// a sample from its counter, its callchain split into kernel and user frames with how the kernel's
// walk ended, and the side-band records. The perf_event half of "both backends feed one builder".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
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

  // An event the recorder opened on a thread (not inherited), for the thread's CPU tails: its id and
  // the CPU it counts on.
  void add_direct_event(int32_t pid, int32_t tid, uint32_t cpu, uint64_t id);
  // The count read from a direct event at the end of the recording: its thread's, and the final counts
  // of every copy inherited from it whose task exited (PERF_RECORD_READ), and the counts so far of
  // those still running.
  void final_count(uint64_t id, uint64_t total);
  // After the last records (and final_count for each direct event): the CPU time each thread used on a
  // CPU after its last sample there (perf_event has no record of it; the eBPF backend's CpuTailEvent),
  // one CpuTailEvent per thread. A thread created during the recording gets it at its exit, from the
  // final counts its events report then (attr.inherit_stat); a thread the recorder attached, here, from
  // its events' counts less those of the threads that inherited them, when every such thread has exited
  // and no record was lost (`counts_complete`). The others' tails are not known (tails_unknown()).
  void finish_cpu_tails(bool counts_complete, const EventSink& sink);
  [[nodiscard]] uint64_t tails_unknown() const { return tails_unknown_; }

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
  void on_fork(const TaskRecord& t);
  void on_exit(const TaskRecord& t);
  void on_read(const ReadRecord& r);
  void emit_exited_tails(uint64_t before_pass, const EventSink& sink);
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

  // CPU tails. The events opened on threads, by id: their thread and CPU.
  struct DirectEvent {
    int32_t pid = 0;
    int32_t tid = 0;
    uint32_t cpu = 0;
    uint64_t final_count = 0;
    bool final_read = false;
  };
  std::unordered_map<uint64_t, DirectEvent> direct_events_;
  std::unordered_set<int32_t> direct_alive_;  // threads with direct events that have not exited
  // Their last counter values per CPU once they exited (their tails wait for the final counts).
  std::unordered_map<int32_t, std::vector<uint64_t>> direct_last_;
  // Per direct event: the final counts of its inherited copies (READ records), which its own count
  // read at the end includes.
  std::unordered_map<uint64_t, uint64_t> inherited_final_;
  // Per task created during the recording: the directly attached threads whose events it inherited
  // (through its creators); per such thread, how many of them are running.
  std::unordered_map<int32_t, std::vector<int32_t>> roots_;
  std::unordered_map<int32_t, uint32_t> live_descendants_;
  // A task created during the recording that exited: its last counter values, the events it kept
  // (set_own_event_ids), and the tail its READ records add up, given when the records of the next
  // passes are in.
  struct Exited {
    int32_t pid = 0;
    uint64_t pass = 0;
    std::vector<uint64_t> last;
    std::optional<std::unordered_set<uint64_t>> own_ids;
    uint64_t tail_ns = 0;
  };
  std::unordered_map<int32_t, Exited> exited_;
  uint64_t pass_ = 0;
  uint64_t tails_unknown_ = 0;

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
