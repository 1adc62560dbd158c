// Symbolizes a RawProfile into a Profile: unique addresses per module, resolved once.
#pragma once

#include <memory>

#include "hpd/model/profile.h"
#include "hpd/model/raw_profile.h"
#include "hpd/symbolizer/symbolizer.h"

namespace hpd {

struct ConvertOptions {
  bool kernel_frames = true;  // keep kernel frames (resolved from kallsyms)
  std::string kallsyms_path = "/proc/kallsyms";
  // Kernel symbols already read (by the recording, RecordResult::kernel_symbols): used instead of
  // reading kallsyms_path.
  std::shared_ptr<const KernelSymbols> kernel_symbols;
};

// Builds the symbolized Profile.
// - Each unique (module, file offset) is resolved once, in one Symbolizer::resolve batch per module;
//   each unique raw stack (per process, mapping epoch and on/off-CPU) is built into the prefix tree once.
// - Return addresses are looked up at address - 1 and stored so ("nudged") in Frame::address; exact
//   instruction pointers as they are. Exact: the user leaf when RawStack::user_leaf says the thread
//   was interrupted there (not after a system call, whose user pc is a return address), and the
//   kernel leaf of an on-CPU sample. Every caller frame, and every kernel frame of an off-CPU
//   sample (the kernel leaf is a call into the scheduler), is a return address.
// - Stacks run root first: user frames from the outermost to the user leaf, then kernel frames from
//   the syscall entry to the kernel leaf; one Frame per inline level (inline_depth 0..n, outer first).
// - Categories: kUser / kKernel; every frame of an off-CPU sample is kIdle.
// - Addresses outside every mapping become "0x<address>" frames (no lib); modules whose file cannot
//   be read give "<basename>+0x<file offset>" frames and are listed in meta.missing_modules (as is
//   "[kernel.kallsyms]" when kernel addresses exist but kallsyms cannot be read).
// - One Thread per (pid, tid) that has samples or lost data; other threads are omitted. Released
//   samples (RawProfile::released) become the threads' sample_sums, each resolved as its stack was
//   at the sum's first sample.
// - Call edges are resolved too: caller = innermost inlined function at the call site.
// - MIP snapshots become Profile::mip_counts from the last snapshot per (pid, module), never-called
//   functions included; each function is the Func its sampled frames use (the symbolizer's outer
//   function at its entry address), else its demangled MIP name in the module's lib. A process with
//   counts but no samples gets an empty main thread.
Profile symbolize_profile(const RawProfile& raw, Symbolizer& symbolizer, const ConvertOptions& options = {});

// The number of Threads symbolize_profile(raw, ...) gives, found without symbolizing anything (the
// summary of a recording written to a capture, whose names nothing printed needs).
size_t profile_thread_count(const RawProfile& raw);

}  // namespace hpd
