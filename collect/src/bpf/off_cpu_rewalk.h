// OffCpuRewalk: cfi mode's second walk of off-CPU stacks that the programs walked by frame pointer
// because the thread blocked before its process's tables were published. Such a thread's stack does not
// change until it runs again, so once the tables are published its stack is read here
// (process_vm_readv) and walked again (CfiMaps::walk_stack); the result replaces the record's user
// stack when the record is decoded. The read counts only if the thread was still off the CPU after it:
// the programs keep the thread's entry in pending_walks from its switch-out until its switch-in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "bpf/cfi_maps.h"

struct hpd_pending_walk;

namespace hpd {

class BpfEventDecoder;

class OffCpuRewalk {
 public:
  // `pending_walks_fd`: the programs' map of struct hpd_pending_walk by tid. `lazy`: tables are compiled
  // only for processes that were sampled (system-wide recordings); a thread waiting here counts as a
  // sample of its process, so that its tables are compiled while it is still off the CPU.
  OffCpuRewalk(int pending_walks_fd, bool lazy) : fd_(pending_walks_fd), lazy_(lazy) {}

  // Walks again the waiting stacks whose process has been published with every table since they were
  // last tried, and hands each walk that no longer lacks a table to `decoder`. Cheap when no thread
  // waits (one map lookup); scans at most every 50 ms unless a process was published since; reads a
  // waiting thread's stack only when its process's tables are all in place, and only for a switch-out
  // before `mappings_read_at` (the mappings made before then have been read and published): a library
  // mapped just before a later switch-out may not be among the published mappings yet, and a walk
  // without it would stop at its first frame there, as the programs' did, and be taken as final.
  void poll(CfiMaps& maps, BpfEventDecoder& decoder, uint64_t mappings_read_at, uint64_t now_ns);

  [[nodiscard]] uint64_t stacks_read() const { return stacks_read_; }

 private:
  int fd_;
  bool lazy_;
  uint64_t last_scan_ns_ = 0;
  uint64_t last_publications_ = ~0ull;
  std::unordered_map<int32_t, CfiMaps::WalkTried> tried_;  // by tid: walks that still lacked a table
  // Reads `bytes` of the waiting thread's stack into stack_ (fewer at the end of its mapping); false
  // when it cannot be read or the thread ran meanwhile.
  bool read_stack(const hpd_pending_walk& w, int32_t tid, size_t bytes);

  std::vector<uint8_t> stack_;
  uint64_t stacks_read_ = 0;
};

}  // namespace hpd
