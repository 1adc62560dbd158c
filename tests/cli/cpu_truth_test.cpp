// Privileged integration tests: the CPU time hpctl gives each sample, with default flags, against a
// fixture that measures its own (tests/fixtures/cpu_slices.c): per-function CPU shares when functions
// run in slices near the scheduler tick, the CPU per sample of a busy thread, and the CPU graph the
// Firefox Profiler draws from the export. For a launched command (per-thread task-clock events) and
// for --all (per-CPU cpu-clock events).
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cpu_clock.h"
#include "firefox_lint.h"
#include "fixture_truth.h"
#include "hpd/capture/capture.h"
#include "streamed_capture.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtures = HPD_FIXTURE_DIR;

// What the fixture measured with its thread CPU clock.
struct Truth {
  double seven_ns = 0;
  double three_ns = 0;
  double thread_cpu_ns = 0;
  double main_cpu_ns = 0;   // of thread_cpu_ns, what it had used when main began (fork, exec, ld.so)
  double work_cpu_ns = 0;   // the rounds' thread CPU time ...
  double work_wall_ns = 0;  // ... and wall time
  [[nodiscard]] double seven_percent() const { return 100.0 * seven_ns / (seven_ns + three_ns); }
  // How much of a CPU the thread had while it worked.
  [[nodiscard]] double busy_percent() const { return 100.0 * work_cpu_ns / work_wall_ns; }
};

Truth parse_truth(const std::string& out) {
  Truth t;
  auto values = fixture_truth(out, "cpu_slices");
  if (values.empty()) {
    ADD_FAILURE() << "no truth line in the fixture's output: " << out;
    return t;
  }
  t.seven_ns = values["seven_ns"];
  t.three_ns = values["three_ns"];
  t.thread_cpu_ns = values["thread_cpu_ns"];
  t.main_cpu_ns = values["main_cpu_ns"];
  t.work_cpu_ns = values["work_cpu_ns"];
  t.work_wall_ns = values["work_wall_ns"];
  EXPECT_GT(t.seven_ns, 0) << out;
  EXPECT_GT(t.three_ns, 0) << out;
  return t;
}

// One thread's samples in a Firefox export, reduced to what the checks need.
struct ThreadFigures {
  size_t samples = 0;
  size_t seven_samples = 0;  // on-CPU samples with seven_units on the stack
  size_t three_samples = 0;
  size_t off_cpu_samples = 0;  // samples of the thread waiting (preempted on a loaded machine)
  double seven_cpu_ns = 0;     // their threadCPUDelta
  double three_cpu_ns = 0;
  // What those samples carried beyond one interval each: CPU time the thread used while its timer was
  // held back (a late interrupt, or the hypervisor's steal that the guest did not see as steal). Each
  // such sample stands for that much more CPU than one sample's count says; seen beside four hogs:
  // three samples of three_units carrying 8.4, 9.2 and 10.3 ms, with no steal in /proc/stat.
  double held_back_ns = 0;
  double cpu_ns = 0;                     // every sample's threadCPUDelta
  std::vector<double> cpu_per_interval;  // each sample's threadCPUDelta / interval
  // The thread's CPU graph as the Firefox Profiler draws it: each sample's CPU over the time since
  // the previous sample (its CPU ratio, capped at 100%), averaged over the samples.
  double firefox_cpu_percent = 0;
  // Each on-CPU sample's CPU over the nominal interval (capped at 100%), averaged: how much of its
  // interval a sample of a thread that never blocks carries. Off-CPU samples (the thread preempted,
  // not running) carry none and are left out.
  double cpu_over_interval_percent = 0;
  // The graph's area over its length: the CPU the samples carry (each capped at the time since the
  // previous sample) over the time they span.
  double graph_area_percent = 0;

