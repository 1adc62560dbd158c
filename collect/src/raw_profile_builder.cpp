// Events to RawProfile: the sample rules shared by both backends (raw_profile_builder.h).
#include "raw_profile_builder.h"

#include <algorithm>

#include "recording_common.h"

namespace hpd {

RawProfileBuilder::RawProfileBuilder(RawProfile& profile, BuilderConfig config, SystemLookups lookups)
    : profile_(profile), config_(config), tracker_(profile, config.tracker, std::move(lookups)) {}

void RawProfileBuilder::on_event(const Event& event) {
  std::visit(
      [this](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, SampleEvent>) {
          on_sample(e);
        } else if constexpr (std::is_same_v<T, MmapEvent>) {
          tracker_.on_mmap(e);
        } else if constexpr (std::is_same_v<T, CommEvent>) {
          tracker_.on_comm(e);
        } else if constexpr (std::is_same_v<T, ExecStartEvent>) {
          tracker_.on_exec_start(e);
        } else if constexpr (std::is_same_v<T, ExecEvent>) {
          tracker_.on_exec(e);
        } else if constexpr (std::is_same_v<T, ForkEvent>) {
          tracker_.on_fork(e);
        } else if constexpr (std::is_same_v<T, ExitEvent>) {
          tracker_.on_exit(e);
          if (e.tail_follows) tails_awaited_.insert(e.tid);
        } else if constexpr (std::is_same_v<T, CpuTailEvent>) {
          on_cpu_tail(e);
        } else if constexpr (std::is_same_v<T, LostEvent>) {
          profile_.lost.lost_records += e.records;
          profile_.lost.throttle_events += e.throttles;
        } else if constexpr (std::is_same_v<T, ThreadLostEvent>) {
          // A thread (or process) known only from its drops is described like one first seen in a sample.
          if (e.records > 0)
            tracker_.thread_for(e.pid, e.tid, config_.tracker.start_ns).lost.lost_records += e.records;
        }
      },
      event);
}

StackEnd RawProfileBuilder::apply_user_state(const SampleEvent& e, const RawProcess& process) {
  const UserRegs& regs = *e.regs;
  const StackCopy copy{regs.sp(), e.stack, e.stack_size};
  const UnwindContext context{&process, &profile_.modules, e.time_ns};
  const uint64_t start = mono_now();
  StackEnd end = StackEnd::kUnknown;
  if (config_.dwarf) {
    end = unwinder_->unwind(context, regs, copy, unwound_);
    std::swap(user_, unwound_);
    ++unwind_.unwound;
  } else if (insert_frameless_leaf_caller(*unwinder_, context, regs, copy, user_)) {
    ++unwind_.leaf_callers;
  }
  unwind_.ns += mono_now() - start;
  return end;
}

// A frame-pointer chain that stopped short of its thread's first frame, walked again with CFI from the
// sample's registers and stack copy: that walk replaces the chain (in user_) when it went all the way or
// to the frame limit; otherwise the chain stays, and kUnknown says so.
StackEnd RawProfileBuilder::cfi_instead_of_chain(const SampleEvent& e) {
  const UserRegs& regs = *e.regs;
  const StackCopy copy{regs.sp(), e.stack, e.stack_size};
  const uint64_t start = mono_now();
  auto walk = [&] {
    const UnwindContext context{&profile_.process(e.pid), &profile_.modules, e.time_ns};
    return unwinder_->unwind(context, regs, copy, unwound_);
  };
  tracker_.has_user_mapping(e.pid, regs.ip(), e.time_ns);
  StackEnd end = walk();
  // A return address in no known mapping: a new read of the maps may show it.
  if (unwinder_->last_unmapped_pc() != 0 &&
      tracker_.has_user_mapping(e.pid, unwinder_->last_unmapped_pc(), e.time_ns))
    end = walk();
  ++unwind_.unwound;
  unwind_.ns += mono_now() - start;
  if (end != StackEnd::kComplete && end != StackEnd::kTruncated) return StackEnd::kUnknown;
  std::swap(user_, unwound_);
  return end;
}

