// Privileged integration tests: hpctl report and convert of perf's own recordings. The fixture
// cpu_slices measures the CPU time of its two phases with its own thread CPU clock; `perf record`
// (real perf, cpu-clock at 999 Hz) records it with frame pointers (-g, the fixture built with them)
// and with --call-graph dwarf (the fixture built -O2 -g without them, unwound by hpd's unwinder).
// hpd's shares must be the fixture's within 2 points, and its totals perf report's of the same file.
// Cut, empty and garbage files: a clear error and a non-zero exit, never a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fixture_truth.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtures = HPD_FIXTURE_DIR;
const std::string kPerf = HPD_PERF;

struct Truth {
  double seven_ns = 0;
  double three_ns = 0;
  [[nodiscard]] double seven_percent() const { return 100.0 * seven_ns / (seven_ns + three_ns); }
};

Truth parse_truth(const std::string& out) {
  auto values = fixture_truth(out, "cpu_slices");
  const Truth t{values["seven_ns"], values["three_ns"]};
  EXPECT_GT(t.seven_ns, 0) << "no truth in the fixture's output: " << out;
  EXPECT_GT(t.three_ns, 0) << out;
  return t;
}

// perf report's own totals of a file: samples and the sum of their periods (its "event count"), from
// its per-command table.
struct PerfTotals {
  uint64_t samples = 0;
  uint64_t period = 0;
};

