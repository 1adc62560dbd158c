// Privileged integration test: the time threads spend runnable, waiting for a CPU, apart from the time
// they spend blocked, against fixtures that measure their own: tests/fixtures/cpu_wait.c (two
// spinners pinned to one CPU, each measuring its wall and thread CPU time, and a sleeper) and
// tests/fixtures/wakeup_wait.c (a sleeper woken while its CPU is taken, which then waits for it).
// Recorded by hpctl into a capture (default flags, and --backend perf --off-cpu), then read back by
// `hpctl report --json` and `hpctl convert`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_clock.h"
#include "cpu_wait_truth.h"
#include "firefox_lint.h"
#include "subprocess.h"
#include "temp_dir.h"

using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixture = std::string(HPD_FIXTURE_DIR) + "/cpu_wait";
const std::string kWakeupFixture = std::string(HPD_FIXTURE_DIR) + "/wakeup_wait";
constexpr int kPhaseMs = 2000;
constexpr int kSleepMs = 600;

// The report's time of one thread (totals.time_by_thread), in ns.
struct Reported {
  double cpu_ns = 0, blocked_ns = 0, wait_ns = 0;
  bool found = false;
};

Reported reported(const json& report, int64_t tid) {
  Reported r;
  for (const json& t : report.at("totals").at("time_by_thread")) {
    if (t.at("tid").get<int64_t>() != tid) continue;
    r.found = true;
    r.cpu_ns = t.at("cpu_ns").get<double>();
    r.blocked_ns = t.at("off_cpu_ns").get<double>();
    r.wait_ns = t.at("wait_cpu_ns").get<double>();
  }
  return r;
}

// A thread's waits in the Firefox export: the sum of its "Waiting for CPU" markers, and how many of
// its samples have their leaf frame in the Idle category, subcategory "Waiting for CPU" (the writer's
// "[waiting for CPU]" leaf, which the profiler's "Include idle samples" hides).
struct ExportedWaits {
  double marker_ns = 0;
  size_t samples_in_category = 0;
};

ExportedWaits exported_waits(const json& profile, int64_t tid) {
  ExportedWaits w;
  size_t category = SIZE_MAX, subcategory = SIZE_MAX;
  const json& categories = profile.at("meta").at("categories");
  for (size_t c = 0; c < categories.size(); ++c) {
    if (categories[c].at("name") != "Idle") continue;
    category = c;
    const json& subs = categories[c].at("subcategories");
    for (size_t k = 0; k < subs.size(); ++k) {
      if (subs[k] == "Waiting for CPU") subcategory = k;
    }
  }
  EXPECT_NE(category, SIZE_MAX) << "no Idle category";
  EXPECT_NE(subcategory, SIZE_MAX) << "no Waiting for CPU subcategory of Idle";
  const json& stack_frame = profile.at("shared").at("stackTable").at("frame");
  const json& frame_category = profile.at("shared").at("frameTable").at("category");
  const json& frame_subcategory = profile.at("shared").at("frameTable").at("subcategory");
  for (const json& t : profile.at("threads")) {
    if (!t.at("tid").is_number() || t.at("tid").get<int64_t>() != tid) continue;
    const json& markers = t.at("markers");
    for (const json& d : markers.at("data")) {
      if (d.is_object() && d.value("type", "") == "HpdWaitCpu") w.marker_ns += d.at("offCpuNs").get<double>();
    }
    for (const json& stack : t.at("samples").at("stack")) {
      if (stack.is_null()) continue;
      const auto frame = stack_frame[stack.get<size_t>()].get<size_t>();
      w.samples_in_category += frame_category[frame].get<size_t>() == category &&
                               frame_subcategory[frame].get<size_t>() == subcategory;
    }
  }
  return w;
}

class CpuWaitTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Records the fixture with `flags` (none: the defaults) and checks every figure against its truth.
  // `stacks`: the backend takes a stack at a switch-out and splits a blocked interval at its wakeup
  // (eBPF; perf_event's switch records have no stack, and its wait after a wakeup stays blocked).
  // `yield`: the spinners give the CPU up with sched_yield() (runnable, not preempted) as well.
  void check_recording(const std::vector<std::string>& flags, const std::string& what, bool stacks,
                       bool yield = false) {
    SCOPED_TRACE(what);
    const std::string capture = path(what + ".hpr");
    std::vector<std::string> record = {kHpctl, "record", "-o", capture, "--no-report"};
    record.insert(record.end(), flags.begin(), flags.end());
    record.insert(record.end(), {"--", kFixture, std::to_string(kPhaseMs), std::to_string(kSleepMs)});
    if (yield) record.push_back("yield");
    const double steal_before = host_steal_ns();
    const RunResult r = run(record);
    // Time stolen from the machine's CPUs (a VM on a busy host: 3.5% of both CPUs seen beside a CI
    // run): the fixture's wall-clock truth counts it as off the CPU, and no scheduler saw it.
    const double stolen_ns = host_steal_ns() - steal_before;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::map<std::string, CpuWaitTruth> truth = cpu_wait_truth(r.out);
    ASSERT_EQ(truth.size(), 3u) << r.out;

    const RunResult rep = run({kHpctl, "report", capture, "--json", "--limit", "0"});
    ASSERT_EQ(rep.exit_code, 0) << rep.err;
    const json report = json::parse(rep.out);
    const RunResult text = run({kHpctl, "report", capture});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("Time by thread"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("waiting for a CPU"), std::string::npos) << text.out;

    const std::string firefox = path(what + ".json.gz");
    const RunResult conv = run({kHpctl, "convert", capture, "-o", firefox});
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    const json profile = testing::load_json_maybe_gzip(firefox);
    for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;

    for (const char* name : {"spin_a", "spin_b"}) {
      const CpuWaitTruth& t = truth.at(name);
      const Reported got = reported(report, t.tid);
      ASSERT_TRUE(got.found) << name;
      const ExportedWaits exported = exported_waits(profile, t.tid);
      std::printf(
          "%s %s: truth cpu %.1f ms (whole thread %.1f), waited %.1f ms (wall %.1f - cpu; kernel run delay "
          "%.1f), whole life off the CPU %.1f ms (waiting %.1f, blocked %.1f); hpd cpu %.1f ms, waiting for "
          "CPU %.1f ms, blocked %.1f ms; export: %zu samples in the category, markers %.1f ms; stolen from "
          "the machine's CPUs meanwhile %.1f ms\n",
          what.c_str(), name, t.cpu_ns / 1e6, t.thread_cpu_ns / 1e6, t.waited_ns() / 1e6, t.wall_ns / 1e6,
          t.run_delay_ns / 1e6, t.life_off_ns() / 1e6, t.life_run_delay_ns / 1e6, t.life_blocked_ns() / 1e6,
          got.cpu_ns / 1e6, got.wait_ns / 1e6, got.blocked_ns / 1e6, exported.samples_in_category,
          exported.marker_ns / 1e6, stolen_ns / 1e6);
      // Two spinners on one CPU wait for it about half of the phase (more on a loaded machine): the
      // checks below could not pass by accident.
      ASSERT_GT(t.waited_ns(), 0.2 * kPhaseMs * 1e6) << name << " hardly waited: the CPU was not shared";
      // The kernel's run delay agrees with the thread's own clocks over the phase, where it never
      // blocks: which makes it the truth for the waits before the phase, after the pinning and the
      // start barrier (hundreds of ms on a loaded machine). The clocks' difference also holds what the
      // hypervisor stole while the thread ran (72-83 ms of 2 s per thread in a CI run here): at most
      // the time stolen from the machine meanwhile.
      EXPECT_NEAR(t.run_delay_ns, t.waited_ns(), std::max(0.05 * t.waited_ns(), 2e6) + stolen_ns) << name;
      // Off the CPU: waiting for it plus blocked, however the backend splits them.
      EXPECT_NEAR(got.wait_ns + got.blocked_ns, t.life_off_ns(),
                  std::max(0.1 * t.life_off_ns(), 10e6) + stolen_ns)
          << name;
      if (stacks) {
        EXPECT_NEAR(got.wait_ns, t.life_run_delay_ns, std::max(0.1 * t.life_run_delay_ns, 5e6)) << name;
        // Blocked only when pinned and at the start barrier (the truth's rest holds the stolen time).
        EXPECT_NEAR(got.blocked_ns, t.life_blocked_ns(), 0.05 * t.life_off_ns() + 20e6 + stolen_ns) << name;
      } else {
        // At least its waits in the phase (preempted or yielding), at most all of its run delay.
        EXPECT_GT(got.wait_ns, 0.9 * (t.waited_ns() - stolen_ns)) << name;
        EXPECT_LT(got.wait_ns, 1.1 * t.life_run_delay_ns + 5e6) << name;
      }
      // eBPF reads the scheduler's runtime, whose deltas telescope to the thread's CPU time at its last
      // switch-out: the truth (taken just before the thread returns) plus its exit, microseconds. A
      // thread yielding about as often as the timer fires may see no sample for 100 ms and more (the
      // two in step), so most of its last stretch can be the tail reported at that switch-out (lost
      // when the recording ended before the task was freed: 1-9% short, 2 runs in 3). perf_event counts
      // task-clock periods, and the part of the last one a thread does not finish is not in any sample
      // (2.1% short once, yielding 1000 times a second).
      if (stacks) {
        EXPECT_GE(got.cpu_ns, t.thread_cpu_ns - 1e5) << name;
        EXPECT_LT(got.cpu_ns, t.thread_cpu_ns + std::max(0.003 * t.thread_cpu_ns, 2e6)) << name;
      } else {
        // perf_event's thread CPU is its task-clock counter, which runs on while the hypervisor has
        // the thread's virtual CPU (the thread's CPU clock does not): ahead by up to the steal (seen
        // beside four CPU hogs and a CI run: 346.1 ms for 300.2, 260 ms stolen).
        const double tolerance = std::max(0.05 * t.thread_cpu_ns, 3e6);
        EXPECT_LE(got.cpu_ns, t.thread_cpu_ns + tolerance + stolen_ns) << name;
        EXPECT_GE(got.cpu_ns, t.thread_cpu_ns - tolerance) << name;
      }
      if (stacks) {
        EXPECT_GT(exported.samples_in_category, 0u) << name;
      }
      EXPECT_NEAR(exported.marker_ns, got.wait_ns, 1e3) << name;
    }
    const CpuWaitTruth& sleeper = truth.at("sleeper");
    const Reported slept = reported(report, sleeper.tid);
    ASSERT_TRUE(slept.found);
    std::printf(
        "%s sleeper: truth slept %.1f ms (asked %d), whole life off the CPU %.1f ms (waiting %.1f); hpd "
        "blocked %.1f ms, waiting for CPU %.1f ms\n",
        what.c_str(), sleeper.wall_ns / 1e6, kSleepMs, sleeper.life_off_ns() / 1e6,
        sleeper.life_run_delay_ns / 1e6, slept.blocked_ns / 1e6, slept.wait_ns / 1e6);
    // Off the CPU: its sleep, measured from before the call to after it, and the start barrier; blocked,
    // then (after each wakeup) waiting for a CPU, on this CPU the spinners do not use.
    EXPECT_GE(sleeper.wall_ns, kSleepMs * 1e6);
    EXPECT_NEAR(slept.blocked_ns + slept.wait_ns, sleeper.life_off_ns(),
                std::max(0.05 * sleeper.life_off_ns(), 10e6));
    // What it waited for a CPU is the kernel's run delay: microseconds on a quiet machine, far below the
    // 600 ms that a sleep counted as waiting would give (perf_event counts the waits after a wakeup as
    // blocked, so less).
    if (stacks) {
      EXPECT_NEAR(slept.wait_ns, sleeper.life_run_delay_ns, std::max(0.1 * sleeper.life_run_delay_ns, 5e6));
    } else {
      EXPECT_LT(slept.wait_ns, sleeper.life_run_delay_ns + 5e6);
    }
  }

  hpd::testing::TempDir tmp_{"hpd-cpu-wait", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const std::filesystem::path dir_{tmp_.path()};
};