void RawProfileBuilder::drop_samples_before(int32_t pid, uint64_t released_ns) {
  held_pid_ = pid;
  released_ns_ = released_ns;
  std::erase_if(profile_.samples,
                [&](const RawSample& s) { return s.pid == pid && s.time_ns < released_ns; });
}

void RawProfileBuilder::on_sample(const SampleEvent& e) {
  if (e.pid == held_pid_ && e.time_ns < released_ns_) return;  // the hold (drop_samples_before)
  // A sample of a process no longer followed (one the ring held before its exec record): not the
  // client's to have.
  if (tracker_.unfollowed(e.pid, e.time_ns)) {
    ++unfollowed_samples_;
    return;
  }
  unwind_.sample_bytes += e.record_bytes;
  // An index: it stays valid when later calls add threads (or processes).
  const auto thread_index =
      static_cast<size_t>(&tracker_.thread_for(e.pid, e.tid, e.time_ns, e.comm) - profile_.threads.data());

  RawSample sample;
  sample.time_ns = e.time_ns;
  sample.pid = e.pid;
  sample.tid = e.tid;
  sample.cpu = static_cast<uint16_t>(e.cpu);
  sample.kind = e.kind;
  // An off-CPU sample's CPU: what the scheduler charged the thread for its wait after its wakeup.
  sample.cpu_delta_ns = e.cpu_delta_ns;
  if (is_off_cpu_interval(e.kind)) sample.off_cpu_ns = e.off_cpu_ns;

  std::span<const uint64_t> kernel = e.kernel;
  if ((is_off_cpu_interval(e.kind) || e.at_exit) && is_scheduler_frame_) {
    // The blocking function, not the scheduler, is the leaf of an off-CPU stack; of a thread waiting
    // for a CPU, the point where it was preempted (an interrupt's return, a cond_resched) or yielded;
    // of an exit stack, do_exit, not the tracepoint's frames.
    size_t skip = 0;
    while (skip < kernel.size() && is_scheduler_frame_(kernel[skip])) ++skip;
    kernel = kernel.subspan(skip);
  }
  std::span<const uint64_t> user = e.user;
  tracker_.note_sample(e.pid, e.time_ns, e.user_mode, user);

  // A user state of the moment the sample was taken: on-CPU samples, and off-CPU ones of dwarf mode
  // (their switch-out's copy); not an exit stack's.
  const bool unwind_here = unwinder_ != nullptr && e.regs.has_value() && !e.at_exit &&
                           (e.kind == SampleKind::kOnCpu || (config_.dwarf && is_off_cpu_interval(e.kind)));
  StackEnd unwound = StackEnd::kUnknown;
  if (unwind_here) {
    user_.assign(e.user.begin(), e.user.end());
    // The walk needs the mapping of the leaf: read the maps again if it is new (dlopen, JIT).
    if (config_.dwarf) tracker_.has_user_mapping(e.pid, e.regs->ip(), e.time_ns);
    unwound = apply_user_state(e, profile_.process(e.pid));
    // The walk met a return address in no known mapping (a library mapped after the last read): if a
    // new read of the maps shows it, walk again.
    if (config_.dwarf && unwinder_->last_unmapped_pc() != 0 &&
        tracker_.has_user_mapping(e.pid, unwinder_->last_unmapped_pc(), e.time_ns)) {
      user_.assign(e.user.begin(), e.user.end());
      unwound = apply_user_state(e, profile_.process(e.pid));
    }
    // Nothing unwound and no kernel frames: keep at least the sampled instruction.
    if (user_.empty() && kernel.empty() && e.regs->ip() != 0) user_.push_back(e.regs->ip());
    user = user_;
  }

  // How the stack ended, one rule for both backends. The collector's own word (walk_end) decides
  // when the user part is its walk; an unwinding done here replaces it. A sample without user frames
  // failed in a process with user mappings; a kernel thread has none, and its kernel stack is all
  // there is (the perf builder called every such sample failed, the eBPF one only in processes with
  // mappings). A kernel part that filled its limit truncates a stack that was otherwise complete.
  if (e.no_stack_taken) {
    sample.stack_end = StackEnd::kUnknown;
  } else if (unwound != StackEnd::kUnknown) {
    sample.stack_end = unwound;
  } else if (e.user_state_lost || e.walk_end == StackEnd::kFailed) {
    sample.stack_end = StackEnd::kFailed;
  } else if (e.walk_end == StackEnd::kTruncated) {
    sample.stack_end = StackEnd::kTruncated;
  } else if (user.empty()) {
    sample.stack_end = profile_.process(e.pid).mappings.empty() ? StackEnd::kComplete : StackEnd::kFailed;
  } else {
    sample.stack_end = e.walk_end;
  }
  // A frame-pointer chain that stopped by itself is whole when it stopped in its thread's first frame
  // (_start, clone3); anywhere else a frame without a frame pointer (a library built without them)
  // or a broken chain ended it, and the callers above are missing.
  if (e.fp_chain_ended && unwound == StackEnd::kUnknown && sample.stack_end == StackEnd::kComplete &&
      unwinder_ != nullptr && !user.empty()) {
    const UnwindContext context{&profile_.process(e.pid), &profile_.modules, e.time_ns};
    if (!unwinder_->is_outermost_frame(context, user.back(), user.size() > 1)) {
      sample.stack_end = StackEnd::kFailed;
      if (config_.cfi_fallback && unwind_here) {
        const StackEnd end = cfi_instead_of_chain(e);
        if (end != StackEnd::kUnknown) {
          sample.stack_end = end;
          user = user_;
        }
      }
    }
  }
  // A thread past its exit never returns to user mode: a sample taken later in its exit (tearing down
  // its memory, whose user stack can no longer be read) has the user stack of its exit stack, taken
  // when it entered do_exit, when its own walk failed from the same user instruction.
  if (!e.at_exit && sample.kind == SampleKind::kOnCpu && sample.stack_end == StackEnd::kFailed &&
      !user.empty() && thread_index < ends_.size()) {
    const ThreadEnd& end = ends_[thread_index];
    if (end.exit_stack && end.exit.time_ns <= e.time_ns && end.exit.stack != kNoIndex &&
        end.exit.stack_end == StackEnd::kComplete) {
      const std::span<const uint64_t> exit_user = profile_.stacks.user_frames(end.exit.stack);
      if (!exit_user.empty() && exit_user.front() == user.front()) {
        user_.assign(exit_user.begin(), exit_user.end());
        user = user_;
        sample.stack_end = StackEnd::kComplete;
        ++samples_after_exit_stack_;
      }
    }
  }
  if (e.kernel_truncated && sample.stack_end != StackEnd::kFailed && sample.stack_end != StackEnd::kUnknown)
    sample.stack_end = StackEnd::kTruncated;
  if (e.kernel_failed && !e.no_stack_taken) sample.stack_end = StackEnd::kFailed;

  if (!kernel.empty() || !user.empty())
    sample.stack =
        profile_.stacks.intern(kernel, user, e.user_leaf.value_or(presumed_user_leaf(e.kernel.size())));
  tracker_.note_unplaced(e.pid, user, e.time_ns);
  if (ends_.size() <= thread_index) ends_.resize(thread_index + 1);
  ThreadEnd& end = ends_[thread_index];
  if (e.at_exit) {
    // Not a sample yet: the CPU time after the thread's last sample will be, with this stack.
    end.exit = sample;
    end.exit_stack = true;
    return;
  }
  count_stack_end(thread_index, sample.stack_end);
  if (sample.kind == SampleKind::kOnCpu) {
    end.sampled = true;
    end.last_ns = std::max(end.last_ns, sample.time_ns);
    end.cpu = sample.cpu;
  }
  profile_.samples.push_back(sample);
  ++samples_;
}

