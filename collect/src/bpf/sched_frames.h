// SchedulerFrames: the address ranges of the kernel's scheduler functions (from /proc/kallsyms), so
// that an off-CPU stack's kernel part can start at the function that blocked (futex_wait_queue,
// do_nanosleep, pipe_read...) rather than at __schedule; and by the same means those of the system-call
// entries, which tell perf_event's samples taken in a system call from those taken in an interrupt.
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
  static SchedulerFrames from_kallsyms(std::istream& in) { return from_kallsyms(in, is_scheduler_function); }
  // /proc/kallsyms; empty when it cannot be read.
  static SchedulerFrames load() { return load(is_scheduler_function); }
  // The same for the functions `pick` chooses by name (is_syscall_entry: the system-call entries).
  static SchedulerFrames from_kallsyms(std::istream& in, bool (*pick)(const char*));
  static SchedulerFrames load(bool (*pick)(const char*));

  [[nodiscard]] bool contains(uint64_t address) const;
  [[nodiscard]] size_t size() const { return ranges_.size(); }
  // Whether a kernel function name is one of the scheduler's own (or the tracing and BPF frames that
  // call the sched_switch program).
  static bool is_scheduler_function(const char* name);
  // Whether a kernel function name is where a thread that made a system call entered the kernel
  // (entry_SYSCALL_64, the compat entries), or where a new thread starts, on the way back from
  // clone (ret_from_fork): the outermost kernel frame of such a thread's stack. Its user pc is the
  // instruction after the `syscall`. Interrupts and exceptions enter elsewhere (asm_sysvec_*,
  // asm_exc_*, asm_common_interrupt).
  static bool is_syscall_entry(const char* name);

 private:
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;  // sorted [start, end)
};

}  // namespace hpd
