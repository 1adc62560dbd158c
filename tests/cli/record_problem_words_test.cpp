// One record vocabulary (issue 30): the record request's one validator (session's
// record_options_from_request on the recorder's target_problem and record_option_problem)
// gives a typed reason; the engine's own words name no hpctl flag; hpctl words each reason with its
// flags, as it always has (the texts below are hpctl's before the change); hpd answers with its
// request's fields and the reason's name, and that reply reaches hpctl's user in the same words as a
// local recording's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "daemon_client.h"
#include "hpd/collect/recorder.h"
#include "hpd/service/error_reply.h"
#include "hpd/session/record_pipeline.h"
#include "record_problem_words.h"

namespace hpd {
namespace {

struct Case {
  session::RecordRequest request;
  TargetProblem target;
  OptionProblem option;
  const char* hpctl_words;  // what hpctl printed for these options before the reasons were typed
  const char* hpd_words;    // hpd's, with its request's fields
};

session::RecordRequest request(std::vector<int32_t> pids, std::vector<std::string> command, bool all,
                               std::string cgroup) {
  session::RecordRequest r;
  r.target.pids = std::move(pids);
  r.target.command = std::move(command);
  r.target.all_processes = all;
  r.target.cgroup = std::move(cgroup);
  return r;
}

std::vector<Case> cases() {
  std::vector<Case> c = {
      {request({}, {}, false, ""), TargetProblem::kNoTarget, OptionProblem::kNone,
       "nothing to record: give --pid PID, --all, --cgroup PATH, or a command after -- (hpctl record -- "
       "./app)",
       "nothing to record: give \"pids\", \"all\": true or a \"cgroup\" (a command is started by the client "
       "and given by its pid)"},
      {request({1}, {"true"}, false, ""), TargetProblem::kPidsAndCommand, OptionProblem::kNone,
       "give either --pid or a command after --, not both",
       "give either \"pids\" or a \"command\", not both"},
      {request({}, {}, true, "system.slice"), TargetProblem::kAllAndCgroup, OptionProblem::kNone,
       "give either --all or --cgroup, not both", "give either \"all\": true or a \"cgroup\", not both"},
      {request({1}, {}, true, ""), TargetProblem::kPidsAndSystemWide, OptionProblem::kNone,
       "--pid cannot be combined with --all or --cgroup",
       "\"pids\" cannot be combined with \"all\" or \"cgroup\""},
      {request({1}, {}, false, "system.slice"), TargetProblem::kPidsAndSystemWide, OptionProblem::kNone,
       "--pid cannot be combined with --all or --cgroup",
       "\"pids\" cannot be combined with \"all\" or \"cgroup\""},
      {request({}, {""}, false, ""), TargetProblem::kEmptyCommand, OptionProblem::kNone,
       "the command to run is empty", "the \"command\" to run is empty"},
  };
  Case cfi{request({1}, {}, false, ""), TargetProblem::kNone, OptionProblem::kCfiWithPerf,
           "--call-graph cfi unwinds inside the eBPF programs: use it with the eBPF backend, or --call-graph "
           "dwarf "
           "with --backend perf",
           "\"call_graph\": \"cfi\" unwinds inside the eBPF programs: use it with the eBPF backend, or "
           "\"call_graph\": \"dwarf\" with \"backend\": \"perf\""};
  cfi.request.call_graph = CallGraph::kCfi;
  cfi.request.backend = Backend::kPerf;
  Case all{request({}, {}, true, ""), TargetProblem::kNone, OptionProblem::kAllWithPerf,
           "--all needs the eBPF backend; drop --backend perf",
           "\"all\" needs the eBPF backend; drop \"backend\": \"perf\""};
  all.request.backend = Backend::kPerf;
  Case cgroup{request({}, {}, false, "/"), TargetProblem::kNone, OptionProblem::kCgroupWithPerf,
              "--cgroup needs the eBPF backend; drop --backend perf",
              "\"cgroup\" needs the eBPF backend; drop \"backend\": \"perf\""};
  cgroup.request.backend = Backend::kPerf;
  const char* alloc_words =
      "--alloc is not supported for --all or --cgroup: it samples the allocations of a command hpctl "
      "launches "
      "(hpctl record --alloc -- CMD) or of processes given with --pid";
  const char* alloc_hpd =
      "\"alloc\" is not supported with \"all\" or \"cgroup\": it samples the allocations of the processes in "
      "\"pids\" (or, through \"alloc_log\", of a command the client started)";
  Case alloc_all{request({}, {}, true, ""), TargetProblem::kNone, OptionProblem::kAllocWithAll, alloc_words,
                 alloc_hpd};
  alloc_all.request.alloc = true;
  Case alloc_cgroup{request({}, {}, false, "/"), TargetProblem::kNone, OptionProblem::kAllocWithCgroup,
                    alloc_words, alloc_hpd};
  alloc_cgroup.request.alloc = true;
  c.insert(c.end(), {cfi, all, cgroup, alloc_all, alloc_cgroup});
  return c;
}

// The recorder's options for the case's request, built directly (record_options_from_request would
// refuse them first), on which the recorder's own checks must find the same reason.
RecordOptions options_of(const session::RecordRequest& r) {
  RecordOptions o;
  o.target = r.target;
  if (o.target.cgroup == "/") o.target.cgroup = ".";  // the root cgroup, as the session names it
  o.backend = r.backend;
  o.call_graph = r.call_graph;
  o.sample_allocations = r.alloc;
  return o;
}

const std::regex kHpctlFlag("(^|[^\\w-])--?[a-z]");

TEST(RecordVocabulary, EachReasonComesFromTheOneValidatorAndIsWordedByEachLayer) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.hpctl_words);
    std::string reason = c.target != TargetProblem::kNone ? to_string(c.target) : to_string(c.option);
    ASSERT_FALSE(reason.empty());
    try {
      session::record_options_from_request(c.request);
      ADD_FAILURE() << "accepted";
    } catch (const session::RecordRequestError& e) {
      EXPECT_EQ(e.target_problem(), c.target);
      EXPECT_EQ(e.option_problem(), c.option);
      // The engine's words: no flag of hpctl's.
      EXPECT_FALSE(std::regex_search(std::string(e.what()), kHpctlFlag)) << e.what();
      // hpctl: its flags, as before.
      EXPECT_EQ(cli::error_words(e), c.hpctl_words);
      // hpd: its request's fields, and the reason by name.
      const service::ErrorReply reply = service::error_reply_for(e);
      EXPECT_EQ(reply.code, service::ErrorCode::kBadRequest);
      EXPECT_EQ(reply.text, c.hpd_words);
      EXPECT_EQ(reply.reason, reason);
      EXPECT_FALSE(reply.internal);
      // That reply, as hpctl's client receives it (DaemonError with the reply's reason): the words of a
      // local recording.
      EXPECT_EQ(cli::error_words(cli::DaemonError("bad_request", reply.text, reply.reason)), c.hpctl_words);
    }
    // The recorder, given the same options, finds the same reason (and hpd answers it as a failed
    // recording, named alike).
    try {
      validate_record_options(options_of(c.request));
      ADD_FAILURE() << "the recorder accepted";
    } catch (const RecordTargetError& e) {
      EXPECT_EQ(e.problem(), c.target);
      EXPECT_EQ(cli::error_words(e), c.hpctl_words);
      EXPECT_EQ(service::error_reply_for(e).code, service::ErrorCode::kRecordFailed);
      EXPECT_EQ(service::error_reply_for(e).reason, reason);
    } catch (const RecordOptionError& e) {
      EXPECT_EQ(e.problem(), c.option);
      EXPECT_EQ(cli::error_words(e), c.hpctl_words);
      EXPECT_EQ(service::error_reply_for(e).code, service::ErrorCode::kRecordFailed);
      EXPECT_EQ(service::error_reply_for(e).reason, reason);
    }
    const RecordOptions options = options_of(c.request);
    EXPECT_EQ(target_problem(options.target), c.target);
    EXPECT_EQ(record_option_problem(options), c.option);
  }
  // Good requests pass.
  EXPECT_NO_THROW(session::record_options_from_request(request({1, 2}, {}, false, "")));
  EXPECT_NO_THROW(session::record_options_from_request(request({}, {"true"}, true, "")));
  EXPECT_NO_THROW(session::record_options_from_request(request({}, {}, false, "system.slice")));
  session::RecordRequest alloc_pid = request({1}, {}, false, "");
  alloc_pid.alloc = true;
  alloc_pid.backend = Backend::kPerf;
  EXPECT_NO_THROW(session::record_options_from_request(alloc_pid));
}

