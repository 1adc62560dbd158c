// Privileged integration test: a function whose body #includes a .c file (as glibc's
// __vfprintf_internal includes vfprintf-process-arg.c) is one row of `hpctl report`, with the CPU time
// the program measured in it, though its lines come from two files; `hpctl annotate` shows the lines
// of its own file and names the included one with its samples. Built -O2 -g (no frame pointers).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;

// churn() runs two loops, one written in churn.c, the other in churn_part.c, #included into its
// body; the program measures its own thread CPU time in churn() and in elsewhere().
constexpr const char* kMain = R"(#include <stdint.h>
#include <stdio.h>
#include <time.h>

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) uint64_t churn(uint64_t acc, int kind) {
  if (kind == 0) {
    for (int i = 0; i < 4000000; ++i) acc = acc * 6364136223846793005ull + 1442695040888963407ull;
  } else {
#include "churn_part.c"
  }
  return acc;
}

__attribute__((noinline)) uint64_t elsewhere(uint64_t acc) {
  for (int i = 0; i < 2000000; ++i) acc = (acc >> 3) ^ (acc * 0x9e3779b97f4a7c15ull);
  return acc;
}

int main(int argc, char** argv) {
  volatile uint64_t sink = 1;
  uint64_t in_churn = 0, in_elsewhere = 0;
  const uint64_t start = thread_cpu_ns();
  // Calls of a few ms each: the clock's own system calls are a small part of what they measure.
  while (thread_cpu_ns() - start < 2500000000u) {
    for (int kind = 0; kind < 2; ++kind) {
      const uint64_t before = thread_cpu_ns();
      sink = churn(sink, kind);
      in_churn += thread_cpu_ns() - before;
    }
    const uint64_t before = thread_cpu_ns();
    sink = elsewhere(sink);
    in_elsewhere += thread_cpu_ns() - before;
  }
  FILE* out = fopen(argv[argc - 1], "w");
  fprintf(out, "%llu %llu\n", (unsigned long long)in_churn, (unsigned long long)in_elsewhere);
  fclose(out);
  return sink == 7 ? 1 : 0;
}
)";

constexpr const char* kPart = R"(for (int i = 0; i < 3000000; ++i) {
  acc ^= acc << 13;
  acc ^= acc >> 7;
  acc ^= acc << 17;
}
)";

class WholeFunctionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new hpd::testing::TempDir("hpd-whole");
    const fs::path dir = tmp_->path();
    std::ofstream(dir / "churn.c") << kMain;
    std::ofstream(dir / "churn_part.c") << kPart;
    RunResult cc = run({"gcc", "-O2", "-g", (dir / "churn.c").string(), "-o", (dir / "churn").string()});
    ASSERT_EQ(cc.exit_code, 0) << cc.err;
    profile_ = (dir / "churn.json.gz").string();
    truth_ = (dir / "truth.txt").string();
    RunResult r = run({kHpctl, "--local", "record", "-o", profile_, "--no-report", "-q", "--",
                       (dir / "churn").string(), truth_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  static json hpctl_json(const std::vector<std::string>& args) {
    std::vector<std::string> argv{kHpctl};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = run(argv, 120);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  }
  static inline hpd::testing::TempDir* tmp_ = nullptr;
  static inline std::string profile_, truth_;
};

TEST_F(WholeFunctionTest, TheFunctionIsOneRowWithTheCpuTimeItMeasured) {
  // The premise: the included file's lines are in the profile as a file of their own.
  const json annotation = hpctl_json({"annotate", "--json", "churn", profile_});
  ASSERT_EQ(annotation.at("other_files").size(), 1u) << annotation.dump(1);
  EXPECT_EQ(fs::path(annotation["other_files"][0].at("file").get<std::string>()).filename(), "churn_part.c");
  EXPECT_EQ(fs::path(annotation.at("file").get<std::string>()).filename(), "churn.c");
  EXPECT_GT(annotation["other_files"][0].at("self_samples").get<uint64_t>(), 0u);

  std::ifstream in(truth_);
  uint64_t in_churn = 0, in_elsewhere = 0;
  ASSERT_TRUE(in >> in_churn >> in_elsewhere);
  ASSERT_GT(in_churn + in_elsewhere, 0u);
  const json report = hpctl_json({"report", "--json", "--limit", "0", profile_});
  std::vector<json> rows;
  double elsewhere_ns = 0;
  for (const json& f : report.at("functions")) {
    if (f.at("name") == "churn") rows.push_back(f);
    if (f.at("name") == "elsewhere") elsewhere_ns += f.at("self_cpu_ns").get<double>();
  }
  ASSERT_EQ(rows.size(), 1u) << report.at("functions").dump(1);
  // churn's share of the CPU of the two functions the program timed, by its clock and by hpd.
  const double truth = 100.0 * double(in_churn) / double(in_churn + in_elsewhere);
  const double churn_ns = rows[0].at("self_cpu_ns").get<double>();
  ASSERT_GT(churn_ns + elsewhere_ns, 0);
  const double share = 100.0 * churn_ns / (churn_ns + elsewhere_ns);
  std::printf("churn: %.2f%% of churn and elsewhere by hpd, %.2f%% by its clock\n", share, truth);
  EXPECT_NEAR(share, truth, 3.0) << "churn's own clock says " << truth << "% of churn and elsewhere";
}

}  // namespace
}  // namespace hpd::test
