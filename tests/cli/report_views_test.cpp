// Privileged integration test of the report views on the report_tree fixture, whose call tree and
// CPU shares are known by construction: callers/callees trees, annotate, diff, and the filters.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixture = HPD_FIXTURE_DIR "/report_tree";
const std::string kFixtureSource = HPD_REPORT_TREE_SOURCE;

class ReportViewsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_.emplace("hpd-views");
    dir_ = tmp_->path();
    // Fixed work, default flags: A as built, B with beta twice as slow.
    for (const auto& [name, slowdown] : {std::pair{"a.json.gz", "1"}, std::pair{"b.json.gz", "2"}}) {
      RunResult r = run({kHpctl, "--local", "record", "-o", (dir_ / name).string(), "--no-report", "-q", "--",
                         kFixture, "12000", slowdown});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  static void TearDownTestSuite() { tmp_.reset(); }
  static std::string a() { return (dir_ / "a.json.gz").string(); }
  static std::string b() { return (dir_ / "b.json.gz").string(); }

  static json hpctl_json(std::vector<std::string> args) {
    std::vector<std::string> argv{kHpctl};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? json::parse(r.out) : json();
  }

  static json flat_row(const json& report, const std::string& name) {
    for (const auto& f : report.at("functions")) {
      if (f.at("name") == name) return f;
    }
    return json();
  }

  static const json* child(const json& node, const std::string& name) {
    for (const auto& c : node.at("children")) {
      if (c.at("name") == name) return &c;
    }
    return nullptr;
  }

  // The two recordings every test reads, made once for the suite.
  static inline std::optional<hpd::testing::TempDir> tmp_;
  static inline fs::path dir_;
};

TEST_F(ReportViewsTest, CallersOfTheHotLoopFollowTheKnownTree) {
  const json flat = hpctl_json({"report", "--json", "--limit", "0", a()});
  const json tree = hpctl_json({"report", "--json", "--callers", "hot_loop", a()});
  const json& root = tree.at("tree");
  ASSERT_EQ(root.at("name"), "hot_loop");
  // The root counts every sample with hot_loop on the stack: the flat report's total, exactly.
  EXPECT_EQ(root.at("samples"), flat_row(flat, "hot_loop").at("total_samples"));
  EXPECT_GT(root.at("samples").get<double>(), 500);
  // hot_loop has one caller, alpha; alpha two, run_round and gamma_, each half (3 units of 6).
  const json* alpha = child(root, "alpha");
  ASSERT_NE(alpha, nullptr);
  EXPECT_GE(alpha->at("samples").get<double>(), 0.98 * root.at("samples").get<double>());
  const json* direct = child(*alpha, "run_round");
  const json* via_gamma = child(*alpha, "gamma_");
  ASSERT_NE(direct, nullptr);
  ASSERT_NE(via_gamma, nullptr);
  EXPECT_NEAR(direct->at("percent_of_root").get<double>(), 50, 6);
  EXPECT_NEAR(via_gamma->at("percent_of_root").get<double>(), 50, 6);
  const json* gamma_caller = child(*via_gamma, "run_round");
  ASSERT_NE(gamma_caller, nullptr);
  EXPECT_EQ(gamma_caller->at("samples"), via_gamma->at("samples"));
  // Every branch counts each sample once: children never add up to more than their parent.
  EXPECT_LE(direct->at("samples").get<uint64_t>() + via_gamma->at("samples").get<uint64_t>(),
            alpha->at("samples").get<uint64_t>());
}

