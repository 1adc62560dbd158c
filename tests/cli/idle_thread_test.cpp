// Privileged integration test: a thread that existed through the recording but never ran keeps its
// track. tests/fixtures/spin_and_read.c runs "spinner" for a known amount of its own CPU time while
// "reader" is blocked in read(); `hpctl record -- spin_and_read` with the perf_event backend (which
// samples only CPU time without --off-cpu) and with eBPF (whose off-CPU samples show the reader) for
// comparison. The reader must have a Firefox track with its name and a lifetime spanning the
// spinner's samples, and a report line saying it has no samples and why; no sample is invented: the
// export's samples are the report's, and the spinner's CPU and share stay what the fixture measured.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_clock.h"
#include "firefox_lint.h"
#include "subprocess.h"
#include "temp_dir.h"

using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixture = std::string(HPD_FIXTURE_DIR) + "/spin_and_read";
constexpr const char* kCpuSeconds = "1.5";

struct Truth {
  long long tid = 0;
  double cpu_ns = 0;
};

// "spin_and_read: NAME tid N cpu_ns N" lines.
std::map<std::string, Truth> parse_truth(const std::string& out) {
  std::map<std::string, Truth> truth;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    char name[32];
    long long tid = 0, cpu = 0;
    if (std::sscanf(line.c_str(), "spin_and_read: %31s tid %lld cpu_ns %lld", name, &tid, &cpu) == 3)
      truth[name] = Truth{tid, static_cast<double>(cpu)};
  }
  return truth;
}

const json* thread_of(const json& profile, long long tid) {
  for (const json& t : profile.at("threads")) {
    if (t.at("tid").get<long long>() == tid) return &t;
  }
  return nullptr;
}

class IdleThreadTest : public ::testing::Test {
 protected:
  hpd::testing::TempDir tmp_{"hpd-idle-thread", hpd::testing::TempDir::Cleanup::kKeepOnFailure};

  void check(const std::vector<std::string>& flags, const std::string& what, bool off_cpu) {
    SCOPED_TRACE(what);
    const std::string capture = tmp_.path() + "/" + what + ".hpr";
    std::vector<std::string> record = {kHpctl, "record", "-o", capture, "--no-report"};
    record.insert(record.end(), flags.begin(), flags.end());
    record.insert(record.end(), {"--", kFixture, kCpuSeconds});
    const double steal_before = host_steal_ns();
    const RunResult r = run(record);
    const double stolen_ns = host_steal_ns() - steal_before;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::map<std::string, Truth> truth = parse_truth(r.out);
    ASSERT_EQ(truth.size(), 2u) << r.out;
    const Truth& spinner = truth.at("spinner");
    const Truth& reader = truth.at("reader");

    const RunResult rep = run({kHpctl, "report", capture, "--json", "--limit", "0"});
    ASSERT_EQ(rep.exit_code, 0) << rep.err;
    const json totals = json::parse(rep.out).at("totals");
    const RunResult text = run({kHpctl, "report", capture});
    ASSERT_EQ(text.exit_code, 0) << text.err;

    const std::string firefox = tmp_.path() + "/" + what + ".json.gz";
    const RunResult conv = run({kHpctl, "convert", capture, "-o", firefox});
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    const json profile = testing::load_json_maybe_gzip(firefox);
    for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;

    // The spinner: its CPU as it measured it, and nearly all of the on-CPU samples.
    const json* spin = thread_of(profile, spinner.tid);
    ASSERT_NE(spin, nullptr) << "no track for the spinner";
    const json& spin_times = spin->at("samples").at("time");
    ASSERT_FALSE(spin_times.empty());
    double spin_cpu_ns = 0;
    uint64_t spin_samples = 0;
    for (const json& tt : totals.at("time_by_thread")) {
      if (tt.at("tid").get<long long>() == spinner.tid) {
        spin_cpu_ns = tt.at("cpu_ns").get<double>();
        spin_samples = tt.at("samples").get<uint64_t>();
      }
    }
    const uint64_t samples = totals.at("samples").get<uint64_t>();
    std::printf("%s: spinner truth %.1f ms, hpd %.1f ms in %llu of %llu on-CPU samples; host steal %.1f ms\n",
                what.c_str(), spinner.cpu_ns / 1e6, spin_cpu_ns / 1e6,
                static_cast<unsigned long long>(spin_samples), static_cast<unsigned long long>(samples),
                stolen_ns / 1e6);
    // perf_event's thread CPU is its task-clock counter, which runs on while the hypervisor has the
    // thread's virtual CPU (its CPU clock does not): ahead by up to the steal. eBPF's is the
    // scheduler's runtime, which leaves the steal out as the clock does.
    const bool perf = std::find(flags.begin(), flags.end(), "perf") != flags.end();
    EXPECT_LE(spin_cpu_ns, 1.05 * spinner.cpu_ns + (perf ? stolen_ns : 0));
    EXPECT_GE(spin_cpu_ns, 0.95 * spinner.cpu_ns);
    EXPECT_GE(static_cast<double>(spin_samples), 0.95 * static_cast<double>(samples));

    // No sample invented: the export holds the report's samples, on-CPU plus off-CPU.
    size_t exported = 0;
    for (const json& t : profile.at("threads")) exported += t.at("samples").at("length").get<size_t>();
    EXPECT_EQ(exported, samples + totals.at("off_cpu_samples").get<uint64_t>() +
                            totals.at("wait_cpu_samples").get<uint64_t>());

    // The reader: a track with its name, alive from before the spinner's first sample to after its
    // last one (it was blocked all that time).
    const json* read = thread_of(profile, reader.tid);
    ASSERT_NE(read, nullptr) << "no track for the thread blocked in read()";
    EXPECT_EQ(read->at("name").get<std::string>(), "reader");
    const json& reg = read->at("registerTime");
    const json& unreg = read->at("unregisterTime");
    ASSERT_TRUE(reg.is_number());
    EXPECT_LE(reg.get<double>(), spin_times.front().get<double>());
    if (!unreg.is_null()) {
      EXPECT_GE(unreg.get<double>(), spin_times.back().get<double>());
    }
    const size_t reader_samples = read->at("samples").at("length").get<size_t>();
    if (off_cpu) {
      EXPECT_GT(reader_samples, 0u) << "eBPF records the reader's off-CPU time";
    } else {
      // It used microseconds of CPU (its start), far below one sampling interval.
      EXPECT_EQ(reader_samples, 0u);
      const std::string line = "tid " + std::to_string(reader.tid) + " reader";
      const size_t at = text.out.find(line);
      ASSERT_NE(at, std::string::npos) << "wanted \"" << line << "\" in\n" << text.out;
      const std::string rest = text.out.substr(at, text.out.find('\n', at) - at);
      EXPECT_NE(rest.find("no samples"), std::string::npos) << rest;
      EXPECT_NE(rest.find("without --off-cpu"), std::string::npos) << rest;
    }
  }
};

TEST_F(IdleThreadTest, PerfBackendGivesABlockedThreadATrackWithoutSamples) {
  check({"--backend", "perf"}, "perf", false);
}

TEST_F(IdleThreadTest, EbpfShowsTheBlockedThreadByItsOffCpuSamples) {
  check({}, "bpf", true);
}

}  // namespace
}  // namespace hpd::test
