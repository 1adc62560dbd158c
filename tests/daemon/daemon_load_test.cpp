// Load test of hpd: 8 concurrent 60 s sessions against 8 busy processes. No session may be lost, every
// profile must be valid with samples, hpd's memory must stay bounded, lost samples must be reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "firefox_lint.h"
#include "hpd_harness.h"
#include "subprocess.h"

namespace hpd::test {
namespace {

using nlohmann::json;

constexpr int kSessions = 8;
constexpr int kSeconds = 60;
// Measured on the 2-CPU test VM (cpu_split judged without frame pointers, so dwarf stack copies):
// hpd's VmRSS peaked at 287 MiB with the 8 sessions (their BPF rings, profiles, and 8 symbolizers
// loading DWARF at the same time at the end) and fell to 20 MiB once they ended. The bounds leave
// room for a busier machine but catch a leak of a session's profile or rings.
constexpr uint64_t kRssBoundBytes = 512ull << 20;
constexpr uint64_t kRssAfterBoundBytes = 96ull << 20;

TEST(HpdLoad, EightConcurrentSessionsForAMinute) {
  Hpd hpd;
  const std::string fixture = std::string(HPD_FIXTURE_DIR) + "/cpu_split";
  std::vector<std::unique_ptr<Background>> targets;
  std::vector<std::unique_ptr<Background>> clients;
  for (int i = 0; i < kSessions; ++i) {
    targets.push_back(
        std::make_unique<Background>(std::vector<std::string>{fixture, std::to_string(kSeconds + 60)}));
  }
  for (int i = 0; i < kSessions; ++i) {
    const std::string out = hpd.out_dir() + "/load" + std::to_string(i) + ".json.gz";
    const std::string err = hpd.out_dir() + "/load" + std::to_string(i) + ".err";
    clients.push_back(std::make_unique<Background>(std::vector<std::string>{
        "sh", "-c",
        "exec \"$0\" --socket \"$1\" --daemon record --no-report --pid \"$2\" -d \"$3\" -o \"$4\" 2>\"$5\"",
        HPD_HPCTL_PATH, hpd.socket(), std::to_string(targets[i]->pid()), std::to_string(kSeconds), out,
        err}));
  }
  // Watch hpd while the sessions run.
  uint64_t peak_rss = 0;
  size_t peak_sessions = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(kSeconds + 5)) {
    const json status = hpd.status();
    peak_rss = std::max(peak_rss, status["rss_bytes"].get<uint64_t>());
    peak_sessions = std::max(peak_sessions, status["sessions"].get<size_t>());
    if (status["sessions"] == 0 && peak_sessions == kSessions) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  EXPECT_EQ(peak_sessions, static_cast<size_t>(kSessions)) << "every session ran at the same time";
  for (int i = 0; i < kSessions; ++i) {
    const std::string base = hpd.out_dir() + "/load" + std::to_string(i);
    const int exit_code = clients[i]->wait();
    std::ifstream err_file(base + ".err");
    std::stringstream err;
    err << err_file.rdbuf();
    EXPECT_EQ(exit_code, 0) << "session " << i << ": " << err.str();
    const json profile = testing::load_json_maybe_gzip(base + ".json.gz");
    const auto problems = testing::lint_firefox_profile(profile);
    EXPECT_TRUE(problems.empty()) << i << ": " << (problems.empty() ? "" : problems.front());
    EXPECT_GT(count_samples(profile), 1000u) << "session " << i;
    EXPECT_NE(err.str().find("recorded by hpd"), std::string::npos) << err.str();
  }
  const json status = hpd.status();
  peak_rss = std::max(peak_rss, status["rss_bytes"].get<uint64_t>());
  EXPECT_EQ(status["sessions_finished"], kSessions);
  EXPECT_TRUE(status.contains("lost")) << "lost samples are reported";
  std::printf("hpd load: peak VmRSS %.1f MiB, after %.1f MiB; %llu samples, %llu lost over %d sessions\n",
              peak_rss / 1048576.0, status["rss_bytes"].get<uint64_t>() / 1048576.0,
              static_cast<unsigned long long>(status["samples"].get<uint64_t>()),
              static_cast<unsigned long long>(status["lost"].get<uint64_t>()), kSessions);
  EXPECT_LT(peak_rss, kRssBoundBytes);
  EXPECT_LT(status["rss_bytes"].get<uint64_t>(), kRssAfterBoundBytes)
      << "memory of ended sessions is given back";
  EXPECT_EQ(hpd.terminate(), 0) << hpd.log();
}

}  // namespace
}  // namespace hpd::test