TEST_F(ReportViewsTest, CalleesOfARoundSplitAsBuilt) {
  const json flat = hpctl_json({"report", "--json", "--limit", "0", a()});
  const json tree = hpctl_json({"report", "--json", "--callees", "run_round", a()});
  const json& root = tree.at("tree");
  EXPECT_EQ(root.at("samples"), flat_row(flat, "run_round").at("total_samples"));
  uint64_t children = 0;
  for (const auto& c : root.at("children")) children += c.at("samples").get<uint64_t>();
  EXPECT_EQ(children + root.at("self_samples").get<uint64_t>(), root.at("samples").get<uint64_t>());
  // alpha 3/7, gamma_ (-> alpha) 3/7, beta 1/7 of the round.
  const json* alpha = child(root, "alpha");
  const json* gamma = child(root, "gamma_");
  const json* beta = child(root, "beta");
  ASSERT_TRUE(alpha && gamma && beta);
  EXPECT_NEAR(alpha->at("percent_of_root").get<double>(), 300.0 / 7, 5);
  EXPECT_NEAR(gamma->at("percent_of_root").get<double>(), 300.0 / 7, 5);
  EXPECT_NEAR(beta->at("percent_of_root").get<double>(), 100.0 / 7, 4);
  // alpha's samples, directly or through gamma_, are all of alpha's samples in the flat report.
  const json* alpha_in_gamma = child(*gamma, "alpha");
  ASSERT_NE(alpha_in_gamma, nullptr);
  EXPECT_EQ(alpha->at("samples").get<uint64_t>() + alpha_in_gamma->at("samples").get<uint64_t>(),
            flat_row(flat, "alpha").at("total_samples").get<uint64_t>());

  // The text tree shows the same structure, with percentages.
  RunResult text = run({kHpctl, "report", "--callees", "run_round", a()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Callees of run_round"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("-> gamma_"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("    -> alpha"), std::string::npos) << text.out;
}

TEST_F(ReportViewsTest, AnnotatePutsTheSamplesOnTheHotLoop) {
  // The fixture marks the loop's first and last line.
  std::ifstream source(kFixtureSource);
  std::string line;
  uint32_t number = 0, begin = 0, end = 0;
  std::vector<std::string> lines;
  while (std::getline(source, line)) {
    ++number;
    lines.push_back(line);
    if (line.find("HOT-LOOP-BEGIN") != std::string::npos) begin = number;
    if (line.find("HOT-LOOP-END") != std::string::npos) end = number;
  }
  ASSERT_TRUE(begin > 0 && end > begin);
  const json annotation = hpctl_json({"annotate", "hot_loop", a(), "--json"});
  ASSERT_TRUE(annotation.at("source_found").get<bool>()) << annotation.dump();
  const double self = annotation.at("self_samples").get<double>();
  ASSERT_GT(self, 500);
  double in_loop = 0, best = 0;
  uint32_t best_line = 0;
  for (const auto& l : annotation.at("lines")) {
    const auto n = l.at("self_samples").get<double>();
    const auto at = l.at("line").get<uint32_t>();
    EXPECT_EQ(l.at("text"), lines.at(at - 1));
    if (at >= begin && at <= end) in_loop += n;
    if (n > best) {
      best = n;
      best_line = at;
    }
  }
  EXPECT_GE(in_loop, 0.9 * self);
  EXPECT_GE(best_line, begin);
  EXPECT_LE(best_line, end);
}

TEST_F(ReportViewsTest, DiffPutsTheFunctionMadeTwiceAsSlowAtTheTop) {
  const json diff = hpctl_json({"diff", a(), b(), "--json"});
  ASSERT_GT(diff.at("rows").size(), 3u);
  const json& top = diff.at("rows").at(0);
  EXPECT_EQ(top.at("name"), "beta") << diff.dump(1);
  // beta did twice the work in B, hot_loop the same. CPU time per unit of work drifts between two
  // runs on a loaded machine (other processes share caches and cores), so beta's growth is measured
  // against hot_loop's: about 2 (beta has about 1/7 of some 2000 samples in A: +-0.6 covers
  // three standard deviations of the sampling noise of the ratio).
  const double change = top.at("self_cpu_change_ns").get<double>();
  const double beta_growth =
      top.at("self_cpu_ns").at(1).get<double>() / top.at("self_cpu_ns").at(0).get<double>();
  double hot_growth = 0;
  for (const auto& row : diff.at("rows")) {
    if (row.at("name") != "hot_loop") continue;
    hot_growth = row.at("self_cpu_ns").at(1).get<double>() / row.at("self_cpu_ns").at(0).get<double>();
    EXPECT_LT(std::abs(row.at("self_cpu_change_ns").get<double>()), 0.5 * change);
  }
  ASSERT_GT(hot_growth, 0);
  EXPECT_NEAR(beta_growth / hot_growth, 2.0, 0.6) << "beta x" << beta_growth << ", hot_loop x" << hot_growth;
  RunResult text = run({kHpctl, "diff", a(), b()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("beta"), std::string::npos);
}

TEST_F(ReportViewsTest, FiltersAndSortsSelectWhatTheySay) {
  const json all = hpctl_json({"report", "--json", "--limit", "0", a()});
  const json by_name = hpctl_json({"report", "--json", "--limit", "0", "--thread", "report_tree", a()});
  EXPECT_EQ(by_name.at("totals").at("samples"), all.at("totals").at("samples"));
  const json none = hpctl_json({"report", "--json", "--thread", "no-such-thread", a()});
  EXPECT_EQ(none.at("totals").at("samples"), 0);
  const json some = hpctl_json({"report", "--json", "--limit", "0", "--function", "^(alpha|beta)$", a()});
  ASSERT_EQ(some.at("functions").size(), 2u);
  for (const auto& f : some.at("functions")) EXPECT_TRUE(f.at("name") == "alpha" || f.at("name") == "beta");
  const json by_cpu = hpctl_json({"report", "--json", "--limit", "0", "--sort", "cpu", a()});
  EXPECT_EQ(by_cpu.at("sort"), "cpu");
  uint64_t previous = UINT64_MAX;
  for (const auto& f : by_cpu.at("functions")) {
    EXPECT_LE(f.at("self_cpu_ns").get<uint64_t>(), previous);
    previous = f.at("self_cpu_ns").get<uint64_t>();
  }
  RunResult bad = run({kHpctl, "report", "--function", "(", a()});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("regular expression"), std::string::npos) << bad.err;
  RunResult unknown = run({kHpctl, "report", "--callers", "no_such_function", a()});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("no function"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace hpd::test