// What the wakeup_wait fixture measured (CLOCK_MONOTONIC, ns).
struct SleeperTruth {
  int64_t tid = 0;
  double before_ns = 0, call_ns = 0, deadline_ns = 0, back_ns = 0, run_delay_ns = -1;
  [[nodiscard]] double slept_ns() const { return deadline_ns - call_ns; }
  [[nodiscard]] double waited_ns() const { return back_ns - deadline_ns; }
};

SleeperTruth parse_sleeper(const std::string& out) {
  SleeperTruth t;
  const size_t at = out.find("wakeup_wait: sleeper ");
  EXPECT_NE(at, std::string::npos) << out;
  if (at == std::string::npos) return t;
  std::istringstream in(out.substr(at + 21, out.find('\n', at) - at - 21));
  std::string key;
  double value = 0;
  while (in >> key >> value) {
    if (key == "tid") t.tid = static_cast<int64_t>(value);
    if (key == "before_ns") t.before_ns = value;
    if (key == "call_ns") t.call_ns = value;
    if (key == "deadline_ns") t.deadline_ns = value;
    if (key == "back_ns") t.back_ns = value;
    if (key == "run_delay_ns") t.run_delay_ns = value;
  }
  EXPECT_GT(t.tid, 0) << out;
  return t;
}

