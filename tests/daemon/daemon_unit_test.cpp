// Unit tests of the hpd service's parts: protocol parsing and frames, RecordRequest as JSON, the
// configuration file, access rules, systemd notification and socket activation.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "hpd/service/access.h"
#include "hpd/service/config.h"
#include "hpd/service/error_reply.h"
#include "hpd/service/protocol.h"
#include "hpd/service/server.h"
#include "hpd/service/systemd.h"
#include "hpd/session/record_json.h"
#include "hpd/session/record_pipeline.h"

namespace hpd::service {
namespace {

using nlohmann::json;

ErrorCode parse_error(const std::string& text) {
  try {
    parse_request(text);
  } catch (const ProtocolError& e) {
    return e.code();
  }
  ADD_FAILURE() << "parsed without error: " << text;
  return ErrorCode::kInternal;
}

TEST(Protocol, ParsesEveryRequestType) {
  EXPECT_EQ(parse_request(R"({"version":1,"type":"hello","client":"hpctl 9"})").client, "hpctl 9");
  EXPECT_EQ(parse_request(R"({"version":1,"type":"status"})").type, RequestType::kStatus);
  EXPECT_EQ(parse_request(R"({"version":1,"type":"sessions"})").type, RequestType::kSessions);
  const Request stop = parse_request(R"({"version":1,"type":"stop","session":12})");
  EXPECT_EQ(stop.type, RequestType::kStop);
  EXPECT_EQ(stop.session, 12u);
  const Request record = parse_request(
      R"({"version":1,"type":"record","fd":true,"launched_command":["./a","b"],
          "args":{"pids":[42],"frequency_hz":99,"output":"x.hpr","all":false,"future_field":[1,2]}})");
  EXPECT_EQ(record.type, RequestType::kRecord);
  EXPECT_TRUE(record.record_has_fd);
  ASSERT_EQ(record.record.target.pids.size(), 1u);
  EXPECT_EQ(record.record.target.pids[0], 42);
  EXPECT_EQ(record.record.frequency_hz, 99u);
  EXPECT_EQ(record.record.output, "x.hpr");
  EXPECT_EQ(record.record.event, SamplingEvent::kTaskClock);  // absent: the default
  EXPECT_EQ(record.launched_command, (std::vector<std::string>{"./a", "b"}));
}

TEST(Protocol, RefusesBadMessagesWithTheirCode) {
  EXPECT_EQ(parse_error("\x01\x02garbage"), ErrorCode::kMalformed);
  EXPECT_EQ(parse_error(""), ErrorCode::kMalformed);
  EXPECT_EQ(parse_error("[1,2]"), ErrorCode::kMalformed);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"hel)"), ErrorCode::kMalformed);
  EXPECT_EQ(parse_error("{\"version\":1,\"type\":\"\xff\xfe\"}"), ErrorCode::kMalformed);  // not UTF-8
  EXPECT_EQ(parse_error(R"({"type":"status"})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":"1","type":"status"})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":2,"type":"status"})"), ErrorCode::kUnsupportedVersion);
  EXPECT_EQ(parse_error(R"({"version":-1,"type":"status"})"), ErrorCode::kUnsupportedVersion);
  EXPECT_EQ(parse_error(R"({"version":1})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":7})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"format_disk"})"), ErrorCode::kUnknownType);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"stop","session":-3})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record"})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":[]})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":{"pids":"42"}})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":{"pids":[-1e99]}})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":{"frequency_hz":-5}})"),
            ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":{"frequency_hz":1e3}})"),
            ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":{"frequency_hz":99999999999}})"),
            ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":{"all":1}})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":{},"fd":"yes"})"), ErrorCode::kBadRequest);
  EXPECT_EQ(parse_error(R"({"version":1,"type":"record","args":{},"launched_command":[1]})"),
            ErrorCode::kBadRequest);
  // The message names the field.
  try {
    parse_request(R"({"version":1,"type":"record","args":{"duration_s":"long"}})");
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("duration_s"), std::string::npos) << e.what();
  }
}

TEST(Protocol, ErrorMessagesCarryCodeAndText) {
  const json j = json::parse(error_message(ErrorCode::kPermissionDenied, "no \xff way"));
  EXPECT_EQ(j["version"], kProtocolVersion);
  EXPECT_EQ(j["type"], "error");
  EXPECT_EQ(j["code"], "permission_denied");
  EXPECT_TRUE(j["message"].get<std::string>().starts_with("no "));
}