  [[nodiscard]] double seven_cpu_percent() const {
    return 100.0 * seven_cpu_ns / (seven_cpu_ns + three_cpu_ns);
  }
  [[nodiscard]] double seven_sample_percent() const {
    return 100.0 * double(seven_samples) / double(seven_samples + three_samples);
  }
  // How far the held-back timers can have moved the share by sample count, in points: all of what
  // they held back counted for one of the two functions.
  [[nodiscard]] double held_back_points() const {
    return 100.0 * held_back_ns / (seven_cpu_ns + three_cpu_ns);
  }
  [[nodiscard]] double median_cpu_per_interval() const {
    if (cpu_per_interval.empty()) return 0;
    std::vector<double> sorted = cpu_per_interval;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
};

// The figures of the thread `tid` (the fixture is single-threaded: its pid).
ThreadFigures figures_of(const json& profile, int64_t tid) {
  ThreadFigures f;
  const auto& shared = profile.at("shared");
  const auto& strings = shared.at("stringArray");
  const auto& stack_frame = shared.at("stackTable").at("frame");
  const auto& prefix_offset = shared.at("stackTable").at("prefixOffset");
  const auto& frame_func = shared.at("frameTable").at("func");
  const auto& func_name = shared.at("funcTable").at("name");
  const double interval_ms = profile.at("meta").at("interval").get<double>();
  auto has_function = [&](int64_t stack, const std::string& name) {
    for (int64_t i = stack;;) {
      const auto func = frame_func[stack_frame[i].get<size_t>()].get<size_t>();
      if (strings[func_name[func].get<size_t>()].get<std::string>() == name) return true;
      const auto off = prefix_offset[i].get<int64_t>();
      if (off == 0) return false;
      i -= off;
    }
  };
  for (const auto& t : profile.at("threads")) {
    if (!t.contains("tid") || !t.at("tid").is_number() || t.at("tid").get<int64_t>() != tid) continue;
    const auto& samples = t.at("samples");
    const auto& stacks = samples.at("stack");
    const auto& times = samples.at("time");
    const auto& deltas = samples.at("threadCPUDelta");
    double ratio_sum = 0, interval_ratio_sum = 0, capped_cpu_ms = 0, span_ms = 0;
    size_t ratios = 0, on_cpu = 0;
    for (size_t i = 0; i < stacks.size(); ++i) {
      const double delta_ns = deltas[i].get<double>();
      ++f.samples;
      f.cpu_ns += delta_ns;
      f.cpu_per_interval.push_back(delta_ns / (interval_ms * 1e6));
      if (i > 0) {
        const double since_ms = times[i].get<double>() - times[i - 1].get<double>();
        if (since_ms > 0) {
          ratio_sum += std::min(1.0, delta_ns / (since_ms * 1e6));
          capped_cpu_ms += std::min(since_ms, delta_ns / 1e6);
          span_ms += since_ms;
          ++ratios;
        }
      }
      // Off-CPU samples have a weight (intervals spent off the CPU) and no CPU.
      const bool off_cpu = samples.contains("weight") && samples.at("weight").is_array() && delta_ns == 0;
      if (!off_cpu) {
        interval_ratio_sum += std::min(1.0, delta_ns / (interval_ms * 1e6));
        ++on_cpu;
      }
      // The per-function shares count on-CPU samples only, as hpd's report does (its percentages are
      // of on-CPU samples; waiting for a CPU is its wall view): the samples a preempted thread gets on
      // a loaded machine carry no CPU and are no part of the CPU view, by count or by weight.
      f.off_cpu_samples += off_cpu;
      if (off_cpu || stacks[i].is_null()) continue;
      const int64_t stack = stacks[i].get<int64_t>();
      const bool seven = has_function(stack, "seven_units");
      if (seven) {
        ++f.seven_samples;
        f.seven_cpu_ns += delta_ns;
      } else if (has_function(stack, "three_units")) {
        ++f.three_samples;
        f.three_cpu_ns += delta_ns;
      }
      if (seven || has_function(stack, "three_units"))
        f.held_back_ns += std::max(0.0, delta_ns - interval_ms * 1e6);
    }
    if (ratios > 0) {
      f.firefox_cpu_percent = 100.0 * ratio_sum / double(ratios);
      f.cpu_over_interval_percent = on_cpu != 0 ? 100.0 * interval_ratio_sum / double(on_cpu) : 0;
      f.graph_area_percent = 100.0 * capped_cpu_ms / span_ms;
    }
  }
  return f;
}

class CpuTruthTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // `hpctl record --all` into a capture, HPD_STACK_MEMORY_KB set to `stack_memory_kb` ("": default).
  void check_all_processes(const std::string& stack_memory_kb);

  json load_profile(const std::string& file) {
    json profile = testing::load_json_maybe_gzip(file);
    for (const auto& p : testing::lint_firefox_profile(profile)) ADD_FAILURE() << file << ": " << p;
    return profile;
  }

