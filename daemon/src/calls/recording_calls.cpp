// RecordingCallCounter: starts, feeds and finishes a CallCounter from a recording backend's loop.
#include "calls/recording_calls.h"

#include <unistd.h>

#include "hpd/calls/call_counter.h"
#include "perf/call_graph_choice.h"

namespace hpd {

RecordingCallCounter::RecordingCallCounter(const RecordOptions& options) {
  if (!options.count_calls) return;
  try {
    counter_ = std::make_unique<calls::CallCounter>(calls::CallCounterOptions{options.follow_children});
  } catch (const calls::CallCountError& e) {
    stats_.messages.push_back(std::string("call counts unavailable: ") + e.what());
  }
}

RecordingCallCounter::~RecordingCallCounter() = default;

void RecordingCallCounter::fail(const std::string& what) {
  stats_ = counter_->stats();
  stats_.messages.push_back("call counts stopped: " + what);
  counter_.reset();
}

void RecordingCallCounter::add_launched(int32_t pid, const std::string& argv0) {
  if (!counter_) return;
  try {
    counter_->add_launched(pid, resolve_command(argv0));
  } catch (const calls::CallCountError& e) {
    fail(e.what());
  }
}

void RecordingCallCounter::add_process(int32_t pid) {
  if (!counter_) return;
  try {
    counter_->add_process(pid);
  } catch (const calls::CallCountError& e) {
    fail(e.what());
  }
}

void RecordingCallCounter::add_held_at_exec(int32_t pid) {
  if (!counter_) return;
  const std::string exe_link = "/proc/" + std::to_string(pid) + "/exe";
  char target[4096];
  const ssize_t n = ::readlink(exe_link.c_str(), target, sizeof target - 1);
  try {
    counter_->add_launched(pid, exe_link, n > 0 ? std::string(target, size_t(n)) : exe_link);
  } catch (const calls::CallCountError& e) {
    fail(e.what());
  }
}

void RecordingCallCounter::poll() {
  if (counter_) counter_->rescan();
}

void RecordingCallCounter::finish(RecordResult& result) {
  if (counter_) {
    stats_ = counter_->finish(result.profile);
    counter_.reset();
  }
  result.calls = std::move(stats_);
}

}  // namespace hpd
