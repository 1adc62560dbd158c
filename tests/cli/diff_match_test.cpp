// Privileged integration test of `hpctl diff` across builds: the diff_versions fixture built twice
// (-O2 -g, version 1 and version 2) under different file names in different directories, with its
// shared library renamed from libdiffwork.so.1.2 to libdiffwork.so.1.3, each recorded with default
// flags. Each function must be one row, matched across the two binaries, with the change of its CPU
// share that the two runs measured of themselves; the two static `helper`s of part_a.c and part_b.c
// stay two rows.
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
const std::string kCompiler = HPD_C_COMPILER;
const std::string kSource = HPD_DIFF_VERSIONS_SOURCE;  // tests/fixtures/diff_versions

struct Build {
  std::string dir, library, program, profile, truth_file;
  std::map<std::string, double> truth;  // the fixture's own measurement (fixture_truth)
};

class DiffMatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_.emplace("hpd-diffmatch");
    builds_[0] = make(1, "v1", "libdiffwork.so.1.2", "app-v1");
    builds_[1] = make(2, "rebuilt", "libdiffwork.so.1.3", "app-v2");
  }
  static void TearDownTestSuite() { tmp_.reset(); }

  static Build make(int version, const std::string& subdir, const std::string& library,
                    const std::string& program) {
    Build b;
    b.dir = (fs::path(tmp_->path()) / subdir).string();
    fs::create_directories(b.dir);
    b.library = b.dir + "/" + library;
    b.program = b.dir + "/" + program;
    b.profile = b.dir + "/profile.json.gz";
    b.truth_file = b.dir + "/truth.txt";
    RunResult lib =
        run({kCompiler, "-O2", "-g", "-shared", "-fPIC", kSource + "/diffwork.c", "-o", b.library});
    EXPECT_EQ(lib.exit_code, 0) << lib.err;
    // No soname: the program's DT_NEEDED is the library's path, so it runs without LD_LIBRARY_PATH.
    RunResult prog = run({kCompiler, "-O2", "-g", "-DVERSION=" + std::to_string(version), kSource + "/main.c",
                          kSource + "/part_a.c", kSource + "/part_b.c", b.library, "-o", b.program});
    EXPECT_EQ(prog.exit_code, 0) << prog.err;
    RunResult rec = run({kHpctl, "--local", "record", "-o", b.profile, "--no-report", "-q", "--", b.program,
                         "3", b.truth_file},
                        600);
    EXPECT_EQ(rec.exit_code, 0) << rec.err;
    std::ifstream in(b.truth_file);
    std::stringstream text;
    text << in.rdbuf();
    b.truth = fixture_truth(text.str(), "diff_versions");
    return b;
  }

  static json diff_json() {
    RunResult r = run({kHpctl, "diff", "--json", "--limit", "0", builds_[0].profile, builds_[1].profile});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? json::parse(r.out) : json();
  }

  static inline std::optional<hpd::testing::TempDir> tmp_;
  static inline Build builds_[2];
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST_F(DiffMatchTest, EachFunctionIsOneRowWithTheShareChangeTheRunsMeasured) {
  for (const Build& b : builds_)
    ASSERT_GT(b.truth.count("total") ? b.truth.at("total") : 0.0, 1e9) << b.truth_file;
  const json diff = diff_json();
  ASSERT_TRUE(diff.contains("rows")) << diff.dump(1);
  const double total[2] = {diff.at("totals").at(0).at("cpu_ns").get<double>(),
                           diff.at("totals").at(1).at("cpu_ns").get<double>()};
  ASSERT_GT(total[0], 0);
  ASSERT_GT(total[1], 0);
  // key (as the fixture names it) -> name and source file of the function.
  const std::map<std::string, std::pair<std::string, std::string>> functions{
      {"alpha", {"alpha", "main.c"}},
      {"beta", {"beta", "main.c"}},
      {"helper@part_a.c", {"helper", "part_a.c"}},
      {"helper@part_b.c", {"helper", "part_b.c"}},
      {"lib_work", {"lib_work", "diffwork.c"}}};
  for (const auto& [key, function] : functions) {
    const auto& [name, file] = function;
    std::vector<json> rows;
    for (const json& row : diff.at("rows")) {
      if (row.at("name") == name && ends_with(row.value("file", ""), "/" + file)) rows.push_back(row);
    }
    ASSERT_EQ(rows.size(), 1u) << key << " must be one row, matched across the builds:\n" << diff.dump(1);
    const json& row = rows[0];
    double self[2], total_share[2], truth[2];
    for (int side = 0; side < 2; ++side) {
      self[side] = 100.0 * row.at("self_cpu_ns").at(side).get<double>() / total[side];
      total_share[side] = 100.0 * row.at("total_cpu_ns").at(side).get<double>() / total[side];
      truth[side] = 100.0 * builds_[side].truth.at(key) / builds_[side].truth.at("total");
    }
    // What the fixture fixes (10 to 40% of the CPU), as measured by the runs themselves.
    EXPECT_GT(truth[0], 5) << key;
    EXPECT_GT(truth[1], 5) << key;
    // Total: all the function measured (its clock reads included). Self: less its clock reads, a
    // fraction of a percent. Both within 2 points: the fixture alternates its functions in 10 ms
    // rounds sampled every millisecond of CPU time, some 3000 samples a run (1500 were too few beside
    // four CPU hogs: alpha's self share 2.3 points below its clock's in one run, 0.2 in the other).
    EXPECT_NEAR(total_share[1] - total_share[0], truth[1] - truth[0], 2.0)
        << key << ": diff says total " << total_share[0] << "% -> " << total_share[1]
        << "%, the runs measured " << truth[0] << "% -> " << truth[1] << "%";
    EXPECT_NEAR(self[1] - self[0], truth[1] - truth[0], 2.0)
        << key << ": diff says self " << self[0] << "% -> " << self[1] << "%, the runs measured " << truth[0]
        << "% -> " << truth[1] << "%";
  }
  // The modules were paired, and the diff says how: the programs by being the program, the
  // libraries by their names without the version.
  ASSERT_TRUE(diff.contains("modules")) << diff.dump(1);
  bool program = false, library = false;
  for (const json& m : diff.at("modules")) {
    if (m.at("a") == "app-v1" && m.at("b") == "app-v2" && m.at("by") == "program") program = true;
    if (m.at("a") == "libdiffwork.so.1.2" && m.at("b") == "libdiffwork.so.1.3" &&
        m.at("by") == "unversioned_name")
      library = true;
  }
  EXPECT_TRUE(program) << diff.at("modules").dump(1);
  EXPECT_TRUE(library) << diff.at("modules").dump(1);
}

