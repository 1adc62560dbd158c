// Privileged integration test: a thread that blocks in a wrapper of its own in its first microseconds,
// when its process's unwind tables may not be in the eBPF maps yet, has the same stack, frame for frame,
// as the same wait taken later with the tables in place. tests/fixtures/early_wait.c blocks its main
// thread at the start of main(), and a second thread right after its start, in wait_join() (which calls
// pthread_join), works a little, then blocks again through the same call path; it writes when each wait
// began and ended (CLOCK_MONOTONIC). Recorded 20 times by `hpctl record -- FIXTURE` with default flags
// (eBPF, the default call graph), with and without frame pointers, and once through hpd; read back from
// the Firefox export, whose samples carry whole stacks and whose off-CPU markers their intervals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtureDir = HPD_FIXTURE_DIR;
constexpr int kRuns = 20;
constexpr const char* kWaitMs = "200";  // each wait of the fixture
constexpr const char* kCpuMs = "100";   // its work between the waits (its own CPU time)
constexpr double kShare = 0.95;
constexpr const char* kWrapper = "wait_join";

// One waiting thread of the fixture: its tid, and when each of its two waits began and ended.
struct Waits {
  int64_t tid = 0;
  double early_entered = 0, early_left = 0, later_entered = 0, later_left = 0;
};

std::map<std::string, Waits> read_truth(const std::string& path) {
  std::map<std::string, Waits> truth;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name, key;
    words >> name;
    double value = 0;
    Waits w;
    while (words >> key >> value) {
      if (key == "tid") w.tid = static_cast<int64_t>(value);
      if (key == "early_entered_ns") w.early_entered = value;
      if (key == "early_left_ns") w.early_left = value;
      if (key == "later_entered_ns") w.later_entered = value;
      if (key == "later_left_ns") w.later_left = value;
    }
    truth[name] = w;
  }
  return truth;
}

// An off-CPU sample of the export: when its thread switched out (CLOCK_MONOTONIC), for how long, whether
// blocked (not waiting for a CPU), how its walk ended (hpdStackEnd), and its stack from the root down.
struct OffCpuSample {
  double at_ns = 0, off_ns = 0;
  bool blocked = false;
  int end = 0;
  std::vector<std::string> stack;
};

// The off-CPU samples of thread `tid` in the Firefox export `profile`, in time order.
std::vector<OffCpuSample> off_cpu_samples(const json& profile, int64_t tid) {
  const json& shared = profile.at("shared");
  const json& strings = shared.at("stringArray");
  const json& func_name = shared.at("funcTable").at("name");
  const json& frame_func = shared.at("frameTable").at("func");
  const json& stack_frame = shared.at("stackTable").at("frame");
  const json& stack_prefix = shared.at("stackTable").at("prefixOffset");
  const double start_ns =
      profile.at("meta").at("startTimeAsClockMonotonicNanosecondsSinceBoot").get<double>();
  const auto stack_of = [&](size_t s) {
    std::vector<std::string> names;
    for (;;) {
      const size_t frame = stack_frame.at(s).get<size_t>();
      names.push_back(strings.at(func_name.at(frame_func.at(frame).get<size_t>()).get<size_t>()));
      const size_t off = stack_prefix.at(s).get<size_t>();
      if (off == 0) break;
      s -= off;
    }
    std::reverse(names.begin(), names.end());
    return names;
  };
  std::vector<OffCpuSample> out;
  for (const json& t : profile.at("threads")) {
    if (!t.at("tid").is_number() || t.at("tid").get<int64_t>() != tid) continue;
    const json& samples = t.at("samples");
    for (const json& d : t.at("markers").at("data")) {
      if (!d.is_object() || !d.contains("offCpuNs")) continue;
      const size_t i = d.at("sample").get<size_t>();
      OffCpuSample s;
      s.at_ns = start_ns + samples.at("time").at(i).get<double>() * 1e6;
      s.off_ns = d.at("offCpuNs").get<double>();
      s.blocked = d.value("type", "") == "HpdOffCpu";
      s.end = samples.at("hpdStackEnd").at(i).get<int>();
      if (!samples.at("stack").at(i).is_null()) s.stack = stack_of(samples.at("stack").at(i).get<size_t>());
      out.push_back(std::move(s));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.at_ns < b.at_ns; });
  return out;
}