// An off-CPU interval of the Firefox export (one marker), CLOCK_MONOTONIC ns.
struct ExportedInterval {
  double start_ns = 0, ns = 0;
  bool waits = false;  // HpdWaitCpu, else HpdOffCpu
  [[nodiscard]] double end_ns() const { return start_ns + ns; }
};

std::vector<ExportedInterval> exported_intervals(const json& profile, int64_t tid) {
  std::vector<ExportedInterval> out;
  const double start_mono_ns =
      profile.at("meta").at("startTimeAsClockMonotonicNanosecondsSinceBoot").get<double>();
  for (const json& t : profile.at("threads")) {
    if (!t.at("tid").is_number() || t.at("tid").get<int64_t>() != tid) continue;
    const json& markers = t.at("markers");
    for (size_t i = 0; i < markers.at("data").size(); ++i) {
      const json& d = markers.at("data")[i];
      if (!d.is_object()) continue;
      const std::string type = d.value("type", "");
      if (type != "HpdWaitCpu" && type != "HpdOffCpu") continue;
      out.push_back({start_mono_ns + markers.at("startTime")[i].get<double>() * 1e6,
                     d.at("offCpuNs").get<double>(), type == "HpdWaitCpu"});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ExportedInterval& a, const ExportedInterval& b) { return a.start_ns < b.start_ns; });
  return out;
}

// A blocked interval split at its wakeup (eBPF, sched_wakeup): a sleeper woken while a SCHED_FIFO hog
// holds its CPU is blocked until its deadline and waits for the CPU from there until it returns.
class WakeupWaitTest : public ::testing::Test {
 protected:
  struct Recorded {
    SleeperTruth truth;
    Reported reported;
    // The blocked interval that begins the sleep and the one right after it, if any.
    std::optional<ExportedInterval> sleep, after;
  };

  // Records `wakeup_wait SLEEP_MS HOG_MS [CPU]` with `flags` (none: the defaults) and reads it back.
  Recorded record(const std::vector<std::string>& flags, const std::string& what, int sleep_ms, int hog_ms,
                  int cpu = -1) {
    SCOPED_TRACE(what);
    Recorded got;
    const std::string capture = (dir_ / (what + ".hpr")).string();
    std::vector<std::string> command = {kHpctl, "record", "-o", capture, "--no-report"};
    command.insert(command.end(), flags.begin(), flags.end());
    command.insert(command.end(), {"--", kWakeupFixture, std::to_string(sleep_ms), std::to_string(hog_ms)});
    if (cpu >= 0) command.push_back(std::to_string(cpu));
    const RunResult r = run(command);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    // Every blocked interval of the recording began after the hooks were attached, so each had its
    // wakeup seen (eBPF; perf_event does not look for any).
    EXPECT_EQ(r.err.find("ended with no wakeup seen"), std::string::npos) << r.err;
    got.truth = parse_sleeper(r.out);
    const RunResult rep = run({kHpctl, "report", capture, "--json", "--limit", "0"});
    EXPECT_EQ(rep.exit_code, 0) << rep.err;
    if (rep.exit_code == 0) got.reported = reported(json::parse(rep.out), got.truth.tid);
    const std::string firefox = (dir_ / (what + ".json.gz")).string();
    const RunResult conv = run({kHpctl, "convert", capture, "-o", firefox});
    EXPECT_EQ(conv.exit_code, 0) << conv.err;
    if (conv.exit_code != 0) return got;
    const json profile = testing::load_json_maybe_gzip(firefox);
    for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;
    const std::vector<ExportedInterval> intervals = exported_intervals(profile, got.truth.tid);
    for (size_t i = 0; i < intervals.size(); ++i) {
      // The switch-out comes microseconds after the fixture's clock read before the call (later if
      // the thread was preempted in between: that wait is an interval of its own).
      const ExportedInterval& v = intervals[i];
      if (v.waits || v.start_ns < got.truth.call_ns || v.start_ns > got.truth.deadline_ns) continue;
      got.sleep = v;
      if (i + 1 < intervals.size() && std::abs(intervals[i + 1].start_ns - v.end_ns()) < 1e3)
        got.after = intervals[i + 1];
      break;
    }
    const SleeperTruth& t = got.truth;
    std::printf(
        "%s: truth slept %.2f ms, then waited %.2f ms (kernel run delay %.2f ms), %.1f ms before; hpd: "
        "sleep interval %.2f ms (%s), next %.2f ms (%s); thread blocked %.2f ms, waiting for CPU %.2f ms\n",
        what.c_str(), t.slept_ns() / 1e6, t.waited_ns() / 1e6, t.run_delay_ns / 1e6, t.before_ns / 1e6,
        got.sleep ? got.sleep->ns / 1e6 : -1.0, got.sleep ? (got.sleep->waits ? "wait" : "blocked") : "none",
        got.after ? got.after->ns / 1e6 : -1.0, got.after ? (got.after->waits ? "wait" : "blocked") : "none",
        got.reported.blocked_ns / 1e6, got.reported.wait_ns / 1e6);
    return got;
  }

