// Privileged integration test of tail-call edges: tests/fixtures/tail_calls.c compiled -O2 -g by gcc 12
// and clang 14, recorded with default flags into a capture. spin() burns the CPU, reached from main
// through via_tail's jump (a tail call), through direct's call (ordinary), and through an indirect
// call of a function that jumps to it (a tail call nothing names). The callers and callees trees must
// mark the first edge, and only it, with the share of spin's samples the fixture's own CPU clock
// gave each way; the capture converted to a Firefox file keeps the marks (HpdTailCall markers).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "firefox_lint.h"
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
  std::string firefox;                  // the capture converted by `hpctl convert`
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
    r.firefox = dir + "/profile.json.gz";
    RunResult cc = run({compiler == "gcc" ? HPD_GCC12 : HPD_CLANG14, "-O2", "-g", kSource, "-o", program});
    EXPECT_EQ(cc.exit_code, 0) << cc.err;
    // About 2.5 s of CPU: 40 rounds of 3 calls of 12 million steps (about 20 ms each here). Calls far
    // longer than the 1 ms sampling interval: with 2500 rounds of 0.35 ms calls, a round lasted about
    // one interval, and the samples could keep falling at the same place of it (a CI run gave the tail
    // call 42.1% of the samples for 33.5% of the CPU). Now where the samples fall moves each call's
    // count by less than one sample: 40 per way at most, 1.6% of about 2500, within the 8 points.
    RunResult rec = run({kHpctl, "--local", "record", "-o", r.capture, "--no-report", "-q", "--", program,
                         "40", truth, "12000000"},
                        600);
    EXPECT_EQ(rec.exit_code, 0) << rec.err;
    RunResult conv = run({kHpctl, "convert", r.capture, "-o", r.firefox});
    EXPECT_EQ(conv.exit_code, 0) << conv.err;
    std::ifstream in(truth);
    std::stringstream text;
    text << in.rdbuf();
    r.truth = fixture_truth(text.str(), "tail_calls");
    return recordings_.emplace(compiler, std::move(r)).first->second;
  }

  static json report(const std::string& file, const std::string& direction, const std::string& function) {
    RunResult out = run({kHpctl, "report", "--json", direction, function, file});
    EXPECT_EQ(out.exit_code, 0) << out.err;
    return out.exit_code == 0 ? json::parse(out.out) : json();
  }
  static json tree(const Recording& r, const std::string& direction, const std::string& function) {
    const json all = report(r.capture, direction, function);
    return all.is_null() ? json() : all.at("tree");
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

// The capture converted to a Firefox file: the edge is one HpdTailCall marker (main -> spin, with the
// samples the capture's report gives the marked edge), and the report of the file is the capture's,
// marks included: the tail call marked, main's other edge to spin (the indirect call) and the edges
// through direct not.
TEST_P(TailCallRecordTest, TheFirefoxFileMarksTheSameEdges) {
  const Recording& r = recording(GetParam());
  const json capture = report(r.capture, "--callers", "spin");
  ASSERT_FALSE(capture.is_null());
  const auto [main_marked, main_plain] = marked_and_not(capture.at("tree"), "main");
  ASSERT_GT(main_marked, 0) << capture.dump(1);
  ASSERT_GT(main_plain, 0) << capture.dump(1);

  const json file = hpd::testing::load_json_maybe_gzip(r.firefox);
  const json& strings = file.at("shared").at("stringArray");
  std::vector<std::pair<std::string, std::string>> pairs;
  double samples = 0, share = -1;
  for (const json& thread : file.at("threads")) {
    const json& markers = thread.at("markers");
    for (size_t i = 0; i < markers.at("length").get<size_t>(); ++i) {
      const json& d = markers.at("data").at(i);
      if (!d.is_object() || d.value("type", "") != "HpdTailCall") continue;
      const std::string caller = strings.at(d.at("caller").get<size_t>());
      const std::string callee = strings.at(d.at("callee").get<size_t>());
      pairs.emplace_back(caller, callee);
      if (caller != "main" || callee != "spin") continue;
      samples += d.at("samples").get<double>();
      share = d.at("share").get<double>();
      EXPECT_EQ(strings.at(markers.at("name").at(i).get<size_t>()), "main \xE2\x86\x92 spin (tail call)");
    }
  }
  EXPECT_EQ(std::count(pairs.begin(), pairs.end(), std::pair<std::string, std::string>{"main", "spin"}), 1)
      << "one thread, one marker for the edge";
  for (const auto& [caller, callee] : pairs) EXPECT_TRUE(caller != "direct" && callee != "direct");
  EXPECT_EQ(samples, main_marked);
  // One thread: its on-CPU samples are all the report's.
  EXPECT_NEAR(share, main_marked / capture.at("all_samples").get<double>(), 1e-5);

  for (const auto& [direction, function] :
       {std::pair{"--callers", "spin"}, std::pair{"--callees", "main"}, std::pair{"--callers", "direct"}}) {
    const json a = report(r.capture, direction, function), b = report(r.firefox, direction, function);
    EXPECT_EQ(b.at("tree"), a.at("tree")) << direction << " " << function;
  }
  RunResult text = run({kHpctl, "report", "--callers", "spin", r.firefox});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("<- [tail call] main"), std::string::npos) << text.out;
  RunResult capture_text = run({kHpctl, "report", "--callers", "spin", r.capture});
  EXPECT_EQ(text.out, capture_text.out);
}

INSTANTIATE_TEST_SUITE_P(Compilers, TailCallRecordTest, ::testing::Values("gcc", "clang"));

}  // namespace
}  // namespace hpd::test
