// Privileged integration test: with `--backend perf` each sample's CPU delta is the thread's
// task-clock counter (read with PERF_SAMPLE_READ, one inherited event per thread and CPU) minus its
// value at the thread's previous sample on that CPU; what the thread counted on a CPU after its last
// sample there comes at its exit (PERF_RECORD_READ, attr.inherit_stat) as one more sample, its CPU
// tail. tests/fixtures/thread_clocks.c runs more threads than there are CPUs (preempted, migrating),
// each measuring its own CPU clock and its own task-clock counter. Per thread, the sum of the deltas in
// the export must be its task-clock, at least, the largest delta no more than
// the largest gap the thread's own cpu-clock sampler at the same period saw, and the gap to the
// thread's CPU clock no more than that of its two clocks: on a virtual machine the task-clock also
// counts the time the hypervisor stole from the vCPU while the thread was on it, which the CPU clock
// (sum_exec_runtime) leaves out (issue #33's single 16.4 ms delta and a thread 4% over its clock).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_clock.h"
#include "firefox_lint.h"
#include "streamed_capture.h"
#include "subprocess.h"
#include "temp_dir.h"

using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixture = std::string(HPD_FIXTURE_DIR) + "/thread_clocks";
constexpr double kPeriodNs = 1e9 / 999;  // hpctl record's default frequency

struct ThreadTruth {
  long long tid = 0;
  double cpu_ns = 0, task_clock_ns = 0, cpu_clock_ns = 0;
  long long switches = 0;
  double stolen_ns = 0;  // steal the thread's own task-clock counter saw, summed over 1 ms spans
  // The largest advance of its own cpu-clock sampler (at hpd's period) in one sample, and the samples
  // its ring lost.
  double gap_ns = 0;
  long long lost = 0, throttled = 0;
};

// "thread_clocks: tid N cpu_ns N task_clock_ns N cpu_clock_ns N switches N stolen_ns N gap_ns N lost N
// throttled N" lines.
std::vector<ThreadTruth> parse_truth(const std::string& out) {
  std::vector<ThreadTruth> truth;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    long long tid = 0, cpu = 0, task = 0, cpu_clock = 0, switches = 0, stolen = 0, gap = 0, lost = 0,
              throttled = 0;
    if (std::sscanf(line.c_str(),
                    "thread_clocks: tid %lld cpu_ns %lld task_clock_ns %lld cpu_clock_ns %lld switches %lld "
                    "stolen_ns %lld gap_ns %lld lost %lld throttled %lld",
                    &tid, &cpu, &task, &cpu_clock, &switches, &stolen, &gap, &lost, &throttled) == 9)
      truth.push_back(ThreadTruth{tid, static_cast<double>(cpu), static_cast<double>(task),
                                  static_cast<double>(cpu_clock), switches, static_cast<double>(stolen),
                                  static_cast<double>(gap), lost, throttled});
  }
  return truth;
}

class PerfThreadCpuTest : public ::testing::Test {
 protected:
  hpd::testing::TempDir tmp_{"hpd-perf-thread-cpu", hpd::testing::TempDir::Cleanup::kKeepOnFailure};

