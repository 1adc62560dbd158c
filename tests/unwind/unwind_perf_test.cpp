// Unwinder on real samples (privileged): perf_event_open with PERF_SAMPLE_REGS_USER/STACK_USER on
// fixture programs built without frame pointers, on a Rust -Zannotate-moves fixture, and on xz;
// compared with `perf record --call-graph dwarf` on the same fixture.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cpu_clock.h"
#include "hpd/unwind/unwinder.h"
#include "perf_script.h"
#include "subprocess.h"
#include "unwind_test_support.h"
#include "word_text.h"

using namespace hpd;
using namespace hpd::unwind_test;
using hpd::test::ChainShare;

namespace {

const std::string kFixtures = HPD_UNWIND_FIXTURE_DIR;

struct Recorded {
  std::vector<RawModule> modules;
  RawProcess process;
  CaptureResult capture;
};

// Starts `argv`, lets it get past its start-up (20 ms of its CPU time), reads its maps, samples it.
Recorded record(const std::vector<std::string>& argv, const CaptureOptions& opts) {
  Recorded r;
  test::Background child(argv);
  EXPECT_TRUE(test::wait_for_cpu(child.pid(), 0.02)) << argv[0] << " exited before it used 20 ms of CPU";
  r.process = process_from_maps(child.pid(), r.modules);
  r.capture = capture(child.pid(), opts);
  return r;
}

struct Unwound {
  std::vector<uint64_t> stack;
  StackEnd end = StackEnd::kUnknown;
};

std::vector<Unwound> unwind_all(Unwinder& unwinder, const Recorded& r) {
  std::vector<Unwound> out;
  for (const auto& s : r.capture.samples) {
    Unwound u;
    u.end =
        unwinder.unwind(UnwindContext{&r.process, &r.modules, s.time_ns}, s.regs, s.stack_copy(), u.stack);
    out.push_back(std::move(u));
  }
  return out;
}

bool has_prefix(const std::vector<SymFrame>& frames, const std::vector<std::string>& names) {
  if (frames.size() < names.size()) return false;
  for (size_t i = 0; i < names.size(); ++i) {
    if (frames[i].function != names[i]) return false;
  }
  return true;
}

bool mentions(const SymFrame& f, const std::string& word) {
  if (f.function.find(word) != std::string::npos) return true;
  for (const auto& n : f.inlined) {
    if (n.find(word) != std::string::npos) return true;
  }
  return false;
}

// Of the samples whose leaf is chain_d: how many carry the whole chain and ended kComplete.
ChainShare chain_share(const Recorded& r, const std::vector<Unwound>& unwound, std::string* example) {
  StackSymbolizer sym;
  ChainShare c;
  for (const auto& u : unwound) {
    const auto frames = sym.symbolize(r.process, r.modules, u.stack);
    if (frames.empty() || frames[0].function != "chain_d") continue;
    ++c.in_leaf;
    if (u.end == StackEnd::kComplete &&
        has_prefix(frames, {"chain_d", "chain_c", "chain_b", "chain_a", "main"})) {
      ++c.whole;
    } else if (example->empty()) {
      *example = std::string(to_string(u.end)) + ": " + describe(frames);
    }
  }
  return c;
}

void expect_whole_chains(const std::string& fixture, uint32_t stack_bytes, bool expect_fp_steps) {
  CaptureOptions opts;
  opts.stack_bytes = stack_bytes;
  opts.cpu_seconds = 1.0;  // of the fixture's CPU time
  const Recorded r = record({kFixtures + "/" + fixture, "3"}, opts);
  ASSERT_TRUE(r.capture.error.empty()) << r.capture.error;
  ASSERT_GT(r.capture.samples.size(), 300u);
  Unwinder unwinder;
  const auto unwound = unwind_all(unwinder, r);
  std::string example;
  const ChainShare c = chain_share(r, unwound, &example);
  std::printf(
      "%s: %zu samples, %zu in chain_d, %zu with the whole chain (%.1f%%); cfi steps %llu, fp steps %llu\n",
      fixture.c_str(), r.capture.samples.size(), c.in_leaf, c.whole, 100 * c.share(),
      static_cast<unsigned long long>(unwinder.stats().cfi_steps),
      static_cast<unsigned long long>(unwinder.stats().fp_steps));
  ASSERT_GT(c.in_leaf, r.capture.samples.size() / 2);
  EXPECT_GE(c.share(), 0.95) << "first incomplete: " << example;
  if (expect_fp_steps) {
    EXPECT_GT(unwinder.stats().fp_steps, c.in_leaf);
  }
}

TEST(UnwindPerf, WholeChainWithoutFramePointersGcc) {
  expect_whole_chains("chain_gcc", 16384, false);
}
TEST(UnwindPerf, WholeChainWithoutFramePointersClang) {
  expect_whole_chains("chain_clang", 16384, false);
}
TEST(UnwindPerf, FramePointerFallbackWhereCfiIsMissing) {
  expect_whole_chains("chain_fp_nocfi", 16384, true);
}

// `perf record --call-graph dwarf` on the same fixture, same period and copy size, read back with
// `perf script`: our complete-chain share must not be lower.
TEST(UnwindPerf, NoFewerWholeChainsThanPerfDwarf) {
  ASSERT_FALSE(std::string(HPD_PERF).empty()) << "perf is not installed";
  const std::string dir = ::testing::TempDir() + "/unwind_perf_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string cmd =
      test::perf_dwarf_command(HPD_PERF, dir, kFixtures + "/chain_gcc 1.5", 1000000, 16384);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const ChainShare perf = test::chain_share(test::read_perf_script(test::perf_script_path(dir)),
                                            {"chain_d", "chain_c", "chain_b", "chain_a", "main"});

  CaptureOptions opts;
  opts.stack_bytes = 16384;
  opts.cpu_seconds = 1.0;  // of the fixture's CPU time
  const Recorded r = record({kFixtures + "/chain_gcc", "3"}, opts);
  ASSERT_TRUE(r.capture.error.empty()) << r.capture.error;
  Unwinder unwinder;
  std::string example;
  const ChainShare ours = chain_share(r, unwind_all(unwinder, r), &example);
  std::printf(
      "whole-chain share in chain_d: hpd %.1f%% (%zu/%zu), perf --call-graph dwarf %.1f%% (%zu/%zu)\n",
      100 * ours.share(), ours.whole, ours.in_leaf, 100 * perf.share(), perf.whole, perf.in_leaf);
  ASSERT_GT(perf.in_leaf, 300u) << "perf script gave too few samples; see " << test::perf_script_path(dir);
  EXPECT_GE(ours.share(), perf.share() - 0.01) << example;
}

// glibc's memmove has no frame: the kernel's frame-pointer chain goes from the leaf straight to
// copy_block's caller. frameless_leaf_return must give copy_block back.
TEST(UnwindPerf, FramelessLeafCallerInFramePointerMode) {
  CaptureOptions opts;
  opts.callchain = true;
  opts.stack_bytes = 256;
  opts.cpu_seconds = 1.0;                                              // of the fixture's CPU time
  const Recorded r = record({kFixtures + "/memcpy_fp", "120"}, opts);  // killed once sampled
  ASSERT_TRUE(r.capture.error.empty()) << r.capture.error;
  Unwinder unwinder;
  StackSymbolizer sym;
  size_t in_copy = 0, kernel_has_caller = 0, recovered = 0;
  for (const auto& s : r.capture.samples) {
    const SymFrame leaf = sym.symbolize_one(r.process, r.modules, s.ip, false);
    if (leaf.module != "libc.so.6" || (!mentions(leaf, "memmove") && !mentions(leaf, "memcpy"))) continue;
    ++in_copy;
    if (s.callchain.size() >= 2 &&
        sym.symbolize_one(r.process, r.modules, s.callchain[1], true).function == "copy_block") {
      ++kernel_has_caller;
    }
    const auto ra = unwinder.frameless_leaf_return(UnwindContext{&r.process, &r.modules, s.time_ns}, s.regs,
                                                   s.stack_copy());
    if (ra && sym.symbolize_one(r.process, r.modules, *ra, true).function == "copy_block") ++recovered;
  }
  std::printf(
      "memcpy_fp: %zu samples, %zu in libc memmove/memcpy; kernel fp chain has copy_block in %zu, "
      "frameless_leaf_return recovers it in %zu\n",
      r.capture.samples.size(), in_copy, kernel_has_caller, recovered);
  ASSERT_GT(in_copy, r.capture.samples.size() / 2);
  EXPECT_LT(kernel_has_caller, in_copy / 10);  // the problem is real
  EXPECT_GE(recovered, in_copy * 95 / 100);
}

// Rust -Zannotate-moves: samples in libc's memmove belong to compiler_move/compiler_copy inlined in
// the caller; the caller's return address (at ret - 1) must resolve into that inline range, in fp
// mode (frameless_leaf_return) and in dwarf mode (the unwound frame 1), under a Rust caller.
TEST(UnwindPerf, RustCompilerMoveFramesInBothModes) {
  const std::string fixture = kFixtures + "/moves_loop";
  if (!std::filesystem::exists(fixture)) GTEST_SKIP() << "rustc was not found at configure time";
  CaptureOptions opts;
  opts.callchain = true;
  opts.stack_bytes = 65528;
  opts.cpu_seconds = 1.0;                             // of the fixture's CPU time
  const Recorded r = record({fixture, "120"}, opts);  // killed once sampled
  ASSERT_TRUE(r.capture.error.empty()) << r.capture.error;
  Unwinder unwinder;
  StackSymbolizer sym;
  size_t in_memmove = 0, fp_annotated = 0, dwarf_annotated = 0, dwarf_reaches_main = 0;
  std::string example;
  for (const auto& s : r.capture.samples) {
    const SymFrame leaf = sym.symbolize_one(r.process, r.modules, s.ip, false);
    // memcpy and memmove share their code in glibc; the symbol table may name either.
    if (leaf.module != "libc.so.6" || (!mentions(leaf, "memmove") && !mentions(leaf, "memcpy"))) continue;
    ++in_memmove;
    const UnwindContext ctx{&r.process, &r.modules, s.time_ns};
    // fp mode needs only the first bytes of the stack.
    const StackCopy small{s.regs.sp(),
                          std::span<const uint8_t>(s.stack).first(std::min<size_t>(256, s.stack.size())), 0};
    const auto ra = unwinder.frameless_leaf_return(ctx, s.regs, small);
    auto annotated = [&](uint64_t address) {
      const SymFrame f = sym.symbolize_one(r.process, r.modules, address, true);
      return (mentions(f, "compiler_move") || mentions(f, "compiler_copy")) && mentions(f, "moves_loop::");
    };
    if (ra && annotated(*ra)) ++fp_annotated;
    std::vector<uint64_t> stack;
    const StackEnd end = unwinder.unwind(ctx, s.regs, s.stack_copy(), stack);
    if (stack.size() >= 2 && annotated(stack[1])) ++dwarf_annotated;
    const auto frames = sym.symbolize(r.process, r.modules, stack);
    bool main_found = false;
    for (const auto& f : frames) main_found = main_found || f.function == "moves_loop::main";
    if (end == StackEnd::kComplete && main_found) {
      ++dwarf_reaches_main;
    } else if (example.empty()) {
      example = std::string(to_string(end)) + ": " + describe(frames);
    }
  }
  std::printf(
      "moves_loop: %zu samples, %zu in memmove; compiler_move/copy caller: fp+leaf helper %zu, dwarf %zu; "
      "dwarf stacks complete to main %zu\n",
      r.capture.samples.size(), in_memmove, fp_annotated, dwarf_annotated, dwarf_reaches_main);
  ASSERT_GT(in_memmove, 100u);
  EXPECT_GE(fp_annotated, in_memmove * 90 / 100);
  EXPECT_GE(dwarf_annotated, in_memmove * 90 / 100);
  EXPECT_GE(dwarf_reaches_main, in_memmove * 90 / 100) << example;
}

// A stripped Debian binary on a real workload: stacks in liblzma reach xz's main (the xz frame
// whose caller is glibc's __libc_start_call_main) with dwarf unwinding.
TEST(UnwindPerf, XzStacksReachMainThroughLiblzma) {
  ASSERT_FALSE(std::string(HPD_XZ).empty()) << "xz is not installed (Debian package xz-utils)";
  const std::string dir = ::testing::TempDir() + "/unwind_xz_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string input = dir + "/input.txt";
  test::write_word_text(input, 4'000'000, 16);
  CaptureOptions opts;
  opts.stack_bytes = 16384;
  opts.cpu_seconds = 1.5;  // of xz's CPU time
  const Recorded r = record({HPD_XZ, "-T1", "-6", "-c", "-k", input}, opts);
  ASSERT_TRUE(r.capture.error.empty()) << r.capture.error;
  Unwinder unwinder;
  StackSymbolizer sym;
  const auto unwound = unwind_all(unwinder, r);
  size_t in_lzma = 0, to_main = 0;
  std::string example;
  for (const auto& u : unwound) {
    const auto frames = sym.symbolize(r.process, r.modules, u.stack);
    if (frames.empty() || frames[0].module.find("liblzma") == std::string::npos) continue;
    ++in_lzma;
    bool reached = false;
    for (size_t i = 1; i + 1 < frames.size(); ++i) {
      if (frames[i].module == "xz" && frames[i + 1].function == "__libc_start_call_main") reached = true;
    }
    if (u.end == StackEnd::kComplete && reached) {
      ++to_main;
    } else if (example.empty()) {
      example = std::string(to_string(u.end)) + ": " + describe(frames);
    }
  }
  std::printf("xz: %zu samples, %zu with the leaf in liblzma, %zu complete through xz's main\n",
              r.capture.samples.size(), in_lzma, to_main);
  ASSERT_GT(in_lzma, r.capture.samples.size() / 2);
  EXPECT_GE(to_main, in_lzma * 95 / 100) << example;
}

}  // namespace