std::string joined(const std::vector<std::string>& stack) {
  std::string s;
  for (const std::string& f : stack) s += (s.empty() ? "" : " -> ") + f;
  return s;
}

// The stack of one wait ([entered, left] as the fixture measured it): the longest blocked sample that
// switched out within it; and the part of the wait spent off the CPU in samples with the wrapper.
struct Wait {
  OffCpuSample longest;
  double wrapper_ns = 0;
};

Wait wait_of(const std::vector<OffCpuSample>& samples, double entered, double left) {
  Wait w;
  for (const OffCpuSample& s : samples) {
    if (s.at_ns < entered || s.at_ns > left) continue;
    if (s.blocked && s.off_ns > w.longest.off_ns) w.longest = s;
    if (std::find(s.stack.begin(), s.stack.end(), kWrapper) != s.stack.end())
      w.wrapper_ns += std::min(s.off_ns, left - s.at_ns);
  }
  return w;
}

// A stack from its root down to the wrapper (nothing without the wrapper).
std::vector<std::string> through_wrapper(const std::vector<std::string>& stack) {
  const auto it = std::find(stack.begin(), stack.end(), kWrapper);
  return it == stack.end() ? std::vector<std::string>{} : std::vector<std::string>(stack.begin(), it + 1);
}

// Failed checks of the running test so far.
int failures_so_far() {
  const ::testing::TestResult* result = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i) failed += result->GetTestPartResult(i).failed();
  return failed;
}

// Checks one recording's capture against the truth file the fixture wrote. Returns false on a failure.
bool check_run(const std::string& what, const std::string& capture, const std::string& truth_path,
               const std::string& firefox) {
  SCOPED_TRACE(what);
  const int failures_before = failures_so_far();
  const RunResult conv = run({kHpctl, "convert", capture, "-o", firefox});
  EXPECT_EQ(conv.exit_code, 0) << conv.err;
  if (conv.exit_code != 0) return false;
  const json profile = testing::load_json_maybe_gzip(firefox);
  for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;
  const std::map<std::string, Waits> truth = read_truth(truth_path);
  EXPECT_EQ(truth.size(), 2u) << truth_path;
  const std::map<std::string, std::string> roots = {{"main", "main"}, {"second", "second_thread"}};
  for (const auto& [name, root] : roots) {
    if (!truth.count(name)) continue;
    const Waits& w = truth.at(name);
    const std::vector<OffCpuSample> samples = off_cpu_samples(profile, w.tid);
    const Wait early = wait_of(samples, w.early_entered, w.early_left);
    const Wait later = wait_of(samples, w.later_entered, w.later_left);
    const double early_ns = w.early_left - w.early_entered;
    std::printf("%s %s: early wait %.1f ms, %.1f ms of it in %s: %s (end %d)\n", what.c_str(), name.c_str(),
                early_ns / 1e6, early.wrapper_ns / 1e6, kWrapper, joined(early.longest.stack).c_str(),
                early.longest.end);
    std::printf("%s %s: later wait %.1f ms: %s (end %d)\n", what.c_str(), name.c_str(),
                (w.later_left - w.later_entered) / 1e6, joined(later.longest.stack).c_str(),
                later.longest.end);
    // The later wait, tables in place: the wrapper under the thread's own functions, a whole walk.
    const std::vector<std::string> later_user = through_wrapper(later.longest.stack);
    EXPECT_FALSE(later_user.empty()) << name << ": the later wait has no " << kWrapper << ": "
                                     << joined(later.longest.stack);
    EXPECT_NE(std::find(later_user.begin(), later_user.end(), root), later_user.end()) << name;
    EXPECT_EQ(later.longest.end, 1) << name << ": the later wait's walk is not complete";
    // The early wait: the same stack, frame for frame, from the root through the wrapper and below it
    // (pthread_join, glibc, the kernel), and as complete.
    EXPECT_EQ(joined(early.longest.stack), joined(later.longest.stack)) << name;
    EXPECT_EQ(early.longest.end, later.longest.end) << name;
    // And the wrapper holds the early wait's wall time.
    EXPECT_GE(early.wrapper_ns, kShare * early_ns) << name;
  }
  return failures_so_far() == failures_before;
}

