// Tests for the dwarf-mode pieces of the perf backend on synthetic data: decoding of
// PERF_SAMPLE_REGS_USER / PERF_SAMPLE_STACK_USER, the builder's use of the unwinder (garbage stacks
// end failed, never crash), and the frame-pointer probe behind --call-graph auto.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include "builder_feeds.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/process.h"
#include "hpd/collect/call_graph_choice.h"
#include "perf/perf_records.h"

extern "C" void _start();  // glibc's crt1: the main thread's first frame

namespace hpd {
namespace {

constexpr uint64_t kRegsMask = (1u << 6) | (1u << 7) | (1u << 8);  // BP, SP, IP
constexpr uint64_t kType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CALLCHAIN |
                           PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;

class Bytes {
 public:
  Bytes() { bytes_.resize(sizeof(perf_event_header)); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  std::vector<uint8_t> done(uint16_t misc = PERF_RECORD_MISC_USER) {
    perf_event_header h{PERF_RECORD_SAMPLE, misc, static_cast<uint16_t>(bytes_.size())};
    std::memcpy(bytes_.data(), &h, sizeof h);
    return bytes_;
  }

 private:
  std::vector<uint8_t> bytes_;
};

// ip, pid/tid, time, an empty callchain.
Bytes sample_head(uint64_t ip) {
  Bytes b;
  b.u64(ip).u32(7).u32(8).u64(1000).u64(0);
  return b;
}

TEST(UserStackDecoding, RegistersAndStackInAbiOrder) {
  std::vector<uint8_t> stack(64);
  for (size_t i = 0; i < stack.size(); ++i) stack[i] = static_cast<uint8_t>(i);
  const auto bytes = sample_head(0x401000)
                         .u64(PERF_SAMPLE_REGS_ABI_64)
                         .u64(0x7ffd0100)  // bp
                         .u64(0x7ffd0000)  // sp
                         .u64(0x401000)    // ip
                         .u64(stack.size())
                         .raw(stack.data(), stack.size())
                         .u64(40)  // dyn_size: only 40 bytes were readable
                         .done();
  const auto record = decode_record(bytes, RecordLayout{kType, 0, false, kRegsMask});
  ASSERT_TRUE(record);
  const auto* s = std::get_if<SampleRecord>(&*record);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->regs_abi, static_cast<uint64_t>(PERF_SAMPLE_REGS_ABI_64));
  ASSERT_EQ(s->user_regs.size(), 3u);
  EXPECT_EQ(s->user_regs[0], 0x7ffd0100u);
  EXPECT_EQ(s->user_regs[1], 0x7ffd0000u);
  EXPECT_EQ(s->user_regs[2], 0x401000u);
  EXPECT_EQ(s->stack_size, 64u);
  ASSERT_EQ(s->user_stack.size(), 40u);
  EXPECT_EQ(s->user_stack[0], 0);
  EXPECT_EQ(s->user_stack[39], 39);
  const UserRegs regs = UserRegs::from_perf(kRegsMask, s->user_regs);
  EXPECT_EQ(regs.sp(), 0x7ffd0000u);
  EXPECT_EQ(regs.ip(), 0x401000u);
  EXPECT_EQ(regs.bp(), 0x7ffd0100u);
}

TEST(UserStackDecoding, KernelThreadHasNoRegistersAndNoStack) {
  // ABI_NONE: no register values follow; size 0: no data and no dyn_size follow.
  const auto bytes = sample_head(0xffffffff81000000ULL).u64(PERF_SAMPLE_REGS_ABI_NONE).u64(0).done();
  const auto record = decode_record(bytes, RecordLayout{kType, 0, false, kRegsMask});
  ASSERT_TRUE(record);
  const auto* s = std::get_if<SampleRecord>(&*record);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->user_regs.empty());
  EXPECT_EQ(s->stack_size, 0u);
  EXPECT_TRUE(s->user_stack.empty());
}

TEST(UserStackDecoding, RawDataBeforeRegistersIsSkipped) {
  const uint8_t raw[4] = {1, 2, 3, 4};  // u32 size + 4 bytes keeps 8-byte alignment
  const auto bytes = sample_head(0x401000)
                         .u32(4)
                         .raw(raw, 4)
                         .u64(PERF_SAMPLE_REGS_ABI_64)
                         .u64(1)
                         .u64(2)
                         .u64(3)
                         .u64(8)
                         .u64(0x1122334455667788ULL)
                         .u64(8)
                         .done();
  const auto record = decode_record(bytes, RecordLayout{kType | PERF_SAMPLE_RAW, 0, false, kRegsMask});
  ASSERT_TRUE(record);
  const auto* s = std::get_if<SampleRecord>(&*record);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->user_regs.size(), 3u);
  EXPECT_EQ(s->user_regs[2], 3u);
  ASSERT_EQ(s->user_stack.size(), 8u);
  uint64_t word = 0;
  std::memcpy(&word, s->user_stack.data(), 8);
  EXPECT_EQ(word, 0x1122334455667788ULL);
}