  // `cpu_clock`: the events count cpu-clock (-e cpu-clock), not task-clock.
  void check(const std::vector<std::string>& flags, const std::string& what, bool cpu_clock) {
    SCOPED_TRACE(what);
    const auto cpus = static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN));
    const std::string threads = std::to_string(static_cast<int>(cpus) + 2);
    const std::string capture = tmp_.path() + "/" + what + ".hpr";
    std::vector<std::string> record = {kHpctl, "--local", "record", "--backend",
                                       "perf", "-o",      capture,  "--no-report"};
    record.insert(record.end(), flags.begin(), flags.end());
    record.insert(record.end(), {"--", kFixture, threads, "700"});
    const RunResult r = run(record);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Every thread exited within the recording: each one's time after its last sample is known.
    EXPECT_EQ(r.err.find("is not known"), std::string::npos) << r.err;
    const std::vector<ThreadTruth> truth = parse_truth(r.out);
    ASSERT_EQ(truth.size(), static_cast<size_t>(std::stoi(threads))) << r.out;

    const std::string firefox = tmp_.path() + "/" + what + ".json.gz";
    const RunResult conv = run({kHpctl, "convert", capture, "-o", firefox});
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    const json profile = testing::load_json_maybe_gzip(firefox);
    for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;
    ASSERT_EQ(profile.at("meta").at("sampleUnits").at("threadCPUDelta").get<std::string>(), "ns");

    for (const ThreadTruth& t : truth) {
      SCOPED_TRACE("tid " + std::to_string(t.tid));
      // The thread's own counter of the clock the events count.
      const double counter = cpu_clock ? t.cpu_clock_ns : t.task_clock_ns;
      ASSERT_GT(counter, 0) << "the fixture could not open its perf counters";
      ASSERT_GT(t.gap_ns, 0) << "the fixture's own sampler took no sample";
      ASSERT_EQ(t.lost, 0) << "the fixture's own sampler lost samples: its gap bounds nothing";
      ASSERT_EQ(t.throttled, 0) << "the kernel throttled the fixture's own sampler: its gap bounds nothing";
      const json* thread = nullptr;
      for (const json& th : profile.at("threads"))
        if (th.at("tid").get<long long>() == t.tid) thread = &th;
      ASSERT_NE(thread, nullptr) << "no track for the thread";
      const json& deltas = thread->at("samples").at("threadCPUDelta");
      const json& times = thread->at("samples").at("time");
      ASSERT_FALSE(deltas.empty());
      double sum = 0, largest = 0;
      size_t largest_at = 0;
      for (size_t i = 0; i < deltas.size(); ++i) {
        const double d = deltas[i].is_null() ? 0 : deltas[i].get<double>();
        sum += d;
        if (d > largest) largest = d, largest_at = i;
      }
      // What the counter counted beyond the thread's CPU clock: steal time (and a little at each
      // context switch, either way).
      const double ahead = std::max(0.0, counter - t.cpu_ns);
      std::printf(
          "%s tid %lld: deltas %.2f ms in %zu samples, largest %.2f ms (sample %zu at %.1f ms); its own "
          "counter %.2f ms, its own sampler's largest %.2f ms, CPU clock %.2f ms, %lld context switches, "
          "%.2f ms stolen\n",
          what.c_str(), t.tid, sum / 1e6, deltas.size(), largest / 1e6, largest_at,
          times[largest_at].get<double>() - times[0].get<double>(), counter / 1e6, t.gap_ns / 1e6,
          t.cpu_ns / 1e6, t.switches, t.stolen_ns / 1e6);
      // The deltas and the CPU tail telescope to the events' final counts: task-clock counts the
      // thread's context, from before its own counter opened (its creation) to after its last reading
      // (its exit, microseconds), so never less than its own counter; 0.1% for rounding. Without the
      // tail they fell short by up to a period per CPU (the time after the thread's last sample on each).
      // Its counter (one event) and hpd's (one per CPU) differ by a little at each context switch: 1%.
      const double slack = 0.01 * counter + 1e6;
      if (!cpu_clock) {
        EXPECT_LE(sum, counter + slack);
        EXPECT_GE(sum, counter - 0.001 * counter);
      } else {
        // A cpu-clock is no one number per thread: each event counts the guest's clock from its own
        // start at a switch-in to its own stop, so the events started before it count the arming of
        // the later ones' timers (several microseconds each on a virtual machine, 1.6-9.5 ms more
        // over 500 switches when the fixture's task-clock counter sampled too), and beside four CPU
        // hogs the fixture's counter twice ended 5.4 and 15.2 ms off hpd's deltas and its own CPU
        // clock, unexplained. Held between the thread's two clocks instead.
        EXPECT_GE(sum, std::min(counter, t.cpu_ns) - slack);
      }
      // Against the thread's own CPU clock: off by no more than its two clocks are.
      EXPECT_LE(sum, t.cpu_ns + ahead + slack);
      // One delta is the counter's advance over one period, one more when a timer expiry was missed,
      // and whatever held the thread's timers back while its counter ran on: steal, a late interrupt.
      // The fixture's own cpu-clock sampler at the same period saw that as its largest gap (a task-clock
      // one's matched it within 1 us): one of hpd's events (per CPU) may hold a period from before the
      // thread's last migration on top (measured: 0.9 ms at most).
      // (The steal the thread saw, its counter's lead over its clock in 1 ms spans, did not bound it:
      // CI saw a 15.5 ms delta where it allowed 12.2; here a thread's samplers saw 7.8 ms gaps with 0.9 ms
      // of it, while the thread with 13.9 ms of it had gaps of 2.4 ms: steal in small pieces.)
      // One event's timer alone can be held back too: beside four CPU hogs, with cpu-clock events, a
      // 13.9 ms delta came where the fixture's sampler never waited 2 ms, and the fixture's own counter
      // once missed 15 ms its CPU clock and hpd's deltas counted. So one delta per thread may pass the
      // bound, and is printed; a baseline kept per thread instead of per thread and CPU gave hundreds
      // (294 ms deltas at every migration).
      const double bound = std::max(2 * kPeriodNs, t.gap_ns + kPeriodNs) + slack;
      size_t over = 0;
      for (size_t i = 0; i < deltas.size(); ++i) {
        const double d = deltas[i].is_null() ? 0 : deltas[i].get<double>();
        if (d <= bound) continue;
        ++over;
        std::printf("%s tid %lld: delta %.2f ms over the bound %.2f ms (sample %zu at %.1f ms)\n",
                    what.c_str(), t.tid, d / 1e6, bound / 1e6, i,
                    times[i].get<double>() - times[0].get<double>());
      }
      EXPECT_LE(over, 1u) << "deltas over " << bound / 1e6 << " ms, the largest " << largest / 1e6 << " ms";
    }
  }
};

