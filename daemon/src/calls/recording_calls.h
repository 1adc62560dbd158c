// The call counter as both recording backends run it beside sampling (RecordOptions::count_calls).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hpd/collect/recorder.h"

namespace hpd {

namespace calls {
class CallCounter;
}

// Never throws for a counter that cannot run: the reason becomes a message and sampling goes on.
class RecordingCallCounter {
 public:
  explicit RecordingCallCounter(const RecordOptions& options);
  ~RecordingCallCounter();
  RecordingCallCounter(const RecordingCallCounter&) = delete;
  RecordingCallCounter& operator=(const RecordingCallCounter&) = delete;

  // A launched command, before it is released to exec `argv0` (resolved through PATH).
  void add_launched(int32_t pid, const std::string& argv0);
  // A running process given with --pid.
  void add_process(int32_t pid);
  // A command its launcher holds stopped right after its exec (RecordOptions::pid_held_at_exec):
  // probed as a launched command, through /proc/PID/exe.
  void add_held_at_exec(int32_t pid);
  // From the poll loop: probes modules mapped since the last call (rate-limited inside).
  void poll();
  // After sampling stopped: detaches, adds the edges to result.profile and fills result.calls.
  void finish(RecordResult& result);

 private:
  void fail(const std::string& what);

  std::unique_ptr<calls::CallCounter> counter_;
  CallCountStats stats_;
};

}  // namespace hpd