TEST(RecordRequestJson, RoundTripsEveryField) {
  session::RecordRequest args;
  args.target.pids = {1, 2};
  args.target.command = {"a", "b c"};
  args.duration_s = 2.5;
  args.frequency_hz = 123;
  args.output = "o.json";
  args.event = SamplingEvent::kCpuClock;
  args.kernel = Switch::kOff;
  args.backend = Backend::kPerf;
  args.target.all_processes = true;
  args.target.cgroup = "x";
  args.off_cpu = Switch::kOn;
  args.off_cpu_min_us = 7;
  args.follow_children = false;
  args.call_graph = CallGraph::kDwarf;
  args.stack_size = 4096;
  args.cfi_rows = 70000;
  args.mip = Switch::kOff;
  args.calls = true;
  args.calls_counter = CallCounterKind::kUprobes;
  args.call_latency = true;
  args.alloc = true;
  args.alloc_mean = 4096;
  const json wire = session::record_request_to_json(args);
  // The target travels under the protocol's names (docs/protocol.md), whatever RecordTarget calls them.
  EXPECT_EQ(wire.at("pids"), json::array({1, 2}));
  EXPECT_EQ(wire.at("command"), json::array({"a", "b c"}));
  EXPECT_EQ(wire.at("all"), true);
  EXPECT_EQ(wire.at("cgroup"), "x");
  EXPECT_FALSE(wire.contains("all_processes"));
  EXPECT_FALSE(wire.contains("target"));
  const session::RecordRequest back = session::record_request_from_json(json::parse(wire.dump()));
  EXPECT_EQ(back.target.pids, args.target.pids);
  EXPECT_EQ(back.target.command, args.target.command);
  EXPECT_DOUBLE_EQ(back.duration_s, 2.5);
  EXPECT_EQ(back.frequency_hz, 123u);
  EXPECT_EQ(back.output, "o.json");
  EXPECT_EQ(back.event, SamplingEvent::kCpuClock);
  EXPECT_EQ(back.kernel, Switch::kOff);
  EXPECT_EQ(back.backend, Backend::kPerf);
  EXPECT_TRUE(back.target.all_processes);
  EXPECT_EQ(back.target.cgroup, "x");
  EXPECT_EQ(back.off_cpu, Switch::kOn);
  EXPECT_EQ(back.off_cpu_min_us, 7u);
  EXPECT_FALSE(back.follow_children);
  EXPECT_EQ(back.call_graph, CallGraph::kDwarf);
  EXPECT_TRUE(back.calls);
  EXPECT_EQ(back.calls_counter, CallCounterKind::kUprobes);
  EXPECT_TRUE(back.call_latency);
  EXPECT_TRUE(back.alloc);
  EXPECT_EQ(back.alloc_mean, 4096u);
  EXPECT_EQ(back.stack_size, 4096u);
  EXPECT_EQ(back.cfi_rows, 70000u);
  EXPECT_EQ(back.mip, Switch::kOff);
  // The words on the wire are the command line's, as docs/protocol.md lists them.
  EXPECT_EQ(wire["event"], "cpu-clock");
  EXPECT_EQ(wire["kernel"], "off");
  EXPECT_EQ(wire["backend"], "perf");
  EXPECT_EQ(wire["off_cpu"], "on");
  EXPECT_EQ(wire["no_follow_children"], true);
  EXPECT_EQ(wire["call_graph"], "dwarf");
  EXPECT_EQ(wire["mip"], "off");
  EXPECT_EQ(wire["calls_counter"], "uprobes");
  EXPECT_EQ(wire["call_latency"], true);
  // Absent fields keep the defaults; follow_children stays on when "no_follow_children" is absent.
  const session::RecordRequest empty = session::record_request_from_json(json::object());
  EXPECT_TRUE(empty.follow_children);
  // An older hpctl sends no "call_latency": its --calls --pid recordings are counted only; a newer
  // one's --call-latency reaches the recorder.
  EXPECT_FALSE(empty.call_latency);
  const json pid_calls = {{"pids", {1}}, {"calls", true}};
  EXPECT_FALSE(session::record_options_from_request(session::record_request_from_json(pid_calls)).time_calls);
  json timed = pid_calls;
  timed["call_latency"] = true;
  EXPECT_TRUE(session::record_options_from_request(session::record_request_from_json(timed)).time_calls);
  EXPECT_EQ(empty.kernel, Switch::kAuto);
  EXPECT_EQ(empty.call_graph, CallGraph::kAuto);
}

TEST(RecordRequestJson, RefusesWordsNoChoiceHasNamingTheField) {
  for (const char* field : {"event", "kernel", "backend", "off_cpu", "call_graph", "mip", "calls_counter"}) {
    for (const json& value : {json("maybe"), json(1), json("ON")}) {
      json args = json::object();
      args[field] = value;
      const json request = {{"version", 1}, {"type", "record"}, {"args", args}};
      try {
        parse_request(request.dump());
        ADD_FAILURE() << field << " = " << value.dump() << " was accepted";
      } catch (const ProtocolError& e) {
        EXPECT_EQ(e.code(), ErrorCode::kBadRequest);
        EXPECT_NE(std::string(e.what()).find(std::string("'") + field + "'"), std::string::npos) << e.what();
      }
    }
  }
  try {
    session::record_request_from_json(json{{"call_graph", "lbr"}});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "field 'call_graph' must be auto, cfi, fp or dwarf");
  }
}

// A failed request is answered by its error's type: a refused request is a bad request, the
// recorder's refusal a failed recording with its reason, and anything unforeseen an internal error
// that hpd's log explains, never "bad request" (the client asked nothing wrong).
// The reply to what `refused` throws: it must throw.
ErrorReply reply_to(const std::function<void()>& refused) {
  try {
    refused();
  } catch (const std::exception& e) {
    return error_reply_for(e);
  }
  ADD_FAILURE() << "accepted what it must refuse";
  return {};
}

TEST(ErrorReply, MapsErrorsByTheirType) {
  const ErrorReply protocol = error_reply_for(ProtocolError(ErrorCode::kNotFound, "no session 7"));
  EXPECT_EQ(protocol.code, ErrorCode::kNotFound);
  EXPECT_EQ(protocol.text, "no session 7");
  EXPECT_FALSE(protocol.internal);

  // The session's refusals, as record_options_from_request throws them: targets, and options that
  // do not go together. Then the recorder's (RecordTargetError, RecordError): a failed recording.
  session::RecordRequest pid_and_command;
  pid_and_command.target.pids = {1};
  pid_and_command.target.command = {"/bin/true"};
  RecordOptions no_cgroup;
  no_cgroup.target.cgroup = "hpd-error-reply-test/no-such-cgroup";
  const struct {
    std::function<void()> refused;
    ErrorCode code;
    std::string text;
    std::string reason;
  } refusals[] = {
      {[] { session::record_options_from_request({}); }, ErrorCode::kBadRequest,
       "nothing to record: give \"pids\"", "no_target"},
      {[&] { session::record_options_from_request(pid_and_command); }, ErrorCode::kBadRequest,
       "give either \"pids\" or a \"command\", not both", "pids_and_command"},
      {[] { validate_record_options({}); }, ErrorCode::kRecordFailed, "nothing to record", "no_target"},
      {[&] { validate_record_options(no_cgroup); }, ErrorCode::kRecordFailed, "no cgroup at ", ""},
  };
  for (const auto& r : refusals) {
    const ErrorReply reply = reply_to(r.refused);
    EXPECT_EQ(reply.code, r.code) << reply.text;
    EXPECT_EQ(reply.text.rfind(r.text, 0), 0u) << reply.text;  // hpd's words, or the error's own message
    EXPECT_EQ(reply.reason, r.reason) << reply.text;
    EXPECT_FALSE(reply.internal);
  }

  // Anything else, a std::invalid_argument of a std::stoi included: internal, its text kept for the log.
  const std::invalid_argument stoi_error("stoi");
  const std::out_of_range range_error(
      "vector::_M_range_check: __n (which is 3) >= this->size() (which is 3)");
  const std::bad_alloc no_memory;
  for (const std::exception* error :
       std::initializer_list<const std::exception*>{&stoi_error, &range_error, &no_memory}) {
    const ErrorReply reply = error_reply_for(*error);
    EXPECT_EQ(reply.code, ErrorCode::kInternal) << error->what();
    EXPECT_NE(reply.code, ErrorCode::kBadRequest) << error->what();
    EXPECT_EQ(reply.text, "internal error, see hpd's log");
    EXPECT_TRUE(reply.internal);
  }
}

