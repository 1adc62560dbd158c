// Privileged integration test: `--backend perf` with default flags on a program built with frame
// pointers over Debian's glibc, which has none (tests/fixtures/qsort_strtod.c: do_qsort calls qsort
// with a comparator, do_strtod calls strtod, each phase measured with the thread's CPU clock).
// - The callers get their CPU: do_qsort's and do_strtod's inclusive share of the thread's CPU within
//   3 points of what the fixture measured (a frame-pointer walk through glibc loses them: 0-1.5% for
//   a truth of 23-28%).
// - What hpd states about the stacks is what the export shows: the report's share of complete stacks
//   of the thread within 3 points of the share of its samples whose stack the Firefox export shows
//   reaching the thread's first frame (_start) through main.
// - The same through `--pid` of a process that execs the fixture from a program that has frame
//   pointers everywhere (tests/fixtures/exec_later.c), and through a launched command that does: the
//   call graph chosen for the first program must still complete the new program's stacks.
// Recorded by hpctl into a capture, read back by `hpctl report --json` and `hpctl convert`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cpu_clock.h"
#include "firefox_lint.h"
#include "fixture_truth.h"
#include "subprocess.h"
#include "temp_dir.h"

using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtures = HPD_FIXTURE_DIR;

double total_cpu_ns(const json& report, const std::string& name) {
  for (const json& f : report.at("functions")) {
    if (f.at("name") == name) return f.at("total_cpu_ns").get<double>();
  }
  return 0;
}

// Per sample of thread `tid` in a Firefox export: its frames' function names, root first.
struct ExportedStacks {
  size_t samples = 0;       // on-CPU samples with a stack
  size_t from_start = 0;    // whose root frame is _start
  size_t through_main = 0;  // _start, then main among its frames
};

ExportedStacks exported_stacks(const json& profile, int64_t tid) {
  ExportedStacks out;
  const json& shared = profile.at("shared");
  const json& strings = shared.at("stringArray");
  const json& func_name = shared.at("funcTable").at("name");
  const json& frame_func = shared.at("frameTable").at("func");
  const json& frame_category = shared.at("frameTable").at("category");
  const json& stack_frame = shared.at("stackTable").at("frame");
  const json& prefix_offset = shared.at("stackTable").at("prefixOffset");
  size_t waiting = SIZE_MAX, blocked = SIZE_MAX;
  const json& categories = profile.at("meta").at("categories");
  for (size_t c = 0; c < categories.size(); ++c) {
    if (categories[c].at("name") == "Waiting for CPU") waiting = c;
    if (categories[c].at("name") == "Idle") blocked = c;  // blocked off the CPU
  }
  for (const json& t : profile.at("threads")) {
    if (!t.at("tid").is_number() || t.at("tid").get<int64_t>() != tid) continue;
    const json& samples = t.at("samples");
    for (const json& stack : samples.at("stack")) {
      if (stack.is_null()) continue;
      size_t s = stack.get<size_t>();
      const auto leaf_category = frame_category[stack_frame[s].get<size_t>()].get<size_t>();
      if (leaf_category == waiting || leaf_category == blocked) continue;
      ++out.samples;
      bool main_seen = false;
      std::string root;
      for (;;) {
        const auto frame = stack_frame[s].get<size_t>();
        root = strings[func_name[frame_func[frame].get<size_t>()].get<size_t>()].get<std::string>();
        main_seen = main_seen || root == "main";
        const auto up = prefix_offset[s].get<size_t>();
        if (up == 0) break;
        s -= up;
      }
      if (root == "_start") {
        ++out.from_start;
        out.through_main += main_seen ? 1 : 0;
      }
    }
  }
  return out;
}

