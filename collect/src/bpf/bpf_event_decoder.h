// Decodes the records of hpd's BPF programs (bpf/profile_event.h) from the eBPF ring buffer into the
// builder's events (events.h), checking each record's sizes; keeps the programs' own statistics (how
// their user walks ended). The eBPF half of "both backends feed one builder".
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "events.h"
#include "perf/perf_event_decoder.h"
#include "profile_event.h"

namespace hpd {

class BpfEventDecoder {
 public:
  // `stack_copy_bytes`: the user stack the programs were asked to copy per on-CPU sample (0 = unknown).
  explicit BpfEventDecoder(uint32_t stack_copy_bytes = 0) : stack_copy_bytes_(stack_copy_bytes) {}

  // One ring-buffer record. Records that are too short or of an unknown type are counted, not used.
  // With hold_pending_walks(), a record may be held and reach the sink later (release_held()).
  void decode(std::span<const uint8_t> bytes, const EventSink& sink);

  // A user stack walked again in user space (CfiMaps::walk_stack): the pc, then one return address per
  // frame; how the walk ended (enum hpd_user_end); the frames it stepped by frame pointer.
  struct UserWalk {
    std::vector<uint64_t> ips;
    uint32_t end = HPD_USER_END_NONE;
    uint32_t fp_frames = 0;
  };

  // cfi mode: an on-CPU record whose walk stood in frame pointers for a table not yet published and
  // that carries its registers and a copy of its stack (the programs' pending_stack_copy_bytes) is
  // held, and every later record of its process behind it, so that the process's events still reach
  // the sink in their order; release_held() walks it again. `on_held` is told the process of each such
  // record (system-wide, tables are compiled for the processes sampled). Past `max_bytes` of held
  // records, all of them are decoded as they are; with `max_age_ns` (not 0), a record that waited that
  // long (its time that much before release_held's `walkable_until_ns`) is decoded as it is, and its
  // process's records behind it go on: a recording without end (hpd's continuous collection) would
  // otherwise hold a process whose tables never come (one that exited before they were published)
  // until the byte bound. Such records' registers and stack go no further
  // than the second walk (the builder does not see them). So is an off-CPU record whose walk met a
  // table not published yet, when it was not walked again while its thread was off the CPU
  // (replace_off_cpu_user_stack) and its switch-out wrote a copy of its stack (HPD_EVENT_SWITCH_STACK):
  // it is walked from that copy.
  void hold_pending_walks(std::function<void(int32_t pid)> on_held, size_t max_bytes,
                          uint64_t max_age_ns = 0);
  enum class HeldWalk {
    kWait,    // the tables it needs are not published yet
    kAsIs,    // no better walk will come: decode it as the programs walked it
    kWalked,  // walked again into the UserWalk
  };
  using HeldWalker =
      std::function<HeldWalk(const hpd_sample_event& e, std::span<const uint8_t> stack, UserWalk& out)>;
  // Decodes each process's held records, oldest first, up to the first one that must still wait for its
  // tables. A record that waits for a second walk is given to `walker` only once the mappings of its
  // time have been read (its time at most `walkable_until_ns`). `final`: nothing waits any more (a
  // record `walker` would keep waiting keeps its first walk).
  void release_held(const HeldWalker& walker, uint64_t walkable_until_ns, const EventSink& sink, bool final);
  // Records held, and of those the ones that wait for a second walk.
  [[nodiscard]] bool holding() const { return !held_.empty(); }
  [[nodiscard]] size_t walks_held() const { return held_walks_; }
  // A thread still off the CPU when the recording ended (a value of the programs' `blocked` map): its
  // interval runs until `end_ns`.
  void decode_still_off_cpu(const hpd_sample_event& event, uint64_t end_ns, const EventSink& sink);

  // cfi mode: the user stack of thread `tid`'s off-CPU record of the switch-out at `time_ns`, walked
  // again once its process's tables were published (off_cpu_rewalk.h). It replaces the frame-pointer
  // walk the record carries when that record is decoded.
  void replace_off_cpu_user_stack(int32_t tid, uint64_t time_ns, std::vector<uint64_t> ips, uint32_t end,
                                  uint32_t fp_frames);