PerfTotals perf_report_totals(const std::string& data, const std::string& event = "cpu-clock") {
  const RunResult r = run({kPerf, "report", "--stdio", "-i", data, "-n", "--sort", "comm", "-F",
                           "sample,period,comm", "-g", "none"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  PerfTotals totals;
  std::istringstream in(r.out);
  std::string line;
  bool in_event = true;  // one table per event, each under "# Samples: N of event 'NAME'"
  while (std::getline(in, line)) {
    if (line.starts_with("# Samples:")) in_event = line.find("of event '" + event + "'") != std::string::npos;
    if (line.empty() || line[0] == '#' || !in_event) continue;
    std::istringstream fields(line);
    uint64_t samples = 0, period = 0;
    if (fields >> samples >> period) {
      totals.samples += samples;
      totals.period += period;
    }
  }
  EXPECT_GT(totals.samples, 0u) << r.out;
  return totals;
}

class PerfDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(kPerf.empty()) << "perf is not installed (Debian package linux-perf)";
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // perf record of the fixture, for about 4 s of its CPU time; returns the fixture's truth.
  Truth record(const std::string& fixture, const std::vector<std::string>& call_graph,
               const std::string& data) {
    std::vector<std::string> argv{kPerf, "record", "-e", "cpu-clock", "-F", "999"};
    argv.insert(argv.end(), call_graph.begin(), call_graph.end());
    for (const std::string& a : {std::string("-o"), data, kFixtures + "/" + fixture, std::string("1"),
                                 std::string("--min-cpu-ms"), std::string("4000")})
      argv.push_back(a);
    const RunResult r = run(argv, 300);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return parse_truth(r.out);
  }

  json report(const std::string& data) {
    const RunResult r = run({kHpctl, "report", data, "--json", "--limit", "0"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    notes_ = r.err;
    return json::parse(r.out);
  }

  static double total_cpu_ns(const json& report, const std::string& function) {
    for (const auto& row : report.at("functions")) {
      if (row.at("name") == function) return row.at("total_cpu_ns").get<double>();
    }
    ADD_FAILURE() << function << " is not in the report";
    return 0;
  }

  void expect_truth_and_perf_totals(const std::string& data, const Truth& truth, const std::string& what) {
    const json r = report(data);
    const double seven = total_cpu_ns(r, "seven_units");
    const double three = total_cpu_ns(r, "three_units");
    const double share = 100.0 * seven / (seven + three);
    const json& totals = r.at("totals");
    const PerfTotals perf = perf_report_totals(data);
    std::printf(
        "%s: truth seven_units %.2f%%, hpd %.2f%%; hpd %llu samples %.0f ns, perf report %llu samples %llu\n",
        what.c_str(), truth.seven_percent(), share, totals.at("samples").get<unsigned long long>(),
        totals.at("cpu_ns").get<double>(), static_cast<unsigned long long>(perf.samples),
        static_cast<unsigned long long>(perf.period));
    // The fixture ran for seconds of its own CPU time: enough samples for the share to mean something.
    ASSERT_GT(totals.at("samples").get<uint64_t>(), 1000u) << what;
    EXPECT_NEAR(share, truth.seven_percent(), 2.0) << what;
    // The phases' samples are nearly all there is: the stacks reached them.
    EXPECT_GT(seven + three, 0.95 * totals.at("cpu_ns").get<double>()) << what;
    EXPECT_EQ(totals.at("samples").get<uint64_t>(), perf.samples) << what;
    EXPECT_EQ(totals.at("cpu_ns").get<uint64_t>(), perf.period) << what;
    EXPECT_NE(notes_.find("event cpu-clock at 999 Hz"), std::string::npos) << notes_;
    EXPECT_NE(notes_.find("time off the CPU"), std::string::npos) << notes_;
    EXPECT_EQ(notes_.find("modules not found"), std::string::npos) << notes_;
  }

  hpd::testing::TempDir tmp_{"hpd-perf-data", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
  std::string notes_;
};

TEST_F(PerfDataTest, FramePointerRecordingMatchesTheFixtureAndPerfReport) {
  const std::string data = path("fp.data");
  const Truth truth = record("cpu_slices", {"-g"}, data);
  expect_truth_and_perf_totals(data, truth, "perf record -g");
  EXPECT_NE(notes_.find("call graph fp"), std::string::npos) << notes_;

  // The other outputs of convert, from the same file.
  for (const std::string out : {"p.json.gz", "p.pb.gz", "p.collapsed"}) {
    const RunResult r = run({kHpctl, "convert", data, "-o", path(out)});
    EXPECT_EQ(r.exit_code, 0) << out << ": " << r.err;
    EXPECT_GT(fs::file_size(path(out)), 100u) << out;
  }
  std::ifstream collapsed(path("p.collapsed"));
  std::stringstream text;
  text << collapsed.rdbuf();
  EXPECT_NE(text.str().find("main;seven_units;spin"), std::string::npos) << text.str().substr(0, 2000);
  // The Firefox profile reads back as the same profile.
  const RunResult again = run({kHpctl, "report", path("p.json.gz"), "--json", "--limit", "0"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(json::parse(again.out).at("totals").at("samples").get<uint64_t>(),
            perf_report_totals(data).samples);
}

TEST_F(PerfDataTest, DwarfRecordingIsUnwoundByHpd) {
  const std::string data = path("dwarf.data");
  const Truth truth = record("cpu_slices_nofp", {"--call-graph", "dwarf"}, data);
  expect_truth_and_perf_totals(data, truth, "perf record --call-graph dwarf");
  EXPECT_NE(notes_.find("call graph dwarf"), std::string::npos) << notes_;
}

TEST_F(PerfDataTest, PipeModeFileIsRead) {
  const std::string data = path("pipe.data");
  const RunResult r = run({"sh", "-c",
                           kPerf + " record -e cpu-clock -F 999 -g -o - " + kFixtures +
                               "/cpu_slices 1 --min-cpu-ms 1000 > " + data + " 2>/dev/null"},
                          300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json rep = report(data);
  EXPECT_NE(notes_.find("pipe-mode perf.data"), std::string::npos) << notes_;
  EXPECT_EQ(rep.at("totals").at("samples").get<uint64_t>(), perf_report_totals(data).samples);
  EXPECT_GT(total_cpu_ns(rep, "seven_units"), 0);
}

TEST_F(PerfDataTest, TracepointSamplesAreSkippedAndSaidSo) {
  // A tracepoint's samples have another layout (RAW, CPU) and carry no CPU time: skipped, counted.
  const RunResult mounted =
      run({"sh", "-c", "[ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing"});
  ASSERT_EQ(mounted.exit_code, 0) << "tracefs: " << mounted.err;
  const std::string data = path("tp.data");
  const RunResult r = run({kPerf, "record", "-e", "cpu-clock", "-e", "sched:sched_switch", "-F", "999", "-g",
                           "-o", data, kFixtures + "/cpu_slices", "1", "--min-cpu-ms", "1000"},
                          300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json rep = report(data);
  const PerfTotals cpu_clock = perf_report_totals(data);
  const PerfTotals switches = perf_report_totals(data, "sched:sched_switch");
  EXPECT_EQ(rep.at("totals").at("samples").get<uint64_t>(), cpu_clock.samples);
  EXPECT_NE(notes_.find("skipped " + std::to_string(switches.samples) +
                        " samples of event sched:sched_switch (a tracepoint)"),
            std::string::npos)
      << notes_;
  EXPECT_EQ(notes_.find("unknown event"), std::string::npos) << notes_;
  EXPECT_EQ(notes_.find("modules not found"), std::string::npos) << notes_;
}

TEST_F(PerfDataTest, CutEmptyAndGarbageFilesAreRefusedClearly) {
  const std::string data = path("whole.data");
  record("cpu_slices", {"-g"}, data);
  std::ifstream in(data, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4096u);
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(path(name), std::ios::binary) << content;
    return path(name);
  };
  struct Case {
    std::string file;
    std::string expected;
  };
  std::string garbage = bytes.substr(0, 8);
  for (size_t i = 0; i < 5000; ++i) garbage.push_back(static_cast<char>((i * 2654435761u) >> 13));
  const std::vector<Case> cases{
      {write("cut_half.data", bytes.substr(0, bytes.size() / 2)), "truncated"},
      {write("cut_header.data", bytes.substr(0, 60)), "truncated"},
      {write("cut_end.data", bytes.substr(0, bytes.size() - 1)), "truncated"},
      {write("empty.data", ""), "empty"},
      {write("garbage.data", garbage), "perf.data"},
  };
  for (const Case& c : cases) {
    for (const std::vector<std::string>& argv :
         {std::vector<std::string>{kHpctl, "report", c.file},
          std::vector<std::string>{kHpctl, "convert", c.file, "-o", path("out.json.gz")}}) {
      const RunResult r = run(argv);
      EXPECT_EQ(r.exit_code, 1) << c.file << ": " << r.err;  // an error, not a signal
      EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.file << ": " << r.err;
      EXPECT_NE(r.err.find(c.file), std::string::npos) << "the message names the file: " << r.err;
    }
  }
}

}  // namespace
}  // namespace hpd::test