  // The checks every recording of the fixture must pass; `what` names the recording. `stolen_ns`: what
  // the hypervisor took from the machine's CPUs while the fixture ran (host_steal_ns).
  // `thread_timer`: the samples came from the thread's own timer (a launched command, a --pid
  // recording), each after one interval of its CPU, so that one carrying more says its timer was held
  // back; not from each CPU's (--all), whose samples fall on whatever runs and carry what the thread
  // used since its last one, often more than an interval, with no bias to either function.
  static void expect_truth(const ThreadFigures& f, const Truth& truth, const std::string& what,
                           double stolen_ns, bool thread_timer) {
    // The sampling timer (task-clock, cpu-clock) counts the time the hypervisor took from the thread's
    // virtual CPU while it ran, the CPU the samples carry (the scheduler's runtime) does not: a sample
    // then carries less than its interval. At most this share of the timer's time was stolen (all of
    // the machine's steal on this thread).
    const double stolen_share = stolen_ns / (truth.thread_cpu_ns + stolen_ns);
    std::printf(
        "%s: truth seven_units %.1f%% (thread CPU %.1f ms, busy %.1f%%); CPU-weighted %.1f%%, by samples "
        "%.1f%% (%zu+%zu on-CPU samples, %zu off); CPU per sample / interval: median %.3f; profile CPU %.1f "
        "ms; "
        "Firefox CPU graph: mean %.1f%%, area %.1f%%; on-CPU samples' CPU over the interval %.1f%%; host "
        "steal %.1f ms (%.1f%% of the thread's timer at most); CPU beyond an interval in its samples %.1f ms "
        "(%.2f points of share)\n",
        what.c_str(), truth.seven_percent(), truth.thread_cpu_ns / 1e6, truth.busy_percent(),
        f.seven_cpu_percent(), f.seven_sample_percent(), f.seven_samples, f.three_samples, f.off_cpu_samples,
        f.median_cpu_per_interval(), f.cpu_ns / 1e6, f.firefox_cpu_percent, f.graph_area_percent,
        f.cpu_over_interval_percent, stolen_ns / 1e6, 100 * stolen_share, f.held_back_ns / 1e6,
        f.held_back_points());
    ASSERT_GT(f.seven_samples + f.three_samples, 300u) << what;
    // Shares: the steal falls on both functions' slices alike (they alternate every few milliseconds).
    EXPECT_NEAR(f.seven_cpu_percent(), truth.seven_percent(), 3.0) << what << ": CPU-weighted share";
    // By sample count, each sample is one interval: a sample that carried more (its thread's timer
    // held back) counts for less than its CPU, by up to held_back_points() on the share.
    EXPECT_NEAR(f.seven_sample_percent(), truth.seven_percent(),
                3.0 + (thread_timer ? f.held_back_points() : 0))
        << what << ": sample-count share (timers held back: " << f.held_back_ns / 1e6 << " ms)";
    // The thread never blocks: each sample carries one interval of CPU (less what was stolen in it).
    EXPECT_GE(f.median_cpu_per_interval(), 0.9 - stolen_share) << what;
    EXPECT_LE(f.median_cpu_per_interval(), 1.1) << what;
    // The Firefox Profiler caps each sample's CPU at 100% of the time since the previous one, so a
    // thread's graph shows its CPU only if every sample carries what the thread used since the last:
    // lumps (one sample with 4 ms, three with 0) are cut and lost. While the thread runs, each
    // sample carries its interval (less what was stolen in it) ...
    EXPECT_GE(f.cpu_over_interval_percent, 90.0 - 100 * stolen_share) << what;
    // ... and the graph over the recording is the share of a CPU the thread measured itself. (On a
    // busy host that is far below 100% for a thread that never blocks: the hypervisor's steal time
    // and other processes' turns are not the thread's CPU time.)
    EXPECT_NEAR(f.graph_area_percent, truth.busy_percent(), 5.0) << what;
  }

