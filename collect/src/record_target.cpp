// The one check of a recording's targets.
#include "hpd/collect/record_target.h"

namespace hpd {

TargetProblem target_problem(const RecordTarget& target) {
  const bool system_wide = target.is_system_wide();
  if (target.pids.empty() && !target.has_command() && !system_wide) return TargetProblem::kNoTarget;
  if (!target.pids.empty() && target.has_command()) return TargetProblem::kPidsAndCommand;
  if (target.all_processes && !target.cgroup.empty()) return TargetProblem::kAllAndCgroup;
  if (system_wide && !target.pids.empty()) return TargetProblem::kPidsAndSystemWide;
  if (target.has_command() && target.command.front().empty()) return TargetProblem::kEmptyCommand;
  return TargetProblem::kNone;
}

}  // namespace hpd
