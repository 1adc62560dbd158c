// How hpd answers a request that failed with an exception: mapped by the error's type, one rule for
// every handler (issue 30: each layer has its error type, and the daemon maps them).
#pragma once

#include <exception>
#include <string>

#include "hpd/collect/recorder.h"
#include "hpd/service/protocol.h"

namespace hpd::service {

// What the client is told of a failed request.
struct ErrorReply {
  ErrorCode code = ErrorCode::kInternal;
  std::string text;
  // An error of no known type (a bug, or a failure hpd did not foresee): the client is told only
  // kInternalErrorText, and the caller logs what() (log_error), where the operator finds it.
  bool internal = true;
  // A refused record request's reason by name (the recorder's TargetProblem or OptionProblem), sent
  // as the reply's "reason" for a client that words it itself; "" for other errors.
  std::string reason;
};

inline constexpr const char* kInternalErrorText = "internal error, see hpd's log";

// ProtocolError: its code and message (bad request, limit, not found, ...).
// session::RecordRequestError (a request whose targets or options make no recording): kBadRequest,
// its reason worded with the request's fields (record_problem_words: "\"pids\" cannot be combined
// with \"all\" or \"cgroup\"") and named in `reason`.
// RecordError (collect's refusal: no such process, a cgroup that is not one, a backend that cannot
// do it): kRecordFailed with its message; RecordTargetError and RecordOptionError worded and named
// as above.
// Anything else: kInternal with kInternalErrorText, never kBadRequest (the client asked nothing wrong).
ErrorReply error_reply_for(const std::exception& error);

// hpd's words for a record request's problems, in the request's JSON fields (docs/protocol.md).
std::string record_problem_words(TargetProblem problem);
std::string record_problem_words(OptionProblem problem);

}  // namespace hpd::service