TEST(UserStackDecoding, TruncatedOrLyingRecordsAreRejected) {
  const RecordLayout layout{kType, 0, false, kRegsMask};
  // Registers cut short.
  EXPECT_FALSE(decode_record(sample_head(1).u64(PERF_SAMPLE_REGS_ABI_64).u64(1).done(), layout));
  // A stack size larger than the record.
  EXPECT_FALSE(decode_record(
      sample_head(1).u64(PERF_SAMPLE_REGS_ABI_64).u64(1).u64(2).u64(3).u64(1 << 20).u64(0).done(), layout));
  // No dyn_size after the data.
  EXPECT_FALSE(decode_record(
      sample_head(1).u64(PERF_SAMPLE_REGS_ABI_64).u64(1).u64(2).u64(3).u64(8).u64(0).done(), layout));
  // A dyn_size beyond the size is cut to the size.
  const auto bytes =
      sample_head(1).u64(PERF_SAMPLE_REGS_ABI_64).u64(1).u64(2).u64(3).u64(8).u64(0).u64(4096).done();
  const auto record = decode_record(bytes, layout);
  ASSERT_TRUE(record);
  EXPECT_EQ(std::get<SampleRecord>(*record).user_stack.size(), 8u);
  // Random bytes never crash the decoder.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(8 + rng() % 300);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    perf_event_header h{PERF_RECORD_SAMPLE, 0, static_cast<uint16_t>(junk.size())};
    std::memcpy(junk.data(), &h, sizeof h);
    (void)decode_record(junk, layout);
  }
}

// A sample of this very process in dwarf mode: its registers, with a stack copy of garbage.
SampleRecord garbage_sample(uint64_t ip, std::vector<uint8_t>& stack_bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (auto& b : stack_bytes) b = static_cast<uint8_t>(rng());
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.ip = ip;
  s.pid = ::getpid();
  s.tid = ::getpid();
  s.time = 1000;
  s.regs_abi = PERF_SAMPLE_REGS_ABI_64;
  s.user_regs = {rng(), 0x7ffd00001000ULL, ip};  // bp, sp, ip
  s.stack_size = stack_bytes.size();
  s.user_stack = stack_bytes;
  return s;
}

TEST(UserStackBuilder, GarbageStackCopiesEndFailedOrTruncated) {
  RawProfile profile;
  PerfFeed builder(profile, PerfDecoderConfig{false, 127, true, kRegsMask});
  Unwinder unwinder;
  builder.set_unwinder(&unwinder);
  builder.add_maps(::getpid(), read_proc_maps(::getpid()), 0);
  // ip inside this test's own code, which has CFI: the walk starts, then meets garbage.
  const auto ip = reinterpret_cast<uint64_t>(&garbage_sample);
  std::vector<uint8_t> stack(4096);
  for (uint64_t seed = 0; seed < 200; ++seed) builder.on_record(garbage_sample(ip + seed % 64, stack, seed));
  ASSERT_EQ(profile.samples.size(), 200u);
  size_t complete = 0;
  for (const RawSample& s : profile.samples) {
    EXPECT_NE(s.stack_end, StackEnd::kUnknown);
    ASSERT_NE(s.stack, kNoIndex);
    const auto user = profile.stacks.user_frames(s.stack);
    ASSERT_FALSE(user.empty());
    complete += s.stack_end == StackEnd::kComplete;
  }
  // Random return addresses almost never land in mapped code with a rule that ends the walk cleanly.
  EXPECT_LT(complete, 10u);
  EXPECT_EQ(builder.unwind_counters().unwound, 200u);
  EXPECT_EQ(profile.lost.stack_failures + profile.lost.truncated_stacks + complete, 200u);
}

