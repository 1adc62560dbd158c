// Privileged integration test: threads that were blocked before the recording began and stay blocked
// through it (the reason people attach to a hung service) show their whole wall time where they wait.
// tests/fixtures/attach_blocked.c blocks three threads in wrappers of their own (a mutex lock, a pipe
// read, pause()) and its main thread in a read of stdin, says when each entered and left its wrapper,
// and is recorded with default flags by `hpctl record --pid P -d 2`: locally as root, and through hpd by
// a real user the test creates. Also: the off-CPU completeness the report states by time is what the
// Firefox export's own samples and markers give.
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "firefox_lint.h"
#include "hpd_harness.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "test_user.h"

using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtureDir = HPD_FIXTURE_DIR;
constexpr double kShare = 0.95;

// What the fixture wrote: each waiter's tid and when it entered and left its wrapper (CLOCK_MONOTONIC).
struct Waiter {
  int64_t tid = 0;
  double entered_ns = 0, left_ns = 0;
};

std::map<std::string, Waiter> read_truth(const std::string& path) {
  std::map<std::string, Waiter> truth;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name, key;
    words >> name;
    double value = 0;
    while (words >> key >> value) {
      if (key == "tid") truth[name].tid = static_cast<int64_t>(value);
      if (key == "entered_ns") truth[name].entered_ns = value;
      if (key == "left_ns") truth[name].left_ns = value;
    }
  }
  return truth;
}

double mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

// Each waiter: the function it blocks in, and the function its thread started in.
struct Expected {
  const char* waiter;
  const char* wrapper;
  const char* start;
};
constexpr Expected kExpected[] = {{"lock", "blocked_in_lock", "lock_waiter"},
                                  {"pipe", "blocked_in_read", "pipe_waiter"},
                                  {"pause", "blocked_in_pause", "pause_waiter"},
                                  {"stdin", "blocked_in_stdin", "main"}};

double function_wall_ns(const json& report, const std::string& name) {
  for (const json& f : report.at("functions"))
    if (f.at("name") == name) return f.at("total_wall_ns").get<double>();
  return 0;
}

// The off-CPU time of a Firefox export (the markers' offCpuNs), and the part of it whose sample's stack
// is complete (hpdStackEnd 1), over all threads.
struct ExportedOffCpu {
  double ns = 0, known_ns = 0, complete_ns = 0;  // known: complete, truncated or failed (1, 2, 3)
};

ExportedOffCpu exported_off_cpu(const json& profile) {
  ExportedOffCpu out;
  for (const json& t : profile.at("threads")) {
    const json& ends = t.at("samples").at("hpdStackEnd");
    const json& data = t.at("markers").at("data");
    for (const json& d : data) {
      if (!d.is_object() || !d.contains("offCpuNs")) continue;
      const double ns = d.at("offCpuNs").get<double>();
      out.ns += ns;
      const int end = ends.at(d.at("sample").get<size_t>()).get<int>();
      if (end >= 1 && end <= 3) out.known_ns += ns;
      if (end == 1) out.complete_ns += ns;
    }
  }
  return out;
}

// Records the fixture started by `fixture` (ready, blocked) with `record_argv` and checks every waiter.
void check_recording(const std::string& what, Background& fixture, const std::string& truth_path,
                     const std::vector<std::string>& record_argv, const std::string& capture,
                     const std::string& firefox) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(fixture.ready());
  const double before = mono_ns();
  const RunResult rec = run(record_argv);
  const double after = mono_ns();
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  std::printf("%s: %s\n", what.c_str(), rec.err.c_str());
  // The summary says how many threads it found waiting: the fixture's four.
  EXPECT_NE(rec.err.find("note: 4 threads were already off the CPU when the recording began: their waits are "
                         "counted from the recording's start, in the functions they wait in"),
            std::string::npos)
      << rec.err;
  ASSERT_EQ(fixture.wait(), 0);
  const std::map<std::string, Waiter> truth = read_truth(truth_path);

  const RunResult rep = run({kHpctl, "report", capture, "--json", "--limit", "0"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json report = json::parse(rep.out);
  const double duration = report.at("totals").at("duration_ns").get<double>();
  EXPECT_GT(duration, 1.9e9);

  for (const Expected& e : kExpected) {
    ASSERT_TRUE(truth.count(e.waiter)) << e.waiter;
    const Waiter& w = truth.at(e.waiter);
    // The fixture's truth: blocked in its wrapper from before hpctl started to after it ended.
    ASSERT_LT(w.entered_ns, before) << e.waiter;
    ASSERT_GT(w.left_ns, after) << e.waiter;
    const double wrapper = function_wall_ns(report, e.wrapper);
    const double start = function_wall_ns(report, e.start);
    double thread_off = 0, complete = 0, known = 0;
    for (const json& t : report.at("totals").at("time_by_thread"))
      if (t.at("tid").get<int64_t>() == w.tid)
        thread_off = t.at("off_cpu_ns").get<double>() + t.at("wait_cpu_ns").get<double>();
    for (const json& s : report.at("totals").at("stacks").at("by_thread")) {
      if (s.at("tid").get<int64_t>() != w.tid) continue;
      const json& off = s.at("off_cpu");
      complete = off.at("complete_ns").get<double>();
      known = complete + off.at("truncated_ns").get<double>() + off.at("failed_ns").get<double>();
    }
    std::printf(
        "%s %s (tid %lld): %s %.1f ms, %s %.1f ms, thread off the CPU %.1f ms (complete %.1f of %.1f "
        "ms) of %.1f ms recorded\n",
        what.c_str(), e.waiter, static_cast<long long>(w.tid), e.wrapper, wrapper / 1e6, e.start, start / 1e6,
        thread_off / 1e6, complete / 1e6, known / 1e6, duration / 1e6);
    EXPECT_GE(wrapper, kShare * duration) << e.wrapper;
    // The stack reaches the thread's start, and the walk says it is whole.
    EXPECT_GE(start, kShare * duration) << e.start;
    EXPECT_GE(complete, kShare * duration) << e.waiter;
  }

  // Completeness by time: what the report states is what the export shows.
  const RunResult conv = run({kHpctl, "convert", capture, "-o", firefox});
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const json profile = testing::load_json_maybe_gzip(firefox);
  for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;
  const ExportedOffCpu exported = exported_off_cpu(profile);
  const json& off = report.at("totals").at("stacks").at("off_cpu");
  const double stated_ns = off.at("complete_ns").get<double>() + off.at("truncated_ns").get<double>() +
                           off.at("failed_ns").get<double>() + off.at("unknown_ns").get<double>();
  EXPECT_NEAR(stated_ns, exported.ns, 1e3);
  EXPECT_NEAR(off.at("complete_ns").get<double>(), exported.complete_ns, 1e3);
  EXPECT_NEAR(stated_ns - off.at("unknown_ns").get<double>(), exported.known_ns, 1e3);
  // And the export's own statement (meta.extra, "Complete stacks") says the same share.
  char stated[32];
  std::snprintf(stated, sizeof stated, "%.1f%% of the time",
                100.0 * exported.complete_ns / exported.known_ns);
  EXPECT_NE(profile.at("meta").dump().find(stated), std::string::npos) << "wanted \"" << stated << "\"";
  const RunResult text = run({kHpctl, "report", capture});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%% of off-CPU time",
                100.0 * exported.complete_ns / exported.known_ns);
  EXPECT_NE(text.out.find(share), std::string::npos) << "wanted \"" << share << "\" in\n" << text.out;
}

