// The mapping of errors to replies (hpd/service/error_reply.h).
#include "hpd/service/error_reply.h"

#include "hpd/session/record_pipeline.h"

namespace hpd::service {

std::string record_problem_words(TargetProblem problem) {
  switch (problem) {
    case TargetProblem::kNone: break;
    case TargetProblem::kNoTarget:
      return "nothing to record: give \"pids\", \"all\": true or a \"cgroup\" (a command is started by the "
             "client and given by its pid)";
    case TargetProblem::kPidsAndCommand: return "give either \"pids\" or a \"command\", not both";
    case TargetProblem::kAllAndCgroup: return "give either \"all\": true or a \"cgroup\", not both";
    case TargetProblem::kPidsAndSystemWide: return "\"pids\" cannot be combined with \"all\" or \"cgroup\"";
    case TargetProblem::kEmptyCommand: return "the \"command\" to run is empty";
  }
  return "";
}

std::string record_problem_words(OptionProblem problem) {
  switch (problem) {
    case OptionProblem::kNone: break;
    case OptionProblem::kCfiWithPerf:
      return "\"call_graph\": \"cfi\" unwinds inside the eBPF programs: use it with the eBPF backend, or "
             "\"call_graph\": \"dwarf\" with \"backend\": \"perf\"";
    case OptionProblem::kAllWithPerf: return "\"all\" needs the eBPF backend; drop \"backend\": \"perf\"";
    case OptionProblem::kCgroupWithPerf:
      return "\"cgroup\" needs the eBPF backend; drop \"backend\": \"perf\"";
    case OptionProblem::kAllocWithAll:
    case OptionProblem::kAllocWithCgroup:
      return "\"alloc\" is not supported with \"all\" or \"cgroup\": it samples the allocations of the "
             "processes in \"pids\" (or, through \"alloc_log\", of a command the client started)";
    case OptionProblem::kBpfUnprivileged:
      return "the eBPF backend needs CAP_BPF and CAP_PERFMON, which hpd lacks; ask with \"backend\": "
             "\"perf\"";
    case OptionProblem::kBpfNeededUnprivileged:
      return "this recording needs the eBPF backend, whose CAP_BPF and CAP_PERFMON hpd lacks";
  }
  return "";
}

namespace {

ErrorReply refusal(ErrorCode code, TargetProblem target, OptionProblem option) {
  if (target != TargetProblem::kNone) return {code, record_problem_words(target), false, to_string(target)};
  return {code, record_problem_words(option), false, to_string(option)};
}

}  // namespace

ErrorReply error_reply_for(const std::exception& error) {
  if (const auto* e = dynamic_cast<const ProtocolError*>(&error)) return {e->code(), e->what(), false, ""};
  if (const auto* e = dynamic_cast<const session::RecordRequestError*>(&error)) {
    if (e->target_problem() != TargetProblem::kNone || e->option_problem() != OptionProblem::kNone)
      return refusal(ErrorCode::kBadRequest, e->target_problem(), e->option_problem());
    return {ErrorCode::kBadRequest, error.what(), false, ""};
  }
  if (const auto* e = dynamic_cast<const RecordTargetError*>(&error))
    return refusal(ErrorCode::kRecordFailed, e->problem(), OptionProblem::kNone);
  if (const auto* e = dynamic_cast<const RecordOptionError*>(&error))
    return refusal(ErrorCode::kRecordFailed, TargetProblem::kNone, e->problem());
  if (dynamic_cast<const RecordError*>(&error) != nullptr)
    return {ErrorCode::kRecordFailed, error.what(), false, ""};
  return {ErrorCode::kInternal, kInternalErrorText, true, ""};
}

}  // namespace hpd::service