  [[nodiscard]] uint64_t malformed_records() const { return malformed_; }
  // How the programs' user walks ended (enum hpd_user_end), on-CPU [0] and off-CPU [1].
  using UserEnds = std::array<std::array<uint64_t, HPD_USER_END_COUNT>, 2>;
  [[nodiscard]] const UserEnds& user_ends() const { return user_ends_; }
  // cfi walks that stepped by frame pointer because their process's or a module's table was not loaded.
  [[nodiscard]] uint64_t samples_tables_pending() const { return tables_pending_; }
  // Off-CPU records whose user stack was replaced by a walk made once the tables were published (not
  // counted in samples_tables_pending()).
  [[nodiscard]] uint64_t off_cpu_rewalked() const { return rewalked_; }
  // Of those, the ones walked from the copy of the stack their switch-out wrote (their thread had run
  // again before the tables were published), the others having been read while it was off the CPU.
  [[nodiscard]] uint64_t off_cpu_rewalked_from_copy() const { return off_cpu_rewalked_from_copy_; }
  // On-CPU records held and walked again with the tables (not counted in samples_tables_pending()).
  [[nodiscard]] uint64_t on_cpu_rewalked() const { return on_cpu_rewalked_; }
  // The most bytes of records held at once.
  [[nodiscard]] size_t held_bytes_peak() const { return held_bytes_peak_; }
  // cfi walks with at least one frame stepped by frame pointer (modules without a table).
  [[nodiscard]] uint64_t samples_with_fp_frames() const { return with_fp_frames_; }
  // On-CPU samples whose thread had no earlier runtime value (cpu_delta_ns is a guess).
  [[nodiscard]] uint64_t samples_without_baseline() const { return samples_without_baseline_; }
  // dwarf mode with off-CPU samples: the programs copy each switched-out thread's stack
  // (HPD_EVENT_SWITCH_STACK); an off-CPU record without its copy is counted.
  void expect_switch_stacks() { switch_stacks_expected_ = true; }
  // dwarf mode: off-CPU records whose user stack is unwound from the copy taken at their switch-out
  // (HPD_EVENT_SWITCH_STACK), and those that had none (the ring was too full for copies or lost it, or the
  // thread was already off the CPU when the recording began): these keep the programs' frame-pointer walk.
  [[nodiscard]] uint64_t off_cpu_with_stack_copy() const { return off_cpu_with_copy_; }
  [[nodiscard]] uint64_t off_cpu_without_stack_copy() const { return off_cpu_without_copy_; }
  // Blocked intervals split at their wakeup into a blocked and a waiting-for-CPU sample.
  [[nodiscard]] uint64_t blocked_split_at_wakeup() const { return split_at_wakeup_; }
  // Blocked intervals that ended (the thread ran again) with no wakeup seen: all of it counted as
  // blocked, including any wait for a CPU after the wakeup (woken before the hook was attached).
  [[nodiscard]] uint64_t blocked_without_wakeup() const { return without_wakeup_; }
  // Waits for a CPU after a wakeup that the scheduler charged as CPU time, given to their
  // waiting-for-CPU sample (charged_ns in bpf/profile_event.h), and that time in all.
  [[nodiscard]] uint64_t waits_charged_as_cpu() const { return charged_waits_; }
  [[nodiscard]] uint64_t waits_charged_ns() const { return charged_ns_; }

 private:
  // cfi mode, holding: an off-CPU record whose walk met a table not published yet, not walked again
  // while its thread was off the CPU, and whose switch-out wrote a copy of its stack (decoded, or held
  // before it): it waits to be walked from that copy.
  bool off_cpu_waits_for_walk(std::span<const uint8_t> bytes, const hpd_event_header& header) const;
  // decode() without holding; `walk`: the user stack walked again, which replaces the record's.
  void decode_record(std::span<const uint8_t> bytes, const EventSink& sink, const UserWalk* walk);
  // `still_off_cpu`: the interval did not end with a switch-in (the recording ended first).
  void decode_sample(const hpd_sample_event& e, std::span<const uint8_t> frames,
                     std::span<const uint8_t> stack, size_t record_bytes, const EventSink& sink,
                     bool still_off_cpu = false, const UserWalk* walk = nullptr);

  uint32_t stack_copy_bytes_;
  std::array<uint64_t, HPD_MAX_FRAMES> ips_{};
  UserEnds user_ends_{};
  uint64_t malformed_ = 0;
  uint64_t tables_pending_ = 0;
  uint64_t rewalked_ = 0;
  uint64_t off_cpu_rewalked_from_copy_ = 0;
  struct OffCpuWalk {
    uint64_t time_ns;
    UserWalk walk;
  };
  std::unordered_map<int32_t, OffCpuWalk> rewalks_;  // by tid: at most one switch-out waits per thread
  // hold_pending_walks(): per process, its records from the first one that waits for a second walk on.
  struct Held {
    std::vector<uint8_t> bytes;
    bool walk = false;  // waits for a second walk
  };
  bool hold_ = false;
  std::function<void(int32_t)> on_held_;
  size_t max_held_bytes_ = 0;
  uint64_t max_held_age_ns_ = 0;  // 0: no bound on how long a record waits
  std::map<int32_t, std::deque<Held>> held_;
  // A process forked while its parent's records were held joins its parent's queue (by child pid: the
  // queue's pid), it and all its records, so that its fork reaches the sink after every earlier record
  // of its parent (the parent's exec and mappings among them: what the child inherits) and before any
  // of the child's own. Forgotten with the queue.
  std::unordered_map<int32_t, int32_t> held_with_;
  // The pid of the queue the records of `pid` join: its parent's (held_with_) while that is held, else
  // its own.
  int32_t queue_of(int32_t pid) const;
  void forget_queue(int32_t queue);
  // Past max_held_bytes_: the process holding the most gives its records up with the programs' walk.
  void release_largest(const EventSink& sink);
  // Decodes a held record (with `walk`, its second walk; without, the programs' walk) and forgets it.
  void emit_held(const Held& h, const EventSink& sink, const UserWalk* walk);
  size_t held_bytes_ = 0;
  size_t held_bytes_peak_ = 0;
  size_t held_walks_ = 0;
  uint64_t on_cpu_rewalked_ = 0;
  uint64_t with_fp_frames_ = 0;
  uint64_t samples_without_baseline_ = 0;
  // dwarf mode: per tid, the record of its last switch-out's stack copy (HPD_EVENT_SWITCH_STACK),
  // until its off-CPU record (same time) takes it, the thread exits or switches out again.
  struct SwitchStack {
    uint64_t time_ns;
    std::vector<uint8_t> bytes;
  };
  std::unordered_map<int32_t, SwitchStack> switch_stacks_;
  bool switch_stacks_expected_ = false;
  uint64_t off_cpu_with_copy_ = 0;
  uint64_t off_cpu_without_copy_ = 0;
  uint64_t split_at_wakeup_ = 0;
  uint64_t without_wakeup_ = 0;
  uint64_t charged_waits_ = 0;
  uint64_t charged_ns_ = 0;
  Event event_;  // the sample being decoded
};

// The comm of a record, without the padding.
std::string comm_of(const hpd_event_header& header);

}  // namespace hpd