TEST_F(DiffMatchTest, TheTextSaysHowModulesWerePairedAndTellsTheHelpersApart) {
  RunResult r = run({kHpctl, "diff", "--limit", "0", "--wide", builds_[0].profile, builds_[1].profile});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Modules paired where their paths differ:\n"), std::string::npos) << r.out;
  const auto path = [](const std::string& p) { return fs::canonical(p).string(); };
  EXPECT_NE(
      r.out.find("  " + path(builds_[0].program) + " = " + path(builds_[1].program) + " (the program)\n"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  " + path(builds_[0].library) + " = " + path(builds_[1].library) +
                       " (name without version)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("helper (part_a.c)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("helper (part_b.c)"), std::string::npos) << r.out;
}

// What hpd shows for a tail call (docs: README, "Tail calls"): part_a_step ends in a jump to helper
// (gcc -O2 says so in DWARF 5: a DW_TAG_call_site with DW_AT_call_tail_call), so no sample has
// part_a_step on its stack and helper's caller is main, the function that called part_a_step.
TEST_F(DiffMatchTest, ATailCalledFunctionShowsItsCallersCaller) {
  ASSERT_TRUE(have_tool("readelf"));
  RunResult dwarf = run({"readelf", "--debug-dump=info", builds_[0].program});
  ASSERT_EQ(dwarf.exit_code, 0) << dwarf.err;
  // part_a_step and part_b_step each make one tail call (main.c, whose calls return, makes none).
  size_t tail_calls = 0;
  for (size_t at = dwarf.out.find("DW_AT_call_tail_call"); at != std::string::npos;
       at = dwarf.out.find("DW_AT_call_tail_call", at + 1))
    ++tail_calls;
  ASSERT_EQ(tail_calls, 2u) << "the fixture no longer tail-calls as this test assumes";

  RunResult flat = run({kHpctl, "report", "--json", "--limit", "0", builds_[0].profile});
  ASSERT_EQ(flat.exit_code, 0) << flat.err;
  double helper_total = 0, step_total = 0;
  const json report = json::parse(flat.out);
  for (const json& f : report.at("functions")) {
    if (f.at("name") == "helper") helper_total += f.at("total_samples").get<double>();
    if (f.at("name") == "part_a_step" || f.at("name") == "part_b_step")
      step_total += f.at("total_samples").get<double>();
  }
  ASSERT_GT(helper_total, 200);
  // Only a sample on the jump instruction itself has part_a_step on the stack.
  EXPECT_LT(step_total, 0.02 * helper_total);
  RunResult tree = run({kHpctl, "report", "--json", "--callers", "helper", builds_[0].profile});
  ASSERT_EQ(tree.exit_code, 0) << tree.err;
  const json root = json::parse(tree.out).at("tree");
  double via_main = 0;
  for (const json& c : root.at("children")) {
    EXPECT_NE(c.at("name"), "part_a_step");
    EXPECT_NE(c.at("name"), "part_b_step");
    if (c.at("name") == "main") via_main += c.at("samples").get<double>();
  }
  EXPECT_GE(via_main, 0.95 * root.at("samples").get<double>()) << root.dump(1);
}

}  // namespace
}  // namespace hpd::test
