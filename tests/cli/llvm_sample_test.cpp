// `hpctl convert --format llvm-sample|symbol-order` end to end, with the real tools: fixtures built
// by clang, recorded by `hpctl --local record` at the default rate; the profile read by
// llvm-profdata and by clang -fprofile-sample-use; the order file given to lld. The numbers are
// held against the recording's own report and against lines the fixture marks in its source.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"
#include "temp_dir.h"

using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kHpd = HPD_HPD_PATH;
const std::string kSource = HPD_PGO_INTERP_SOURCE;
const std::string kClang = "clang++-14";
const std::string kProfdata = "/usr/bin/llvm-profdata";
// The flags of the benchmark's builds: line tables with discriminators.
const std::vector<std::string> kFlags = {"-O2", "-gline-tables-only", "-fdebug-info-for-profiling"};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The line of the source that holds `marker`.
uint32_t line_of(const std::string& marker) {
  std::ifstream in(kSource);
  std::string line;
  for (uint32_t n = 1; std::getline(in, line); ++n) {
    if (line.find(marker) != std::string::npos) return n;
  }
  ADD_FAILURE() << marker << " not in " << kSource;
  return 0;
}

RunResult build(const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{kClang};
  argv.insert(argv.end(), kFlags.begin(), kFlags.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {kSource, "-o", out});
  return run(argv, 300);
}

// A function's block in a text profile: its header "name:total:head" and its indented lines.
struct TextFunction {
  uint64_t total = 0, head = 0;
  std::vector<std::string> lines;
};
std::map<std::string, TextFunction> parse_profile(const std::string& text) {
  std::map<std::string, TextFunction> out;
  std::istringstream in(text);
  std::string line;
  TextFunction* current = nullptr;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != ' ') {
      const size_t c2 = line.rfind(':'), c1 = line.rfind(':', c2 - 1);
      current = &out[line.substr(0, c1)];
      current->total = std::stoull(line.substr(c1 + 1, c2 - c1 - 1));
      current->head = std::stoull(line.substr(c2 + 1));
    } else if (current != nullptr) {
      current->lines.push_back(line);
    }
  }
  return out;
}

// Samples of the body line " offset[.d]: N" at `indent` spaces, summed over discriminators.
uint64_t body_at(const TextFunction& f, int indent, uint32_t offset) {
  uint64_t sum = 0;
  const std::string pad(static_cast<size_t>(indent), ' ');
  for (const std::string& l : f.lines) {
    if (l.compare(0, pad.size(), pad) != 0 || l[pad.size()] == ' ') continue;
    const std::string rest = l.substr(pad.size());
    const size_t colon = rest.find(':');
    const std::string key = rest.substr(0, colon);
    const std::string value = rest.substr(colon + 2);
    if (std::stoul(key.substr(0, key.find('.'))) != offset) continue;
    if (value.find(':') != std::string::npos) continue;  // an inlined call site
    sum += std::stoull(value);
  }
  return sum;
}

uint64_t report_self(const json& report, const std::string& name) {
  for (const auto& f : report.at("functions")) {
    if (f.at("name") == name) return f.at("self_samples").get<uint64_t>();
  }
  return 0;
}

