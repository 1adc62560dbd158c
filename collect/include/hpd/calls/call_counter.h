// CallCounter: exact (caller, callee) call counts of target processes from their mcount / __fentry__
// instrumentation, read from outside with eBPF uprobes.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "hpd/calls/call_stats.h"
#include "hpd/model/raw_profile.h"

namespace hpd::calls {

class CallCountError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CallCounterOptions {
  bool follow_children = true;  // processes the targets fork are counted too
  // Processes counted from the start: in the targets before the fork hook is attached, so that every
  // process they fork from then on is followed (add_process still probes their modules). Those they
  // forked before are given with add_child.
  std::vector<int32_t> targets = {};
  // Functions probed at their first instruction (NOP sites) are also timed, from their entry to
  // their return (uprobe sessions, Linux 6.13): RawProfile::call_latency. On an older kernel they are
  // counted only, and a message says so. Off (the default): no return probe is placed, and a message
  // says the latency was not measured and how to have it.
  bool time_calls = false;
  // A client who may trace only processes running with their own credentials (a user's session
  // through hpd): a target that executes a program with other credentials (a set-user-ID one) is
  // neither counted nor probed from that exec on, and a message says so.
  bool restrict_to_client = false;
  uint32_t client_uid = 0;
  uint32_t client_gid = 0;
  // With time_calls: the sampling programs' map of timed calls' entries (timed_entry.bpf.h), which the
  // timing program then writes for their stack walks; -1: none (no recording walks stacks here).
  int timed_entries_fd = -1;
};

// Loads the counting program on construction and attaches probes as modules are added. Probes sit
// on files (every process mapping the file traps at them while attached; the program counts only
// the target processes). Destruction detaches everything; the targets' code is restored by the kernel.
class CallCounter {
 public:
  // Throws CallCountError when the program cannot be loaded (no BPF, no uprobe_multi support).
  explicit CallCounter(CallCounterOptions options);
  ~CallCounter();
  CallCounter(const CallCounter&) = delete;
  CallCounter& operator=(const CallCounter&) = delete;

  // A launched command held before its exec (or stopped right after it, before its first
  // instruction): counts process `pid` and probes `executable` (and the libc hooks it may need) now,
  // so that its first calls after the exec are counted.
  // `shown` names the executable in messages when `executable` is a path such as /proc/PID/exe.
  void add_launched(int32_t pid, const std::string& executable, const std::string& shown = "");
  // Counts this process (and, with follow_children, the processes it forks from now on) and probes
  // every instrumented module it maps now.
  void add_process(int32_t pid);
  // A process that a target forked before the counter followed it (found by the recording's walk of
  // the targets' children): counted and probed as a child the fork hook followed, with no message when
  // no module of it is instrumented.
  void add_child(int32_t pid);
  // Re-reads the maps of the counted processes and probes modules mapped since (dlopen, exec).
  // Cheap to call often: it does the work at most every `min_interval_ms`.
  void rescan(uint32_t min_interval_ms = 100);

  // Detaches every probe, then moves the counted edges into `profile.call_edges` (adding processes
  // that only the counter saw) and returns the statistics. The counter is finished afterwards.
  CallCountStats finish(RawProfile& profile);

  // Statistics so far (hits are read at finish()).
  [[nodiscard]] const CallCountStats& stats() const;
  // Whether the timing program writes the map given as CallCounterOptions::timed_entries_fd.
  [[nodiscard]] bool writes_timed_entries() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Why call counting cannot work here, or "" when it can (the program is loaded once to find out).
std::string call_counter_unavailable_reason();

}  // namespace hpd::calls
