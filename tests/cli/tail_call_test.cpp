// Privileged integration test of tail-call edges: tests/fixtures/tail_calls.c compiled -O2 -g by gcc 12
// and clang 14, recorded with default flags into a capture. spin() burns the CPU, reached from main
// through via_tail's jump (a tail call), through direct's call (ordinary), and through an indirect
// call of a function that jumps to it (a tail call nothing names). The callers and callees trees must
// mark the first edge, and only it, with the share of spin's samples the fixture's own CPU clock
// gave each way.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "fixture_truth.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kSource = HPD_TAIL_CALLS_SOURCE;

struct Recording {
  std::string capture;
  std::map<std::string, double> truth;  // tail_ns, direct_ns, indirect_ns
};

class TailCallRecordTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { tmp_.emplace("hpd-tailcall"); }
  static void TearDownTestSuite() { tmp_.reset(); }

  static const Recording& recording(const std::string& compiler) {
    auto it = recordings_.find(compiler);
    if (it != recordings_.end()) return it->second;
    Recording r;
    const std::string dir = (fs::path(tmp_->path()) / compiler).string();
    fs::create_directories(dir);
    const std::string program = dir + "/tail_calls", truth = dir + "/truth.txt";
    r.capture = dir + "/profile.hpr";
    RunResult cc = run({compiler == "gcc" ? HPD_GCC12 : HPD_CLANG14, "-O2", "-g", kSource, "-o", program});
    EXPECT_EQ(cc.exit_code, 0) << cc.err;
    // About 2 s of CPU: 3 x 200000 steps a round.
    RunResult rec =
        run({kHpctl, "--local", "record", "-o", r.capture, "--no-report", "-q", "--", program, "2500", truth},
            600);
    EXPECT_EQ(rec.exit_code, 0) << rec.err;
    std::ifstream in(truth);
    std::stringstream text;
    text << in.rdbuf();
    r.truth = fixture_truth(text.str(), "tail_calls");
    return recordings_.emplace(compiler, std::move(r)).first->second;
  }

  static json tree(const Recording& r, const std::string& direction, const std::string& function) {
    RunResult out = run({kHpctl, "report", "--json", direction, function, r.capture});
    EXPECT_EQ(out.exit_code, 0) << out.err;
    return out.exit_code == 0 ? json::parse(out.out).at("tree") : json();
  }

  // The samples of `node`'s children of that name, by whether their edge is marked a tail call.
  static std::pair<double, double> marked_and_not(const json& node, const std::string& name) {
    double marked = 0, plain = 0;
    for (const json& c : node.at("children")) {
      if (c.at("name") != name) continue;
      (c.at("tail_call").get<bool>() ? marked : plain) += c.at("samples").get<double>();
    }
    return {marked, plain};
  }

  static inline std::optional<hpd::testing::TempDir> tmp_;
  static inline std::map<std::string, Recording> recordings_;
};

TEST_P(TailCallRecordTest, TheTailCallEdgeIsMarkedAndNoOther) {
  const Recording& r = recording(GetParam());
  ASSERT_EQ(r.truth.size(), 3u) << "the fixture wrote no truth line";
  const double total_ns = r.truth.at("tail_ns") + r.truth.at("direct_ns") + r.truth.at("indirect_ns");
  ASSERT_GT(total_ns, 0);

  const json callers = tree(r, "--callers", "spin");
  const double all = callers.at("samples").get<double>();
  ASSERT_GT(all, 300) << callers.dump(1);
  const auto [main_marked, main_plain] = marked_and_not(callers, "main");
  const auto [direct_marked, direct_plain] = marked_and_not(callers, "direct");
  // spin <- main through via_tail's jump: marked, with via_tail's share of the CPU.
  EXPECT_NEAR(main_marked / all, r.truth.at("tail_ns") / total_ns, 0.08) << callers.dump(1);
  // spin <- main through the indirect call: a tail call too, but nothing names main's callee there.
  EXPECT_NEAR(main_plain / all, r.truth.at("indirect_ns") / total_ns, 0.08) << callers.dump(1);
  // spin <- direct: an ordinary call.
  EXPECT_EQ(direct_marked, 0) << callers.dump(1);
  EXPECT_NEAR(direct_plain / all, r.truth.at("direct_ns") / total_ns, 0.08) << callers.dump(1);
  // And direct <- main, an ordinary call, is not marked either.
  for (const json& c : callers.at("children")) {
    if (c.at("name") != "direct") continue;
    for (const json& g : c.at("children")) EXPECT_FALSE(g.at("tail_call").get<bool>()) << callers.dump(1);
  }

  // The same edge seen from main.
  const json callees = tree(r, "--callees", "main");
  const auto [spin_marked, spin_plain] = marked_and_not(callees, "spin");
  EXPECT_NEAR(spin_marked / all, r.truth.at("tail_ns") / total_ns, 0.08) << callees.dump(1);
  EXPECT_NEAR(spin_plain / all, r.truth.at("indirect_ns") / total_ns, 0.08) << callees.dump(1);
  EXPECT_EQ(marked_and_not(callees, "direct").first, 0) << callees.dump(1);

  // The text says it where the edge is drawn.
  RunResult text = run({kHpctl, "report", "--callers", "spin", r.capture});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("<- [tail call] main"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("[tail call] direct"), std::string::npos) << text.out;
}

INSTANTIATE_TEST_SUITE_P(Compilers, TailCallRecordTest, ::testing::Values("gcc", "clang"));

}  // namespace
}  // namespace hpd::test
