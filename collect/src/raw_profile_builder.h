// The one RawProfile builder: turns the events of either backend (events.h) into samples with their
// stacks, CPU times and how each stack ended, and, through its ProcessTracker, into processes,
// threads and mappings. Free of system calls except through the injected lookups, so tests feed it
// synthetic events.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_set>
#include <vector>

#include "events.h"
#include "hpd/model/raw_profile.h"
#include "hpd/unwind/unwinder.h"
#include "process_tracker.h"

namespace hpd {

struct BuilderConfig {
  TrackerConfig tracker;
  // dwarf mode: user stacks are unwound here from the samples' registers and stack copies. Otherwise
  // the copies only put back the callers of frameless leaves into the frame-pointer chains.
  bool dwarf = false;
  // Not dwarf: an on-CPU stack whose frame-pointer chain stopped short of its thread's first frame is
  // unwound with CFI from the sample's registers and stack copy (RecordOptions::fp_with_cfi_fallback).
  bool cfi_fallback = false;
};

// What the unwinder did, for RecordResult.
struct UnwindCounters {
  uint64_t unwound = 0;       // dwarf: samples unwound in user space
  uint64_t leaf_callers = 0;  // fp: callers of frameless leaves inserted
  uint64_t ns = 0;            // monotonic time inside the unwinder
  uint64_t sample_bytes = 0;  // bytes of the sample records handled
};

class RawProfileBuilder {
 public:
  RawProfileBuilder(RawProfile& profile, BuilderConfig config, SystemLookups lookups = {});

  void on_event(const Event& event);

  ProcessTracker& processes() { return tracker_; }
  [[nodiscard]] const ProcessTracker& processes() const { return tracker_; }

  // The unwinder for samples with registers and a stack copy (owned by the caller, one per recording).
  // Without one, such samples keep the collector's chain as it is.
  void set_unwinder(Unwinder* unwinder) { unwinder_ = unwinder; }
  // Off-CPU stacks: the kernel part starts at the function that blocked. Leading kernel frames for
  // which this returns true (the scheduler's own: __schedule, schedule, schedule_timeout, the
  // tracepoint's and the program's frames) are dropped.
  void set_scheduler_frames(std::function<bool(uint64_t)> is_scheduler_frame) {
    is_scheduler_frame_ = std::move(is_scheduler_frame);
  }

  [[nodiscard]] uint64_t samples() const { return samples_; }
  // Drops the processes and threads that exited before `exited_before_ns` and every stack nothing
  // names any more, from the profile and from what the builder keeps (RecordOptions::forget_before).
  void forget_exited(uint64_t exited_before_ns);
  // Lets go of every stack only the released samples' sums name (RawProfile::forget_released_stacks),
  // keeping those the builder still holds (exit stacks waiting for their threads' CPU tails);
  // RecordOptions::stack_memory_bound.
  void forget_released_stacks();
  // A command held by its launcher until `released_ns` (a launched command, or one held at its exec):
  // its samples older than that are the hold, not its program's (through hpd, the stopped thread
  // blocked in ptrace_stop), and are dropped, those already in the profile and those still to come.
  void drop_samples_before(int32_t pid, uint64_t released_ns);
  // Samples dropped because their process was no longer followed (ExecEvent::unfollowed).
  [[nodiscard]] uint64_t unfollowed_samples() const { return unfollowed_samples_; }
  [[nodiscard]] const UnwindCounters& unwind_counters() const { return unwind_; }
  // Samples added for the CPU time threads used after their last timer sample (CpuTailEvent).
  [[nodiscard]] uint64_t cpu_tails() const { return cpu_tails_; }
  // CPU time taken back from exited threads' last samples (CpuTailEvent::excess_ns), and what could
  // not be (those samples were no longer in the profile: a continuous chunk took them).
  [[nodiscard]] uint64_t cpu_taken_back_ns() const { return cpu_taken_back_ns_; }
  [[nodiscard]] uint64_t cpu_excess_left_ns() const { return cpu_excess_left_ns_; }
  [[nodiscard]] uint64_t threads_with_cpu_excess() const { return threads_with_cpu_excess_; }
  // On-CPU samples taken in a thread's exit after its exit stack whose walk failed, given that stack's
  // user part (on_sample).
  [[nodiscard]] uint64_t samples_after_exit_stack() const { return samples_after_exit_stack_; }
  // Threads that exited with a CPU tail to come (ExitEvent::tail_follows) which has not come yet.
  [[nodiscard]] size_t tails_awaited() const { return tails_awaited_.size(); }

 private:
  std::vector<uint32_t> exit_stacks() const;
  void renumber_exit_stacks(const std::vector<uint32_t>& renumbered);
  void on_sample(const SampleEvent& e);
  void on_cpu_tail(const CpuTailEvent& e);
  void take_back_cpu(int32_t tid, uint64_t excess_ns);
  // Unwinds (dwarf) or completes (fp) user_ from the sample's registers and stack copy; returns how a
  // dwarf walk ended, kUnknown when none was done.
  StackEnd apply_user_state(const SampleEvent& e, const RawProcess& process);
  StackEnd cfi_instead_of_chain(const SampleEvent& e);

  RawProfile& profile_;
  BuilderConfig config_;
  ProcessTracker tracker_;
  Unwinder* unwinder_ = nullptr;
  std::function<bool(uint64_t)> is_scheduler_frame_;
  std::vector<uint64_t> user_;
  std::vector<uint64_t> unwound_;
  UnwindCounters unwind_;
  // A stack that failed or was truncated counts among the recording's and the thread's losses.
  void count_stack_end(size_t thread_index, StackEnd stack_end);

  // Per thread (by its index in RawProfile::threads): what its CPU tail needs. Copies, not indices into
  // the samples, so that samples already written out may leave memory.
  struct ThreadEnd {
    RawSample exit;           // where it exited (SampleEvent::at_exit): its stack and how it ended
    bool exit_stack = false;  // `exit` is set
    bool sampled = false;     // it had an on-CPU sample
    uint64_t last_ns = 0;     // its last on-CPU sample's time
    uint16_t cpu = 0;         // and CPU
  };
  std::vector<ThreadEnd> ends_;
  uint64_t samples_ = 0;
  uint64_t unfollowed_samples_ = 0;
  uint64_t cpu_tails_ = 0;
  uint64_t cpu_taken_back_ns_ = 0;
  uint64_t cpu_excess_left_ns_ = 0;
  uint64_t threads_with_cpu_excess_ = 0;
  uint64_t samples_after_exit_stack_ = 0;  // user stacks taken from their thread's exit stack
  std::unordered_set<int32_t> tails_awaited_;
  int32_t held_pid_ = 0;  // drop_samples_before
  uint64_t released_ns_ = 0;
};

}  // namespace hpd