  // As record(), with the hog, until the sleeper did wait for its CPU after the wakeup. Another
  // SCHED_FIFO task of this shared machine on the same CPU can throttle the hog (the kernel keeps 5% of
  // each second for normal tasks) and let the sleeper run at once; the checks need a wait to measure,
  // which the fixture's own clocks show. Three tries, the second on CPU 0 (the first and the last on
  // the last CPU: benchmarks of the other work pin their SCHED_FIFO targets there too), then it fails.
  Recorded record_woken_while_busy(const std::vector<std::string>& flags, const std::string& what,
                                   int sleep_ms, int hog_ms) {
    Recorded got;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      got = record(flags, what + "-" + std::to_string(attempt), sleep_ms, hog_ms, attempt == 2 ? 0 : -1);
      if (got.truth.waited_ns() > kLeastWaitNs) break;
      std::printf("%s: attempt %d: the woken sleeper got its CPU back after %.2f ms, again\n", what.c_str(),
                  attempt, got.truth.waited_ns() / 1e6);
    }
    return got;
  }
  static constexpr double kLeastWaitNs = 100e6;

  hpd::testing::TempDir tmp_{"hpd-wakeup-wait", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const std::filesystem::path dir_{tmp_.path()};
};

// How far hpd's instants may be from the fixture's: the timer's slack (50 us) and a loaded VM's delays
// between the kernel's event and the fixture's clock read; far below the 150 ms the checks tell apart.
double tolerance(double ns) {
  return std::max(3e6, 0.02 * ns);
}

TEST_F(WakeupWaitTest, WokenWhileItsCpuIsTakenWaitsForItAfterTheWakeup) {
  constexpr int kSleepMs = 300, kHogMs = 250;
  const Recorded got = record_woken_while_busy({}, "hog", kSleepMs, kHogMs);
  const SleeperTruth& t = got.truth;
  // The fixture did what it should: it slept as long as asked, and the CPU stayed taken well past
  // the wakeup.
  // slept_ns runs from the call to the deadline set just before it, so the time the thread spent off
  // its CPU in between (the hog taking it; 2.6 ms seen under load) is not slept: within 10%.
  ASSERT_LE(t.slept_ns(), kSleepMs * 1e6);
  ASSERT_GT(t.slept_ns(), 0.9 * kSleepMs * 1e6);
  ASSERT_GT(t.waited_ns(), kLeastWaitNs) << "the woken sleeper got its CPU back at once, three times";
  ASSERT_TRUE(got.reported.found);

  // The sleep's interval is blocked up to the wakeup, at the deadline, ...
  ASSERT_TRUE(got.sleep.has_value()) << "no off-CPU interval begins at the sleep";
  EXPECT_FALSE(got.sleep->waits);
  EXPECT_NEAR(got.sleep->ns, t.slept_ns(), tolerance(t.slept_ns()));
  EXPECT_NEAR(got.sleep->end_ns(), t.deadline_ns, tolerance(t.slept_ns()));
  // ... then waits for a CPU until the thread runs again, with the same stack.
  ASSERT_TRUE(got.after.has_value()) << "no interval follows the sleep's";
  EXPECT_TRUE(got.after->waits);
  EXPECT_NEAR(got.after->ns, t.waited_ns(), tolerance(t.waited_ns()));
  EXPECT_NEAR(got.after->end_ns(), t.back_ns, tolerance(t.waited_ns()));
  // The kernel's own count of the thread's run-queue wait agrees.
  if (t.run_delay_ns >= 0) {
    EXPECT_NEAR(got.after->ns, t.run_delay_ns, tolerance(t.run_delay_ns));
  }

  // The thread's totals: the sleep and the wait after it, plus whatever came before the sleep (the
  // thread's start, moving to its CPU, waiting for the sleep's start), which the fixture bounds. With
  // the whole interval blocked, blocked time would exceed the sleep by the wait (over 100 ms).
  const double slack = t.before_ns + tolerance(t.slept_ns());
  EXPECT_GT(got.reported.blocked_ns, t.slept_ns() - tolerance(t.slept_ns()));
  EXPECT_LT(got.reported.blocked_ns, t.slept_ns() + slack);
  EXPECT_GT(got.reported.wait_ns, t.waited_ns() - tolerance(t.waited_ns()));
  EXPECT_LT(got.reported.wait_ns, t.waited_ns() + slack);
}

