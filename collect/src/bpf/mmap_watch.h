// MmapWatch: the kernel's PERF_RECORD_MMAP2 records for the eBPF backend.
//
// The eBPF programs report samples, forks, execs and exits; where a process's code lies comes from
// /proc/PID/maps, read when its first record is handled. A process that lives a few milliseconds
// (a compiler driver's children, `ls` in a shell loop) is gone by then, and its samples kept only
// unresolved addresses: 85% failed stacks on a loop of `ls`, against 6% with the perf backend,
// which gets the kernel's mmap records. These are the same records, from one dummy software event
// per CPU (no samples, only side-band records) per watched task set: each target process with its
// future children (inherit), a cgroup, or the whole system. Only the targets' main threads are watched:
// mappings made by their other existing threads are read from /proc, as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "perf/perf_records.h"
#include "perf/ring_buffer.h"

namespace hpd {

class MmapWatch {
 public:
  // What the events watch.
  struct Scope {
    std::vector<int32_t> pids;  // these processes (and the children they create from now on)
    bool children = true;       // with pids: also their children
    int cgroup_fd = -1;         // else the tasks of this cgroup (v2 directory fd)
    // Each record wakes a poll() on fds(): the cfi walk needs a new process's mappings within
    // milliseconds (its samples are walked by frame pointer until then).
    bool wake_per_record = false;
    // else (no pids, no cgroup): every task of the system
  };

  // Opens and maps one event per CPU and per target (a target gone by now is skipped). Throws
  // RecordError, with every event it opened closed again, when an event cannot be opened for
  // another reason (EMFILE: one descriptor per CPU per target adds up with many --pid targets).
  void open(const Scope& scope, const std::vector<int>& cpus, size_t pages_per_ring);
  // Once open with pids: also watches process `pid` (and, with Scope::children, the children it creates
  // from now on), one event per CPU. Throws RecordError as open() does; the events opened stay.
  void add(int32_t pid);
  // Whether open() succeeded with pids: add() then takes one descriptor per CPU.
  [[nodiscard]] bool watches_pids() const { return !scope_.pids.empty(); }
  // Hands every record written since the last call to its callback, ring by ring: executable
  // mappings to `on_mmap`, and the start of each exec (the kernel's COMM record with the exec flag,
  // written before the new image is mapped) to `on_exec`.
  void drain(const std::function<void(const Mmap2Record&)>& on_mmap,
             const std::function<void(const CommRecord&)>& on_exec);
  // The events' descriptors, readable when records wait (with Scope::wake_per_record, after each one).
  [[nodiscard]] std::vector<int> fds() const;
  // Records the kernel could not write because a ring was full.
  [[nodiscard]] uint64_t lost() const { return lost_; }

 private:
  struct Ring {
    UniqueFd fd;
    PerfRingBuffer buffer;
  };
  // False when the target or CPU is gone (ESRCH, ENODEV); throws on other errors.
  bool open_one(int32_t pid, int cpu, unsigned long flags, bool inherit, size_t pages, bool wake);

  std::vector<Ring> rings_;
  Scope scope_;  // once open
  std::vector<int> cpus_;
  size_t pages_per_ring_ = 0;
  RecordLayout layout_;
  std::vector<uint8_t> scratch_;
  uint64_t lost_ = 0;
};

}  // namespace hpd
