// SchedulerFrames: the address ranges of the kernel's scheduler functions (from /proc/kallsyms), so
// that an off-CPU stack's kernel part can start at the function that blocked (futex_wait_queue,
// do_nanosleep, pipe_read...) rather than at __schedule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace hpd {

class KernelSymbols;

class SchedulerFrames {
 public:
  // From the kernel's symbols as the symbolizer reads them (/proc/kallsyms, once per recording): a
  // scheduler function (t or T) ends where the next t or T symbol begins. An empty table (kallsyms
  // unreadable, or its addresses 0 under kptr_restrict) gives no ranges.
  static SchedulerFrames from_symbols(const KernelSymbols& symbols);

  [[nodiscard]] bool contains(uint64_t address) const;
  [[nodiscard]] size_t size() const { return ranges_.size(); }
  // Whether a kernel function name is one of the scheduler's own (or the tracing and BPF frames that
  // call the sched_switch program).
  static bool is_scheduler_function(const char* name);

 private:
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;  // sorted [start, end)
};

}  // namespace hpd
