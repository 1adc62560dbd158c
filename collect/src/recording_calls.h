// The call counter as both recording backends run it beside sampling (RecordOptions::count_calls):
// hpd's in-process runtime for a launched command, eBPF uprobes otherwise. It also holds the runtime's
// allocation log (RecordOptions::sample_allocations), which travels the same way: the runtime preloaded
// into the launched command, its log read when the recording ends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpd/calls/alloc_probes.h"
#include "hpd/collect/recorder.h"

namespace hpd {

namespace calls {
class AllocLog;
class CallCounter;
class PreloadTable;
}  // namespace calls

// Never throws for a counter that cannot run: the reason becomes a message and sampling goes on.
// Made before the command is launched: it decides whether the command gets the runtime.
class RecordingCallCounter {
 public:
  // `timed_entries_fd`: the eBPF backend's map of timed calls' entries (CallCounterOptions), or -1.
  explicit RecordingCallCounter(const RecordOptions& options, int timed_entries_fd = -1);
  ~RecordingCallCounter();
  RecordingCallCounter(const RecordingCallCounter&) = delete;
  RecordingCallCounter& operator=(const RecordingCallCounter&) = delete;

  // "NAME=VALUE" entries to launch the command with (the runtime's preload), or none.
  [[nodiscard]] std::vector<std::string> launch_environment() const;
  // The runtime library the command is launched with, or "" (uprobes, or no counting).
  [[nodiscard]] std::string runtime_in_use() const { return table_ ? runtime_ : std::string(); }
  // A message for the user among the call counter's.
  void note(const std::string& message) { stats_.messages.push_back(message); }
  // The recording's stack walks put back the return addresses the runtime's hook replaced (the eBPF
  // backend's cfi and fp walks, calls_unwind.bpf.h), so sampled stacks of timed calls are whole.
  void set_stacks_through_hook() { stacks_through_hook_ = true; }
  // Whether the uprobes' timing program writes the map given to the constructor.
  [[nodiscard]] bool writes_timed_entries() const;

  // A launched command, before it is released to exec `argv0` (resolved through PATH).
  void add_launched(int32_t pid, const std::string& argv0);
  // A running process given with --pid.
  void add_process(int32_t pid);
  // A process a target forked before the recording followed its children (the backends' walk of the
  // targets' children): its calls are counted as those of a child forked later.
  void add_child(int32_t pid);
  // A command its launcher holds stopped right after its exec (RecordOptions::pid_held_at_exec):
  // probed as a launched command, through /proc/PID/exe.
  void add_held_at_exec(int32_t pid);
  // From the poll loop: probes modules mapped since the last call (rate-limited inside).
  void poll();
  // After sampling stopped: detaches, adds the edges (and the runtime's latencies) to
  // result.profile and fills result.calls; reads the sampled allocations into result.profile.
  void finish(RecordResult& result);

 private:
  void fail(const std::string& what);
  // Runs `step` on the uprobes counter, if it counts; a CallCountError stops the counting (fail).
  void with_counter(const std::function<void(calls::CallCounter&)>& step);
  void start_uprobes(const RecordOptions& options, int timed_entries_fd);

  std::unique_ptr<calls::CallCounter> counter_;
  std::unique_ptr<calls::PreloadTable> table_;
  std::unique_ptr<calls::AllocLog> alloc_;
  // --alloc --pid: uprobes on each given process's allocator (alloc_probes.h).
  uint64_t alloc_probe_mean_ = 0;  // 0: not asked for
  std::vector<std::unique_ptr<calls::AllocProbes>> alloc_probes_;
  calls::AllocProbeClient alloc_probe_client_;
  std::string alloc_source_;
  bool alloc_handed_over_ = false;  // alloc_ is a client's log (RecordOptions::alloc_log_fd)
  std::string alloc_runtime_;
  std::vector<std::string> alloc_messages_;
  std::string runtime_;
  CallCountStats stats_;
  bool stacks_through_hook_ = false;
  bool table_handed_over_ = false;  // RecordOptions::call_table_fd: the client's, untrusted
};

}  // namespace hpd