TEST(RecordRequestJson, SummaryRoundTrips) {
  session::RecordSummary s;
  s.mode = "daemon";
  s.samples = 77;
  s.seconds = 1.5;
  s.lost_records = 3;
  s.notes = {"a note"};
  const session::RecordSummary back =
      session::record_summary_from_json(json::parse(session::record_summary_to_json(s).dump()));
  EXPECT_EQ(back.mode, "daemon");
  EXPECT_EQ(back.samples, 77u);
  EXPECT_DOUBLE_EQ(back.seconds, 1.5);
  EXPECT_EQ(back.lost_records, 3u);
  EXPECT_EQ(back.notes, s.notes);
}

TEST(Config, ParsesKeysCommentsAndUnits) {
  const Config c = parse_config(
      "# comment\n\n  max_sessions = 3   # trailing\nmax_duration_s=10m\nmax_frequency_hz = 500\n"
      "max_session_memory_mb = 64\ncontinuous = on\ncontinuous_frequency = 49\ncontinuous_chunk_seconds = "
      "30\n"
      "continuous_max_age = 2d\ncontinuous_max_bytes = 512M\nstate_directory = /var/lib/x\n"
      "group = wheel\nlog_level = debug\nsocket = /tmp/s.sock\r\nmax_cfi_rows = 100000\n"
      "continuous_cfi_rows = 65536\ncontinuous_kernel = off\ncontinuous_off_cpu = on\n",
      "t.conf");
  EXPECT_EQ(c.max_sessions, 3u);
  EXPECT_FALSE(c.continuous_kernel);
  EXPECT_TRUE(c.continuous_off_cpu);
  // Their defaults: kernel frames on, off-CPU off (every context switch of the machine).
  EXPECT_TRUE(Config{}.continuous_kernel);
  EXPECT_FALSE(Config{}.continuous_off_cpu);
  EXPECT_THROW(parse_config("continuous_off_cpu = sometimes\n", "t.conf"), ConfigError);
  EXPECT_EQ(c.max_cfi_rows, 100000u);
  EXPECT_EQ(c.continuous_cfi_rows, 65536u);
  EXPECT_DOUBLE_EQ(c.max_duration_s, 600);
  EXPECT_EQ(c.max_frequency_hz, 500u);
  EXPECT_EQ(c.max_session_memory_mb, 64u);
  EXPECT_TRUE(c.continuous);
  EXPECT_EQ(c.continuous_frequency, 49u);
  EXPECT_EQ(c.continuous_chunk_seconds, 30u);
  EXPECT_EQ(c.continuous_max_age_s, 2u * 86400);
  EXPECT_EQ(c.continuous_max_bytes, 512ull << 20);
  EXPECT_EQ(c.state_directory, "/var/lib/x");
  EXPECT_EQ(c.group, "wheel");
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.socket, "/tmp/s.sock");
  EXPECT_EQ(parse_config("", "empty"), Config{});
}

TEST(Config, ReportsEveryProblemWithFileAndLine) {
  try {
    parse_config(
        "max_sessions = 2\nmax_sesions = 3\nmax_sessions = -1\njust words\nmax_frequency_hz = 1e9\n"
        "continuous = maybe\nstate_directory = relative\nmax_duration_s = 5 parsecs\n",
        "/etc/hpd/hpd.conf");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const auto& p = e.problems();
    ASSERT_EQ(p.size(), 7u) << e.what();
    EXPECT_TRUE(p[0].starts_with("/etc/hpd/hpd.conf:2: unknown key 'max_sesions'")) << p[0];
    EXPECT_TRUE(p[1].starts_with("/etc/hpd/hpd.conf:3: bad value '-1' for max_sessions")) << p[1];
    EXPECT_TRUE(p[2].starts_with("/etc/hpd/hpd.conf:4: expected `key = value`")) << p[2];
    EXPECT_TRUE(p[3].starts_with("/etc/hpd/hpd.conf:5:")) << p[3];
    EXPECT_TRUE(p[4].starts_with("/etc/hpd/hpd.conf:6:")) << p[4];
    EXPECT_TRUE(p[5].starts_with("/etc/hpd/hpd.conf:7:")) << p[5];
    EXPECT_TRUE(p[6].starts_with("/etc/hpd/hpd.conf:8:")) << p[6];
  }
  EXPECT_THROW(load_config("/nonexistent/hpd.conf"), ConfigError);
}