class EarlyWaitTest : public ::testing::TestWithParam<const char*> {
 protected:
  // kRuns recordings of the fixture with waits of `wait_ms`; the runs that failed.
  int failed_runs(const char* wait_ms) {
    const std::string fixture = kFixtureDir + "/" + GetParam();
    int failed = 0;
    for (int i = 0; i < kRuns; ++i) {
      const std::string base = dir_ + "/wait" + wait_ms + "-run" + std::to_string(i);
      const RunResult rec = run({kHpctl, "record", "--no-report", "-o", base + ".hpr", "--", fixture,
                                 base + ".truth", wait_ms, kCpuMs});
      EXPECT_EQ(rec.exit_code, 0) << rec.err;
      if (rec.exit_code != 0 ||
          !check_run(std::string(GetParam()) + " " + wait_ms + " ms run " + std::to_string(i), base + ".hpr",
                     base + ".truth", base + ".json.gz")) {
        std::printf("run %d: %s\n", i, rec.err.c_str());
        ++failed;
      }
    }
    return failed;
  }

  hpd::testing::TempDir tmp_{"hpd-early-wait", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const std::string dir_{tmp_.path()};
};

TEST_P(EarlyWaitTest, FirstMicrosecondsWaitHasTheStackOfTheLaterOne) {
  EXPECT_EQ(failed_runs(kWaitMs), 0) << "of " << kRuns << " runs";
}

// The second walk of such a wait from the copy of its stack taken as it blocked, alone: without the
// read of the waiting thread's stack (HPD_OFF_CPU_REWALK=0), which otherwise comes first whenever the
// recorder gets to it before the thread runs again, so that the copies are what completes the early
// waits (on a loaded machine the read may come too late, and the copy is all there is). A recorder quick
// enough puts every table in place before the fixture blocks, and leaves nothing to walk again (CI saw
// five such runs in a row): HPD_DRAIN_PAUSE_US=20000 holds it back after each read of the mappings, as a
// recorder preempted there is, so that the early waits come before their tables in every run.
TEST(EarlyWaitCopies, FirstMicrosecondsWaitIsWalkedAgainFromItsCopy) {
  hpd::testing::TempDir tmp("hpd-early-wait-copy", hpd::testing::TempDir::Cleanup::kKeepOnFailure);
  uint64_t from_copies = 0;
  for (int i = 0; i < 5; ++i) {
    const std::string base = tmp.path() + "/run" + std::to_string(i);
    const RunResult rec = run({kHpctl, "--local", "record", "--no-report", "-o", base + ".hpr", "--",
                               kFixtureDir + "/early_wait_nofp", base + ".truth", kWaitMs, kCpuMs},
                              120, {"HPD_OFF_CPU_REWALK=0", "HPD_DRAIN_PAUSE_US=20000"});
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
    EXPECT_TRUE(
        check_run("copies run " + std::to_string(i), base + ".hpr", base + ".truth", base + ".json.gz"))
        << rec.err;
    // "N off-CPU: R read before their thread ran again, C from a copy of their stack taken as it blocked"
    const std::string read = " read before their thread ran again, ";
    const size_t at = rec.err.find(read);
    if (at == std::string::npos) continue;
    const size_t count = rec.err.rfind("off-CPU: ", at);
    ASSERT_NE(count, std::string::npos) << rec.err;
    EXPECT_EQ(std::strtoull(rec.err.c_str() + count + std::strlen("off-CPU: "), nullptr, 10), 0u)
        << "no stack is read with HPD_OFF_CPU_REWALK=0\n"
        << rec.err;
    from_copies += std::strtoull(rec.err.c_str() + at + read.size(), nullptr, 10);
  }
  // The paused recorder published the tables after the threads blocked: their waits were walked again
  // from the copies.
  EXPECT_GT(from_copies, 0u);
}

// A recorder slow to come back to its ring: HPD_DRAIN_PAUSE_US pauses it 20 ms after each read of the
// mappings, as a recorder preempted there on a loaded machine is. The fixture's libraries are mapped and
// its threads block inside such a pause, before the recorder has read those mappings, and the second
// walk of their stacks must wait for them: CI once saw the main thread's early wait keep its first
// frame alone, walked again without libc's mapping and taken as final. Five runs of each build.
TEST(EarlyWaitSlowRecorder, WaitBeforeItsMappingsWereReadHasTheStackOfTheLaterOne) {
  hpd::testing::TempDir tmp("hpd-early-wait-slow", hpd::testing::TempDir::Cleanup::kKeepOnFailure);
  int failed = 0;
  uint64_t read_again = 0;
  for (const char* name : {"early_wait", "early_wait_nofp"}) {
    for (int i = 0; i < 5; ++i) {
      const std::string base = tmp.path() + "/" + name + std::to_string(i);
      const RunResult rec = run({kHpctl, "--local", "record", "--no-report", "-o", base + ".hpr", "--",
                                 kFixtureDir + "/" + name, base + ".truth", kWaitMs, kCpuMs},
                                120, {"HPD_DRAIN_PAUSE_US=20000"});
      ASSERT_EQ(rec.exit_code, 0) << rec.err;
      if (!check_run(std::string("slow recorder ") + name + " run " + std::to_string(i), base + ".hpr",
                     base + ".truth", base + ".json.gz")) {
        std::printf("%s\n", rec.err.c_str());
        ++failed;
      }
      // "N off-CPU: R read before their thread ran again, C from a copy ..."
      const std::string read = " read before their thread ran again";
      const size_t at = rec.err.find(read);
      const size_t count = at == std::string::npos ? std::string::npos : rec.err.rfind("off-CPU: ", at);
      if (count != std::string::npos)
        read_again += std::strtoull(rec.err.c_str() + count + std::strlen("off-CPU: "), nullptr, 10);
    }
  }
  EXPECT_EQ(failed, 0) << "of 10 runs";
  // The pause put the early waits before their tables: some of them were read and walked again.
  EXPECT_GT(read_again, 0u);
}

INSTANTIATE_TEST_SUITE_P(FramePointersOrNot, EarlyWaitTest,
                         ::testing::Values("early_wait", "early_wait_nofp"));

// The same through hpd, as root: one run of each build.
TEST(EarlyWaitHpd, FirstMicrosecondsWaitHasTheStackOfTheLaterOne) {
  Hpd hpd;
  for (const char* name : {"early_wait", "early_wait_nofp"}) {
    const std::string base = hpd.out_dir() + "/" + name;
    const RunResult rec =
        run({kHpctl, "--socket", hpd.socket(), "--daemon", "record", "--no-report", "-o", base + ".hpr", "--",
             kFixtureDir + "/" + name, base + ".truth", kWaitMs, kCpuMs});
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
    if (!check_run(std::string("hpd ") + name, base + ".hpr", base + ".truth", base + ".json.gz"))
      std::printf("%s\n", rec.err.c_str());
  }
}

}  // namespace
}  // namespace hpd::test
