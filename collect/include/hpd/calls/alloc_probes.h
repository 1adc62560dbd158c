// `hpctl record --alloc --pid PID`: the allocations of a process already running, sampled from outside
// through uprobes on its allocator's entry points (bpf/alloc.bpf.c), with the sampling decision in the
// kernel. The records become the same RawProfile allocation data hpd's in-process runtime produces
// (alloc_log.h), so the report, pprof, the capture and the Firefox export need nothing else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpd/calls/allocator_symbols.h"
#include "hpd/model/raw_profile.h"

namespace hpd::calls {

// One module of the target whose allocator entry points are probed (allocator_symbols.h).
struct AllocatorModule {
  std::string path;  // as the target maps it
  ModuleAllocators allocators;
};

// The modules `pid` maps that define malloc or free as dynamic symbols, or an allocator under other
// names (mimalloc's mi_*, je_*, _rjem_*, tc_*) in either symbol table. Empty when none does (a static
// program: its glibc malloc is in .symtab only, which is not looked at for the C library's names).
std::vector<AllocatorModule> find_allocators(int32_t pid);

// Who the probes are for. A client restricted to their own processes (a user's session through hpd)
// loses the target when it executes a program with other credentials (a set-user-ID one): the
// probes then stop looking at it at once, in the kernel, and are taken out of it.
struct AllocProbeClient {
  bool restrict_to_client = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
};

class AllocProbes {
 public:
  // Finds the allocator of `pid`, loads the program and attaches its probes. Throws CallCountError
  // saying why it cannot (no allocator found: naming the process and the symbols looked for).
  AllocProbes(int32_t pid, uint64_t mean_bytes, AllocProbeClient client = {});
  ~AllocProbes();
  AllocProbes(const AllocProbes&) = delete;
  AllocProbes& operator=(const AllocProbes&) = delete;

  // "uprobes on pid N's allocator in PATH" for the summary.
  [[nodiscard]] const std::string& description() const;
  // Detaches (the target runs on unprobed), reads what is left in the ring, and appends the sampled
  // allocations to profile.allocations, their frees matched, and fills profile.alloc. Returns
  // messages for the user (the frees of unsampled addresses, free(NULL), what was lost).
  std::vector<std::string> finish(RawProfile& profile);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpd::calls