TEST(UserStackBuilder, DwarfSampleWithoutRegistersIsFailedWithItsIp) {
  RawProfile profile;
  PerfFeed builder(profile, PerfDecoderConfig{false, 127, true, kRegsMask});
  Unwinder unwinder;
  builder.set_unwinder(&unwinder);
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.ip = 0x401000;
  s.pid = s.tid = 42;
  builder.on_record(s);
  ASSERT_EQ(profile.samples.size(), 1u);
  EXPECT_EQ(profile.samples[0].stack_end, StackEnd::kFailed);
  const auto user = profile.stacks.user_frames(profile.samples[0].stack);
  ASSERT_EQ(user.size(), 1u);
  EXPECT_EQ(user[0], 0x401000u);
}

TEST(UserStackBuilder, FramePointerChainKeepsItsFramesWhenTheLeafHasAFrame) {
  // fp mode: the unwinder is only asked about the leaf; an ip outside every mapping adds nothing.
  RawProfile profile;
  PerfFeed builder(profile, PerfDecoderConfig{false, 127, false, kRegsMask});
  Unwinder unwinder;
  builder.set_unwinder(&unwinder);
  std::vector<uint8_t> stack(256, 0);
  SampleRecord s;
  s.misc = PERF_RECORD_MISC_USER;
  s.ip = 0x1234;
  s.pid = s.tid = 43;
  s.callchain = {static_cast<uint64_t>(PERF_CONTEXT_USER), 0x1234, 0x5678};
  s.regs_abi = PERF_SAMPLE_REGS_ABI_64;
  s.user_regs = {0, 0x7ffd00001000ULL, 0x1234};
  s.stack_size = stack.size();
  s.user_stack = stack;
  builder.on_record(s);
  ASSERT_EQ(profile.samples.size(), 1u);
  const auto user = profile.stacks.user_frames(profile.samples[0].stack);
  ASSERT_EQ(user.size(), 2u);
  EXPECT_EQ(user[1], 0x5678u);
  // The chain stopped at an address in no mapping: not its thread's first frame.
  EXPECT_EQ(profile.samples[0].stack_end, StackEnd::kFailed);
  EXPECT_EQ(builder.unwind_counters().leaf_callers, 0u);
}

// perf_event's frame-pointer chains end without saying why: one is complete when it ends in its
// thread's first frame (this program's _start, whose CFI leaves the return address undefined), failed
// when it ends anywhere else (a frame without a frame pointer above it: the callers are missing).
TEST(UserStackBuilder, FramePointerChainIsCompleteOnlyWhenItEndsInTheThreadsFirstFrame) {
  RawProfile profile;
  PerfFeed builder(profile, PerfDecoderConfig{false, 127, false, kRegsMask});
  Unwinder unwinder;
  builder.set_unwinder(&unwinder);
  builder.add_maps(::getpid(), read_proc_maps(::getpid()), 0);
  const auto leaf = reinterpret_cast<uint64_t>(&garbage_sample);
  const auto start = reinterpret_cast<uint64_t>(&_start);
  std::vector<uint8_t> stack(256, 0);  // no frameless-leaf caller to add: its slot holds 0
  for (const uint64_t last : {start + 4, leaf + 8}) {
    SampleRecord s;
    s.misc = PERF_RECORD_MISC_USER;
    s.ip = leaf;
    s.pid = s.tid = ::getpid();
    s.time = 1000;
    s.callchain = {static_cast<uint64_t>(PERF_CONTEXT_USER), leaf, last};
    s.regs_abi = PERF_SAMPLE_REGS_ABI_64;
    s.user_regs = {0, 0x7ffd00001000ULL, leaf};
    s.stack_size = stack.size();
    s.user_stack = stack;
    builder.on_record(s);
  }
  ASSERT_EQ(profile.samples.size(), 2u);
  EXPECT_EQ(profile.stacks.user_frames(profile.samples[0].stack).size(), 2u);
  EXPECT_EQ(profile.samples[0].stack_end, StackEnd::kComplete);
  EXPECT_EQ(profile.samples[1].stack_end, StackEnd::kFailed);
  EXPECT_EQ(profile.lost.stack_failures, 1u);
}

