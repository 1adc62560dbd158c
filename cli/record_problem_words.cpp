// hpctl's words for a record request's problems (record_problem_words.h).
#include "record_problem_words.h"

#include "daemon_client.h"
#include "hpd/session/record_pipeline.h"

namespace hpd::cli {

std::string record_problem_words(TargetProblem problem) {
  switch (problem) {
    case TargetProblem::kNone: break;
    case TargetProblem::kNoTarget:
      return "nothing to record: give --pid PID, --all, --cgroup PATH, or a command after -- (hpctl record "
             "-- "
             "./app)";
    case TargetProblem::kPidsAndCommand: return "give either --pid or a command after --, not both";
    case TargetProblem::kAllAndCgroup: return "give either --all or --cgroup, not both";
    case TargetProblem::kPidsAndSystemWide: return "--pid cannot be combined with --all or --cgroup";
    case TargetProblem::kEmptyCommand: return "the command to run is empty";
  }
  return "";
}

std::string record_problem_words(OptionProblem problem) {
  switch (problem) {
    case OptionProblem::kNone: break;
    case OptionProblem::kCfiWithPerf:
      return "--call-graph cfi unwinds inside the eBPF programs: use it with the eBPF backend, or "
             "--call-graph "
             "dwarf with --backend perf";
    case OptionProblem::kAllWithPerf: return "--all needs the eBPF backend; drop --backend perf";
    case OptionProblem::kCgroupWithPerf: return "--cgroup needs the eBPF backend; drop --backend perf";
    case OptionProblem::kAllocWithAll:
    case OptionProblem::kAllocWithCgroup:
      return "--alloc is not supported for --all or --cgroup: it samples the allocations of a command hpctl "
             "launches (hpctl record --alloc -- CMD) or of processes given with --pid";
    case OptionProblem::kBpfUnprivileged:
      return "the eBPF backend needs CAP_BPF and CAP_PERFMON (or root); run as root, or record a process "
             "with "
             "--backend perf";
    case OptionProblem::kBpfNeededUnprivileged:
      return "this recording needs CAP_BPF and CAP_PERFMON (or root); run as root, or record a process with "
             "--backend perf";
  }
  return "";
}

std::string error_words(const std::exception& error) {
  if (const auto* e = dynamic_cast<const session::RecordRequestError*>(&error)) {
    if (e->target_problem() != TargetProblem::kNone) return record_problem_words(e->target_problem());
    if (e->option_problem() != OptionProblem::kNone) return record_problem_words(e->option_problem());
  }
  if (const auto* e = dynamic_cast<const RecordTargetError*>(&error))
    return record_problem_words(e->problem());
  if (const auto* e = dynamic_cast<const RecordOptionError*>(&error))
    return record_problem_words(e->problem());
  // hpd's refusal of a request, named in its reply: worded as a local recording's (hpd words it with
  // its request's fields, for clients that do not know the reason).
  if (const auto* e = dynamic_cast<const DaemonError*>(&error)) {
    if (const TargetProblem target = target_problem_named(e->reason()); target != TargetProblem::kNone)
      return record_problem_words(target);
    if (const OptionProblem option = option_problem_named(e->reason()); option != OptionProblem::kNone)
      return record_problem_words(option);
  }
  return error.what();
}

}  // namespace hpd::cli