// The reasons' names travel in hpd's error reply ("reason") and come back as the same reason; each
// name is one reason's.
TEST(RecordVocabulary, ReasonNamesRoundTripThroughTheReply) {
  std::set<std::string> names;
  for (const TargetProblem p :
       {TargetProblem::kNoTarget, TargetProblem::kPidsAndCommand, TargetProblem::kAllAndCgroup,
        TargetProblem::kPidsAndSystemWide, TargetProblem::kEmptyCommand}) {
    EXPECT_EQ(target_problem_named(to_string(p)), p);
    EXPECT_EQ(option_problem_named(to_string(p)), OptionProblem::kNone);
    EXPECT_TRUE(names.insert(to_string(p)).second) << to_string(p);
  }
  for (const OptionProblem p :
       {OptionProblem::kCfiWithPerf, OptionProblem::kAllWithPerf, OptionProblem::kCgroupWithPerf,
        OptionProblem::kAllocWithAll, OptionProblem::kAllocWithCgroup, OptionProblem::kBpfUnprivileged,
        OptionProblem::kBpfNeededUnprivileged}) {
    EXPECT_EQ(option_problem_named(to_string(p)), p);
    EXPECT_EQ(target_problem_named(to_string(p)), TargetProblem::kNone);
    EXPECT_TRUE(names.insert(to_string(p)).second) << to_string(p);
    EXPECT_FALSE(cli::record_problem_words(p).empty());
    EXPECT_FALSE(service::record_problem_words(p).empty());
    EXPECT_FALSE(std::regex_search(std::string(record_problem_text(p)), kHpctlFlag))
        << record_problem_text(p);
  }
  EXPECT_EQ(target_problem_named("no such reason"), TargetProblem::kNone);
  EXPECT_EQ(option_problem_named(""), OptionProblem::kNone);

  const auto reply = nlohmann::json::parse(service::error_message(service::ErrorCode::kBadRequest, "words",
                                                                  to_string(OptionProblem::kAllWithPerf)));
  EXPECT_EQ(reply["reason"], "all_with_perf");
  EXPECT_EQ(reply["message"], "words");
  // Other errors carry no reason (older clients' replies are unchanged), and hpctl prints their message.
  EXPECT_FALSE(
      nlohmann::json::parse(service::error_message(service::ErrorCode::kLimit, "full")).contains("reason"));
  EXPECT_EQ(cli::error_words(cli::DaemonError("limit", "full")), "full");
  EXPECT_EQ(cli::error_words(cli::DaemonError("bad_request", "hpd's words", "a reason of a newer hpd")),
            "hpd's words");
}

}  // namespace
}  // namespace hpd
