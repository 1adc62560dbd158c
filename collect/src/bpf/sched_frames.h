// SchedulerFrames: the address ranges of the kernel's scheduler functions (from /proc/kallsyms), so
// that an off-CPU stack's kernel part can start at the function that blocked (futex_wait_queue,
// do_nanosleep, pipe_read...) rather than at __schedule.
#pragma once

#include <cstdint>
#include <istream>
#include <utility>
#include <vector>

namespace hpd {

class SchedulerFrames {
 public:
  // From a kallsyms listing ("address type name [module]" lines, sorted or not). Addresses that read
  // as 0 (kptr_restrict) give no ranges.
  static SchedulerFrames from_kallsyms(std::istream& in);
  // /proc/kallsyms; empty when it cannot be read.
  static SchedulerFrames load();

  [[nodiscard]] bool contains(uint64_t address) const;
  [[nodiscard]] size_t size() const { return ranges_.size(); }
  // Whether a kernel function name is one of the scheduler's own (or the tracing and BPF frames that
  // call the sched_switch program).
  static bool is_scheduler_function(const char* name);

 private:
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;  // sorted [start, end)
};

}  // namespace hpd