TEST(Config, FormatPrintsEveryKeyAndReadsBackTheSame) {
  const Config c = parse_config(
      "max_sessions = 3\nmax_duration_s = 1.5\nmax_frequency_hz = 500\nmax_session_memory_mb = 64\n"
      "continuous = on\ncontinuous_frequency = 49\ncontinuous_chunk_seconds = 30\ncontinuous_max_age = 2d\n"
      "continuous_max_bytes = 512M\nstate_directory = /var/lib/x\ngroup = wheel\nlog_level = debug\n"
      "socket = /tmp/s.sock\nmax_connections_per_user = 7\nmax_sessions_per_user = 2\nidle_timeout = 2m\n"
      "client_timeout = 2.5\nstop_timeout = 4\nmax_cfi_rows = 1000\ncontinuous_cfi_rows = 5000\n"
      "max_user_memory_mb = 300\nmax_jit_symbols_mb = 8\nmax_symbol_cache_mb = 100\nmax_unwind_cache_mb = "
      "0\nmax_kept_unwind_tables_mb = 4\nmax_stack_memory_kb = 512\notlp_endpoint = "
      "https://collector:4318\npush_labels = team=storage, "
      "region = eu-1\n"
      "push_timeout = 10s\npush_retry_max = 5m\npush_compression = none\n"
      "continuous_kernel = off\ncontinuous_off_cpu = on\n"
      "debuginfod_urls =  https://debuginfod.example   http://127.0.0.1:8002 \n",
      "t.conf");
  const std::string text = format_config(c);
  EXPECT_EQ(c.debuginfod_urls, "https://debuginfod.example http://127.0.0.1:8002");
  EXPECT_THROW(parse_config("debuginfod_urls = debuginfod.example\n", "t.conf"), ConfigError);
  EXPECT_EQ(Config{}.debuginfod_urls, "");
  EXPECT_EQ(parse_config(text, "formatted"), c) << text;
  EXPECT_EQ(parse_config(format_config(Config{}), "defaults"), Config{});
  // One line per key: every key of the parser, none twice (38 keys today).
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 38) << text;
  EXPECT_NE(text.find("max_stack_memory_kb = 512\n"), std::string::npos) << text;
  EXPECT_EQ(c.max_kept_unwind_tables_mb, 4u);
  EXPECT_NE(text.find("max_kept_unwind_tables_mb = 4\n"), std::string::npos) << text;
  // 0: no unwind-table cache on disk; the bound is in MiB.
  EXPECT_EQ(c.max_unwind_cache_mb, 0u);
  EXPECT_EQ(Config{}.max_unwind_cache_mb, 256u);
  EXPECT_THROW(parse_config("max_unwind_cache_mb = -1\n", "t.conf"), ConfigError);
  EXPECT_THROW(parse_config("max_unwind_cache_mb = 1048577\n", "t.conf"), ConfigError);
  EXPECT_EQ(c.max_user_memory_mb, 300u);
  EXPECT_EQ(c.max_jit_symbols_mb, 8u);
  EXPECT_EQ(c.max_symbol_cache_mb, 100u);
  EXPECT_THROW(parse_config("max_jit_symbols_mb = 0\n", "t.conf"), ConfigError);
  // The rows of the CFI maps: 1 to the recorder's limit, 2^25.
  EXPECT_THROW(parse_config("max_cfi_rows = 0\n", "t.conf"), ConfigError);
  EXPECT_THROW(parse_config("continuous_cfi_rows = 33554433\n", "t.conf"), ConfigError);
  EXPECT_NE(text.find("idle_timeout = 120\n"), std::string::npos) << text;
  EXPECT_NE(text.find("client_timeout = 2.5\n"), std::string::npos) << text;
  EXPECT_THROW(parse_config("stop_timeout = 0\n", "t.conf"), ConfigError);
  EXPECT_NE(text.find("continuous_max_age = 172800\n"), std::string::npos) << text;
  EXPECT_NE(text.find("log_level = debug\n"), std::string::npos) << text;
}

