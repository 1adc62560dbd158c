// SchedulerFrames: scheduler function ranges from kallsyms.
#include "bpf/sched_frames.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "hpd/symbolizer/symbolizer.h"

namespace hpd {

bool SchedulerFrames::is_scheduler_function(const char* name) {
  // The switch itself and the generic ways to call it. Functions that decide to wait (futex_wait_queue,
  // do_nanosleep, pipe_read, do_poll, ep_poll...) are not here: they are what an off-CPU stack should show.
  static const char* const kExact[] = {
      "__schedule",
      "schedule",
      "schedule_idle",
      "schedule_preempt_disabled",
      "schedule_timeout",
      "schedule_hrtimeout",
      "schedule_hrtimeout_range",
      "schedule_hrtimeout_range_clock",
      "io_schedule",
      "io_schedule_timeout",
      "preempt_schedule",
      "preempt_schedule_common",
      "preempt_schedule_irq",
      "preempt_schedule_notrace",
      "__cond_resched",
      "__traceiter_sched_switch",
      "__bpf_trace_sched_switch",
      // The exit tracepoint's, in front of do_exit in an exit stack.
      "__traceiter_sched_process_exit",
      "__bpf_trace_sched_process_exit",
      "schedule_timeout_interruptible",
      "schedule_timeout_uninterruptible",
      "schedule_timeout_killable",
      "schedule_timeout_idle",
  };
  for (const char* n : kExact) {
    if (std::strcmp(name, n) == 0) return true;
  }
  // The BPF trampolines and programs in front of the scheduler's frames.
  return std::strncmp(name, "bpf_trace_run", 13) == 0 || std::strncmp(name, "bpf_prog_", 9) == 0 ||
         std::strncmp(name, "bpf_trampoline_", 15) == 0;
}

bool SchedulerFrames::is_syscall_entry(const char* name) {
  return std::strncmp(name, "entry_SYSCALL", 13) == 0 || std::strncmp(name, "entry_SYSENTER", 14) == 0 ||
         std::strncmp(name, "entry_INT80", 11) == 0 || std::strncmp(name, "ret_from_fork", 13) == 0;
}

SchedulerFrames SchedulerFrames::from_symbols(const KernelSymbols& symbols, bool (*pick)(const char*)) {
  // Sorted by address already; weak symbols (w, W) neither start nor end a range.
  const KernelSymbols::Symbol* previous = nullptr;
  SchedulerFrames out;
  for (const KernelSymbols::Symbol& s : symbols.symbols()) {
    if (s.type != 't' && s.type != 'T') continue;
    // A function ends where the next symbol begins.
    if (previous != nullptr && s.address > previous->address && pick(symbols.name(*previous)))
      out.ranges_.emplace_back(previous->address, s.address);
    previous = &s;
  }
  return out;
}

void SchedulerFrames::add(uint64_t start, uint64_t end) {
  if (start >= end) return;
  const std::pair<uint64_t, uint64_t> range{start, end};
  ranges_.insert(std::upper_bound(ranges_.begin(), ranges_.end(), range), range);
}

bool SchedulerFrames::contains(uint64_t address) const {
  const auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), address,
                       [](uint64_t a, const std::pair<uint64_t, uint64_t>& r) { return a < r.first; });
  return it != ranges_.begin() && address < (it - 1)->second;
}

}  // namespace hpd