void RawProfileBuilder::forget_exited(uint64_t exited_before_ns) {
  const RawProfile::Forgotten forgotten = profile_.forget_exited(exited_before_ns);
  profile_.release_unmapped_module_files();
  tracker_.forget(forgotten.pids, forgotten.tids);
  for (const int32_t tid : forgotten.tids) tails_awaited_.erase(tid);
  std::vector<ThreadEnd> ends(profile_.threads.size());
  for (size_t i = 0; i < ends_.size() && i < forgotten.threads.size(); ++i) {
    if (forgotten.threads[i] != kNoIndex) ends[forgotten.threads[i]] = ends_[i];
  }
  ends_ = std::move(ends);
  renumber_exit_stacks(profile_.forget_unused_stacks(exit_stacks()));
}

void RawProfileBuilder::forget_released_stacks() {
  renumber_exit_stacks(profile_.forget_released_stacks(exit_stacks()));
}

// The exit stacks still waiting for their threads' CPU tails: the builder's own references to stacks.
std::vector<uint32_t> RawProfileBuilder::exit_stacks() const {
  std::vector<uint32_t> stacks;
  for (const ThreadEnd& end : ends_) {
    if (end.exit_stack) stacks.push_back(end.exit.stack);
  }
  return stacks;
}

void RawProfileBuilder::renumber_exit_stacks(const std::vector<uint32_t>& renumbered) {
  for (ThreadEnd& end : ends_) {
    if (end.exit_stack && end.exit.stack < renumbered.size()) end.exit.stack = renumbered[end.exit.stack];
  }
}

