// Helpers for the unwinder tests and bench: real samples from perf_event_open (own minimal ring
// reader), fixture processes, /proc/PID/maps as a RawProcess, and symbolization of unwound stacks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpd/model/raw_profile.h"
#include "hpd/unwind/unwinder.h"

namespace hpd::unwind_test {

struct CaptureOptions {
  uint64_t period_ns = 1'000'000;  // task-clock sampling period
  uint32_t stack_bytes = 16384;    // PERF_SAMPLE_STACK_USER size (0 = no stack copy)
  uint64_t regs_mask = kPerfRegsUnwind;
  bool callchain = false;  // PERF_SAMPLE_CALLCHAIN (user part, frame-pointer walk by the kernel)
  double seconds = 1.0;
  // When > 0, instead of `seconds`: sample until the target has used this much CPU time since the
  // event was enabled (a loaded machine stretches the capture instead of starving it), or until
  // cap_seconds of wall time passed, which only a break reaches.
  double cpu_seconds = 0;
  double cap_seconds = 120;
};

struct CapturedSample {
  uint64_t time_ns = 0;
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t ip = 0;
  UserRegs regs;
  uint64_t stack_requested = 0;     // the size field of the record (after the kernel's clamping)
  std::vector<uint8_t> stack;       // cut to dyn_size
  std::vector<uint64_t> callchain;  // user addresses only, context markers removed

  StackCopy stack_copy() const { return StackCopy{regs.sp(), stack, stack_requested}; }
};

struct CaptureResult {
  std::vector<CapturedSample> samples;
  uint64_t lost = 0;
  uint64_t bytes = 0;  // bytes of PERF_RECORD_SAMPLE records read
  std::string error;   // non-empty when the event could not be opened
};

// Samples `pid` (one thread group, not inherited) with task-clock for opts.seconds, or until it has
// used opts.cpu_seconds of CPU.
CaptureResult capture(pid_t pid, const CaptureOptions& opts);

// The executable mappings of `pid` as a RawProcess; modules are added to `modules` (no build-ids).
RawProcess process_from_maps(pid_t pid, std::vector<RawModule>& modules);

// Symbolized frame: function (outermost real function) and its inline chain, innermost first.
struct SymFrame {
  std::string module;  // basename of the module path
  std::string function;
  std::vector<std::string> inlined;  // innermost first, ending with `function`
};

// Symbolizes an unwound stack (leaf exact, return addresses at address - 1).
class StackSymbolizer {
 public:
  StackSymbolizer();
  ~StackSymbolizer();
  std::vector<SymFrame> symbolize(const RawProcess& process, const std::vector<RawModule>& modules,
                                  const std::vector<uint64_t>& stack);
  SymFrame symbolize_one(const RawProcess& process, const std::vector<RawModule>& modules, uint64_t address,
                         bool return_address);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Chain of function names of a symbolized stack, for messages.
std::string describe(const std::vector<SymFrame>& frames);

// A raw copy of n bytes of the live stack from sp, as the kernel makes for a sample. It reads whole
// frames, AddressSanitizer's redzones between variables included, which is the point: so the copy
// is not instrumented (see the definition).
void copy_raw_stack(uint64_t sp, size_t n, std::vector<uint8_t>& out);

}  // namespace hpd::unwind_test
