// Privileged integration test of JIT frames: code generated at run time is named from the process's
// /tmp/perf-PID.map in the report and in the Firefox export (a C fixture that writes its own map,
// and node --perf-basic prof when Debian's nodejs is installed, as install-deps.sh does).
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "firefox_lint.h"
#include "hpd/capture/capture.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixture = HPD_FIXTURE_DIR "/jit_perf_map";
const std::string kFixtureNoFramePointers = HPD_FIXTURE_DIR "/jit_perf_map_nofp";

class JitTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // The maps the recorded processes left in /tmp.
    for (const std::string& map : maps_) fs::remove(map);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // hot.js: 1.5 s of one recursive JavaScript function, hotFibonacci, that node compiles.
  std::string write_hot_script() const {
    const std::string script = path("hot.js");
    std::ofstream(script)
        << "function hotFibonacci(n) { return n < 2 ? n : hotFibonacci(n - 1) + hotFibonacci(n - 2); }\n"
           "const end = Date.now() + 1500;\n"
           "let total = 0;\n"
           "while (Date.now() < end) total += hotFibonacci(25);\n"
           "console.log(total);\n";
    return script;
  }

  // Records `command` with default flags (and `flags`); returns the Firefox profile, and the JSON report
  // in `report`.
  json record(const std::vector<std::string>& command, json& report, std::string* summary = nullptr,
              const std::vector<std::string>& flags = {}) {
    const std::string out = path("jit.json.gz");
    std::vector<std::string> argv{kHpctl, "--local", "record", "-o", out, "--no-report"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    RunResult r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (summary != nullptr) *summary = r.err;
    json profile = testing::load_json_maybe_gzip(out);
    for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;
    for (const auto& t : profile.at("threads")) {
      maps_.push_back("/tmp/perf-" + t.at("pid").get<std::string>() + ".map");
    }
    RunResult rep = run({kHpctl, "report", "--json", "--limit", "0", out});
    EXPECT_EQ(rep.exit_code, 0) << rep.err;
    report = json::parse(rep.out);
    return profile;
  }

  static const json* row_containing(const json& report, const std::string& part) {
    for (const auto& f : report.at("functions")) {
      if (f.at("name").get<std::string>().find(part) != std::string::npos) return &f;
    }
    return nullptr;
  }

  static bool export_has_function(const json& profile, const std::string& name) {
    const auto& strings = profile.at("shared").at("stringArray");
    for (const auto& n : profile.at("shared").at("funcTable").at("name")) {
      if (strings.at(n.get<size_t>()).get<std::string>().find(name) != std::string::npos) return true;
    }
    return false;
  }

  // Kept when the test fails: its recordings and logs are what to look at.
  hpd::testing::TempDir tmp_{"hpd-jit", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
  std::vector<std::string> maps_;
};

TEST_F(JitTest, GeneratedCodeIsNamedFromThePerfMap) {
  json report;
  std::string summary;
  const json profile = record({kFixture, "1.0"}, report, &summary);
  const json* jit = row_containing(report, "jit_hot_loop");
  ASSERT_NE(jit, nullptr) << report.dump(1);
  // The fixture spends its CPU time in the generated loop.
  EXPECT_GT(jit->at("self_percent").get<double>(), 80);
  EXPECT_EQ(jit->at("library"), "[jit]") << jit->dump();
  EXPECT_TRUE(export_has_function(profile, "jit_hot_loop"));
  EXPECT_NE(summary.find("JIT symbols of pid"), std::string::npos) << summary;
}

// Generated code that sets up no frame (the fixture's loop: no push of rbp) has its return address at
// the top of its stack; a frame-pointer step from it read its caller's frame instead, and the caller was
// lost: every sample showed main -> jit_hot_loop (run_generated missing), and built without frame
// pointers the walk failed there. Every way of walking the stack now finds the callers, frame for frame:
// the eBPF programs' cfi walk (the default), the frame-pointer chain with the leaf's caller put back
// (fp), the perf backend's stack copies unwound in user space (dwarf, its auto choice here).
TEST_F(JitTest, TheGeneratedCodesCallersAreInItsStacks) {
  struct Way {
    std::string fixture;
    std::vector<std::string> flags;
  };
  const Way ways[] = {
      {kFixture, {}},
      {kFixtureNoFramePointers, {}},
      {kFixture, {"--call-graph", "fp"}},
      {kFixture, {"--backend", "perf"}},
      {kFixtureNoFramePointers, {"--backend", "perf"}},
  };
  for (const Way& way : ways) {
    std::string flags;
    for (const std::string& f : way.flags) flags += " " + f;
    SCOPED_TRACE(fs::path(way.fixture).filename().string() + flags);
    json report;
    std::string summary;
    record({way.fixture, "0.5"}, report, &summary, way.flags);
    const std::string collapsed = path("jit.collapsed");
    RunResult c = run({kHpctl, "convert", "-q", "-o", collapsed, path("jit.json.gz")});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    // Samples in the generated code (its own, and the kernel's on top of it), and those whose stack
    // holds its two callers right below it.
    uint64_t in_loop = 0, with_callers = 0;
    std::ifstream lines(collapsed);
    std::string line;
    while (std::getline(lines, line)) {
      const size_t space = line.rfind(' ');
      ASSERT_NE(space, std::string::npos) << line;
      const std::string stack = line.substr(0, space);
      const uint64_t count = std::stoull(line.substr(space + 1));
      if (stack.find("jit_hot_loop") == std::string::npos) continue;
      in_loop += count;
      if (stack.find(";main;run_generated;jit_hot_loop") != std::string::npos) with_callers += count;
    }
    // The fixture spends nearly all its CPU time in the loop: 0.5 s at 999 Hz.
    ASSERT_GT(in_loop, 200u) << summary;
    EXPECT_GE(with_callers, in_loop * 95 / 100) << summary;
  }
}

// Issue #35: anonymous executable memory (perf's "//anon" in the mmap records the eBPF backend
// watches) was taken for a file by the CFI tables: "frame pointers for //anon: ... No such file".
// It has no file and no table: no note tries to open it (with the default backend, eBPF with cfi).
TEST_F(JitTest, AnonymousCodeIsNotOpenedAsAFile) {
  json report;
  std::string summary;
  record({kFixture, "0.5"}, report, &summary);
  ASSERT_NE(summary.find("call graph: cfi"), std::string::npos) << "not recorded with cfi\n" << summary;
  EXPECT_EQ(summary.find("//anon"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("anon: No such file"), std::string::npos) << summary;
  EXPECT_NE(row_containing(report, "jit_hot_loop"), nullptr) << report.dump(1);
}

// A capture (.hpr: what hpd writes, and what a recording not symbolized at its end keeps) holds the JIT
// symbols read when the recording ended: its summary said "JIT symbols of pid N: 1 of 1" while the
// capture held none, and its report showed the fixture's hot loop as [anon]+0xOFFSET. Also when the
// recording let go of its stacks (HPD_STACK_MEMORY_KB=1, at 4999 Hz: each flush's new stacks use more than
// the bound at times), when which addresses were sampled is no longer known and every symbol of the map
// is kept.
TEST_F(JitTest, ACaptureKeepsTheJitSymbolsItsSummaryNames) {
  for (const std::string stack_memory_kb : {"", "1"}) {
    SCOPED_TRACE("HPD_STACK_MEMORY_KB=" + stack_memory_kb);
    const std::string hpr = path("jit" + stack_memory_kb + ".hpr");
    std::vector<std::string> argv{"env"};
    if (!stack_memory_kb.empty()) argv.push_back("HPD_STACK_MEMORY_KB=" + stack_memory_kb);
    argv.insert(argv.end(),
                {kHpctl, "--local", "record", "-F", "4999", "-o", hpr, "--no-report", "--", kFixture, "1.0"});
    const RunResult r = run(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const size_t note = r.err.find("JIT symbols of pid ");
    ASSERT_NE(note, std::string::npos) << r.err;
    maps_.push_back("/tmp/perf-" + std::to_string(std::stoi(r.err.substr(note + 19))) + ".map");
    EXPECT_NE(r.err.find(": 1 of 1 from /tmp/perf-"), std::string::npos) << r.err;
    const CaptureContents capture = read_capture_file(hpr);
    if (stack_memory_kb.empty())
      EXPECT_EQ(capture.info.stack_generations, 0u);
    else
      EXPECT_GE(capture.info.stack_generations, 1u) << "the stacks were not let go";
    ASSERT_EQ(capture.profile.jit_symbols.size(), 1u);
    EXPECT_EQ(capture.profile.jit_symbols[0].name, "jit_hot_loop");
    const RunResult rep = run({kHpctl, "report", "--json", "--limit", "0", hpr});
    ASSERT_EQ(rep.exit_code, 0) << rep.err;
    const json report = json::parse(rep.out);
    const json* jit = row_containing(report, "jit_hot_loop");
    ASSERT_NE(jit, nullptr) << report.at("functions").at(0).dump();
    EXPECT_GT(jit->at("self_percent").get<double>(), 80);
    EXPECT_EQ(jit->at("library"), "[jit]") << jit->dump();
  }
}

TEST_F(JitTest, WithoutAMapTheCodeStaysUnnamed) {
  json report;
  record({kFixture, "0.5", "--no-map"}, report);
  EXPECT_EQ(row_containing(report, "jit_hot_loop"), nullptr);
  // The hot code is still there, as an anonymous address.
  const json& top = report.at("functions").at(0);
  EXPECT_GT(top.at("self_percent").get<double>(), 80) << top.dump();
}

// node --perf-prof writes jit-PID.dump in its directory and maps it; no perf map.
TEST_F(JitTest, NodeWithPerfProfNamesTheHotJavaScriptFunctionFromItsJitdump) {
  ASSERT_TRUE(have_tool("node")) << "nodejs is installed by packaging/install-deps.sh";
  write_hot_script();  // run by its name in dir_, where node writes the jitdump
  json report;
  std::string summary;
  const json profile =
      record({"/bin/sh", "-c", "cd " + dir_.string() + " && exec node --perf-prof hot.js"}, report, &summary);
  const json* hot = row_containing(report, "hotFibonacci");
  ASSERT_NE(hot, nullptr) << report.dump(1);
  EXPECT_GT(hot->at("total_percent").get<double>(), 50) << hot->dump();
  EXPECT_TRUE(export_has_function(profile, "hotFibonacci"));
  EXPECT_NE(summary.find(".dump"), std::string::npos) << summary;
}

TEST_F(JitTest, NodeWithPerfBasicProfNamesTheHotJavaScriptFunction) {
  ASSERT_TRUE(have_tool("node")) << "nodejs is installed by packaging/install-deps.sh";
  const std::string script = write_hot_script();
  json report;
  const json profile = record({"node", "--perf-basic-prof", script}, report);
  const json* hot = row_containing(report, "hotFibonacci");
  ASSERT_NE(hot, nullptr) << report.dump(1);
  EXPECT_GT(hot->at("total_percent").get<double>(), 50) << hot->dump();
  EXPECT_TRUE(export_has_function(profile, "hotFibonacci"));
}

}  // namespace
}  // namespace hpd::test