class LlvmSample : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_tool(kClang) || !have_tool(kProfdata)) GTEST_SKIP() << "needs clang++-14 and llvm-profdata";
    tmp_.emplace("hpd-llvm-sample", hpd::testing::TempDir::Cleanup::kKeepOnFailure);
    const RunResult b = build(binary());
    ASSERT_EQ(b.exit_code, 0) << b.err;
    // The fixed lines: 1.5 s of CPU time in two functions. The interpreter: its default input.
    RunResult r = run({kHpctl, "--local", "record", "-o", tmp_->file("lines.hpr"), "--no-report", "-q", "--",
                       binary(), "--lines", "1500"},
                      300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run({kHpctl, "--local", "record", "-o", tmp_->file("interp.hpr"), "--no-report", "-q", "--", binary(),
             "400"},
            300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { tmp_.reset(); }
  static std::string binary() { return tmp_->file("interp"); }
  static std::string file(const std::string& name) { return tmp_->file(name); }

  static std::string convert(const std::string& capture, const std::string& format,
                             std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{kHpctl, "convert", file(capture), "-o", "-", "--format", format, "-q"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const RunResult r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  static inline std::optional<hpd::testing::TempDir> tmp_;
};

TEST_F(LlvmSample, TotalsAreTheReportsSamplesAndTheHotLinesHoldThem) {
  const auto profile = parse_profile(convert("lines.hpr", "llvm-sample"));
  const RunResult rep = run({kHpctl, "report", "--json", "--limit", "0", file("lines.hpr")});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json report = json::parse(rep.out);

  // burn_loop inlines nothing: its total is the report's self samples, exactly.
  ASSERT_TRUE(profile.count("_ZN3pgo9burn_loopEmm")) << "linkage names expected";
  const TextFunction& burn = profile.at("_ZN3pgo9burn_loopEmm");
  EXPECT_EQ(burn.total, report_self(report, "pgo::burn_loop(unsigned long, unsigned long)"));
  EXPECT_GT(burn.total, 500u);  // 0.75 s of CPU at 999 Hz
  // Its samples are on its loop's line, keyed by the offset from its declaration line.
  const uint32_t burn_offset = line_of("HOT LINE burn_loop") - line_of("uint64_t burn_loop(");
  EXPECT_GE(body_at(burn, 1, burn_offset), burn.total * 95 / 100);

  // calls_mix: its own samples and those of mix_inlined, inlined into it at the marked call.
  const TextFunction& calls = profile.at("_ZN3pgo9calls_mixEmm");
  EXPECT_EQ(calls.total, report_self(report, "pgo::calls_mix(unsigned long, unsigned long)") +
                             report_self(report, "pgo::mix_inlined(unsigned long, unsigned long)"));
  const uint32_t call_offset = line_of("CALL LINE calls_mix") - line_of("uint64_t calls_mix(");
  const std::string site = " " + std::to_string(call_offset) + ": _ZN3pgoL11mix_inlinedEmm:";
  const auto it = std::find_if(calls.lines.begin(), calls.lines.end(),
                               [&](const std::string& l) { return l.starts_with(site); });
  ASSERT_NE(it, calls.lines.end()) << "no inlined call site '" << site << "'";
  const uint64_t inlined_total = std::stoull(it->substr(site.size()));
  EXPECT_EQ(inlined_total, report_self(report, "pgo::mix_inlined(unsigned long, unsigned long)"));
  // Inside it, the callee's loop line (offset from mix_inlined's declaration), at two spaces.
  const uint32_t mix_offset = line_of("HOT LINE mix_inlined") - line_of("uint64_t mix_inlined(");
  EXPECT_GE(body_at(calls, 2, mix_offset), inlined_total * 95 / 100);
}

// hpd's continuous profile is input too: a time window of its chunks, exported for one program
// (`hpctl export --comm`), gives that program's profile, which llvm-profdata reads and whose totals are
// the window's own samples of the program.
TEST_F(LlvmSample, ContinuousExportWindowGivesTheProgramsProfile) {
  namespace fs = std::filesystem;
  const std::string state = file("continuous");
  fs::create_directories(state);
  const std::string conf = file("hpd.conf");
  std::ofstream(conf) << "continuous = on\ncontinuous_chunk_seconds = 1\ncontinuous_frequency = 499\n"
                      << "state_directory = " << state << "\n";
  const auto chunks = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(state))
      n += e.path().filename().string().starts_with("chunk-");
    return n;
  };
  Background hpd({kHpd, "--config", conf, "--socket", file("hpd.sock")});
  // Sampling has begun once the first chunk is on disk.
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
       chunks() == 0 && std::chrono::steady_clock::now() < deadline;)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GT(chunks(), 0u) << "hpd's continuous mode wrote no chunk";
  // The program under a name of its own: the other tests of this suite, which ctest may run beside
  // this one, run `interp` (the same build-id from another directory), and the system-wide profile
  // has them too.
  const std::string own = file("interp-export");
  fs::copy_file(binary(), own, fs::copy_options::overwrite_existing);
  const RunResult work = run({own, "--lines", "600"}, 300);  // 0.6 s of CPU time
  ASSERT_EQ(work.exit_code, 0) << work.err;
  // SIGTERM ends the chunk in progress.
  ASSERT_EQ(::kill(hpd.pid(), SIGTERM), 0);
  ASSERT_EQ(hpd.wait(), 0);

  const std::string window = file("window.json.gz");
  RunResult r = run({kHpctl, "export", "--dir", state, "--comm", "interp-export", "-o", window, "-q"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string prof = file("window.prof");
  const RunResult converted =
      run({kHpctl, "convert", window, "-o", prof, "--format", "llvm-sample", "--binary", own}, 300);
  ASSERT_EQ(converted.exit_code, 0) << converted.err;
  r = run({kProfdata, "show", "--sample", prof});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  const RunResult rep = run({kHpctl, "report", "--json", "--limit", "0", window});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json report = json::parse(rep.out);
  uint64_t in_program = 0;
  for (const auto& f : report.at("functions"))
    if (f.at("library") == "interp-export") in_program += f.at("self_samples").get<uint64_t>();
  uint64_t in_profile = 0;
  const auto profile = parse_profile(read_file(prof));
  for (const auto& [name, f] : profile) in_profile += f.total;
  // A sample with no source line (in a PLT stub: clock_gettime@plt, seen once beside four CPU hogs)
  // has no place in the profile; hpctl says how many it left out, and the rest are all there.
  // ("hpctl: llvm-sample of BINARY: N functions, S samples (U without a source line)")
  const std::string& said = converted.err;
  const size_t samples_at = said.find(" samples");
  ASSERT_NE(samples_at, std::string::npos) << said;
  const size_t number_at = said.rfind(' ', samples_at - 1) + 1;
  EXPECT_EQ(std::stoull(said.substr(number_at, samples_at - number_at)), in_program) << said;
  uint64_t unlocated = 0;
  if (const size_t u = said.find(" without a source line"); u != std::string::npos) {
    const size_t open = said.rfind('(', u);
    unlocated = std::stoull(said.substr(open + 1, u - open - 1));
  }
  EXPECT_EQ(in_profile + unlocated, in_program) << said;
  // The two functions of --lines hold nearly all of it (0.6 s at 499 Hz: about 300 samples).
  ASSERT_TRUE(profile.count("_ZN3pgo9burn_loopEmm")) << read_file(prof);
  EXPECT_EQ(profile.at("_ZN3pgo9burn_loopEmm").total,
            report_self(report, "pgo::burn_loop(unsigned long, unsigned long)"));
  EXPECT_GT(in_profile, 150u);
}

TEST_F(LlvmSample, LlvmProfdataAndClangReadTheProfileWithoutComplaint) {
  const std::string prof = file("app.prof");
  RunResult r = run(
      {kHpctl, "convert", file("interp.hpr"), "-o", prof, "--format", "llvm-sample", "--binary", binary()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run({kProfdata, "show", "--sample", "--all-functions", prof});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The interpreter's step is the hottest function, under its linkage name.
  EXPECT_NE(r.out.find("Function: _ZN3pgo4stepERKNS_4InsnEPlRiS3_: "), std::string::npos) << r.out;
  // Its figures are the file's: every function's total and head samples, as llvm-profdata read them.
  const auto parsed = parse_profile(read_file(prof));
  size_t functions = 0;
  std::istringstream shown(r.out);
  for (std::string l; std::getline(shown, l);) {
    if (!l.starts_with("Function: ")) continue;
    const size_t name_end = l.find(": ", 10);
    const std::string name = l.substr(10, name_end - 10);
    ASSERT_TRUE(parsed.count(name)) << l;
    EXPECT_EQ(l.substr(name_end + 2, l.find(" sampled lines") - name_end - 2)
                  .substr(0, l.find(',', name_end) - name_end - 2),
              std::to_string(parsed.at(name).total))
        << l;
    ++functions;
  }
  EXPECT_EQ(functions, parsed.size());
  EXPECT_GE(parsed.size(), 4u);

  // clang reads it for the same source and flags, and says nothing about it.
  r = build(file("interp_spgo"),
            {"-fprofile-sample-use=" + prof, "-Wall", "-Wextra", "-Wprofile-instr-out-of-date",
             "-Wprofile-instr-unprofiled", "-Wbackend-plugin", "-Werror=backend-plugin"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("profile"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  // The rebuilt benchmark does the same work.
  const RunResult plain = run({binary(), "40"});
  const RunResult rebuilt = run({file("interp_spgo"), "40"});
  EXPECT_EQ(plain.out, rebuilt.out);
}

// The extensible binary form (chosen by the .extbinary suffix): llvm-profdata shows it exactly as
// the text form of the same recording, and clang builds with it without a word.
TEST_F(LlvmSample, TheBinaryFormReadsAsTheTextFormAndClangTakesIt) {
  const std::string text = file("same.prof"), binary_form = file("same.extbinary");
  RunResult r = run({kHpctl, "convert", file("interp.hpr"), "-o", text, "--format", "llvm-sample", "--binary",
                     binary(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run({kHpctl, "convert", file("interp.hpr"), "-o", binary_form, "--binary", binary()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("llvm-sample-binary of"), std::string::npos) << r.err;
  const RunResult shown_text = run({kProfdata, "show", "--sample", "--all-functions", text});
  const RunResult shown_binary = run({kProfdata, "show", "--sample", "--all-functions", binary_form});
  ASSERT_EQ(shown_text.exit_code, 0) << shown_text.err;
  ASSERT_EQ(shown_binary.exit_code, 0) << shown_binary.err;
  EXPECT_NE(shown_text.out.find("Function: _ZN3pgo4stepERKNS_4InsnEPlRiS3_: "), std::string::npos);
  EXPECT_EQ(shown_binary.out, shown_text.out);
  // The summary (clang's hot and cold thresholds) too.
  const RunResult detail_text = run({kProfdata, "show", "--sample", "--detailed-summary", text});
  const RunResult detail_binary = run({kProfdata, "show", "--sample", "--detailed-summary", binary_form});
  EXPECT_EQ(detail_binary.out, detail_text.out);
  EXPECT_NE(detail_binary.out.find("Total count: "), std::string::npos) << detail_binary.out;

  r = build(file("interp_extbinary"),
            {"-fprofile-sample-use=" + binary_form, "-Wall", "-Wextra", "-Wprofile-instr-out-of-date",
             "-Wprofile-instr-unprofiled", "-Wbackend-plugin", "-Werror=backend-plugin"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("profile"), std::string::npos) << r.err;
  EXPECT_EQ(run({file("interp_extbinary"), "40"}).out, run({binary(), "40"}).out);

  // Not to a terminal.
  r = run({kHpctl, "convert", file("interp.hpr"), "-o", "-", "--format", "llvm-sample-binary"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs an output file"), std::string::npos) << r.err;
}

TEST_F(LlvmSample, AnotherOrARebuiltBinaryOrOneWithoutDebugInfoIsRefused) {
  // Another program: no samples of its build-id in the recording.
  RunResult r = run({kHpctl, "convert", file("lines.hpr"), "-o", file("x.prof"), "--format", "llvm-sample",
                     "--binary", "/bin/true"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no samples of '/bin/true'"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(file("x.prof")).good());

  // The recorded binary rebuilt in place (another build-id): a stale profile is refused.
  const std::string copy = file("rebuilt_dir");
  ASSERT_EQ(run({"mkdir", "-p", copy}).exit_code, 0);
  ASSERT_EQ(build(copy + "/interp").exit_code, 0);
  r = run({kHpctl, "--local", "record", "-o", file("copy.hpr"), "--no-report", "-q", "--", copy + "/interp",
           "40"},
          300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(build(copy + "/interp", {"-DPGO_REBUILT=1", "-fno-inline-functions"}).exit_code, 0);
  r = run({kHpctl, "convert", file("copy.hpr"), "-o", file("x.prof"), "--format", "llvm-sample"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rebuilt since the recording"), std::string::npos) << r.err;

  // A binary without debug information: said, nothing written.
  ASSERT_EQ(run({kClang, "-O2", kSource, "-o", copy + "/nodebug"}, 300).exit_code, 0);
  r = run({kHpctl, "--local", "record", "-o", file("nodebug.hpr"), "--no-report", "-q", "--",
           copy + "/nodebug", "40"},
          300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run({kHpctl, "convert", file("nodebug.hpr"), "-o", file("x.prof"), "--format", "llvm-sample"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("has no debug information"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(file("x.prof")).good());
}

// `hpctl pgo-check`: the profile's build-id against real binaries: the one profiled, the program
// rebuilt (its lines in place, or a function's start moved by lines added above it), another
// program, one linked without a build-id; exit status and the moved functions named.
TEST_F(LlvmSample, PgoCheckTellsMatchStaleAnotherBinaryAndNoBuildId) {
  const std::string prof = file("check.prof");
  RunResult r = run({kHpctl, "convert", file("interp.hpr"), "-o", prof, "--format", "llvm-sample", "--binary",
                     binary(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto check = [&](const std::string& profile, const std::string& bin) {
    return run({kHpctl, "pgo-check", profile, "--binary", bin});
  };
  r = check(prof, binary());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(r.out.starts_with("match: ")) << r.out;

  // The profile's declaration lines, as its comments carry them.
  const std::string text = read_file(prof);
  std::map<std::string, uint32_t> decl;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.starts_with("# decl-line ")) continue;
    std::istringstream f(l.substr(12));
    std::string name;
    uint32_t line = 0;
    f >> name >> line;
    decl[name] = line;
  }
  const std::string step = "_ZN3pgo4stepERKNS_4InsnEPlRiS3_";
  const uint32_t step_line = line_of("bool step(const Insn& in");
  ASSERT_EQ(decl[step], step_line) << text;

  // Rebuilt with other flags: stale, every function where it was.
  const std::string dir = file("check_dir");
  ASSERT_EQ(run({"mkdir", "-p", dir}).exit_code, 0);
  ASSERT_EQ(build(dir + "/o1", {"-O1"}).exit_code, 0);
  r = check(prof, dir + "/o1");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_TRUE(r.out.starts_with("stale: ")) << r.out;
  EXPECT_EQ(r.out.find("start on another line"), std::string::npos) << r.out;

  // Rebuilt from a source with three lines added above step(): stale, and exactly the profile's
  // functions of this source declared from step() on are named, each three lines further.
  {
    std::ifstream src(kSource);
    std::ofstream moved(dir + "/moved.cpp");
    std::string line;
    for (uint32_t n = 1; std::getline(src, line); ++n) {
      if (n == step_line) moved << "\n\n\n";
      moved << line << '\n';
    }
  }
  std::vector<std::string> argv{kClang};
  argv.insert(argv.end(), kFlags.begin(), kFlags.end());
  argv.insert(argv.end(), {dir + "/moved.cpp", "-o", dir + "/moved"});
  ASSERT_EQ(run(argv, 300).exit_code, 0);
  r = check(prof, dir + "/moved");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_TRUE(r.out.starts_with("stale: ")) << r.out;
  size_t expected_moved = 0;
  for (const auto& [name, line] : decl) {
    const std::string said = "  " + name + ": line " + std::to_string(line) + " in the profile, " +
                             std::to_string(line + 3) + " in the binary\n";
    // The fixture's own functions (pgo:: and main); those of headers (std::vector's) stay put.
    const bool own = name.starts_with("_ZN3pgo") || name == "main";
    if (own && line >= step_line) {
      ++expected_moved;
      EXPECT_NE(r.out.find(said), std::string::npos) << said << r.out;
    } else {
      EXPECT_EQ(r.out.find("  " + name + ": "), std::string::npos) << r.out;
    }
  }
  ASSERT_GE(expected_moved, 2u);  // step() and run()/run_traced() at least
  EXPECT_NE(r.out.find(std::to_string(expected_moved) + " functions start on another line"),
            std::string::npos)
      << r.out;

  // Another program with debug information, and one without: another binary.
  {
    std::ofstream(dir + "/other.c")
        << "int helper(int x) { return x * 3; }\nint main(void) { return helper(0); }\n";
  }
  ASSERT_EQ(run({"clang-14", "-g", dir + "/other.c", "-o", dir + "/other"}, 300).exit_code, 0);
  for (const std::string& other : {dir + "/other", std::string("/bin/true")}) {
    r = check(prof, other);
    EXPECT_EQ(r.exit_code, 4) << other << r.out << r.err;
    EXPECT_TRUE(r.out.starts_with("another binary: ")) << r.out;
  }

  // No build-id: in the binary, or in the profile (its first line gone).
  ASSERT_EQ(build(dir + "/noid", {"-Wl,--build-id=none"}).exit_code, 0);
  r = check(prof, dir + "/noid");
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_NE(r.out.find("has none (link it with -Wl,--build-id)"), std::string::npos) << r.out;
  { std::ofstream(dir + "/headless.prof") << text.substr(text.find('\n') + 1); }
  r = check(dir + "/headless.prof", binary());
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_TRUE(r.out.starts_with("no build-id: the profile carries none")) << r.out;

  // -q: the status only. Not a profile: an error, status 1.
  r = run({kHpctl, "pgo-check", "-q", prof, "--binary", dir + "/o1"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "");
  { std::ofstream(dir + "/garbage.prof") << "hello\n"; }
  r = check(dir + "/garbage.prof", binary());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not an LLVM text sample profile"), std::string::npos) << r.err;
}

// The symbol order of a recording with exact call counts (--calls) follows the counts: each
// function right after its most frequent caller, also where the samples alone would part them (a
// caller too cheap to be sampled, a callee never sampled). The fixture knows its calls: dispatch
// calls often 200000 times and rarely 10 times, other calls rarely 50 times; spin and rarely burn
// the CPU.
TEST_F(LlvmSample, SymbolOrderFollowsExactCallCountsOfACallsRecording) {
  const std::string dir = file("calls_dir");
  ASSERT_EQ(run({"mkdir", "-p", dir}).exit_code, 0);
  {
    std::ofstream(dir + "/calls.c") << R"(#include <stdint.h>
#include <time.h>
static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
volatile uint64_t sink;
__attribute__((noinline)) void burn(double ms) {
  const double end = cpu_ms() + ms;
  uint64_t x = 1;
  while (cpu_ms() < end)
    for (int i = 0; i < 1000; ++i) x = x * 6364136223846793005u + 1442695040888963407u;
  sink = x;
}
__attribute__((noinline)) void spin(void) { burn(400); }
__attribute__((noinline)) uint64_t often(uint64_t x) { return x * 3 + 1; }
__attribute__((noinline)) void rarely(void) { burn(4); }
__attribute__((noinline)) void dispatch(void) {
  uint64_t x = 0;
  for (int i = 0; i < 200000; ++i) x = often(x);
  sink = x;
  for (int i = 0; i < 10; ++i) rarely();
}
__attribute__((noinline)) void other(void) {
  for (int i = 0; i < 50; ++i) rarely();
}
int main(void) {
  spin();
  dispatch();
  other();
  return 0;
}
)";
  }
  // Instrumented entries (-pg -mfentry), linked without -pg: what --calls counts.
  ASSERT_EQ(run({"clang-14", "-O1", "-g", "-fdebug-info-for-profiling", "-pg", "-mfentry", "-c",
                 dir + "/calls.c", "-o", dir + "/calls.o"},
                300)
                .exit_code,
            0);
  ASSERT_EQ(run({"clang-14", dir + "/calls.o", "-o", dir + "/calls"}, 300).exit_code, 0);
  RunResult r = run({kHpctl, "--local", "record", "--calls", "--calls-counter", "uprobes", "-o",
                     dir + "/calls.hpr", "--no-report", "-q", "--", dir + "/calls"},
                    300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run({kHpctl, "convert", dir + "/calls.hpr", "-o", "-", "--format", "symbol-order"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("exact call edges"), std::string::npos) << r.err;
  std::vector<std::string> order;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) order.push_back(l);
  const auto at = [&](const std::string& name) {
    return static_cast<size_t>(std::find(order.begin(), order.end(), name) - order.begin());
  };
  for (const char* f : {"main", "spin", "dispatch", "often", "other", "rarely"})
    ASSERT_LT(at(f), order.size()) << f << " missing from\n" << r.out;
  EXPECT_EQ(at("often"), at("dispatch") + 1) << r.out;
  EXPECT_EQ(at("rarely"), at("other") + 1) << r.out;  // 50 calls from other beat 10 from dispatch

  // The same program recorded without --calls: by samples alone, other (never sampled) does not
  // precede rarely, so the test can tell.
  r = run({kHpctl, "--local", "record", "-o", dir + "/plain.hpr", "--no-report", "-q", "--", dir + "/calls"},
          300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run({kHpctl, "convert", dir + "/plain.hpr", "-o", "-", "--format", "symbol-order", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string plain = r.out;
  EXPECT_EQ(plain.find("other\nrarely\n"), std::string::npos) << plain;
}

TEST_F(LlvmSample, SymbolOrderPutsTheHotFunctionsFirstInLldsLayout) {
  if (!have_tool("ld.lld-14") && !have_tool("ld.lld")) GTEST_SKIP() << "needs lld (Debian package lld-14)";
  const std::string order_text = convert("interp.hpr", "symbol-order");
  std::vector<std::string> hot;
  std::istringstream in(order_text);
  for (std::string l; std::getline(in, l);) hot.push_back(l);
  ASSERT_GE(hot.size(), 3u) << order_text;
  EXPECT_EQ(hot.front(), "_ZN3pgo4stepERKNS_4InsnEPlRiS3_") << order_text;
  { std::ofstream(file("order.txt")) << order_text; }
  const RunResult r = build(file("interp_ordered"), {"-ffunction-sections", "-fuse-ld=lld",
                                                     "-Wl,--symbol-ordering-file=" + file("order.txt"),
                                                     "-Wl,--no-warn-symbol-ordering"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // nm -n: the hot functions are next to each other in the file's order, no other function between.
  const RunResult nm = run({"nm", "-n", "--defined-only", file("interp_ordered")});
  ASSERT_EQ(nm.exit_code, 0);
  std::vector<std::string> text_symbols;
  std::istringstream lines(nm.out);
  for (std::string l; std::getline(lines, l);) {
    std::istringstream f(l);
    std::string address, type, name;
    f >> address >> type >> name;
    if (type == "T" || type == "t" || type == "W" || type == "w") text_symbols.push_back(name);
  }
  const auto first = std::find(text_symbols.begin(), text_symbols.end(), hot.front());
  ASSERT_NE(first, text_symbols.end()) << nm.out;
  ASSERT_GE(static_cast<size_t>(text_symbols.end() - first), hot.size());
  for (size_t i = 0; i < hot.size(); ++i)
    EXPECT_EQ(first[static_cast<ptrdiff_t>(i)], hot[i]) << "position " << i << "\n" << nm.out;
  // Without the order file the same functions lie apart (the test can tell).
  const RunResult plain = build(file("interp_unordered"), {"-ffunction-sections", "-fuse-ld=lld"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const RunResult nm_plain = run({"nm", "-n", "--defined-only", file("interp_unordered")});
  std::vector<std::string> plain_symbols;
  std::istringstream plain_lines(nm_plain.out);
  for (std::string l; std::getline(plain_lines, l);) {
    std::istringstream f(l);
    std::string address, type, name;
    f >> address >> type >> name;
    if (type == "T" || type == "t" || type == "W" || type == "w") plain_symbols.push_back(name);
  }
  const auto plain_first = std::find(plain_symbols.begin(), plain_symbols.end(), hot.front());
  bool same = static_cast<size_t>(plain_symbols.end() - plain_first) >= hot.size();
  for (size_t i = 0; same && i < hot.size(); ++i) same = plain_first[static_cast<ptrdiff_t>(i)] == hot[i];
  EXPECT_FALSE(same) << "the default layout already has this order: the test would prove nothing";
  EXPECT_EQ(run({file("interp_ordered"), "40"}).out, run({binary(), "40"}).out);
}

}  // namespace
}  // namespace hpd::test