// The choice on the executable alone (its libraries are the next test's).
CallGraphChoice executable_only(const std::string& path) {
  return choose_call_graph(std::vector<CallGraphTarget>{{path, {}}});
}

TEST(FramePointerProbe, TellsFramePointerBuildsApart) {
  // This test binary is built without frame pointers (the project's default flags), and is read
  // through its .eh_frame_hdr.
  const FramePointerProbe self = probe_frame_pointers("/proc/self/exe");
  ASSERT_TRUE(self.readable) << self.error;
  EXPECT_TRUE(self.has_eh_frame);
  EXPECT_GT(self.functions_checked, 50u);
  EXPECT_FALSE(self.built_with_frame_pointers()) << self.with_frame_setup << " of " << self.functions_checked;
  const FramePointerProbe spinner = probe_frame_pointers(HPD_SPINNER_PATH);
  ASSERT_TRUE(spinner.readable) << spinner.error;
  EXPECT_TRUE(spinner.built_with_frame_pointers())
      << spinner.with_frame_setup << " of " << spinner.functions_checked;
  EXPECT_EQ(executable_only(HPD_SPINNER_PATH).mode, CallGraph::kFp);
  EXPECT_EQ(executable_only("/proc/self/exe").mode, CallGraph::kDwarf);
}

// A frame-pointer executable over a library without them (Debian's glibc): the walk would lose the
// callers of every library function (qsort's comparator, strtod), so auto means dwarf, and says why.
TEST(FramePointerProbe, ALibraryWithoutFramePointersMeansDwarf) {
  const CallGraphTarget program = call_graph_target_of(HPD_SPINNER_PATH);
  const auto libc = std::find_if(program.libraries.begin(), program.libraries.end(),
                                 [](const std::string& l) { return l.ends_with("/libc.so.6"); });
  ASSERT_NE(libc, program.libraries.end()) << "libc not among the program's libraries";
  const FramePointerProbe glibc = probe_frame_pointers(*libc);
  ASSERT_TRUE(glibc.readable) << glibc.error;
  ASSERT_FALSE(glibc.built_with_frame_pointers())
      << "this glibc has frame pointers: the test needs one without";
  const CallGraphChoice choice = choose_call_graph({std::string(HPD_SPINNER_PATH)});
  EXPECT_EQ(choice.mode, CallGraph::kDwarf) << choice.reason;
  EXPECT_NE(choice.reason.find("libc.so.6"), std::string::npos) << choice.reason;
  // A library that has them (another frame-pointer build) leaves fp; one that has not means dwarf.
  EXPECT_EQ(choose_call_graph(std::vector<CallGraphTarget>{{HPD_SPINNER_PATH, {HPD_CPU_SPLIT_PATH}}}).mode,
            CallGraph::kFp);
  EXPECT_EQ(choose_call_graph(std::vector<CallGraphTarget>{{HPD_SPINNER_PATH, {"/proc/self/exe"}}}).mode,
            CallGraph::kDwarf);
  // A running process: the files it maps, named as it knows them.
  const CallGraphTarget self = call_graph_target_of(static_cast<int32_t>(::getpid()));
  EXPECT_TRUE(std::any_of(self.libraries.begin(), self.libraries.end(),
                          [](const std::string& l) { return l.ends_with("/libc.so.6"); }));
  EXPECT_EQ(choose_call_graph(std::vector<CallGraphTarget>{{HPD_SPINNER_PATH, self.libraries}}).mode,
            CallGraph::kDwarf);
}