class PerfCallGraphTest : public ::testing::Test {
 protected:
  hpd::testing::TempDir tmp_{"hpd-perf-cg", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const std::filesystem::path dir_{tmp_.path()};
};

// What qsort_strtod measured, from its line in `out` (tid <= 0 when the line is missing).
struct Truth {
  double tid = -1, qsort_ns = -1, strtod_ns = -1, thread_ns = -1;
};

Truth truth_of(const std::string& out) {
  const std::string prefix = "qsort_strtod:";
  return Truth{fixture_field(out, prefix, "tid"), fixture_field(out, prefix, "qsort_ns"),
               fixture_field(out, prefix, "strtod_ns"), fixture_field(out, prefix, "thread_cpu_ns")};
}

// Checks the capture of a qsort_strtod run against what it measured: the callers' CPU when `callers`
// (a frame-pointer walk cannot give it), and the stated completeness against the export.
void check_capture(const std::string& dir, const std::string& capture, const std::string& what,
                   const Truth& truth, bool callers) {
  const double tid = truth.tid, thread_ns = truth.thread_ns;
  ASSERT_GT(tid, 0);
  ASSERT_GT(thread_ns, 0);

  const RunResult rep = run({kHpctl, "report", capture, "--json", "--limit", "0", "--tid",
                             std::to_string(static_cast<int64_t>(tid))});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json report = json::parse(rep.out);
  const double cpu_ns = report.at("totals").at("cpu_ns").get<double>();
  ASSERT_GT(cpu_ns, 0);
  const double qsort_truth = 100.0 * truth.qsort_ns / thread_ns,
               strtod_truth = 100.0 * truth.strtod_ns / thread_ns;
  const double qsort_got = 100.0 * total_cpu_ns(report, "do_qsort") / cpu_ns;
  const double strtod_got = 100.0 * total_cpu_ns(report, "do_strtod") / cpu_ns;
  std::printf(
      "do_qsort truth %.1f%% hpd %.1f%%; do_strtod truth %.1f%% hpd %.1f%% (of %.0f ms, truth %.0f ms)\n",
      qsort_truth, qsort_got, strtod_truth, strtod_got, cpu_ns / 1e6, thread_ns / 1e6);
  if (callers) {
    EXPECT_NEAR(qsort_got, qsort_truth, 3.0);
    EXPECT_NEAR(strtod_got, strtod_truth, 3.0);
  }

  // The completeness hpd states for the thread, against what the export shows.
  double stated = -1;
  for (const json& s : report.at("totals").at("stacks").at("by_thread")) {
    if (s.at("tid").get<double>() != tid) continue;
    const json& on = s.at("on_cpu");
    const double known =
        on.at("complete").get<double>() + on.at("truncated").get<double>() + on.at("failed").get<double>();
    ASSERT_GT(known, 100) << s.dump();
    stated = 100.0 * on.at("complete").get<double>() / known;
  }
  ASSERT_GE(stated, 0) << "no stacks stated for the thread: " << report.at("totals").at("stacks").dump();

  const std::string firefox = dir + "/" + what + ".json.gz";
  const RunResult conv = run({kHpctl, "convert", capture, "-o", firefox});
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const json profile = testing::load_json_maybe_gzip(firefox);
  for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;
  const ExportedStacks shown = exported_stacks(profile, static_cast<int64_t>(tid));
  ASSERT_GT(shown.samples, 100u);
  const double from_start = 100.0 * double(shown.from_start) / double(shown.samples);
  const double through_main = 100.0 * double(shown.through_main) / double(shown.samples);
  std::printf(
      "complete stacks: stated %.1f%%; the export shows %.1f%% from _start, %.1f%% through main, of %zu\n",
      stated, from_start, through_main, shown.samples);
  EXPECT_NEAR(stated, from_start, 3.0);
  if (callers) {
    EXPECT_NEAR(stated, through_main, 3.0);
    // Every sample of the thread is in main's work (its start-up is a few microseconds of 1.5 s).
    EXPECT_GE(through_main, 95.0);
  }
}

// Records the fixture with `flags` and checks the capture.
void check(const std::string& dir, const std::vector<std::string>& flags, const std::string& what,
           bool callers) {
  SCOPED_TRACE(what);
  const std::string capture = dir + "/" + what + ".hpr";
  std::vector<std::string> record = {kHpctl, "record", "--backend", "perf", "-o", capture, "--no-report"};
  record.insert(record.end(), flags.begin(), flags.end());
  record.insert(record.end(), {"--", kFixtures + "/qsort_strtod", "1500"});
  const RunResult r = run(record);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Truth truth = truth_of(r.out);
  ASSERT_GT(truth.tid, 0) << r.out;
  check_capture(dir, capture, what, truth, callers);
}

TEST_F(PerfCallGraphTest, FramePointerProgramOverGlibcWithoutThemGetsItsCallers) {
  check(dir_.string(), {}, "default", true);
}

// Frame pointers asked for: the chains stop in glibc, below main's callers (__libc_start_call_main
// keeps no frame), and the report must not call them complete.
TEST_F(PerfCallGraphTest, FramePointerChainsThatStopShortAreNotCalledComplete) {
  check(dir_.string(), {"--call-graph", "fp"}, "fp", false);
}

// A launched command whose program (exec_later: frame pointers everywhere, nothing linked) execs
// qsort_strtod (frame pointers over glibc without them). auto judges the program the command names
// and its libraries: fp, whose attributes the events keep through the exec; the stacks the
// frame-pointer walk cannot complete after it are unwound with CFI from a stack copy. The callers get
// their CPU, the stacks reach main, and the stated completeness is what the export shows.
TEST_F(PerfCallGraphTest, LaunchedCommandThatExecsAProgramWithoutFramePointersGetsItsCallers) {
  SCOPED_TRACE("launched exec");
  const std::string out = dir_.string() + "/launched.out";
  const std::string capture = dir_.string() + "/launched.hpr";
  // exec_later's stdin is /dev/null: its read of the go-ahead returns at once, and it execs.
  const RunResult r = run({kHpctl, "--local", "record", "--backend", "perf", "-o", capture, "--no-report",
                           "--", kFixtures + "/exec_later", out, kFixtures + "/qsort_strtod", "1500"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string fixture_out = read_text_file(out);
  const Truth truth = truth_of(fixture_out);
  ASSERT_GT(truth.tid, 0) << fixture_out;
  check_capture(dir_.string(), capture, "launched", truth, true);
}

// `--pid` of a process that runs a program built with frame pointers and linking nothing
// (exec_later), which then execs qsort_strtod (frame pointers over glibc without them). The call graph
// chosen at the attach (fp: nothing the first program runs lacks them) cannot change once the events
// are open: the stacks the frame-pointer walk cannot complete after the exec are unwound with CFI from
// a stack copy. The callers get their CPU, the stacks reach main, and the stated completeness is what
// the export shows.
TEST_F(PerfCallGraphTest, PidThatExecsAProgramWithoutFramePointersGetsItsCallers) {
  SCOPED_TRACE("exec");
  const std::string out = dir_.string() + "/exec.out";
  BackgroundOptions launch;
  launch.ready_line = "ready";
  launch.stdin_pipe = true;
  Background target({kFixtures + "/exec_later", out, kFixtures + "/qsort_strtod", "1500"}, launch);
  ASSERT_TRUE(target.ready());
  const pid_t pid = target.pid();
  const std::string capture = dir_.string() + "/exec.hpr";
  BackgroundOptions quiet;
  quiet.stdout_path = dir_.string() + "/record.out";
  Background recorder({kHpctl, "--local", "record", "--backend", "perf", "--pid",
                       std::to_string(target.pid()), "-o", capture, "--no-report"},
                      quiet);
  // The exec comes once hpctl has the target's events open (one per online CPU).
  const auto cpus = static_cast<size_t>(::sysconf(_SC_NPROCESSORS_ONLN));
  while (perf_events_held(recorder.pid()) < cpus) {
    const std::string stat = read_text_file("/proc/" + std::to_string(recorder.pid()) + "/stat");
    ASSERT_EQ(stat.find(") Z "), std::string::npos) << "hpctl ended before it attached";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(target.send("x"));
  ASSERT_EQ(target.wait(), 0);
  ASSERT_EQ(recorder.wait(), 0);
  const std::string fixture_out = read_text_file(out);
  const Truth truth = truth_of(fixture_out);
  ASSERT_EQ(truth.tid, static_cast<double>(pid)) << fixture_out;
  check_capture(dir_.string(), capture, "exec", truth, true);
}

}  // namespace
}  // namespace hpd::test