// Without the hog the woken sleeper gets a CPU at once (on this shared machine, whatever else runs
// there may still hold it a moment, which the fixture measures): hpd finds no more wait than that.
TEST_F(WakeupWaitTest, SleepingOnAnIdleCpuHardlyWaitsAfterTheWakeup) {
  constexpr int kSleepMs = 200;
  const Recorded got = record({}, "idle", kSleepMs, 0);
  const SleeperTruth& t = got.truth;
  // slept_ns runs from the call to the deadline set just before it, so the time the thread spent off
  // its CPU in between (the hog taking it; 2.6 ms seen under load) is not slept: within 10%.
  ASSERT_LE(t.slept_ns(), kSleepMs * 1e6);
  ASSERT_GT(t.slept_ns(), 0.9 * kSleepMs * 1e6);
  ASSERT_TRUE(got.reported.found);
  ASSERT_TRUE(got.sleep.has_value()) << "no off-CPU interval begins at the sleep";
  EXPECT_FALSE(got.sleep->waits);
  EXPECT_NEAR(got.sleep->ns, t.slept_ns(), tolerance(t.slept_ns()));
  // A wait after the wakeup, if any, is what the fixture saw: from the deadline to its return.
  const double waited = got.after && got.after->waits ? got.after->ns : 0;
  EXPECT_NEAR(waited, t.waited_ns(), tolerance(0));
  EXPECT_LT(got.reported.wait_ns, t.waited_ns() + t.before_ns + tolerance(0));
  EXPECT_NEAR(got.reported.blocked_ns, t.slept_ns(), t.before_ns + tolerance(t.slept_ns()));
}

// perf_event has no wakeup to split at (docs/architecture.md): the sleep's interval stays blocked
// until the thread runs again, the wait for the CPU after the wakeup included.
TEST_F(WakeupWaitTest, PerfBackendCountsTheWaitAfterTheWakeupAsBlocked) {
  constexpr int kSleepMs = 300, kHogMs = 250;
  const Recorded got =
      record_woken_while_busy({"--backend", "perf", "--off-cpu"}, "perf-hog", kSleepMs, kHogMs);
  const SleeperTruth& t = got.truth;
  // slept_ns runs from the call to the deadline set just before it, so the time the thread spent off
  // its CPU in between (the hog taking it; 2.6 ms seen under load) is not slept: within 10%.
  ASSERT_LE(t.slept_ns(), kSleepMs * 1e6);
  ASSERT_GT(t.slept_ns(), 0.9 * kSleepMs * 1e6);
  ASSERT_GT(t.waited_ns(), kLeastWaitNs) << "the woken sleeper got its CPU back at once, three times";
  ASSERT_TRUE(got.sleep.has_value()) << "no off-CPU interval begins at the sleep";
  EXPECT_FALSE(got.sleep->waits);
  const double whole = t.back_ns - t.call_ns;
  EXPECT_NEAR(got.sleep->ns, whole, tolerance(whole));
}

TEST_F(CpuWaitTest, DefaultFlagsTellWaitingForTheCpuFromBlocked) {
  check_recording({}, "default", true);
}

// perf_event: the intervals come from context-switch records (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT).
TEST_F(CpuWaitTest, PerfBackendTellsWaitingForTheCpuFromBlocked) {
  check_recording({"--backend", "perf", "--off-cpu"}, "perf", false);
}

// A thread that yields is switched out without being preempted, still TASK_RUNNING: only the task
// state tells it waits for a CPU. (So does a thread preempted in user mode: the return to user mode
// calls schedule() with sched_switch's preempt argument false. With the preempt argument alone both
// tests fail: every wait is then counted as blocked.)
TEST_F(CpuWaitTest, YieldingThreadsWaitForTheCpuToo) {
  check_recording({}, "default-yield", true, true);
  check_recording({"--backend", "perf", "--off-cpu"}, "perf-yield", false, true);
}

}  // namespace
}  // namespace hpd::test