// Threads created during a recording and still running at its end: their events' counts cannot be read
// (the kernel reports an inherited event's count at the task's exit), nor, so, the part of their creator's
// that is its own. The summary says how many threads' time after their last sample is not known: the
// fixture's COUNT late threads and the main thread that created them.
TEST_F(PerfThreadCpuTest, ThreadsStillRunningAtTheEndAreSaidToHaveUnknownTails) {
  constexpr int kLate = 3;
  const std::string fixture_out = tmp_.path() + "/late.out", err = tmp_.path() + "/late.err";
  BackgroundOptions held;
  held.stdin_pipe = true;
  held.stdout_path = fixture_out;
  Background fixture({std::string(HPD_FIXTURE_DIR) + "/late_threads", std::to_string(kLate)}, held);
  const auto printed = [&](const std::string& line) {
    return read_text_file(fixture_out).find(line + "\n") != std::string::npos;
  };
  ASSERT_TRUE(wait_until([&] { return printed("ready"); })) << read_text_file(fixture_out);
  const std::string capture = tmp_.path() + "/late.hpr";
  Background recorder({"/bin/sh", "-c",
                       "exec " + kHpctl + " --local record --backend perf --pid " +
                           std::to_string(fixture.pid()) + " -o " + capture + " --no-report 2>" + err});
  // Recording once the streamed capture holds a sample of the spinning main thread.
  ASSERT_TRUE(wait_until([&] { return streamed_capture_has_samples(kHpctl, capture); }, 120, 0.25))
      << "the recording never started: " << read_text_file(err);
  ASSERT_TRUE(fixture.send("g"));
  ASSERT_TRUE(wait_until([&] { return printed("started " + std::to_string(kLate)); }))
      << read_text_file(fixture_out);
  ::kill(recorder.pid(), SIGINT);
  ASSERT_EQ(recorder.wait(), 0) << read_text_file(err);
  const std::string text = read_text_file(err);
  EXPECT_NE(text.find("note: " + std::to_string(kLate + 1) +
                      " threads' CPU time after their last sample on "
                      "each CPU is not known"),
            std::string::npos)
      << text;
}

TEST_F(PerfThreadCpuTest, EachThreadsDeltasAddUpToItsOwnClocks) {
  check({}, "task-clock", false);
}

TEST_F(PerfThreadCpuTest, EachThreadsDeltasAddUpToItsOwnClocksWithCpuClock) {
  check({"-e", "cpu-clock"}, "cpu-clock", true);
}

}  // namespace
}  // namespace hpd::test