// What parse_config says of `text` (as hpd.conf), "no error" when it takes it.
std::string config_problem(const std::string& text) {
  try {
    parse_config(text, "hpd.conf");
  } catch (const ConfigError& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

// Each of `bad` as the value of `key` (on a file's second line) is refused with the file and line, the
// key, and `expected`.
void expect_values_refused(const std::string& key, std::initializer_list<const char*> bad,
                           const std::string& expected) {
  for (const char* value : bad) {
    const std::string problem = config_problem("max_sessions = 2\n" + key + " = " + value + "\n");
    EXPECT_NE(problem.find("hpd.conf:2: "), std::string::npos) << value << ": " << problem;
    EXPECT_NE(problem.find(key), std::string::npos) << value << ": " << problem;
    EXPECT_NE(problem.find(expected), std::string::npos) << value << ": " << problem;
  }
}

// What a recording into a capture keeps of the stacks it wrote: KiB from 0 (kept to the end) to 2^30,
// session::kStackMemoryBound by default (hpctl's too); anything else is refused with the file and line.
TEST(Config, StackMemoryBoundIsKiBAndBadValuesNameTheLine) {
  EXPECT_EQ(Config{}.max_stack_memory_kb << 10, session::kStackMemoryBound);
  EXPECT_EQ(parse_config("max_stack_memory_kb = 0\n", "t.conf").max_stack_memory_kb, 0u);
  EXPECT_EQ(parse_config("max_stack_memory_kb = 1\n", "t.conf").max_stack_memory_kb, 1u);
  EXPECT_EQ(parse_config("max_stack_memory_kb = 1073741824\n", "t.conf").max_stack_memory_kb, 1073741824u);
  expect_values_refused("max_stack_memory_kb", {"-1", "1073741825", "16M", "1.5", "lots", ""},
                        "expected a number of KiB from 0 to 1073741824");
}

// The bound of the unwind tables hpd keeps in memory across recordings: MiB from 1 to 1048576, 128 by
// default (CfiTableCache::kDefaultLimitBytes); anything else is refused with the file and line.
TEST(Config, KeptUnwindTablesBoundIsMiBAndBadValuesNameTheLine) {
  EXPECT_EQ(Config{}.max_kept_unwind_tables_mb, 128u);
  EXPECT_EQ(parse_config("max_kept_unwind_tables_mb = 1\n", "t.conf").max_kept_unwind_tables_mb, 1u);
  EXPECT_EQ(parse_config("max_kept_unwind_tables_mb = 1048576\n", "t.conf").max_kept_unwind_tables_mb,
            1048576u);
  expect_values_refused("max_kept_unwind_tables_mb", {"0", "-1", "1048577", "64M", "1.5", "lots", ""},
                        "expected a number of MiB from 1 to 1048576");
}

TEST(Config, PushKeysAreCheckedWhenTheFileIsRead) {
  const Config c = parse_config(
      "otlp_endpoint = http://collector:4318\npush_labels = team=storage, region = eu-1,empty=\n"
      "push_timeout = 10s\npush_retry_max = 5m\n",
      "t.conf");
  EXPECT_EQ(c.otlp_endpoint, "http://collector:4318");
  const std::vector<std::pair<std::string, std::string>> labels{
      {"team", "storage"}, {"region", "eu-1"}, {"empty", ""}};
  EXPECT_EQ(c.push_labels, labels);
  EXPECT_EQ(c.push_timeout_s, 10);
  EXPECT_EQ(c.push_retry_max_s, 300);
  EXPECT_TRUE(Config{}.otlp_endpoint.empty());  // no push unless asked
  const auto problem = config_problem;
  EXPECT_NE(problem("otlp_endpoint = collector:4318\n")
                .find("hpd.conf:1: bad value 'collector:4318' for "
                      "otlp_endpoint: 'collector:4318' is not a URL"),
            std::string::npos)
      << problem("otlp_endpoint = collector:4318\n");
  EXPECT_NE(problem("otlp_endpoint = ftp://c:21\n").find("only http://, https://, grpc:// and grpcs://"),
            std::string::npos);
  EXPECT_EQ(parse_config("otlp_endpoint = grpc://collector:4317\n", "t.conf").otlp_endpoint,
            "grpc://collector:4317");
  EXPECT_NE(problem("otlp_endpoint = grpc://collector:4317/v1\n").find("without a path"), std::string::npos);
  EXPECT_NE(problem("otlp_endpoint = http://\n").find("names no host"), std::string::npos);
  EXPECT_NE(problem("push_labels = team\n").find("expected KEY=VALUE pairs"), std::string::npos);
  EXPECT_NE(problem("push_labels = =x\n").find("expected KEY=VALUE pairs"), std::string::npos);
  EXPECT_NE(problem("push_labels = a=1, a=2\n").find("'a' is given twice"), std::string::npos);
  EXPECT_NE(problem("push_timeout = 0\n").find("bad value '0' for push_timeout"), std::string::npos);
  EXPECT_NE(problem("push_retry_max = soon\n").find("bad value 'soon' for push_retry_max"),
            std::string::npos);
}

// Several endpoints: the unsuffixed keys keep meaning the first endpoint; KEY.NAME keys add more,
// each with its own transport settings (TLS files and headers are not inherited; the timeout is).
TEST(Config, FurtherEndpointsTakeKeysWithANameSuffix) {
  const std::string ca = "/etc/ssl/certs/ca-certificates.crt";
  const Config c =
      parse_config("otlp_endpoint = http://127.0.0.1:4318\npush_timeout = 10\npush_ca_file = " + ca +
                       "\n"
                       "otlp_endpoint.central = https://central.example:4318\n"
                       "push_timeout.central = 2m\n"
                       "otlp_endpoint.migration = grpc://new-store:4317\n"
                       "push_ca_file.migration = " +
                       ca + "\n",
                   "t.conf");
  // The first endpoint as before.
  EXPECT_EQ(c.otlp_endpoint, "http://127.0.0.1:4318");
  EXPECT_EQ(c.push_ca_file, ca);
  ASSERT_EQ(c.push_endpoints.size(), 2u);
  EXPECT_EQ(c.push_endpoints[0].name, "central");
  EXPECT_EQ(c.push_endpoints[0].otlp_endpoint, "https://central.example:4318");
  EXPECT_EQ(c.push_endpoints[0].timeout_s, 120);
  EXPECT_EQ(c.push_endpoints[0].ca_file, "");  // not the first endpoint's CA
  EXPECT_EQ(c.push_endpoints[1].name, "migration");
  EXPECT_EQ(c.push_endpoints[1].ca_file, ca);
  const std::vector<PushEndpoint> all = push_endpoints_of(c);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].name, "");
  EXPECT_EQ(all[0].otlp_endpoint, "http://127.0.0.1:4318");
  EXPECT_EQ(all[0].ca_file, ca);
  EXPECT_EQ(all[0].timeout_s, 10);
  EXPECT_EQ(all[1].timeout_s, 120);
  EXPECT_EQ(all[2].timeout_s, 10);  // push_timeout when the endpoint sets none
  EXPECT_EQ(all[2].otlp_endpoint, "grpc://new-store:4317");
  // Printed and read back the same.
  const std::string text = format_config(c);
  EXPECT_NE(text.find("otlp_endpoint.central = https://central.example:4318\n"), std::string::npos) << text;
  EXPECT_EQ(parse_config(text, "formatted"), c) << text;
  // An empty otlp_endpoint.NAME turns that endpoint off.
  EXPECT_EQ(push_endpoints_of(parse_config("otlp_endpoint.a =\n", "t.conf")).size(), 0u);

  // The old single-endpoint file means what it meant: one endpoint, no further ones.
  const Config old = parse_config("otlp_endpoint = http://collector:4318\npush_timeout = 5\n", "t.conf");
  EXPECT_TRUE(old.push_endpoints.empty());
  ASSERT_EQ(push_endpoints_of(old).size(), 1u);
  EXPECT_EQ(push_endpoints_of(old)[0].otlp_endpoint, "http://collector:4318");
  EXPECT_EQ(push_endpoints_of(old)[0].timeout_s, 5);
  EXPECT_TRUE(push_endpoints_of(Config{}).empty());

  const auto problem = config_problem;
  const auto says = [&](const std::string& text, const std::string& expected) {
    const std::string got = problem(text);
    EXPECT_NE(got.find(expected), std::string::npos) << "for:\n" << text << "got: " << got;
  };
  says("\notlp_endpoint.b = collector:4318\n",
       "hpd.conf:2: bad value 'collector:4318' for otlp_endpoint.b: 'collector:4318' is not a URL");
  says("push_timeout.b = 0\notlp_endpoint.b = http://b:4318\n",
       "hpd.conf:1: bad value '0' for push_timeout.b");
  says("otlp_endpoint.b c = http://b:4318\n", "hpd.conf:1: bad endpoint name 'b c'");
  says("otlp_endpoint. = http://b:4318\n", "hpd.conf:1: bad endpoint name ''");
  says("push_labels.b = a=1\n",
       "hpd.conf:1: unknown key 'push_labels.b' (a further endpoint takes these keys");
  says("# central\npush_timeout.central = 5\n",
       "hpd.conf:2: endpoint 'central' has no otlp_endpoint.central");
  says("otlp_endpoint = http://a:4318\notlp_endpoint.b = http://a:4318/v1development/profiles\n",
       "hpd.conf:2: otlp_endpoint.b pushes to http://a:4318/v1development/profiles as otlp_endpoint does");
  says("otlp_endpoint.b = http://b:4318\npush_client_cert.b = /etc/ssl/certs/ca-certificates.crt\n",
       "hpd.conf:1: push_client_cert.b is given without push_client_key.b");
  std::string many;
  for (int i = 0; i < 9; ++i)
    many += "otlp_endpoint.e" + std::to_string(i) + " = http://e" + std::to_string(i) + ":4318\n";
  says(many, "hpd.conf:9: otlp_endpoint.e8: at most 8 endpoints");
}

