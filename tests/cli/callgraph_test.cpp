// Privileged integration tests of --call-graph: hpctl records fixtures built without frame pointers,
// a Rust -Zannotate-moves program, and xz, through the real kernel; the written profiles' stacks are
// checked (and compared with `perf record --call-graph dwarf` on the same fixture).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "firefox_lint.h"
#include "perf_script.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "word_text.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kUnwindFixtures = HPD_UNWIND_FIXTURE_DIR;

struct Frame {
  std::string func;
  std::string lib;
};

struct SampleStack {
  std::vector<Frame> frames;  // leaf first, one per inline level (innermost first)
  int stack_end = 0;          // StackEnd: 1 complete, 2 truncated, 3 failed
};

// Every sample of every thread of a Firefox profile written by hpctl.
std::vector<SampleStack> sample_stacks(const json& profile) {
  const auto& shared = profile.at("shared");
  const auto& strings = shared.at("stringArray");
  const auto& stack_frame = shared.at("stackTable").at("frame");
  const auto& prefix_offset = shared.at("stackTable").at("prefixOffset");
  const auto& frame_func = shared.at("frameTable").at("func");
  const auto& func_name = shared.at("funcTable").at("name");
  const auto& func_resource = shared.at("funcTable").at("resource");
  const auto& resource_lib = shared.at("resourceTable").at("lib");
  const auto& libs = profile.at("libs");
  std::vector<SampleStack> out;
  for (const auto& t : profile.at("threads")) {
    const auto& samples = t.at("samples");
    const auto& stacks = samples.at("stack");
    const json* ends = samples.contains("hpdStackEnd") ? &samples.at("hpdStackEnd") : nullptr;
    for (size_t k = 0; k < stacks.size(); ++k) {
      SampleStack s;
      if (ends != nullptr) s.stack_end = (*ends)[k].get<int>();
      if (!stacks[k].is_null()) {
        for (int64_t i = stacks[k].get<int64_t>();;) {
          const auto f = frame_func[stack_frame[i].get<size_t>()].get<size_t>();
          Frame frame;
          frame.func = strings[func_name[f].get<size_t>()].get<std::string>();
          const auto& resource = func_resource[f];
          if (resource.is_number_integer() && resource.get<int64_t>() >= 0) {
            const auto& lib = resource_lib[resource.get<size_t>()];
            if (lib.is_number_integer()) frame.lib = libs[lib.get<size_t>()].at("name").get<std::string>();
          }
          s.frames.push_back(std::move(frame));
          const auto off = prefix_offset[i].get<int64_t>();
          if (off == 0) break;
          i -= off;
        }
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::string describe(const SampleStack& s) {
  std::string text = "end " + std::to_string(s.stack_end) + ":";
  for (const Frame& f : s.frames) text += " " + f.func + "@" + f.lib;
  return text;
}

class CallGraphTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Records `command` with the extra hpctl options; returns the profile's samples.
  std::vector<SampleStack> record(const std::vector<std::string>& options,
                                  const std::vector<std::string>& command, json* profile_out = nullptr,
                                  std::string* stderr_out = nullptr) {
    const std::string out = path("profile.json");
    std::vector<std::string> argv{kHpctl, "record", "-F", "999", "-o", out, "--no-report"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    const RunResult r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (stderr_out != nullptr) *stderr_out = r.err;
    if (r.exit_code != 0) return {};
    const json profile = testing::load_json_maybe_gzip(out);
    for (const auto& p : testing::lint_firefox_profile(profile)) ADD_FAILURE() << p;
    if (profile_out != nullptr) *profile_out = profile;
    return sample_stacks(profile);
  }

  // Kept when the test fails: its recordings and logs are what to look at.
  hpd::testing::TempDir tmp_{
      std::string("hpd-cg-") + ::testing::UnitTest::GetInstance()->current_test_info()->name(),
      hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
};

std::string call_graph_of(const json& profile) {
  for (const auto& section : profile.at("meta").at("extra")) {
    for (const auto& entry : section.at("entries")) {
      if (entry.at("label") == "Call graph") return entry.at("value").get<std::string>();
    }
  }
  return "";
}

const std::vector<std::string> kChain = {"chain_d", "chain_c", "chain_b", "chain_a", "main"};

// Of the samples whose leaf is chain_d: how many carry chain_d <- c <- b <- a <- main and ended complete.
ChainShare chain_share(const std::vector<SampleStack>& samples, std::string* example) {
  ChainShare c;
  for (const SampleStack& s : samples) {
    if (s.frames.empty() || s.frames[0].func != "chain_d") continue;
    ++c.in_leaf;
    bool whole = s.frames.size() >= kChain.size() && s.stack_end == 1;
    for (size_t i = 0; whole && i < kChain.size(); ++i) whole = s.frames[i].func == kChain[i];
    if (whole)
      ++c.whole;
    else if (example->empty())
      *example = describe(s);
  }
  return c;
}

TEST_F(CallGraphTest, DwarfGivesWholeChainsWithoutFramePointersAndNoFewerThanPerf) {
  const std::string fixture = kUnwindFixtures + "/chain_gcc";
  json profile;
  std::string err;
  const auto samples = record({"--call-graph", "dwarf"}, {fixture, "2"}, &profile, &err);
  EXPECT_EQ(call_graph_of(profile), "dwarf");
  EXPECT_NE(err.find("call graph: dwarf (32768-byte stack copies)"), std::string::npos) << err;
  std::string example;
  const ChainShare ours = chain_share(samples, &example);
  ASSERT_GT(ours.in_leaf, 1000u) << "about 2 s of CPU in chain_d at 999 Hz expected";
  EXPECT_GE(ours.share(), 0.95) << "first incomplete: " << example;

  // The frame-pointer walk cannot see past chain_d here: the difference dwarf makes.
  std::string fp_example;
  const ChainShare fp =
      chain_share(record({"--call-graph", "fp", "--backend", "perf"}, {fixture, "1"}), &fp_example);
  EXPECT_LT(fp.share(), 0.05);

  ASSERT_FALSE(std::string(HPD_PERF).empty()) << "perf is not installed (Debian package linux-perf)";
  // `perf record --call-graph dwarf` of the same fixture, read back with `perf script`.
  const std::string perf_cmd = perf_dwarf_command(HPD_PERF, dir_.string(), fixture + " 2", 1001001, 32768);
  ASSERT_EQ(std::system(perf_cmd.c_str()), 0) << perf_cmd;
  const ChainShare perf = test::chain_share(read_perf_script(perf_script_path(dir_.string())), kChain);
  std::printf(
      "whole chains in chain_d: hpctl dwarf %.1f%% (%zu/%zu), perf --call-graph dwarf %.1f%% (%zu/%zu), "
      "hpctl fp %.1f%%\n",
      100 * ours.share(), ours.whole, ours.in_leaf, 100 * perf.share(), perf.whole, perf.in_leaf,
      100 * fp.share());
  ASSERT_GT(perf.in_leaf, 500u);
  EXPECT_GE(ours.share(), perf.share() - 0.01);
}

TEST_F(CallGraphTest, AutoUnwindsInTheKernelWithTheEbpfBackend) {
  json profile;
  std::string err;
  const auto samples = record({}, {kUnwindFixtures + "/chain_gcc", "1"}, &profile, &err);
  EXPECT_EQ(call_graph_of(profile), "auto:cfi");
  EXPECT_NE(err.find("call graph: cfi"), std::string::npos) << err;
  EXPECT_NE(err.find("cfi: tables of"), std::string::npos) << err;
  std::string example;
  EXPECT_GE(chain_share(samples, &example).share(), 0.95) << example;
}

TEST_F(CallGraphTest, AutoChoosesDwarfForAProgramWithoutFramePointersAndSaysWhy) {
  json profile;
  std::string err;
  const auto samples = record({"--backend", "perf"}, {kUnwindFixtures + "/chain_gcc", "1"}, &profile, &err);
  EXPECT_EQ(call_graph_of(profile), "auto:dwarf");
  EXPECT_NE(err.find("call graph: dwarf"), std::string::npos) << err;
  EXPECT_NE(err.find("was built without frame pointers"), std::string::npos) << err;
  std::string example;
  EXPECT_GE(chain_share(samples, &example).share(), 0.95) << example;
}

bool mentions(const Frame& f, const char* word) {
  return f.func.find(word) != std::string::npos;
}

// Samples in libc's memmove/memcpy under the Rust fixture: the frame after the leaf must be the
// compiler_move / compiler_copy inline level of a moves_loop function.
void expect_compiler_moves(const std::vector<SampleStack>& samples, const std::string& mode) {
  size_t in_memmove = 0, annotated = 0;
  std::string example;
  for (const SampleStack& s : samples) {
    if (s.frames.size() < 1 || s.frames[0].lib != "libc.so.6" ||
        (!mentions(s.frames[0], "memmove") && !mentions(s.frames[0], "memcpy"))) {
      continue;
    }
    ++in_memmove;
    bool ok = s.frames.size() >= 2 &&
              (mentions(s.frames[1], "compiler_move") || mentions(s.frames[1], "compiler_copy"));
    bool caller = false;
    for (size_t i = 2; ok && i < s.frames.size(); ++i)
      caller = caller || mentions(s.frames[i], "moves_loop::");
    if (ok && caller)
      ++annotated;
    else if (example.empty())
      example = describe(s);
  }
  std::printf("%s: %zu samples in memmove, %zu under compiler_move/compiler_copy of a moves_loop caller\n",
              mode.c_str(), in_memmove, annotated);
  ASSERT_GT(in_memmove, 100u);
  EXPECT_GE(annotated, in_memmove * 90 / 100) << "first miss: " << example;
}

TEST_F(CallGraphTest, RustCompilerMovesUnderTheirCallerInFpAndDwarfModes) {
  const std::string fixture = kUnwindFixtures + "/moves_loop";
  if (!fs::exists(fixture)) GTEST_SKIP() << "rustc was not found at configure time";
  expect_compiler_moves(record({"--call-graph", "fp", "--backend", "perf"}, {fixture, "1.5"}), "fp");
  expect_compiler_moves(record({"--call-graph", "dwarf"}, {fixture, "1.5"}), "dwarf");
}

TEST_F(CallGraphTest, XzStacksReachMainThroughLiblzma) {
  ASSERT_FALSE(std::string(HPD_XZ).empty()) << "xz is not installed (Debian package xz-utils)";
  const std::string input = path("input.txt");
  write_word_text(input, 600'000, 8);
  const auto samples = record({"--call-graph", "dwarf"}, {HPD_XZ, "-T1", "-6", "-f", "-k", input});
  size_t in_lzma = 0, to_main = 0, complete = 0;
  std::string example;
  for (const SampleStack& s : samples) {
    if (s.frames.empty() || s.frames[0].lib.find("liblzma") == std::string::npos) continue;
    ++in_lzma;
    bool reached = false;
    for (size_t i = 1; i + 1 < s.frames.size(); ++i) {
      reached = reached || (s.frames[i].lib == "xz" && s.frames[i + 1].func == "__libc_start_call_main");
    }
    if (reached) ++to_main;
    if (reached && s.stack_end == 1) {
      ++complete;
    } else if (example.empty()) {
      example = describe(s);
    }
  }
  std::printf("xz: %zu samples, %zu in liblzma, %zu through xz's main, %zu of them complete\n",
              samples.size(), in_lzma, to_main, complete);
  ASSERT_GT(in_lzma, 300u);  // about 3 s of compression
  // What the issue asks: stacks reach main through liblzma.
  EXPECT_GE(to_main, in_lzma * 90 / 100) << "first miss: " << example;
  // Past main, into libc. These failed in about one run in eight (up to a quarter of the stacks) while
  // the eBPF recorder read the maps of a fresh exec before ld.so had mapped libc and then waited
  // 200 ms to read them again; it now reads them again at once (18 of 18 runs complete after that).
  EXPECT_GE(complete, in_lzma * 95 / 100) << "first incomplete: " << example;
}

TEST_F(CallGraphTest, CorruptEhFrameEndsStacksFailedWithoutCrashing) {
  // chain_gcc without debug info (no .debug_frame to fall back on), its .eh_frame overwritten with
  // garbage of the same size.
  const std::string original = kUnwindFixtures + "/chain_gcc";
  const std::string copy = path("chain_corrupt");
  const std::string section = path("eh_frame.bin");
  ASSERT_EQ(
      run({HPD_OBJCOPY, "--strip-debug", "--dump-section", ".eh_frame=" + section, original, copy}).exit_code,
      0);
  const auto size = fs::file_size(section);
  ASSERT_GT(size, 64u);
  {
    std::mt19937_64 rng(7);
    std::ofstream out(section, std::ios::binary | std::ios::trunc);
    for (uintmax_t i = 0; i < size; ++i) out.put(static_cast<char>(rng()));
  }
  ASSERT_EQ(run({HPD_OBJCOPY, "--update-section", ".eh_frame=" + section, copy}).exit_code, 0);
  fs::permissions(copy, fs::perms::owner_all);
  const auto samples = record({"--call-graph", "dwarf"}, {copy, "1"});
  size_t in_d = 0, failed = 0, whole = 0;
  for (const SampleStack& s : samples) {
    if (s.frames.empty() || s.frames[0].func != "chain_d") continue;
    ++in_d;
    failed += s.stack_end == 3;
    whole += s.frames.size() >= kChain.size() && s.frames[1].func == "chain_c" && s.stack_end == 1;
  }
  std::printf("corrupt .eh_frame: %zu samples in chain_d, %zu failed, %zu whole\n", in_d, failed, whole);
  ASSERT_GT(in_d, 300u);
  EXPECT_GE(failed, in_d * 90 / 100);
  EXPECT_EQ(whole, 0u);
}

}  // namespace
}  // namespace hpd::test
