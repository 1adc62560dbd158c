// Privileged: `hpctl record --calls --pid PID` times the calls of a running process through its
// uprobes (session mode: entry and return), end to end: the fixture (calls_pid_latency.c, built with
// NOP sites at each function's entry) measures each call itself just inside and just outside the
// function, so hpd's latency of every call lies between the two, on any machine under any load. The
// counts are exact; the report's average, 95th percentile, maximum and total lie between the
// fixture's inner and outer figures. Locally and through hpd. A build whose calls are counted inside
// glibc's hook gets no latency and a message that says why.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"
#include "temp_dir.h"

#include <nlohmann/json.hpp>

namespace {

std::string fixture(const std::string& name) {
  return std::string(HPD_CALLS_FIXTURES) + "/" + name;
}

// One line of the fixture's truth file (calls_pid_latency.c says what each figure is).
struct Truth {
  uint64_t calls = 0;
  double inner_sum = 0, outer_sum = 0, inner_p95 = 0, outer_p95 = 0, inner_max = 0, outer_max = 0,
         inner_top = 0, outer_top = 0;
};

std::map<std::string, Truth> read_truth(const std::string& path) {
  std::map<std::string, Truth> out;
  std::ifstream in(path);
  std::string name;
  Truth t;
  while (in >> name >> t.calls >> t.inner_sum >> t.outer_sum >> t.inner_p95 >> t.outer_p95 >> t.inner_max >>
         t.outer_max >> t.inner_top >> t.outer_top)
    out[name] = t;
  return out;
}

bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

bool wait_for_file(const std::string& path, double timeout_s, pid_t alive = 0) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (std::filesystem::exists(path)) return true;
    if (alive != 0 && !running(alive)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const nlohmann::json* row_of(const nlohmann::json& doc, const std::string& name) {
  for (const nlohmann::json& row : doc["calls"]["rows"])
    if (row["name"] == name) return &row;
  return nullptr;
}

// The argv of hpctl: a local recording, or through the hpd listening on `daemon_socket`.
std::vector<std::string> hpctl(const std::string& daemon_socket) {
  if (daemon_socket.empty()) return {HPD_HPCTL_PATH, "--local"};
  return {HPD_HPCTL_PATH, "--socket", daemon_socket, "--daemon"};
}

// Records `target` with --calls --pid until `done` exists (or the target exits), stops hpctl, and
// returns its stderr (the recording's summary). `out`: the capture written.
std::string record_pid(const hpd::testing::TempDir& dir, pid_t target, const std::string& done,
                       const std::string& out, const std::string& daemon_socket) {
  const std::string err = dir.file("hpctl.err");
  hpd::test::BackgroundOptions options;
  options.stdout_path = dir.file("hpctl.out");
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>'" + err + "'"};
  for (const std::string& a : hpctl(daemon_socket)) argv.push_back(a);
  argv.insert(argv.end(),
              {"record", "--calls", "--no-report", "-o", out, "--pid", std::to_string(target), "-d", "600"});
  hpd::test::Background recorder(argv, options);
  const bool finished = wait_for_file(done, 240, recorder.pid());
  const int status = recorder.terminate(120);
  const std::string summary = read_file(err);
  EXPECT_TRUE(finished) << summary;
  EXPECT_EQ(status, 0) << summary;
  return summary;
}

// Within [low, high], with 1 ns for the JSON's rounding.
void expect_between(double value, double low, double high, const std::string& what) {
  EXPECT_GE(value, low - 1) << what << ": hpd " << value << " ns, the fixture's inner " << low << " ns";
  EXPECT_LE(value, high + 1) << what << ": hpd " << value << " ns, the fixture's outer " << high << " ns";
}

void check_pid_latency(const std::string& daemon_socket) {
  const hpd::testing::TempDir dir("hpd-calls-pid-latency");
  hpd::test::Background target({fixture("pid_latency_nop"), dir.path()});
  ASSERT_TRUE(wait_for_file(dir.file("ready"), 60, target.pid()));
  const std::string out = dir.file("calls.hpr");
  const std::string summary = record_pid(dir, target.pid(), dir.file("done"), out, daemon_socket);
  ASSERT_EQ(target.wait(), 0) << "the fixture saw no probes, or they stayed after the recording\n" << summary;
  EXPECT_NE(summary.find("call counts (uprobes): "), std::string::npos) << summary;
  EXPECT_NE(summary.find("nop5+return"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("call latency: not measured"), std::string::npos) << summary;

  const std::map<std::string, Truth> truth = read_truth(dir.file("truth"));
  ASSERT_EQ(truth.size(), 3u) << read_file(dir.file("truth"));
  const hpd::test::RunResult rep = hpd::test::run({HPD_HPCTL_PATH, "report", "--json", "--limit", "0", out});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const nlohmann::json doc = nlohmann::json::parse(rep.out);
  EXPECT_EQ(doc["calls"]["counter"], "uprobes");
  for (const auto& [name, t] : truth) {
    SCOPED_TRACE(name);
    const nlohmann::json* row = row_of(doc, name);
    ASSERT_NE(row, nullptr) << rep.out;
    EXPECT_EQ((*row)["calls"].get<uint64_t>(), t.calls);
    ASSERT_TRUE(row->contains("latency")) << row->dump();
    const nlohmann::json& l = (*row)["latency"];
    EXPECT_EQ(l["timed_calls"].get<uint64_t>(), t.calls);
    const double n = double(t.calls);
    expect_between(l["avg_ns"].get<double>(), t.inner_sum / n, t.outer_sum / n, "average");
    expect_between(l["max_ns"].get<double>(), t.inner_max, t.outer_max, "maximum");
    // The outermost activations only: a recursive function's time counted once.
    expect_between(l["total_ns"].get<double>(), t.inner_top, t.outer_top, "total");
    // The histogram's buckets are at most 1/16 of their start wide.
    expect_between(l["p95_ns"].get<double>(), t.inner_p95 * 15 / 16, t.outer_p95 * 17 / 16, "p95");
  }

  // The text report shows the timed table; the Firefox profile carries the same latency back.
  const hpd::test::RunResult text = hpd::test::run({HPD_HPCTL_PATH, "report", "--limit", "0", out});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("counted and timed by uprobes"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("runtime's return hook"), std::string::npos) << text.out;
  const std::string firefox = dir.file("calls.json.gz");
  const hpd::test::RunResult conv = hpd::test::run({HPD_HPCTL_PATH, "convert", out, "-o", firefox});
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const hpd::test::RunResult back =
      hpd::test::run({HPD_HPCTL_PATH, "report", "--json", "--limit", "0", firefox});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  const nlohmann::json from_firefox = nlohmann::json::parse(back.out);
  const nlohmann::json* sleep_row = row_of(from_firefox, "sleep_for");
  ASSERT_NE(sleep_row, nullptr) << back.out;
  ASSERT_TRUE(sleep_row->contains("latency")) << sleep_row->dump();
  const Truth& sleep = truth.at("sleep_for");
  expect_between((*sleep_row)["latency"]["avg_ns"].get<double>(), sleep.inner_sum / double(sleep.calls),
                 sleep.outer_sum / double(sleep.calls), "sleep_for average through Firefox");
}

TEST(CallsPidLatency, MatchesWhatTheProgramMeasured) {
  check_pid_latency("");
}

// The same through hpd, as root (the access rules of any --pid recording apply).
TEST(CallsPidLatency, ThroughHpdMatchesWhatTheProgramMeasured) {
  const hpd::testing::TempDir dir("hpd-calls-pid-daemon");
  std::ofstream(dir.file("hpd.conf")).close();
  const std::string socket = dir.file("hpd.sock");
  hpd::test::Background server({HPD_HPD_PATH, "--config", dir.file("hpd.conf"), "--socket", socket});
  bool answers = false;
  for (int attempt = 0; attempt < 300 && !answers; ++attempt) {
    answers = hpd::test::run({HPD_HPCTL_PATH, "--socket", socket, "status"}, 30).exit_code == 0;
    if (!answers) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(answers) << "hpd did not answer on " << socket;
  check_pid_latency(socket);
}

// Calls counted inside glibc's __fentry__ (-pg -mfentry without -mnop-mcount): the function's return
// cannot be probed from there. The counts come, no latency is shown, and the summary says why.
TEST(CallsPidLatency, CallsCountedInGlibcsHookSayWhyTheyAreNotTimed) {
  const hpd::testing::TempDir dir("hpd-calls-pid-hook");
  hpd::test::Background target({fixture("gcc_fentry"), "1000", "1000", "1000000000"});
  ASSERT_GT(target.pid(), 0);
  const std::string out = dir.file("calls.hpr");
  const hpd::test::RunResult r =
      hpd::test::run({HPD_HPCTL_PATH, "--local", "record", "--calls", "--no-report", "-o", out, "--pid",
                      std::to_string(target.pid()), "-d", "1"},
                     120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("call latency: not measured for the calls"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("-mnop-mcount"), std::string::npos) << r.err;
  const hpd::test::RunResult rep = hpd::test::run({HPD_HPCTL_PATH, "report", "--json", "--limit", "0", out});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const nlohmann::json doc = nlohmann::json::parse(rep.out);
  const nlohmann::json* row = row_of(doc, "callee");
  ASSERT_NE(row, nullptr) << rep.out;
  EXPECT_GT((*row)["calls"].get<uint64_t>(), 0u);
  EXPECT_FALSE(row->contains("latency")) << row->dump();
  const hpd::test::RunResult text = hpd::test::run({HPD_HPCTL_PATH, "report", "--limit", "0", out});
  EXPECT_NE(text.out.find("counted by uprobes; not timed"), std::string::npos) << text.out;
}

}  // namespace
