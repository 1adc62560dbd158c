// What a recording records, one type from the engine up: RecordOptions (hpd/collect/recorder.h) and
// RecordRequest (hpd/session/record_request.h) each hold a RecordTarget, copied whole from one to the
// other; hpctl's flags and hpd's protocol ("pids", "command", "all", "cgroup") fill it. With its one
// check (target_problem). No dependency beyond the standard library: library hpd_record_choices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpd {

struct RecordTarget {
  std::vector<int32_t> pids;         // record these running processes (all their threads) ...
  std::vector<std::string> command;  // ... or launch this command and record it
  // Record every process of the system (eBPF only). With a command, until the command exits.
  bool all_processes = false;
  // Record the tasks of this cgroup v2 and its descendants (eBPF only): an absolute path, or one
  // relative to the cgroup v2 mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid systems). With a
  // command, until the command exits (the command is not moved into it). "" for none.
  std::string cgroup;

  // All processes or a cgroup: sampled per CPU rather than per thread.
  [[nodiscard]] bool is_system_wide() const { return all_processes || !cgroup.empty(); }
  [[nodiscard]] bool has_command() const { return !command.empty(); }
};

// What keeps a recording's targets from making one recording. The valid ones: pids alone; a command
// alone, with all processes or with a cgroup; all processes alone; a cgroup alone.
enum class TargetProblem {
  kNone,
  kNoTarget,           // no pid, no command, neither all processes nor a cgroup
  kPidsAndCommand,     // pids and a command to launch
  kAllAndCgroup,       // all processes and a cgroup
  kPidsAndSystemWide,  // pids with all processes or a cgroup
  kEmptyCommand,       // a command whose program name is empty
};

// The one check of a recording's targets: validate_record_options throws RecordTargetError with it,
// and hpctl's and hpd's record requests are checked with it (session::record_options_from_request).
TargetProblem target_problem(const RecordTarget& target);

}  // namespace hpd