class AttachBlockedTest : public ::testing::TestWithParam<const char*> {
 protected:
  hpd::testing::TempDir tmp_{"hpd-attach", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const std::string dir_{tmp_.path()};
};

TEST_P(AttachBlockedTest, LocalRecordingSeesThreadsBlockedSinceBeforeIt) {
  const std::string name = GetParam();
  const std::string truth = dir_ + "/" + name + ".truth";
  BackgroundOptions options;
  options.ready_line = "ready";
  options.stdin_pipe = true;
  Background fixture({kFixtureDir + "/" + name, truth}, options);
  const std::string capture = dir_ + "/" + name + ".hpr";
  check_recording(
      name + " local", fixture, truth,
      {kHpctl, "record", "--no-report", "--pid", std::to_string(fixture.pid()), "-d", "2", "-o", capture},
      capture, dir_ + "/" + name + ".json.gz");
}

INSTANTIATE_TEST_SUITE_P(FramePointersOrNot, AttachBlockedTest,
                         ::testing::Values("attach_blocked", "attach_blocked_nofp"));

// A real user of the machine, made by the test (useradd) and removed after it.
class AttachBlockedAsUser : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { user_ = make_test_user("hpdtest-attach-" + std::to_string(getpid())); }
  static void TearDownTestSuite() { remove_test_user(user_); }
  static std::vector<std::string> as_user(std::vector<std::string> argv) {
    return user_.run_as(std::move(argv));
  }
  static TestUser user_;
};

TestUser AttachBlockedAsUser::user_;

TEST_F(AttachBlockedAsUser, HpdSeesTheUsersThreadsBlockedSinceBeforeTheRecording) {
  Hpd hpd;
  const std::string truth = hpd.out_dir() + "/truth";
  BackgroundOptions options;
  options.ready_line = "ready";
  options.stdin_pipe = true;
  Background fixture(as_user({kFixtureDir + "/attach_blocked_nofp", truth}), options);
  const std::string capture = hpd.out_dir() + "/user.hpr";
  check_recording("hpd, as a user", fixture, truth,
                  as_user({kHpctl, "--socket", hpd.socket(), "--daemon", "record", "--no-report", "--pid",
                           std::to_string(fixture.pid()), "-d", "2", "-o", capture}),
                  capture, hpd.out_dir() + "/user.json.gz");
}

// A command launched through hpd is held stopped at its exec until the recording is attached: off the
// CPU at the attach, but no thread of the program was waiting, and the summary does not say one was.
TEST_F(AttachBlockedAsUser, ACommandHeldAtItsExecIsNotCountedAsAlreadyWaiting) {
  Hpd hpd;
  const std::string capture = hpd.out_dir() + "/command.hpr";
  const RunResult rec = run(as_user({kHpctl, "--socket", hpd.socket(), "--daemon", "record", "--no-report",
                                     "-o", capture, "--", "/bin/sleep", "0.3"}));
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_NE(rec.err.find("recorded by hpd"), std::string::npos) << rec.err;
  EXPECT_EQ(rec.err.find("already off the CPU"), std::string::npos) << rec.err;
}

}  // namespace
}  // namespace hpd::test