  // Kept when the test fails: its recordings and logs are what to look at.
  hpd::testing::TempDir tmp_{"hpd-cpu-truth", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
};

// A launched command, default flags (eBPF, per-thread task-clock events), on the fixture built with
// and without frame pointers.
TEST_F(CpuTruthTest, LaunchedCommandSharesFollowTheThreadCpuClock) {
  for (const std::string fixture : {"cpu_slices", "cpu_slices_nofp"}) {
    SCOPED_TRACE(fixture);
    const std::string out = path(fixture + ".json.gz");
    // Three seconds, and on until the rounds had 500 ms of CPU: a loaded machine (the suite runs two
    // tests at a time) can leave the fixture a few percent of a CPU.
    const double steal_before = host_steal_ns();
    RunResult r = run({kHpctl, "record", "-o", out, "--no-report", "--", kFixtures + "/" + fixture, "3",
                       "--min-cpu-ms", "500"});
    const double stolen_ns = host_steal_ns() - steal_before;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("bpf backend"), std::string::npos) << "the default backend is eBPF: " << r.err;
    const Truth truth = parse_truth(r.out);
    const json profile = load_profile(out);
    const auto& threads = profile.at("threads");
    ASSERT_FALSE(threads.empty());
    const int64_t tid = std::stoll(threads.at(0).at("pid").get<std::string>());
    const ThreadFigures f = figures_of(profile, tid);
    expect_truth(f, truth, fixture, stolen_ns, true);
    // The thread's CPU time in the profile is the kernel's, to 0.1%: at most the thread's whole CPU
    // time (plus the exit path's few us), and at least what it used from main on. In between: the
    // command's CPU counts from where hpctl's forked child waits to exec it; before that the thread
    // ran hpctl's code (after the fork), which is not the command's and a few hundred microseconds
    // on a loaded machine.
    const double tolerance = 0.001 * truth.thread_cpu_ns;
    EXPECT_LE(f.cpu_ns, truth.thread_cpu_ns + tolerance + 200e3);
    EXPECT_GE(f.cpu_ns, truth.thread_cpu_ns - truth.main_cpu_ns - tolerance)
        << "the thread had used " << truth.main_cpu_ns / 1e3 << " us when main began";
  }
}

// --all: per-CPU cpu-clock events, which sample whatever runs; the fixture is one thread among all.
TEST_F(CpuTruthTest, AllProcessesSharesFollowTheThreadCpuClock) {
  check_all_processes("");
}

// The same with a bound of 1 KiB on what the recording keeps of its stacks (HPD_STACK_MEMORY_KB): it
// lets go of them at nearly every flush, as a long recording of a busy machine does at 16 MiB, and
// writes each stack met again once more. The capture read back gives the same truth.
TEST_F(CpuTruthTest, AllProcessesSharesFollowTheThreadCpuClockWhenTheStacksAreLetGo) {
  check_all_processes("1");
}

void CpuTruthTest::check_all_processes(const std::string& stack_memory_kb) {
  BackgroundOptions held;
  held.stdin_pipe = true;
  held.stdout_path = path("fixture.out");
  // Three seconds, and on until the rounds had 500 ms of CPU (a loaded machine may leave it a few
  // percent of a CPU).
  Background fixture({kFixtures + "/cpu_slices", "3", "--wait-stdin", "--min-cpu-ms", "500"}, held);
  const pid_t fixture_pid = fixture.pid();  // wait() forgets it
  // A streamed capture, open-ended: recording once it holds samples, stopped (SIGINT) once the
  // fixture is done, so that the fixture's work lies inside it however slow the machine.
  const std::string hpr = path("all.hpr"), out = path("all.json.gz");
  Background recorder({"env", "HPD_STACK_MEMORY_KB=" + stack_memory_kb, kHpctl, "record", "--all", "-o", hpr,
                       "--no-report", "-q"});
  ASSERT_TRUE(wait_until([&] { return streamed_capture_has_samples(kHpctl, hpr); }, 120, 0.25))
      << "the recording never started";
  const double steal_before = host_steal_ns();
  ASSERT_TRUE(fixture.send("go\n"));
  ASSERT_EQ(fixture.wait(), 0);
  const double stolen_ns = host_steal_ns() - steal_before;
  kill(recorder.pid(), SIGINT);
  ASSERT_EQ(recorder.wait(), 0);
  const CaptureContents capture = read_capture_file(hpr);
  EXPECT_TRUE(capture.info.complete);
  if (stack_memory_kb.empty())
    EXPECT_EQ(capture.info.stack_generations, 0u);
  else
    EXPECT_GE(capture.info.stack_generations, 2u);
  ASSERT_EQ(run({kHpctl, "convert", hpr, "-o", out, "-q"}).exit_code, 0);
  std::ifstream fixture_out(path("fixture.out"));
  const std::string text((std::istreambuf_iterator<char>(fixture_out)), std::istreambuf_iterator<char>());
  const Truth truth = parse_truth(text);
  const json profile = load_profile(out);
  const ThreadFigures f = figures_of(profile, fixture_pid);
  expect_truth(f, truth, "--all", stolen_ns, false);
  // The fixture started before the recording, which seeds its baseline from /proc: the profile holds
  // all of its CPU time but its start-up (before the wait on stdin), so at least the rounds'.
  EXPECT_GE(f.cpu_ns, truth.work_cpu_ns);
  EXPECT_LE(f.cpu_ns, 1.001 * truth.thread_cpu_ns);
}

}  // namespace
}  // namespace hpd::test
