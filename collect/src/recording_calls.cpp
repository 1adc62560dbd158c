// RecordingCallCounter: chooses the runtime or uprobes, then starts, feeds and finishes the counter
// from a recording backend's loop.
#include "recording_calls.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "hpd/base/process.h"
#include "hpd/calls/alloc_abi.h"
#include "hpd/calls/alloc_log.h"
#include "hpd/calls/alloc_probes.h"
#include "hpd/calls/allocator_symbols.h"
#include "hpd/calls/call_counter.h"
#include "hpd/calls/discovery.h"
#include "hpd/calls/preload_table.h"
#include "hpd/collect/call_graph_choice.h"

namespace hpd {

RecordingCallCounter::RecordingCallCounter(const RecordOptions& options, int timed_entries_fd) {
  if (options.sample_allocations && !options.target.command.empty()) {
    alloc_runtime_ = options.call_runtime.empty() ? calls::find_preload_runtime() : options.call_runtime;
    std::string why;
    if (alloc_runtime_.empty())
      why =
          "hpd's runtime (libhpdcalls.so) was not found next to this program, in ../lib/hpd, or in the "
          "install directory (set HPD_CALLS_RUNTIME to its path)";
    else
      why = calls::preload_unusable_reason(resolve_command(options.target.command.front()));
    // A program with its own mcount still takes the allocation hooks: only a static one cannot.
    if (why.find("defines mcount") != std::string::npos) why.clear();
    if (why.empty()) {
      try {
        alloc_ = std::make_unique<calls::AllocLog>(options.alloc_mean_bytes);
      } catch (const calls::CallCountError& e) {
        why = e.what();
      }
    }
    if (!why.empty()) alloc_messages_.push_back("allocations not sampled: " + why);
  }
  if (options.sample_allocations && options.target.command.empty() && options.alloc_log_fd < 0 &&
      !options.target.pids.empty())
    alloc_probe_mean_ = options.alloc_mean_bytes != 0 ? options.alloc_mean_bytes : HPD_ALLOC_DEFAULT_MEAN;
  alloc_probe_client_ =
      calls::AllocProbeClient{options.restrict_to_client, options.client_uid, options.client_gid};
  if (options.alloc_log_fd >= 0) {
    // The launcher made the log and preloaded the runtime: read it through the descriptor only.
    try {
      alloc_ = std::make_unique<calls::AllocLog>(UniqueFd(::fcntl(options.alloc_log_fd, F_DUPFD_CLOEXEC, 0)));
      alloc_handed_over_ = true;
    } catch (const calls::CallCountError& e) {
      alloc_messages_.push_back(std::string("allocations not sampled: ") + e.what());
    }
  }
  if (!options.count_calls) return;
  if (options.call_table_fd >= 0) {
    // The launcher preloaded the runtime already: read its table, whatever happens (uprobes would find
    // no glibc hook to count at, the runtime's mcount takes the calls). The runtime probed for sampled
    // stacks is this program's own, never a path the launcher names.
    runtime_ = options.call_runtime.empty() ? calls::find_preload_runtime() : options.call_runtime;
    try {
      table_ =
          std::make_unique<calls::PreloadTable>(UniqueFd(::fcntl(options.call_table_fd, F_DUPFD_CLOEXEC, 0)));
      table_handed_over_ = true;
      stats_.enabled = true;
      stats_.counter = "runtime";
    } catch (const calls::CallCountError& e) {
      stats_.messages.push_back(std::string("call counts unavailable: ") + e.what());
    }
    return;
  }
  if (!options.target.command.empty() && options.call_counter != CallCounterKind::kUprobes) {
    // The runtime, when the command can take it; else uprobes, saying why.
    std::string why;
    runtime_ = options.call_runtime.empty() ? calls::find_preload_runtime() : options.call_runtime;
    if (runtime_.empty()) {
      why =
          "hpd's call-counting runtime (libhpdcalls.so) was not found next to this program, in "
          "../lib/hpd, or in the install directory (set HPD_CALLS_RUNTIME to its path)";
    } else {
      why = calls::preload_unusable_reason(resolve_command(options.target.command.front()));
    }
    if (why.empty()) {
      try {
        table_ = std::make_unique<calls::PreloadTable>();
        stats_.enabled = true;
        stats_.counter = "runtime";
        return;
      } catch (const calls::CallCountError& e) {
        why = e.what();
      }
    }
    if (options.call_counter == CallCounterKind::kRuntime) {
      stats_.messages.push_back("call counts unavailable: " + why);
      return;
    }
    stats_.messages.push_back("call counts: " + why + "; counting with uprobes instead");
  }
  start_uprobes(options, timed_entries_fd);
}

RecordingCallCounter::~RecordingCallCounter() = default;

bool RecordingCallCounter::writes_timed_entries() const {
  return counter_ && counter_->writes_timed_entries();
}

void RecordingCallCounter::start_uprobes(const RecordOptions& options, int timed_entries_fd) {
  try {
    counter_ = std::make_unique<calls::CallCounter>(calls::CallCounterOptions{
        .follow_children = options.follow_children,
        .targets = options.target.pids,
        .time_calls = options.time_calls,
        .restrict_to_client = options.restrict_to_client,
        .client_uid = options.client_uid,
        .client_gid = options.client_gid,
        .timed_entries_fd = timed_entries_fd,
    });
    stats_.counter = "uprobes";
  } catch (const calls::CallCountError& e) {
    stats_.messages.push_back(std::string("call counts unavailable: ") + e.what());
  }
}

std::vector<std::string> RecordingCallCounter::launch_environment() const {
  std::vector<std::string> env = table_ ? table_->environment(runtime_) : std::vector<std::string>{};
  if (alloc_) {
    // One LD_PRELOAD: the runtime once, whether it counts calls, samples allocations, or both.
    std::vector<std::string> more = alloc_->environment(alloc_runtime_);
    const bool preloaded = std::any_of(env.begin(), env.end(),
                                       [](const std::string& e) { return e.rfind("LD_PRELOAD=", 0) == 0; });
    for (std::string& e : more)
      if (!preloaded || e.rfind("LD_PRELOAD=", 0) != 0) env.push_back(std::move(e));
  }
  return env;
}

void RecordingCallCounter::fail(const std::string& what) {
  std::vector<std::string> messages = std::move(stats_.messages);
  stats_ = counter_->stats();
  stats_.messages.insert(stats_.messages.begin(), messages.begin(), messages.end());
  stats_.messages.push_back("call counts stopped: " + what);
  counter_.reset();
}

void RecordingCallCounter::with_counter(const std::function<void(calls::CallCounter&)>& step) {
  if (!counter_) return;  // the runtime (or nothing) counts: it needs nothing more
  try {
    step(*counter_);
  } catch (const calls::CallCountError& e) {
    fail(e.what());
  }
}

void RecordingCallCounter::add_launched(int32_t pid, const std::string& argv0) {
  with_counter([&](calls::CallCounter& c) { c.add_launched(pid, resolve_command(argv0)); });
}

void RecordingCallCounter::add_process(int32_t pid) {
  if (alloc_probe_mean_ != 0) {
    try {
      alloc_probes_.push_back(
          std::make_unique<calls::AllocProbes>(pid, alloc_probe_mean_, alloc_probe_client_));
      alloc_source_ += (alloc_source_.empty() ? "" : "; ") + alloc_probes_.back()->description();
    } catch (const calls::CallCountError& e) {
      alloc_messages_.push_back(std::string("allocations not sampled: ") + e.what());
    }
  }
  with_counter([&](calls::CallCounter& c) { c.add_process(pid); });
}

void RecordingCallCounter::add_child(int32_t pid) {
  with_counter([&](calls::CallCounter& c) { c.add_child(pid); });
}

void RecordingCallCounter::add_held_at_exec(int32_t pid) {
  if (!counter_) return;
  const std::string exe_link = "/proc/" + std::to_string(pid) + "/exe";
  char target[4096];
  const ssize_t n = ::readlink(exe_link.c_str(), target, sizeof target - 1);
  with_counter([&](calls::CallCounter& c) {
    c.add_launched(pid, exe_link, n > 0 ? std::string(target, size_t(n)) : exe_link);
  });
}

void RecordingCallCounter::poll() {
  if (counter_) counter_->rescan();
}

void RecordingCallCounter::finish(RecordResult& result) {
  if (counter_) {
    std::vector<std::string> messages = std::move(stats_.messages);
    stats_ = counter_->finish(result.profile);
    stats_.counter = "uprobes";
    stats_.messages.insert(stats_.messages.begin(), messages.begin(), messages.end());
    counter_.reset();
  }
  if (table_) {
    // A table handed over by the client is read for the processes this recording follows only (those
    // its access checks admitted); a slot naming another pid was written by someone else.
    std::set<int32_t> followed;
    for (const RawProcess& process : result.profile.processes) followed.insert(process.pid);
    const bool usable = table_handed_over_ ? table_->read(result.profile, stats_, &followed,
                                                          calls::PreloadTable::kClientLimits)
                                           : table_->read(result.profile, stats_);
    if (!usable) {
      // stats_.messages says why; nothing below applies to a table that was not read.
    } else if (stats_.runtime.processes == 0)
      stats_.messages.push_back(
          "call counts: hpd's runtime never started in the command (it cleared LD_PRELOAD, or it is a "
          "script whose interpreter is static); nothing was counted");
    else if (stats_.runtime.calls_timed != 0 && !stacks_through_hook_)
      stats_.messages.push_back(
          "call counts: while the runtime times a call, its return address points to the runtime's hook, "
          "and this recording's stack walks do not put the original back (only the eBPF backend's cfi and "
          "fp walks do), so sampled stacks show hpd_calls_return_trampoline in place of the callers: self "
          "CPU is exact, inclusive CPU of instrumented callers is not (counting with uprobes keeps whole "
          "stacks, without latency)");
    else if (stats_.runtime.calls == 0)
      stats_.messages.push_back(std::string("call counts: the command made no calls to mcount/__fentry__: ") +
                                calls::kBuildAdvice);
    table_.reset();
  }
  if (alloc_) {
    // A log handed over by the client: the processes this recording follows only, within limits.
    std::set<int32_t> followed;
    for (const RawProcess& process : result.profile.processes) followed.insert(process.pid);
    std::vector<std::string> messages =
        alloc_handed_over_ ? alloc_->read(result.profile, &followed, calls::AllocLog::kClientLimits)
                           : alloc_->read(result.profile);
    for (std::string& m : messages) alloc_messages_.push_back(std::move(m));
    for (std::string& m : calls::allocators_not_seen(result.profile)) alloc_messages_.push_back(std::move(m));
    alloc_.reset();
  }
  for (auto& probes : alloc_probes_)
    for (std::string& m : probes->finish(result.profile)) alloc_messages_.push_back(std::move(m));
  alloc_probes_.clear();
  result.alloc_source = std::move(alloc_source_);
  result.alloc_messages = std::move(alloc_messages_);
  result.profile.info.call_counter = stats_.enabled ? stats_.counter : std::string();
  result.calls = std::move(stats_);
}

}  // namespace hpd
