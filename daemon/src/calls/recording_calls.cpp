// RecordingCallCounter: starts, feeds and finishes a CallCounter from a recording backend's loop.
#include "calls/recording_calls.h"

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
