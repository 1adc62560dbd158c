// Unwinder tests on this process's own stack (no perf_event needed): registers captured with inline
// assembly, the stack copied from rsp up, through CFI, a signal frame, the frameless-leaf helper,
// truncated copies, garbage stacks and a module file with a corrupt .eh_frame.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>

#include "hpd/unwind/unwinder.h"
#include "own_return_address.h"
#include "unwind_test_support.h"

using namespace hpd;
using namespace hpd::unwind_test;

namespace {

struct SelfSample {
  UserRegs regs;
  std::vector<uint8_t> stack;
  StackCopy copy(size_t limit = SIZE_MAX) const {
    return StackCopy{regs.sp(), std::span<const uint8_t>(stack.data(), std::min(limit, stack.size())), 0};
  }
};

// Stores rip (an address inside the asm), rsp, rbp, rbx and r12-r15 into r[0..7].
#define CAPTURE_REGS(r)                                                                      \
  asm volatile(                                                                              \
      "lea 0(%%rip), %%rax\n\tmov %%rax, 0(%0)\n\tmov %%rsp, 8(%0)\n\tmov %%rbp, 16(%0)\n\t" \
      "mov %%rbx, 24(%0)\n\tmov %%r12, 32(%0)\n\tmov %%r13, 40(%0)\n\tmov %%r14, 48(%0)\n\t" \
      "mov %%r15, 56(%0)\n\t"                                                                \
      :                                                                                      \
      : "r"(r)                                                                               \
      : "rax", "memory")

uint64_t stack_top_of(uint64_t sp) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t start = 0;
    uint64_t end = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64, &start, &end) == 2 && sp >= start && sp < end)
      return end;
  }
  return sp;
}

// Called by the function that ran CAPTURE_REGS: copies the stack from the captured rsp upward.
__attribute__((noinline)) void finish_capture(const uint64_t* r, SelfSample* out) {
  out->regs = UserRegs{};
  out->regs.set(DwarfReg::kRip, r[0]);
  out->regs.set(DwarfReg::kRsp, r[1]);
  out->regs.set(DwarfReg::kRbp, r[2]);
  out->regs.set(DwarfReg::kRbx, r[3]);
  out->regs.set(DwarfReg::kR12, r[4]);
  out->regs.set(DwarfReg::kR13, r[5]);
  out->regs.set(DwarfReg::kR14, r[6]);
  out->regs.set(DwarfReg::kR15, r[7]);
  const uint64_t top = stack_top_of(r[1]);
  const uint64_t n = std::min<uint64_t>(top - r[1], 1u << 20);
  copy_raw_stack(r[1], n, out->stack);
}

}  // namespace

extern "C" {
volatile uint64_t g_unwind_sink;
SelfSample g_signal_sample;

__attribute__((noinline)) void unwind_capture(SelfSample* out) {
  uint64_t r[8];
  CAPTURE_REGS(r);
  finish_capture(r, out);
  g_unwind_sink = g_unwind_sink + out->stack.size();
}

// The same with a frame pointer: its CFA is rbp-based after the prologue.
__attribute__((noinline, optimize("no-omit-frame-pointer"))) void unwind_capture_fp(SelfSample* out) {
  uint64_t r[8];
  CAPTURE_REGS(r);
  finish_capture(r, out);
  g_unwind_sink = g_unwind_sink + out->stack.size();
}

__attribute__((noinline)) void unwind_level4(SelfSample* out, int mode) {
  if (mode == 0) unwind_capture(out);
  if (mode == 1) unwind_capture_fp(out);
  if (mode == 2) raise(SIGUSR1);
  g_unwind_sink = g_unwind_sink + 4;
}
__attribute__((noinline)) void unwind_level3(SelfSample* out, int mode) {
  unwind_level4(out, mode);
  g_unwind_sink = g_unwind_sink + 3;
}
__attribute__((noinline)) void unwind_level2(SelfSample* out, int mode) {
  char pad[700];
  std::memset(pad, mode, sizeof pad);
  unwind_level3(out, mode);
  g_unwind_sink = g_unwind_sink + static_cast<uint64_t>(pad[g_unwind_sink % sizeof pad]);
}
__attribute__((noinline)) void unwind_level1(SelfSample* out, int mode) {
  unwind_level2(out, mode);
  g_unwind_sink = g_unwind_sink + 1;
}

void unwind_on_signal(int) {
  unwind_capture(&g_signal_sample);
  g_unwind_sink = g_unwind_sink + 5;  // not a tail call: keep the handler's frame
}
}