// The compression of the push: gzip unless push_compression says none; a further endpoint takes
// push_compression unless push_compression.NAME is given.
TEST(Config, PushCompressionIsGzipByDefaultAndEachEndpointMaySetItsOwn) {
  EXPECT_EQ(Config{}.push_compression, hpd::session::PushCompression::kGzip);
  const Config c = parse_config(
      "otlp_endpoint = http://a:4318\npush_compression = none\notlp_endpoint.b = http://b:4318\n"
      "otlp_endpoint.c = grpc://c:4317\npush_compression.c = gzip\n",
      "t.conf");
  EXPECT_EQ(c.push_compression, hpd::session::PushCompression::kNone);
  const std::vector<PushEndpoint> all = push_endpoints_of(c);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].compression, hpd::session::PushCompression::kNone);
  EXPECT_EQ(all[1].compression, hpd::session::PushCompression::kNone);  // push_compression's
  EXPECT_EQ(all[2].compression, hpd::session::PushCompression::kGzip);
  const std::string text = format_config(c);
  EXPECT_NE(text.find("push_compression = none\n"), std::string::npos) << text;
  EXPECT_NE(text.find("push_compression.c = gzip\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("push_compression.b"), std::string::npos) << text;
  EXPECT_EQ(parse_config(text, "formatted"), c) << text;
  EXPECT_EQ(push_endpoints_of(parse_config("otlp_endpoint = http://a:4318\n", "t.conf"))[0].compression,
            hpd::session::PushCompression::kGzip);
  EXPECT_NE(config_problem("push_compression = zstd\n")
                .find("bad value 'zstd' for push_compression: expected gzip or none"),
            std::string::npos);
  EXPECT_NE(config_problem("push_compression.b = \notlp_endpoint.b = http://b:4318\n")
                .find("bad value '' for push_compression.b: expected gzip or none"),
            std::string::npos);
}

TEST(Config, DurationsAndSizes) {
  double s = 0;
  EXPECT_TRUE(parse_duration_s("90", s));
  EXPECT_DOUBLE_EQ(s, 90);
  EXPECT_TRUE(parse_duration_s("1.5h", s));
  EXPECT_DOUBLE_EQ(s, 5400);
  EXPECT_FALSE(parse_duration_s("h", s));
  EXPECT_FALSE(parse_duration_s("-3", s));
  EXPECT_FALSE(parse_duration_s("3w", s));
  uint64_t b = 0;
  EXPECT_TRUE(parse_size_bytes("4K", b));
  EXPECT_EQ(b, 4096u);
  EXPECT_TRUE(parse_size_bytes("2GiB", b));
  EXPECT_EQ(b, 2ull << 30);
  EXPECT_FALSE(parse_size_bytes("99999999999T", b));
  EXPECT_FALSE(parse_size_bytes("", b));
}

// The inode of /proc/WHO/ns/user ("self" or a pid): a user namespace as PeerCredentials names it.
uint64_t user_ns_of(const std::string& who) {
  struct stat st {};
  if (stat(("/proc/" + who + "/ns/user").c_str(), &st) != 0) return 0;
  return st.st_ino;
}

TEST(Access, UnprivilegedPeersRecordOnlyTheirOwnProcesses) {
  const PeerCredentials nobody{1, 65534, 65534};
  session::RecordRequest args;
  args.target.all_processes = true;
  AccessDecision d = check_record_access(nobody, false, "hpd", args);
  EXPECT_FALSE(d.allowed);
  EXPECT_NE(d.reason.find("--all"), std::string::npos);
  EXPECT_NE(d.reason.find("add you to the 'hpd' group"), std::string::npos);
  args = {};
  args.target.cgroup = "/sys/fs/cgroup";
  EXPECT_FALSE(check_record_access(nobody, false, "hpd", args).allowed);
  args = {};
  args.target.pids = {getpid()};  // this test runs as root
  d = check_record_access(nobody, false, "hpd", args);
  EXPECT_FALSE(d.allowed);
  EXPECT_NE(d.reason.find("may only record your own processes"), std::string::npos) << d.reason;
  PeerCredentials me{getpid(), getuid(), getgid()};
  // This test's own capabilities, not CAP_SYS_PTRACE in effect: the uid, gid and dumpable rules decide.
  me.cap_permitted = ~0ull;
  me.user_ns = user_ns_of("self");
  EXPECT_TRUE(check_record_access(me, false, "hpd", args).allowed)
      << check_record_access(me, false, "hpd", args).reason;
  args.target.pids = {0x7ffffff0};
  EXPECT_NE(check_record_access(me, false, "hpd", args).reason.find("no process"), std::string::npos);
  args = {};
  args.target.all_processes = true;
  EXPECT_TRUE(check_record_access(nobody, true, "hpd", args).allowed);
  PeerCredentials root{getpid(), 0, 0};
  root.initial_user_ns = true;
  EXPECT_TRUE(is_privileged_peer(root, "no-such-group-hpd-test"));
  root.initial_user_ns = false;  // root of a user namespace of its own
  EXPECT_FALSE(is_privileged_peer(root, "no-such-group-hpd-test"));
  EXPECT_FALSE(is_privileged_peer(PeerCredentials{0, 65534, 65534}, "no-such-group-hpd-test"));
}

// ns_capable() as the kernel decides it, with a real child user namespace made by a child of the test:
// the initial namespace's capabilities reach into the child, the child's own stay inside it, and the
// owner of the child holds every capability in it (from the parent namespace only).
TEST(Access, CapabilitiesCountOnlyWhereTheirNamespaceReaches) {
  int ready[2];
  int hold[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(hold), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    close(hold[1]);
    // Owned by uid 1234 as the initial namespace sees it.
    if (setresuid(1234, 1234, 1234) != 0 || unshare(CLONE_NEWUSER) != 0) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    [[maybe_unused]] const ssize_t n = read(hold[0], &c, 1);
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  const std::string pid = std::to_string(child);
  const UniqueFd child_ns(open(("/proc/" + pid + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  const UniqueFd own_ns(open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(child_ns && own_ns);
  PeerCredentials outside{1, 1000, 1000};
  outside.user_ns = user_ns_of("self");
  outside.initial_user_ns = true;
  outside.cap_effective = 1ull << kCapSysPtrace;
  EXPECT_TRUE(peer_capable_in(outside, own_ns.get(), kCapSysPtrace));
  EXPECT_TRUE(peer_capable_in(outside, child_ns.get(), kCapSysPtrace)) << "an ancestor's capability";
  EXPECT_FALSE(peer_capable_in(outside, own_ns.get(), kCapSysAdmin));
  outside.cap_effective = 0;
  EXPECT_FALSE(peer_capable_in(outside, child_ns.get(), kCapSysPtrace));
  outside.uid = 1234;  // the child namespace's owner
  EXPECT_TRUE(peer_capable_in(outside, child_ns.get(), kCapSysPtrace)) << "the owner of a child namespace";
  EXPECT_FALSE(peer_capable_in(outside, own_ns.get(), kCapSysPtrace));
  PeerCredentials inside{child, 1234, 1234};
  inside.user_ns = user_ns_of(pid);
  inside.cap_effective = ~0ull;
  EXPECT_TRUE(peer_capable_in(inside, child_ns.get(), kCapSysPtrace));
  EXPECT_FALSE(peer_capable_in(inside, own_ns.get(), kCapSysPtrace)) << "a child's capability outside it";
  EXPECT_EQ(initial_namespace_caps(inside), 0u);
  inside.user_ns = 0;  // unknown: nothing
  EXPECT_FALSE(peer_capable_in(inside, child_ns.get(), kCapSysPtrace));
  close(hold[1]);
  close(ready[0]);
  waitpid(child, nullptr, 0);
}

TEST(Access, KernelFramesAsTheKernelWouldShowThem) {
  PeerCredentials user{1, 1000, 1000};
  EXPECT_NE(kernel_frames_refusal(user, 2, 0).find("perf_event_paranoid is 2"), std::string::npos);
  EXPECT_EQ(kernel_frames_refusal(user, 1, 0), "");
  EXPECT_NE(kernel_frames_refusal(user, 1, 1).find("kptr_restrict is 1 and you lack CAP_SYSLOG"),
            std::string::npos);
  EXPECT_NE(kernel_frames_refusal(user, -1, 2).find("kptr_restrict is 2"), std::string::npos);
  user.cap_effective = (1ull << kCapPerfmon) | (1ull << kCapSyslog);
  // In a user namespace of its own: those are the namespace's, not the kernel's.
  EXPECT_NE(kernel_frames_refusal(user, 2, 0).find("perf_event_paranoid is 2"), std::string::npos);
  user.initial_user_ns = true;
  user.cap_effective = 1ull << kCapPerfmon;
  EXPECT_NE(kernel_frames_refusal(user, 2, 0).find("kptr_restrict is 0"), std::string::npos)
      << "CAP_PERFMON gives samples, but kallsyms shows addresses only with paranoid <= 1 or CAP_SYSLOG";
  user.cap_effective |= 1ull << kCapSyslog;
  EXPECT_EQ(kernel_frames_refusal(user, 2, 1), "");
  EXPECT_NE(kernel_frames_refusal(user, 2, 2).find("kptr_restrict is 2"), std::string::npos);
}

class SocketPair : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_), 0); }
  void TearDown() override {
    if (fds_[0] >= 0) close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  int fds_[2] = {-1, -1};
};

TEST_F(SocketPair, FramesCarryPayloadAndDescriptor) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  send_frame(fds_[0], "{\"a\":1}", pipe_fds[1]);
  send_frame(fds_[0], "second");
  close(pipe_fds[1]);
  Frame frame;
  ASSERT_EQ(read_frame(fds_[1], frame, 1000), ReadResult::kFrame);
  EXPECT_EQ(frame.payload, "{\"a\":1}");
  ASSERT_EQ(frame.fds.size(), 1u);
  UniqueFd received = frame.take_fd();
  ASSERT_TRUE(received);
  ASSERT_EQ(write(received.get(), "x", 1), 1);  // the received descriptor is the pipe's write end
  received.reset();
  char c = 0;
  ASSERT_EQ(read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  close(pipe_fds[0]);
  ASSERT_EQ(read_frame(fds_[1], frame, 1000), ReadResult::kFrame);
  EXPECT_EQ(frame.payload, "second");
  EXPECT_TRUE(frame.fds.empty());
  close(fds_[0]);
  fds_[0] = -1;
  EXPECT_EQ(read_frame(fds_[1], frame, 1000), ReadResult::kClosed);
}

TEST_F(SocketPair, TruncatedAndOversizedFramesAreErrors) {
  const unsigned char header[4] = {100, 0, 0, 0};
  ASSERT_EQ(write(fds_[0], header, 4), 4);
  ASSERT_EQ(write(fds_[0], "short", 5), 5);
  shutdown(fds_[0], SHUT_WR);
  Frame frame;
  try {
    read_frame(fds_[1], frame, 1000);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTruncated);
  }
}

TEST_F(SocketPair, StalledFrameTimesOut) {
  ASSERT_EQ(write(fds_[0], "\x02\x00", 2), 2);
  Frame frame;
  try {
    read_frame(fds_[1], frame, 200);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTruncated);
  }
}

TEST_F(SocketPair, OversizedFrameIsRefusedBeforeReading) {
  const unsigned char header[4] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_EQ(write(fds_[0], header, 4), 4);
  Frame frame;
  try {
    read_frame(fds_[1], frame, 1000);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTooLarge);
  }
  EXPECT_THROW(send_frame(fds_[0], std::string(kMaxMessageBytes + 1, 'x')), std::system_error);
}

