// Privileged: `hpctl record` of a MIP-instrumented fixture joins its exact call counts into the
// report (text and JSON), the Firefox profile's MipCalls markers, and .hpr captures.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "firefox_lint.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kMipFixtures = HPD_MIP_FIXTURE_DIR;

// "leaf(int)" (C++ fixture, demangled) and "leaf" (C fixture) are both "leaf".
std::string base_name(const std::string& name) {
  return name.substr(0, name.find('('));
}

// In --linger mode: main, setup, mid, leaf, late in this order; wait_for_input and never_called never.
struct Expected {
  const char* name;
  uint64_t calls;
  uint64_t first;
};
constexpr Expected kCalled[] = {
    {"main", 1, 1}, {"setup", 1, 2}, {"mid", 16000, 3}, {"leaf", 32000, 4}, {"late", 1, 5}};
const std::set<std::string> kNeverCalled = {"never_called", "wait_for_input"};

class MipRecord : public ::testing::TestWithParam<const char*> {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Records the fixture (alive for 800 ms after its work, so flushes read its final counts).
  RunResult record(const std::string& output, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{kHpctl, "record", "--backend", "perf", "--no-report", "-o", output};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", kMipFixtures + "/" + GetParam(), "--linger", "800"});
    // The fixture's runtime dumps its profile at exit; keep that out of the working directory.
    return run(argv, 120, {"LLVM_MIP_PROFILE_FILENAME=/dev/null"});
  }

  json report_json(const std::string& file) {
    const RunResult r = run({kHpctl, "report", "--json", "--limit", "0", file});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  }

  // Kept when the test fails: its recordings and logs are what to look at.
  hpd::testing::TempDir tmp_{std::string("hpd-mip-it-") + GetParam(),
                             hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
};

// Checks the report's "mip" section against the fixture's known counts.
void check_mip_json(const json& report) {
  ASSERT_TRUE(report.contains("mip")) << report.dump(1);
  const json& mip = report.at("mip");
  EXPECT_EQ(mip.at("functions_called").get<size_t>(), std::size(kCalled));
  EXPECT_EQ(mip.at("functions_never_called").get<size_t>(), kNeverCalled.size());
  std::map<std::string, json> called;
  for (const json& f : mip.at("functions")) called[base_name(f.at("name").get<std::string>())] = f;
  for (const Expected& e : kCalled) {
    ASSERT_TRUE(called.count(e.name)) << e.name << " missing from " << mip.dump(1);
    const json& f = called[e.name];
    EXPECT_EQ(f.at("calls").get<uint64_t>(), e.calls) << e.name;
    EXPECT_EQ(f.at("first_call").get<uint64_t>(), e.first) << e.name;
    EXPECT_TRUE(f.at("counts_calls").get<bool>());
    EXPECT_NE(f.at("library").get<std::string>(), "");
  }
  // Functions come in first-call order.
  ASSERT_EQ(mip.at("functions").size(), std::size(kCalled));
  for (size_t i = 0; i < std::size(kCalled); ++i) {
    EXPECT_EQ(base_name(mip.at("functions")[i].at("name").get<std::string>()), kCalled[i].name);
  }
  EXPECT_EQ(called["leaf"].at("blocks_covered"), called["leaf"].at("blocks_total"));
  EXPECT_EQ(called["setup"].at("blocks_covered").get<uint32_t>() + 1,
            called["setup"].at("blocks_total").get<uint32_t>());
  std::set<std::string> never;
  for (const json& f : mip.at("never_called")) never.insert(base_name(f.at("name").get<std::string>()));
  EXPECT_EQ(never, kNeverCalled);
}

TEST_P(MipRecord, ExactCountsInReportAndFirefoxMarkers) {
  const std::string out = path("mip.json.gz");
  const RunResult r = record(out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("MIP: "), std::string::npos) << r.err;
  check_mip_json(report_json(out));

  const json profile = testing::load_json_maybe_gzip(out);
  for (const std::string& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;
  bool schema = false;
  for (const json& s : profile.at("meta").at("markerSchema")) schema = schema || s.at("name") == "MipCalls";
  EXPECT_TRUE(schema);
  const json& strings = profile.at("shared").at("stringArray");
  std::map<std::string, uint64_t> calls;
  for (const json& t : profile.at("threads")) {
    const json& data = t.at("markers").at("data");
    for (size_t i = 0; i < data.size(); ++i) {
      if (!data[i].is_object() || data[i].value("type", "") != "MipCalls") continue;
      EXPECT_TRUE(t.at("isMainThread").get<bool>());
      EXPECT_EQ(t.at("markers").at("phase")[i], 0);  // instant
      const std::string name = strings.at(data[i].at("function").get<size_t>()).get<std::string>();
      calls[base_name(name)] = data[i].at("calls").get<uint64_t>();
      EXPECT_NE(data[i].at("module").get<std::string>().find(GetParam()), std::string::npos);
    }
  }
  for (const Expected& e : kCalled) EXPECT_EQ(calls[e.name], e.calls) << e.name;
  for (const std::string& n : kNeverCalled) {
    ASSERT_TRUE(calls.count(n)) << n;
    EXPECT_EQ(calls[n], 0u) << n;
  }

  // The text report has the section, within 80 columns (code points: truncation adds a 3-byte "…")
  // on a terminal that wide (piped, names would never be cut).
  const RunResult text = run({kHpctl, "report", "--width", "80", out});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Calls (MIP): 5 of 7 functions called"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Never called: 2 functions: "), std::string::npos) << text.out;
  size_t start = 0;
  while (start < text.out.size()) {
    const size_t end = text.out.find('\n', start);
    const std::string line = text.out.substr(start, end - start);
    size_t columns = 0;
    for (const char c : line) columns += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    EXPECT_LE(columns, 80u) << line;
    start = end + 1;
  }
}

TEST_P(MipRecord, CaptureFileCarriesTheSnapshots) {
  const std::string out = path("mip.hpr");
  const RunResult r = record(out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  check_mip_json(report_json(out));
}

TEST_P(MipRecord, NoMipLeavesCountsOut) {
  const std::string out = path("nomip.json.gz");
  const RunResult r = record(out, {"--no-mip"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(report_json(out).contains("mip"));
}

INSTANTIATE_TEST_SUITE_P(Compilers, MipRecord, ::testing::Values("mip_calls_gcc", "mip_calls_clang"));

}  // namespace
}  // namespace hpd::test