void RawProfileBuilder::count_stack_end(size_t thread_index, StackEnd stack_end) {
  RawThread& thread = profile_.threads[thread_index];
  if (stack_end == StackEnd::kFailed) {
    ++profile_.lost.stack_failures;
    ++thread.lost.stack_failures;
  } else if (stack_end == StackEnd::kTruncated) {
    ++profile_.lost.truncated_stacks;
    ++thread.lost.truncated_stacks;
  }
}

// The CPU time the thread used after its last sample becomes a sample of its own at the thread's end,
// with the stack where the thread exited (the task is gone by now: no stack to take). Without one
// (its record lost, or a backend that takes none) the sample has no stack: unattributed time, not a
// repeat of an older stack, which would give the function of the last sample the rest of the thread's
// run and its whole exit. A thread with neither samples nor an exit stack gets none.
void RawProfileBuilder::on_cpu_tail(const CpuTailEvent& e) {
  tails_awaited_.erase(e.tid);
  if (e.excess_ns != 0) take_back_cpu(e.tid, e.excess_ns);
  const RawThread* thread = profile_.find_thread(e.pid, e.tid);
  if (thread == nullptr) return;
  const auto index = static_cast<size_t>(thread - profile_.threads.data());
  if (index >= ends_.size()) return;
  ThreadEnd& end = ends_[index];
  if (!end.sampled && !end.exit_stack) return;
  // Once: a thread id used again starts over.
  const ThreadEnd taken = end;
  end = ThreadEnd{};
  if (e.cpu_ns == 0) return;
  RawSample tail;
  if (taken.exit_stack) {
    tail = taken.exit;
  } else {
    tail.pid = e.pid;
    tail.tid = e.tid;
    tail.cpu = taken.cpu;
    tail.stack_end = StackEnd::kUnknown;
  }
  tail.kind = SampleKind::kOnCpu;
  tail.time_ns = std::max({tail.time_ns, taken.last_ns, thread->end_ns});
  tail.cpu_delta_ns = e.cpu_ns;
  count_stack_end(index, tail.stack_end);
  profile_.samples.push_back(tail);
  ++cpu_tails_;
}

// The thread's last samples were given `excess_ns` of CPU time that was not its own: it comes off them
// (on-CPU ones, and off-CPU ones given what the scheduler charged for a wait), the latest first, none
// below zero. They are among the last samples added, as the thread has just ended: the search goes
// back a bounded way.
void RawProfileBuilder::take_back_cpu(int32_t tid, uint64_t excess_ns) {
  constexpr size_t kSearched = 1 << 16;
  ++threads_with_cpu_excess_;
  std::vector<RawSample>& samples = profile_.samples;
  const size_t stop = samples.size() > kSearched ? samples.size() - kSearched : 0;
  for (size_t i = samples.size(); i > stop && excess_ns != 0; --i) {
    RawSample& s = samples[i - 1];
    if (s.tid != tid) continue;
    const uint64_t taken = std::min(excess_ns, s.cpu_delta_ns);
    s.cpu_delta_ns -= taken;
    excess_ns -= taken;
    cpu_taken_back_ns_ += taken;
  }
  cpu_excess_left_ns_ += excess_ns;
}

}  // namespace hpd