TEST(FramePointerProbe, SeesFramesWhoseSetUpGccInterleavedWithOtherInstructions) {
  // cpu_split (gcc -O2 -fno-omit-frame-pointer): gcc schedules loads and arithmetic between push %rbp
  // and mov %rsp,%rbp (run_round: 17 bytes; its leaves: 7-11; before its leaves took their length as
  // an argument, three constants, 32 bytes). It was taken for a build without frame pointers.
  const FramePointerProbe fixture = probe_frame_pointers(HPD_CPU_SPLIT_PATH);
  ASSERT_TRUE(fixture.readable) << fixture.error;
  // All but round_done, a true leaf, which gcc leaves without a frame (see cpu_split.c).
  EXPECT_EQ(fixture.with_frame_setup + 1, fixture.functions_checked);
  EXPECT_GE(fixture.functions_checked, 8u);
  EXPECT_EQ(executable_only(HPD_CPU_SPLIT_PATH).mode, CallGraph::kFp);
}

// gcc -pg -mfentry puts call __fentry__ (or, with -mnop-mcount, a 5-byte nop) before the
// prologue: the frame is set up behind it. rustc -O (v0 symbols) pushes %rbp without a frame, and
// its allocator shims (crate "__rustc", precompiled with frame pointers) must not outvote it.
TEST(FramePointerProbe, LooksPastTheFentryHookAndWantsTheFrameSetUp) {
  const std::string dir = HPD_FP_PROBE_DIR;
  struct Case {
    const char* fixture;
    bool frame_pointers;
  };
  for (const Case& c : {Case{"fentry_fp", true}, Case{"nop_fp", true}, Case{"fentry_nofp", false},
                        Case{"rust_nofp", false}, Case{"rust_fp", true}}) {
    SCOPED_TRACE(c.fixture);
    const FramePointerProbe probe = probe_frame_pointers(dir + "/" + c.fixture);
    ASSERT_TRUE(probe.readable) << probe.error;
    ASSERT_GE(probe.functions_checked, 3u);
    EXPECT_EQ(probe.built_with_frame_pointers(), c.frame_pointers)
        << probe.with_frame_setup << " of " << probe.functions_checked;
    if (c.frame_pointers && c.fixture[0] != 'r') {
      // cpu_split's functions all set up a frame but the leaf round_done (see cpu_split.c).
      EXPECT_GE(probe.with_frame_setup + 1, probe.functions_checked);
    } else if (!c.frame_pointers) {
      EXPECT_EQ(probe.with_frame_setup, 0u);
    }
    EXPECT_EQ(executable_only(dir + "/" + c.fixture).mode,
              c.frame_pointers ? CallGraph::kFp : CallGraph::kDwarf);
  }
}

TEST(FramePointerProbe, BadFilesAreReportedNotFatal) {
  const FramePointerProbe missing = probe_frame_pointers("/nonexistent/hpd/binary");
  EXPECT_FALSE(missing.readable);
  EXPECT_NE(missing.error.find("cannot open"), std::string::npos);
  const std::string junk = ::testing::TempDir() + "/hpd_not_elf_" + std::to_string(::getpid());
  {
    std::ofstream out(junk);
    out << "#!/bin/sh\necho this is no ELF file\n";
  }
  const FramePointerProbe script = probe_frame_pointers(junk);
  EXPECT_FALSE(script.readable);
  const CallGraphChoice choice = choose_call_graph({junk});
  EXPECT_EQ(choice.mode, CallGraph::kFp);
  EXPECT_NE(choice.reason.find("could not be inspected"), std::string::npos) << choice.reason;
  // A corrupt ELF: a valid header followed by garbage section tables.
  std::vector<char> bytes(4096);
  std::mt19937 rng(3);
  for (auto& b : bytes) b = static_cast<char>(rng());
  const char ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  std::memcpy(bytes.data(), ident, sizeof ident);
  {
    std::ofstream out(junk, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  (void)probe_frame_pointers(junk);  // must not crash; the result does not matter
  ::unlink(junk.c_str());
  EXPECT_EQ(resolve_command("sh").front(), '/');
}

}  // namespace
}  // namespace hpd