namespace {

class SelfUnwindTest : public ::testing::Test {
 protected:
  void SetUp() override { process_ = process_from_maps(getpid(), modules_); }
  UnwindContext context() const { return UnwindContext{&process_, &modules_, 0}; }
  std::vector<SymFrame> names(const std::vector<uint64_t>& stack) {
    return symbolizer_.symbolize(process_, modules_, stack);
  }
  // Index of the first frame named `name` at or after `from`, or -1.
  static int find(const std::vector<SymFrame>& frames, const std::string& name, size_t from = 0) {
    for (size_t i = from; i < frames.size(); ++i) {
      if (frames[i].function == name) return static_cast<int>(i);
    }
    return -1;
  }

  std::vector<RawModule> modules_;
  RawProcess process_;
  StackSymbolizer symbolizer_;
};

TEST_F(SelfUnwindTest, UnwindsOwnStackToTheRootThroughCfi) {
  SelfSample s;
  unwind_level1(&s, 0);
  Unwinder unwinder;
  std::vector<uint64_t> out;
  const StackEnd end = unwinder.unwind(context(), s.regs, s.copy(), out);
  const auto frames = names(out);
  EXPECT_EQ(end, StackEnd::kComplete) << describe(frames);
  ASSERT_GE(frames.size(), 6u) << describe(frames);
  EXPECT_EQ(frames[0].function, "unwind_capture");
  EXPECT_EQ(frames[1].function, "unwind_level4");
  EXPECT_EQ(frames[2].function, "unwind_level3");
  EXPECT_EQ(frames[3].function, "unwind_level2");
  EXPECT_EQ(frames[4].function, "unwind_level1");
  EXPECT_GE(find(frames, "main"), 5) << describe(frames);
  EXPECT_EQ(frames.back().function, "_start") << describe(frames);
  EXPECT_GT(unwinder.stats().cfi_steps, 5u);

  // The second walk of the same stack is served from the rule cache.
  const uint64_t misses = unwinder.stats().rule_cache_misses;
  std::vector<uint64_t> again;
  EXPECT_EQ(unwinder.unwind(context(), s.regs, s.copy(), again), StackEnd::kComplete);
  EXPECT_EQ(again, out);
  EXPECT_EQ(unwinder.stats().rule_cache_misses, misses);
}

TEST_F(SelfUnwindTest, UnwindsThroughASignalFrame) {
  struct sigaction sa {};
  sa.sa_handler = unwind_on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  SelfSample unused;
  unwind_level1(&unused, 2);
  sigaction(SIGUSR1, &old, nullptr);

  Unwinder unwinder;
  std::vector<uint64_t> out;
  const StackEnd end = unwinder.unwind(context(), g_signal_sample.regs, g_signal_sample.copy(), out);
  const auto frames = names(out);
  EXPECT_EQ(end, StackEnd::kComplete) << describe(frames);
  ASSERT_GE(frames.size(), 4u);
  EXPECT_EQ(frames[0].function, "unwind_capture");
  EXPECT_EQ(frames[1].function, "unwind_on_signal");
  const int level4 = find(frames, "unwind_level4");
  ASSERT_GT(level4, 2) << describe(frames);
  // Between the handler and level4: the signal trampoline (its return address is __restore_rt
  // itself, whose FDE starts one byte early for this lookup at address - 1) and raise's libc frames.
  EXPECT_EQ(frames[2].module, "libc.so.6") << describe(frames);
  EXPECT_NE(find(frames, "__pthread_kill_implementation"), -1) << describe(frames);
  EXPECT_EQ(find(frames, "unwind_level3"), level4 + 1) << describe(frames);
  EXPECT_EQ(find(frames, "unwind_level1"), level4 + 3) << describe(frames);
  EXPECT_NE(find(frames, "main"), -1) << describe(frames);
}

TEST_F(SelfUnwindTest, FramelessLeafReturnGivesTheCallerOnlyWithoutAFramePointer) {
  SelfSample s;
  unwind_level1(&s, 0);
  Unwinder unwinder;
  std::vector<uint64_t> out;
  ASSERT_EQ(unwinder.unwind(context(), s.regs, s.copy(), out), StackEnd::kComplete);
  // -O2 omits the frame pointer: the CFA is rsp-based, so the helper finds level4's return address
  // with only the first bytes of the stack.
  const auto ra = unwinder.frameless_leaf_return(context(), s.regs, s.copy(256));
  ASSERT_TRUE(ra.has_value());
  EXPECT_EQ(*ra, out[1]);

  SelfSample fp;
  unwind_level1(&fp, 1);
  std::vector<uint64_t> fp_out;
  EXPECT_EQ(unwinder.unwind(context(), fp.regs, fp.copy(), fp_out), StackEnd::kComplete);
  ASSERT_GE(fp_out.size(), 2u);
  EXPECT_EQ(names(fp_out)[0].function, "unwind_capture_fp");
  EXPECT_EQ(names(fp_out)[1].function, "unwind_level4");
  EXPECT_FALSE(unwinder.frameless_leaf_return(context(), fp.regs, fp.copy(256)).has_value());
}

// A sampled pc in code no CFI covers (JIT code: anonymous memory, in no mapping of the process) whose
// top of stack holds an address in a module with CFI, right after a call instruction: the caller is
// that address, for the walk (dwarf mode) and for fp mode's frameless-leaf helper alike, where a
// frame-pointer step would lose it. A top of stack that is no such address (a byte past it) is not
// taken.
TEST_F(SelfUnwindTest, ALeafInCodeWithoutCfiTakesTheReturnAddressAtTheTopOfItsStack) {
  const uint64_t ra = hpd::testing::own_return_address();
  std::vector<uint8_t> code(4096, 0x90);  // not mapped executable: only its address is used
  const auto pc = reinterpret_cast<uint64_t>(code.data()) + 16;
  UserRegs regs;
  regs.set(DwarfReg::kRip, pc);
  regs.set(DwarfReg::kRsp, 0x7ffd0000);
  regs.set(DwarfReg::kRbp, 0);
  for (const uint64_t top : {ra, ra + 1}) {
    SCOPED_TRACE(top == ra ? "a return address" : "a byte past it");
    std::vector<uint8_t> stack(16, 0);
    std::memcpy(stack.data(), &top, 8);
    const StackCopy copy{regs.sp(), stack, 0};
    Unwinder unwinder;
    std::vector<uint64_t> out;
    unwinder.unwind(context(), regs, copy, out);
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(out[0], pc);
    const auto leaf_return = unwinder.frameless_leaf_return(context(), regs, copy);
    if (top == ra) {
      ASSERT_GE(out.size(), 2u);
      EXPECT_EQ(out[1], ra);
      EXPECT_EQ(unwinder.stats().sp_steps, 1u);
      EXPECT_EQ(unwinder.stats().fp_steps, 0u);
      EXPECT_EQ(leaf_return, std::optional<uint64_t>(ra));
    } else {
      EXPECT_EQ(out.size(), 1u);
      EXPECT_EQ(unwinder.stats().sp_steps, 0u);
      EXPECT_FALSE(leaf_return.has_value());
    }
  }
}

TEST_F(SelfUnwindTest, ShortCopyIsTruncatedNotFailed) {
  SelfSample s;
  unwind_level1(&s, 0);
  Unwinder unwinder;
  std::vector<uint64_t> out;
  StackCopy copy = s.copy(512);
  EXPECT_EQ(unwinder.unwind(context(), s.regs, copy, out), StackEnd::kTruncated);
  EXPECT_GE(out.size(), 2u);
  // When the kernel says the copy reached the end of the stack, running out of it is a failure.
  copy.requested_size = 4096;
  EXPECT_EQ(unwinder.unwind(context(), s.regs, copy, out), StackEnd::kFailed);
  // Depth limit.
  UnwinderOptions opts;
  opts.max_frames = 3;
  Unwinder shallow(opts);
  EXPECT_EQ(shallow.unwind(context(), s.regs, s.copy(), out), StackEnd::kTruncated);
  EXPECT_EQ(out.size(), 3u);
}

TEST_F(SelfUnwindTest, GarbageStacksAndRegistersFailWithoutCrashing) {
  SelfSample s;
  unwind_level1(&s, 0);
  Unwinder unwinder;
  std::mt19937_64 rng(12345);
  std::vector<uint8_t> garbage(16384);
  std::vector<uint64_t> out;
  int complete = 0;
  for (int i = 0; i < 2000; ++i) {
    for (auto& b : garbage) b = static_cast<uint8_t>(rng());
    UserRegs regs = s.regs;
    if (i % 2 == 1) {
      for (unsigned r = 0; r < kDwarfRegCount; ++r) regs.set(static_cast<DwarfReg>(r), rng());
      if (i % 4 == 1) regs.set(DwarfReg::kRip, s.regs.ip());  // real code, garbage everything else
    }
    const StackEnd end = unwinder.unwind(context(), regs, StackCopy{regs.sp(), garbage, 0}, out);
    EXPECT_NE(end, StackEnd::kUnknown);
    complete += end == StackEnd::kComplete;
    unwinder.frameless_leaf_return(context(), regs, StackCopy{regs.sp(), garbage, 0});
  }
  EXPECT_EQ(complete, 0);
  // No registers at all, and an empty copy.
  EXPECT_EQ(unwinder.unwind(context(), UserRegs{}, StackCopy{}, out), StackEnd::kFailed);
  EXPECT_EQ(unwinder.unwind(context(), s.regs, StackCopy{s.regs.sp(), {}, 0}, out), StackEnd::kTruncated);
  EXPECT_EQ(unwinder.unwind(UnwindContext{}, s.regs, s.copy(), out), StackEnd::kFailed);
}

// The dwarf-mode flake of CallGraphTest.RustCompilerMovesUnderTheirCallerInFpAndDwarfModes: the eBPF
// recorder read the maps of a freshly exec'd process while ld.so had not yet mapped libc, and did not
// read them again for 200 ms; samples in libc's memmove then failed at the leaf. The unwinder names
// the pc that no known mapping covers, so that the recorder can read the maps again and retry.
TEST_F(SelfUnwindTest, LibcPcOutsideKnownMapsIsNamedAndUnwindsOnceMapped) {
  SelfSample s;
  unwind_level1(&s, 0);
  // A sample at the entry of this libc's memmove (the implementation its IFUNC picked, with its
  // real CFI: CFA = rsp + 8), called from the captured point: the return address is the captured
  // rip + 1, so its lookup at address - 1 lands on the captured instruction's CFI row.
  const auto memmove_entry = reinterpret_cast<uint64_t>(dlsym(RTLD_DEFAULT, "memmove"));
  ASSERT_NE(memmove_entry, 0u) << dlerror();
  const uint64_t ret = s.regs.ip() + 1;
  std::vector<uint8_t> stack(sizeof ret);
  std::memcpy(stack.data(), &ret, sizeof ret);
  stack.insert(stack.end(), s.stack.begin(), s.stack.end());
  UserRegs regs = s.regs;
  regs.set(DwarfReg::kRip, memmove_entry);
  regs.set(DwarfReg::kRsp, s.regs.sp() - 8);
  regs.set(DwarfReg::kRbp, 0);  // as in the failing samples: code without frame pointers
  const StackCopy copy{regs.sp(), stack, 0};

  // This process's maps without libc, as read before ld.so mapped it.
  RawProcess early = process_;
  std::erase_if(early.mappings, [&](const RawMapping& m) {
    return std::filesystem::path(modules_[m.module].path).filename() == "libc.so.6";
  });
  ASSERT_LT(early.mappings.size(), process_.mappings.size()) << "libc.so.6 is not mapped here?";
  auto in_libc = [&](uint64_t pc) {
    const RawMapping* m = process_.find_mapping(pc, 0);
    return m != nullptr && early.find_mapping(pc, 0) == nullptr;
  };
  ASSERT_TRUE(in_libc(memmove_entry));

  Unwinder unwinder;
  std::vector<uint64_t> out;
  EXPECT_EQ(unwinder.unwind(UnwindContext{&early, &modules_, 0}, regs, copy, out), StackEnd::kFailed);
  EXPECT_EQ(out, std::vector<uint64_t>{memmove_entry});
  EXPECT_EQ(unwinder.last_unmapped_pc(), memmove_entry);
  EXPECT_EQ(unwinder.stats().outside_mappings, 1u);

  // Once libc is known, the same sample unwinds through memmove's CFI to the root.
  EXPECT_EQ(unwinder.unwind(context(), regs, copy, out), StackEnd::kComplete) << describe(names(out));
  EXPECT_EQ(unwinder.last_unmapped_pc(), 0u);
  ASSERT_GE(out.size(), 7u);
  EXPECT_EQ(out[1], ret);
  const auto frames = names(out);
  EXPECT_EQ(frames[0].module, "libc.so.6");
  EXPECT_EQ(frames[1].function, "unwind_capture");
  EXPECT_EQ(frames[2].function, "unwind_level4");
  EXPECT_EQ(frames.back().function, "_start") << describe(frames);

  // The xz flavour: a stack whose leaf is known but whose outer frames return into libc
  // (__libc_start_call_main) stops there, failed, naming that return address.
  std::vector<uint64_t> own;
  EXPECT_EQ(unwinder.unwind(UnwindContext{&early, &modules_, 0}, s.regs, s.copy(), own), StackEnd::kFailed);
  ASSERT_GE(own.size(), 2u);
  EXPECT_EQ(unwinder.last_unmapped_pc(), own.back());
  EXPECT_TRUE(in_libc(own.back()));
  EXPECT_EQ(names(own)[own.size() - 2].function, "main") << describe(names(own));
  EXPECT_EQ(unwinder.stats().outside_mappings, 2u);
}

// Replaces this test binary's module by a copy whose CFI sections hold garbage.
class CorruptCfiTest : public SelfUnwindTest {
 protected:
  std::string corrupt_copy(const std::vector<std::string>& sections) {
    const std::string dir = ::testing::TempDir() + "/unwind_corrupt_" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    const std::string exe = std::filesystem::read_symlink("/proc/self/exe");
    const std::string out = dir + "/self_corrupt";
    std::string cmd = std::string(HPD_OBJCOPY);
    std::mt19937_64 rng(7);
    for (const auto& name : sections) {
      const std::string dump = dir + "/" + name.substr(1) + ".bin";
      const std::string get =
          std::string(HPD_OBJCOPY) + " -O binary --only-section=" + name + " " + exe + " " + dump;
      if (std::system(get.c_str()) != 0) return "";
      const auto size = std::filesystem::file_size(dump);
      std::vector<char> junk(size);
      for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(rng());
      // Keep a valid-looking first length word now and then so the parser gets past the start.
      if (junk.size() >= 4) std::memcpy(junk.data(), "\x14\x00\x00\x00", 4);
      std::ofstream(dump, std::ios::binary).write(junk.data(), static_cast<std::streamsize>(junk.size()));
      cmd += " --update-section " + name + "=" + dump;
    }
    cmd += " " + exe + " " + out;
    return std::system(cmd.c_str()) == 0 ? out : "";
  }
};

TEST_F(CorruptCfiTest, GarbageEhFrameMarksTheStackFailed) {
  SelfSample s;
  unwind_level1(&s, 0);
  for (const auto& sections :
       {std::vector<std::string>{".eh_frame"}, std::vector<std::string>{".eh_frame", ".eh_frame_hdr"}}) {
    const std::string corrupt = corrupt_copy(sections);
    ASSERT_FALSE(corrupt.empty()) << "objcopy failed";
    std::vector<RawModule> modules = modules_;
    const std::string exe = std::filesystem::read_symlink("/proc/self/exe");
    bool replaced = false;
    for (auto& m : modules) {
      if (m.path == exe) {
        m.path = corrupt;
        replaced = true;
      }
    }
    ASSERT_TRUE(replaced);
    RawProcess process = process_;
    process.pid = 0;  // open the path itself, not /proc/PID/map_files
    Unwinder unwinder;
    std::vector<uint64_t> out;
    const StackEnd end = unwinder.unwind(UnwindContext{&process, &modules, 0}, s.regs, s.copy(), out);
    EXPECT_NE(end, StackEnd::kComplete) << sections.size();
    EXPECT_FALSE(out.empty());
  }
}

}  // namespace
