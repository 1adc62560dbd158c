// Which threads the Firefox Profiler should show and select first (see choose_initial_threads in
// hpd/export/firefox.h): the recording's targets and the busiest threads.
#include <algorithm>
#include <set>
#include <string>

#include "hpd/export/firefox.h"

namespace hpd {
namespace {

// The process name (comm, 15 characters at most) a command line's program gets.
std::string comm_of_command(const std::string& command) {
  std::string program = command.substr(0, command.find(' '));
  const size_t slash = program.rfind('/');
  if (slash != std::string::npos) program = program.substr(slash + 1);
  return program.substr(0, 15);
}

}  // namespace

InitialThreads choose_initial_threads(const Profile& profile) {
  InitialThreads out;
  const size_t n = profile.threads.size();
  if (n == 0) return out;

  // Busy-ness: CPU time of the samples (an off-CPU one's: what the scheduler charged for a wait), or
  // the number of on-CPU samples when no sample carries a CPU time.
  std::vector<uint64_t> cpu(n, 0), samples(n, 0);
  bool any_cpu = false;
  for (size_t i = 0; i < n; ++i) {
    for (const Sample& s : profile.threads[i].samples) {
      cpu[i] += s.cpu_delta_ns;
      if (s.kind == SampleKind::kOnCpu) ++samples[i];
    }
    any_cpu = any_cpu || cpu[i] > 0;
  }
  const std::vector<uint64_t>& busy = any_cpu ? cpu : samples;
  std::vector<uint32_t> by_busy(n);
  for (uint32_t i = 0; i < n; ++i) by_busy[i] = i;
  std::stable_sort(by_busy.begin(), by_busy.end(), [&](uint32_t a, uint32_t b) { return busy[a] > busy[b]; });

  // Targets: everything recorded, unless the recording took the whole system; then only the
  // process of a command launched alongside (--all -- CMD), matched by its process name.
  const std::string& target = profile.meta.recording.target;
  const TargetScope scope = target_scope(target);
  const bool system_wide = scope == TargetScope::kAllProcesses || scope == TargetScope::kContinuous;
  std::string command_comm;
  const std::string while_running = " while running ";
  const size_t at = target.find(while_running);
  if (system_wide && at != std::string::npos)
    command_comm = comm_of_command(target.substr(at + while_running.size()));
  auto is_target = [&](uint32_t i) {
    if (!system_wide) return true;
    return !command_comm.empty() && profile.threads[i].process_name.substr(0, 15) == command_comm;
  };

  std::set<uint32_t> visible;
  size_t targets = 0;
  for (uint32_t i : by_busy) {
    if (is_target(i) && targets < kMaxTargetThreads) {
      visible.insert(i);
      ++targets;
    }
  }
  const uint64_t busiest = busy[by_busy[0]];
  for (size_t k = 0; k < std::min(kMaxBusiestThreads, n); ++k) {
    const uint32_t i = by_busy[k];
    if (busy[i] > 0 && busy[i] * 20 >= busiest) visible.insert(i);
  }
  if (visible.empty()) visible.insert(by_busy[0]);
  // A process's track is its main thread's: show it with any of its threads.
  std::set<int32_t> shown_pids;
  for (uint32_t i : visible) shown_pids.insert(profile.threads[i].pid);
  for (uint32_t i = 0; i < n; ++i) {
    if (profile.threads[i].is_main && shown_pids.count(profile.threads[i].pid) > 0) visible.insert(i);
  }
  out.visible.assign(visible.begin(), visible.end());

  uint32_t selected = by_busy[0];
  for (uint32_t i : by_busy) {
    if (is_target(i)) {
      selected = i;
      break;
    }
  }
  out.selected.push_back(selected);
  return out;
}

}  // namespace hpd