TEST(Systemd, NotifiesAbstractAndPathSockets) {
  for (const bool abstract : {true, false}) {
    const std::string name = abstract ? "@hpd-unit-test-" + std::to_string(getpid())
                                      : "/tmp/hpd-unit-notify-" + std::to_string(getpid());
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    socklen_t length = offsetof(sockaddr_un, sun_path) + name.size();
    if (abstract)
      addr.sun_path[0] = '\0';
    else
      length += 1;
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), length), 0) << strerror(errno);
    setenv("NOTIFY_SOCKET", name.c_str(), 1);
    setenv("WATCHDOG_USEC", "4000000", 1);
    unsetenv("WATCHDOG_PID");
    {
      SystemdNotifier notifier;
      EXPECT_TRUE(notifier.enabled());
      EXPECT_EQ(notifier.watchdog_usec(), 4000000u);
      EXPECT_TRUE(notifier.notify("READY=1\nSTATUS=ok"));
    }
    char buffer[64] = {};
    const ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    EXPECT_EQ(std::string(buffer, n > 0 ? n : 0), "READY=1\nSTATUS=ok");
    close(fd);
    if (!abstract) unlink(name.c_str());
  }
  setenv("WATCHDOG_PID", "1", 1);  // another process's watchdog
  EXPECT_EQ(SystemdNotifier().watchdog_usec(), 0u);
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  EXPECT_FALSE(SystemdNotifier().notify("READY=1"));
}

