// SchedulerFrames: the address ranges of the kernel's scheduler functions (from /proc/kallsyms), so
// that an off-CPU stack's kernel part can start at the function that blocked (futex_wait_queue,
// do_nanosleep, pipe_read...) rather than at __schedule; and by the same means those of the system-call
// entries, which tell perf_event's samples taken in a system call from those taken in an interrupt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace hpd {

class KernelSymbols;

class SchedulerFrames {
 public:
  // From the kernel's symbols as the symbolizer reads them (/proc/kallsyms; in hpd a table kept across
  // recordings): a function that `pick` chooses by name (t or T; by default the scheduler's,
  // is_syscall_entry: the system-call entries) ends where the next t or T symbol begins. An empty table
  // (kallsyms unreadable, or its addresses 0 under kptr_restrict) gives no ranges.
  static SchedulerFrames from_symbols(const KernelSymbols& symbols,
                                      bool (*pick)(const char*) = is_scheduler_function);

  // One more range [start, end): the recording's own BPF programs, which a table read before they
  // were loaded (hpd keeps one across recordings) does not hold.
  void add(uint64_t start, uint64_t end);
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
