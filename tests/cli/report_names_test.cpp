// Privileged integration test: `hpctl report` and its views in 80 columns on a real recording of a
// C++ program whose functions have long template names (built here, -O2 -g). No line is wider than
// the terminal, two different functions never show the same text, trees keep one line per node,
// and --wide / --json keep the whole names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;

// Two instantiations of one member template, whose demangled names differ only deep inside their
// template arguments (double / float), each spending its share of CPU time.
constexpr const char* kFixture = R"(#include <ctime>
#include <map>
#include <string>
#include <vector>

template <typename Key, typename Value>
struct Ledger {
  template <typename Weight>
  __attribute__((noinline)) double settle(
      const std::map<Key, std::vector<Value>>& book, Weight w, int rounds) {
    double sum = 0;
    for (int r = 0; r < rounds; ++r)
      for (const auto& entry : book)
        for (const Value& x : entry.second)
          sum += double(x) * w + double(entry.first.size() + r);
    return sum;
  }
};

int main() {
  std::map<std::string, std::vector<double>> wide;
  std::map<std::string, std::vector<float>> narrow;
  for (int i = 0; i < 64; ++i) {
    wide[std::to_string(i)] = std::vector<double>(256, i);
    narrow[std::to_string(i)] = std::vector<float>(256, float(i));
  }
  Ledger<std::string, double> a;
  Ledger<std::string, float> b;
  volatile double sink = 0;
  // On CPU time, not wall time: the same work however busy the machine is.
  while (std::clock() < CLOCKS_PER_SEC) {
    sink = sink + a.settle(wide, 0.5f, 20);
    sink = sink + b.settle(narrow, 0.5f, 20);
  }
  return sink == 1 ? 1 : 0;
}
)";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The code points of a UTF-8 line, each as its bytes.
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) == 0x80 && !out.empty()) {
      out.back() += c;
    } else {
      out.emplace_back(1, c);
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& cps, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < to && i < cps.size(); ++i) s += cps[i];
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void expect_fits(const std::string& text, size_t width, const std::string& what) {
  for (const std::string& line : lines_of(text))
    EXPECT_LE(code_points(line).size(), width) << what << ": " << line;
}

class ReportNamesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new hpd::testing::TempDir("hpd-names");
    const fs::path dir = tmp_->path();
    std::ofstream(dir / "ledger.cpp") << kFixture;
    RunResult cc = run(
        {"g++", "-O2", "-g", "-std=c++17", (dir / "ledger.cpp").string(), "-o", (dir / "ledger").string()});
    ASSERT_EQ(cc.exit_code, 0) << cc.err;
    profile_ = (dir / "ledger.json.gz").string();
    RunResult r = run(
        {kHpctl, "--local", "record", "-o", profile_, "--no-report", "-q", "--", (dir / "ledger").string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }

  static RunResult hpctl(std::vector<std::string> args,
                         const std::vector<std::string>& env = {"COLUMNS=80"}) {
    args.insert(args.begin(), kHpctl);
    RunResult r = run(args, 120, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  }

  // The full names of the two settle<float> functions, from the JSON report.
  static std::vector<std::string> settle_names() {
    const json report = json::parse(hpctl({"report", "--json", "--limit", "0", profile_}).out);
    std::vector<std::string> names;
    for (const json& f : report.at("functions")) {
      const std::string name = f.at("name");
      if (name.find("::settle<float>") != std::string::npos && f.at("self_samples").get<uint64_t>() > 0)
        names.push_back(name);
    }
    return names;
  }

  static inline hpd::testing::TempDir* tmp_ = nullptr;
  static inline std::string profile_;
};

TEST_F(ReportNamesTest, TheFixturesNamesAreLongAndJsonKeepsThemWhole) {
  const std::vector<std::string> names = settle_names();
  ASSERT_EQ(names.size(), 2u);
  for (const std::string& n : names) {
    EXPECT_GT(n.size(), 200u) << n;
    EXPECT_EQ(n.find("…"), std::string::npos) << n;
  }
}

TEST_F(ReportNamesTest, ReportFitsEightyColumnsAndEveryFunctionIsDistinct) {
  const std::string text = hpctl({"report", "--limit", "0", profile_}).out;
  expect_fits(text, 80, "report");
  // The CPU view's function column: between the "Function" and "Library" headings.
  const std::vector<std::string> lines = lines_of(text);
  size_t header = 0;
  while (header < lines.size() && lines[header].find("Function") == std::string::npos) ++header;
  ASSERT_LT(header, lines.size()) << text;
  const std::vector<std::string> heading = code_points(lines[header]);
  const std::string heading_text = lines[header];
  size_t function_at = 0, library_at = 0;
  for (size_t i = 0; i + 7 <= heading.size(); ++i) {
    if (join(heading, i, i + 8) == "Function") function_at = i;
    if (join(heading, i, i + 7) == "Library") library_at = i;
  }
  ASSERT_GT(library_at, function_at) << heading_text;
  std::vector<std::string> cells;
  for (size_t i = header + 1; i < lines.size() && !lines[i].empty(); ++i)
    cells.push_back(join(code_points(lines[i]), function_at, library_at));
  const std::set<std::string> distinct(cells.begin(), cells.end());
  // Rows of the same name in two libraries would share a text rightly; this program has none.
  EXPECT_EQ(distinct.size(), cells.size()) << text;
  size_t settles = 0;
  for (const std::string& c : cells) settles += c.find("settle") != std::string::npos;
  EXPECT_EQ(settles, 2u) << text;
}

TEST_F(ReportNamesTest, TreesKeepOneLinePerNodeInEightyColumns) {
  const std::vector<std::string> names = settle_names();
  ASSERT_FALSE(names.empty());
  for (const char* direction : {"--callers", "--callees"}) {
    // Every line fits 80 columns down to a depth of 8 (deeper, names keep 16 columns, kernel paths
    // under an interrupt can go deeper).
    expect_fits(hpctl({"report", "--limit", "8", direction, names[0], profile_}).out, 80, direction);
    const std::string text = hpctl({"report", direction, names[0], profile_}).out;
    // One line per node printed (0.5% of the root or more: kCallTreeMinPercent), as many as the JSON
    // tree has.
    const json tree = json::parse(hpctl({"report", "--json", direction, names[0], profile_}).out);
    size_t nodes = 0;
    std::vector<const json*> todo{&tree.at("tree")};
    while (!todo.empty()) {
      const json* n = todo.back();
      todo.pop_back();
      ++nodes;
      for (const json& c : n->at("children"))
        if (c.at("percent_of_root").get<double>() >= 0.5) todo.push_back(&c);
    }
    const std::vector<std::string> lines = lines_of(text);
    size_t printed = 0;
    bool in_tree = false;
    for (const std::string& l : lines) {
      if (l.find("Of fn") != std::string::npos) {
        in_tree = true;
      } else if (in_tree && l.find('%') != std::string::npos &&
                 l.find("branches not shown") == std::string::npos) {
        ++printed;
      }
    }
    EXPECT_EQ(printed, nodes) << text;
  }
}

TEST_F(ReportNamesTest, AnnotateAndDiffFitEightyColumns) {
  const std::vector<std::string> names = settle_names();
  ASSERT_FALSE(names.empty());
  const std::string annotate = hpctl({"annotate", names[0], profile_}).out;
  ASSERT_FALSE(annotate.empty());
  EXPECT_LE(code_points(lines_of(annotate).front()).size(), 80u) << annotate;
  EXPECT_NE(annotate.find("settle"), std::string::npos) << annotate;
  const std::string diff = hpctl({"diff", "--limit", "0", profile_, profile_}).out;
  expect_fits(diff, 80, "diff");
  // Its rows' names (after 61 columns of numbers) are all different.
  std::vector<std::string> cells;
  for (const std::string& line : lines_of(diff)) {
    const std::vector<std::string> cps = code_points(line);
    if (cps.size() > 61 && line.find('+') != std::string::npos && line.find("hpd diff") == std::string::npos)
      cells.push_back(join(cps, 61, cps.size()));
  }
  EXPECT_GT(cells.size(), 10u) << diff;
  EXPECT_EQ(std::set<std::string>(cells.begin(), cells.end()).size(), cells.size()) << diff;
}

TEST_F(ReportNamesTest, WidePrintsWholeNames) {
  const std::vector<std::string> names = settle_names();
  ASSERT_EQ(names.size(), 2u);
  const std::string text = hpctl({"report", "--wide", profile_}).out;
  for (const std::string& n : names) EXPECT_NE(text.find(n), std::string::npos) << n;
}

}  // namespace
}  // namespace hpd::test