TEST(Systemd, ActivationSocketOnlyForThisProcess) {
  setenv("LISTEN_PID", "1", 1);
  setenv("LISTEN_FDS", "1", 1);
  EXPECT_EQ(take_activation_socket(), -1);
  EXPECT_EQ(getenv("LISTEN_FDS"), nullptr);  // consumed either way
  EXPECT_EQ(take_activation_socket(), -1);
}

TEST(Memory, EstimateGrowsWithTheProfile) {
  RawProfile p;
  const uint64_t empty = estimate_profile_bytes(p, false);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t user[3] = {uint64_t(i), uint64_t(i) + 1, 7};
    RawSample s;
    s.stack = p.stacks.intern({}, user);
    p.samples.push_back(s);
  }
  const uint64_t full = estimate_profile_bytes(p, false);
  EXPECT_GT(full, empty + 10000 * (sizeof(RawSample) + 3 * 8));
  EXPECT_LT(full, 10000u * 400);
}

// Released samples: gone for a capture (only their sums stay), still to come for a Firefox output.
TEST(Memory, EstimateCountsReleasedSamplesOnlyWhenTheyComeBack) {
  RawProfile p;
  const uint64_t user[2] = {1, 2};
  const uint32_t stack = p.stacks.intern({}, user);
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 10000; ++i) {
      RawSample s;
      s.pid = s.tid = 7;
      s.stack = stack;
      s.time_ns = uint64_t(round) * 10000 + uint64_t(i);
      p.samples.push_back(s);
    }
    p.release_samples();
  }
  EXPECT_EQ(p.sample_count(), 100000u);
  EXPECT_EQ(p.released.size(), 1u);
  const uint64_t capture = estimate_profile_bytes(p, false);
  // One round's worth: the vector keeps its capacity for the next samples; the 100,000 are gone. Beside
  // them: the stack table's first block of addresses (RawStackTable, 512 words) and a few small parts.
  EXPECT_LT(capture, p.samples.capacity() * sizeof(RawSample) + p.stacks.address_bytes() + 4096);
  EXPECT_LT(capture, 100000u * sizeof(RawSample) / 4);
  EXPECT_GE(estimate_profile_bytes(p, true), capture + 100000u * sizeof(RawSample));
}

}  // namespace
}  // namespace hpd::service
