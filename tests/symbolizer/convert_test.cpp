// symbolize_profile: a synthetic RawProfile over the real C fixture mapped at a fake address.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "hpd/symbolizer/convert.h"
#include "test_util.h"

namespace hpd {
namespace {

constexpr uint64_t kLoadBase = 0x555500000000ull;  // where the fake process "loaded" the PIE
constexpr uint64_t kMissingStart = 0x7f0000000000ull;
constexpr uint64_t kKernelBase = 0xffffffff81000000ull;
constexpr int32_t kPid = 4242;

struct ConvertFixture : ::testing::Test {
  test::TempDir dir;
  std::vector<test::NmSymbol> nm = test::nm_functions(FIXTURE_C_PIE);
  RawProfile raw;
  ConvertOptions options;

  void SetUp() override {
    test::write_file(dir.file("kallsyms"),
                     "ffffffff81000000 T _stext\n"
                     "ffffffff81100000 T entry_SYSCALL_64\n"
                     "ffffffff81200000 t do_syscall_64\n"
                     "ffffffff81300000 T __x64_sys_nanosleep\n");
    options.kallsyms_path = dir.file("kallsyms");
    raw.info.target = "fixture";
    raw.lost.lost_records = 7;
    const std::string build_id =
        test::run("readelf -n '" FIXTURE_C_PIE "' | sed -n 's/.*Build ID: //p' | tr -d '\\n'");
    const uint32_t fixture = raw.intern_module(FIXTURE_C_PIE, build_id);
    const uint32_t missing = raw.intern_module("/nonexistent/libmissing.so", "");
    RawProcess& p = raw.process(kPid);
    p.name = "fixture";
    p.end_ns = 1;  // exited: the symbolizer must not look in /proc/4242
    for (const auto& s : test::load_segments(FIXTURE_C_PIE)) {
      if (!s.exec) continue;
      RawMapping m;
      m.start = kLoadBase + (s.vaddr & ~0xfffull);
      m.end = kLoadBase + ((s.vaddr + s.memsz + 0xfff) & ~0xfffull);
      m.file_offset = s.offset & ~0xfffull;
      m.module = fixture;
      p.mappings.push_back(m);
    }
    p.mappings.push_back(RawMapping{kMissingStart, kMissingStart + 0x10000, 0x2000, missing, 0});
    raw.thread(kPid, kPid).name = "fixture";
    raw.thread(kPid, kPid + 1).name = "worker";
    raw.thread(kPid, kPid + 7).name = "idle thread without samples";
  }

  const test::NmSymbol& sym(const std::string& name) const {
    for (const auto& s : nm) {
      if (s.name == name) return s;
    }
    throw std::runtime_error("no symbol " + name);
  }
  uint64_t start(const std::string& name) const { return kLoadBase + sym(name).address; }
  // A return address just past the function's last byte: found only if looked up at ret - 1.
  uint64_t past_end(const std::string& name) const { return start(name) + sym(name).size; }

  void add_sample(uint32_t stack, uint64_t time, int32_t tid, SampleKind kind = SampleKind::kOnCpu) {
    RawSample s;
    s.time_ns = time;
    s.pid = kPid;
    s.tid = tid;
    s.stack = stack;
    s.kind = kind;
    s.cpu_delta_ns = time / 10;
    raw.samples.push_back(s);
  }

  static std::vector<const Frame*> frames_of(const Profile& p, uint32_t stack, bool outer_only = true) {
    std::vector<const Frame*> out;
    for (uint32_t f : p.stack_frames_root_first(stack)) {
      if (!outer_only || p.frames[f].inline_depth == 0) out.push_back(&p.frames[f]);
    }
    return out;
  }
  static std::vector<std::string> names_of(const Profile& p, uint32_t stack) {
    std::vector<std::string> out;
    for (const Frame* f : frames_of(p, stack)) out.push_back(p.func_name(f->func));
    return out;
  }
  static const Thread& thread(const Profile& p, int32_t tid) {
    for (const auto& t : p.threads) {
      if (t.tid == tid) return t;
    }
    throw std::runtime_error("no thread");
  }
};

TEST_F(ConvertFixture, UserStacksKernelStacksAndFallbacks) {
  const std::vector<uint64_t> user_a{start("hpd_leaf"), past_end("hpd_static_helper"), past_end("hpd_middle"),
                                     past_end("hpd_outer"), past_end("main")};
  const uint32_t a = raw.stacks.intern({}, user_a);
  const std::vector<uint64_t> kernel_b{0xffffffff81200000ull, 0xffffffff81100030ull};
  const std::vector<uint64_t> user_b{start("hpd_leaf") + 5, past_end("main")};
  const uint32_t b = raw.stacks.intern(kernel_b, user_b);
  const std::vector<uint64_t> user_c{0x1234, kMissingStart + 0x100, past_end("main")};
  const uint32_t c = raw.stacks.intern({}, user_c);
  add_sample(a, 300, kPid);
  add_sample(a, 100, kPid);
  add_sample(b, 200, kPid);
  add_sample(c, 150, kPid + 1);
  add_sample(b, 250, kPid + 1, SampleKind::kOffCpu);
  add_sample(kNoIndex, 260, kPid + 1);
  add_sample(a, 270, kPid + 99);  // a thread the recorder never named
  raw.call_edges.push_back(RawCallEdge{kPid, past_end("main"), start("hpd_outer"), 42});

  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw, symbolizer, options);

  EXPECT_EQ(p.meta.recording.target, "fixture");
  EXPECT_EQ(p.meta.lost.lost_records, 7u);
  EXPECT_EQ(p.meta.missing_modules, std::vector<std::string>{"/nonexistent/libmissing.so"});

  // Prefix tree in topological order.
  for (size_t i = 0; i < p.stacks.size(); ++i) {
    EXPECT_TRUE(p.stacks[i].prefix == kNoIndex || p.stacks[i].prefix < i) << i;
  }

  // Threads: only those with samples here (the recording info names no hpd backend, so nothing says
  // the user named these processes; see UnsampledThreadsOfNamedProcessesKeepTheirTrack), samples
  // sorted by time, main thread flagged.
  ASSERT_EQ(p.threads.size(), 3u);
  const Thread& main_thread = thread(p, kPid);
  EXPECT_TRUE(main_thread.is_main);
  EXPECT_EQ(main_thread.name, "fixture");
  EXPECT_EQ(main_thread.process_name, "fixture");
  ASSERT_EQ(main_thread.samples.size(), 3u);
  EXPECT_EQ(main_thread.samples[0].time_ns, 100u);
  EXPECT_EQ(main_thread.samples[1].time_ns, 200u);
  EXPECT_EQ(main_thread.samples[2].time_ns, 300u);
  EXPECT_EQ(main_thread.samples[0].cpu_delta_ns, 10u);
  const Thread& worker = thread(p, kPid + 1);
  EXPECT_FALSE(worker.is_main);
  EXPECT_EQ(worker.name, "worker");
  ASSERT_EQ(worker.samples.size(), 3u);
  EXPECT_EQ(worker.samples[2].stack, kNoIndex);
  EXPECT_EQ(thread(p, kPid + 99).process_name, "fixture");

  // Stack A: user only, root first; leaf exact, callers nudged to ret - 1.
  const uint32_t stack_a = main_thread.samples[0].stack;
  EXPECT_EQ(main_thread.samples[2].stack, stack_a);  // one build per unique raw stack
  EXPECT_EQ(names_of(p, stack_a),
            (std::vector<std::string>{"main", "hpd_outer", "hpd_middle", "hpd_static_helper", "hpd_leaf"}));
  const auto fa = frames_of(p, stack_a);
  EXPECT_EQ(fa.back()->address, static_cast<int64_t>(sym("hpd_leaf").address));
  EXPECT_EQ(fa[0]->address, static_cast<int64_t>(sym("main").address + sym("main").size - 1));
  EXPECT_EQ(fa[3]->address,
            static_cast<int64_t>(sym("hpd_static_helper").address + sym("hpd_static_helper").size - 1));
  for (const Frame* f : fa) {
    EXPECT_EQ(f->category, Category::kUser);
    ASSERT_NE(f->native_symbol, kNoIndex);
    EXPECT_EQ(p.native_symbols[f->native_symbol].address, sym(p.func_name(f->func)).address);
    EXPECT_EQ(p.native_symbols[f->native_symbol].size, sym(p.func_name(f->func)).size);
    ASSERT_NE(f->lib, kNoIndex);
    EXPECT_EQ(p.libs[f->lib].path, FIXTURE_C_PIE);
  }

  // Stack B: user frames, then kernel frames from the entry to the leaf. The user leaf sits under
  // the kernel, so it is a return address too (nudged).
  const uint32_t stack_b = main_thread.samples[1].stack;
  EXPECT_EQ(names_of(p, stack_b),
            (std::vector<std::string>{"main", "hpd_leaf", "entry_SYSCALL_64", "do_syscall_64"}));
  const auto fb = frames_of(p, stack_b);
  EXPECT_EQ(fb[1]->address, static_cast<int64_t>(sym("hpd_leaf").address + 4));
  EXPECT_EQ(fb[2]->address, static_cast<int64_t>(0xffffffff8110002full - kKernelBase));
  EXPECT_EQ(fb[3]->address, static_cast<int64_t>(0xffffffff81200000ull - kKernelBase));
  EXPECT_EQ(fb[2]->category, Category::kKernel);
  EXPECT_EQ(fb[3]->category, Category::kKernel);
  EXPECT_EQ(fb[1]->category, Category::kUser);
  EXPECT_TRUE(p.libs[fb[3]->lib].is_kernel);
  EXPECT_EQ(p.libs[fb[3]->lib].name, "[kernel.kallsyms]");

  // The same raw stack off-CPU: every frame Idle, a different Profile stack, the same user functions.
  // Its kernel leaf is a return address there (a call into the scheduler), looked up one byte back:
  // at do_syscall_64's first byte, that is the function before it.
  const uint32_t stack_b_idle = worker.samples[1].stack;
  EXPECT_NE(stack_b_idle, stack_b);
  EXPECT_EQ(names_of(p, stack_b_idle),
            (std::vector<std::string>{"main", "hpd_leaf", "entry_SYSCALL_64", "entry_SYSCALL_64"}));
  for (const Frame* f : frames_of(p, stack_b_idle, false)) EXPECT_EQ(f->category, Category::kIdle);

  // Stack C: an unmapped address and a module that cannot be read.
  const uint32_t stack_c = worker.samples[0].stack;
  EXPECT_EQ(names_of(p, stack_c), (std::vector<std::string>{"main", "libmissing.so+0x20ff", "0x1234"}));
  const auto fc = frames_of(p, stack_c);
  EXPECT_EQ(fc[2]->lib, kNoIndex);
  EXPECT_EQ(fc[2]->address, -1);
  EXPECT_EQ(fc[2]->native_symbol, kNoIndex);
  ASSERT_NE(fc[1]->lib, kNoIndex);
  EXPECT_EQ(p.libs[fc[1]->lib].name, "libmissing.so");
  EXPECT_EQ(fc[1]->address, 0x20ff);

  // Libs: the fixture (with its build-id), the missing module, the kernel.
  EXPECT_EQ(p.libs.size(), 3u);
  EXPECT_EQ(p.libs[fa[0]->lib].name, "sym_fixture_c_pie");
  EXPECT_EQ(p.libs[fa[0]->lib].build_id.size(), 40u);

  ASSERT_EQ(p.call_edges.size(), 1u);
  EXPECT_EQ(p.func_name(p.call_edges[0].caller_func), "main");
  EXPECT_EQ(p.func_name(p.call_edges[0].callee_func), "hpd_outer");
  EXPECT_EQ(p.call_edges[0].count, 42u);
}

// An interrupted thread's user IP under kernel frames is exact, though taken for a return address:
// at a function's first byte, one byte back is the padding before it, in no function. The address
// itself names the function (and a real return address one byte back still names its caller).
// Mappings the kernel makes without a file ([uprobes]: where uprobes single-step the instructions
// they displaced; [vsyscall]) are no missing module: their addresses become one frame named by the
// mapping. A sample that waited for a CPU has its frames in that category, apart from a blocked one's
// (Idle) and an on-CPU one's, even for the same raw stack.
TEST_F(ConvertFixture, KernelSpecialMappingsAreNotMissingAndWaitsHaveTheirCategory) {
  const uint32_t uprobes = raw.intern_module("[uprobes]", "");
  const uint32_t vsyscall = raw.intern_module("[vsyscall]", "");
  constexpr uint64_t kXol = 0x7fff00000000, kVsyscall = 0xffffffffff600000;
  raw.process(kPid).mappings.push_back(RawMapping{kXol, kXol + 0x1000, 0, uprobes, 0});
  raw.process(kPid).mappings.push_back(RawMapping{kVsyscall, kVsyscall + 0x1000, 0, vsyscall, 0});
  const uint32_t a = raw.stacks.intern({}, std::vector<uint64_t>{kXol + 0x80, past_end("main")});
  const uint32_t b = raw.stacks.intern({}, std::vector<uint64_t>{kVsyscall + 0x400, past_end("main")});
  add_sample(a, 100, kPid);
  add_sample(b, 110, kPid);
  add_sample(a, 120, kPid, SampleKind::kWaitCpu);
  add_sample(a, 130, kPid, SampleKind::kOffCpu);

  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw, symbolizer, options);
  EXPECT_TRUE(p.meta.missing_modules.empty()) << p.meta.missing_modules.front();
  const Thread& t = thread(p, kPid);
  ASSERT_EQ(t.samples.size(), 4u);
  EXPECT_EQ(names_of(p, t.samples[0].stack), (std::vector<std::string>{"main", "[uprobes]"}));
  EXPECT_EQ(names_of(p, t.samples[1].stack), (std::vector<std::string>{"main", "[vsyscall]"}));
  const auto leaf_category = [&](size_t i) { return p.frames[p.stacks[t.samples[i].stack].frame].category; };
  EXPECT_EQ(leaf_category(0), Category::kUser);
  EXPECT_EQ(t.samples[2].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(leaf_category(2), Category::kWaitCpu);
  for (const Frame* f : frames_of(p, t.samples[2].stack)) EXPECT_EQ(f->category, Category::kWaitCpu);
  EXPECT_EQ(leaf_category(3), Category::kIdle);
  EXPECT_NE(t.samples[2].stack, t.samples[3].stack);
}

TEST_F(ConvertFixture, UserIpUnderKernelFramesAtAFunctionStart) {
  // Only meaningful where the byte before the function is padding after a sized symbol (hpd_leaf).
  const uint64_t helper = sym("hpd_static_helper").address;
  const uint64_t leaf_end = sym("hpd_leaf").address + sym("hpd_leaf").size;
  ASSERT_LT(leaf_end, helper);
  const std::vector<uint64_t> kernel{0xffffffff81200001ull};  // a return address inside do_syscall_64
  const std::vector<uint64_t> user{start("hpd_static_helper"), past_end("main")};
  add_sample(raw.stacks.intern(kernel, user), 100, kPid, SampleKind::kOffCpu);
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw, symbolizer, options);
  ASSERT_EQ(p.threads.size(), 1u);
  EXPECT_EQ(names_of(p, p.threads[0].samples.at(0).stack),
            (std::vector<std::string>{"main", "hpd_static_helper", "do_syscall_64"}));
}

// The user leaf is looked up as what the stack says it is: an interrupted instruction as it is (also
// under kernel frames: a thread preempted in user code), the instruction after a `syscall` one byte
// back, as a return address.
TEST_F(ConvertFixture, UserLeafIsLookedUpAsWhatItIs) {
  ASSERT_GT(sym("hpd_leaf").size, 4u);
  const std::vector<uint64_t> kernel{0xffffffff81200000ull};
  const std::vector<uint64_t> user{start("hpd_leaf") + 4, past_end("main")};
  add_sample(raw.stacks.intern(kernel, user, UserLeaf::kInterrupted), 100, kPid, SampleKind::kWaitCpu);
  add_sample(raw.stacks.intern(kernel, user, UserLeaf::kAfterSyscall), 200, kPid, SampleKind::kWaitCpu);
  add_sample(raw.stacks.intern({}, user, UserLeaf::kInterrupted), 300, kPid);
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw, symbolizer, options);
  const Thread& t = thread(p, kPid);
  ASSERT_EQ(t.samples.size(), 3u);
  const auto leaf = [&](size_t i) {
    const auto frames = frames_of(p, t.samples[i].stack);
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      if (p.func_name((*it)->func) == "hpd_leaf") return (*it)->address;
    }
    ADD_FAILURE() << "no hpd_leaf frame in sample " << i;
    return int64_t{-1};
  };
  EXPECT_EQ(leaf(0), static_cast<int64_t>(sym("hpd_leaf").address + 4));
  EXPECT_EQ(leaf(1), static_cast<int64_t>(sym("hpd_leaf").address + 3));
  EXPECT_EQ(leaf(2), leaf(0));
}

TEST_F(ConvertFixture, KernelFramesCanBeDroppedAndMissingKallsymsIsListed) {
  const uint32_t b =
      raw.stacks.intern(std::vector<uint64_t>{0xffffffff81200000ull}, std::vector<uint64_t>{start("main")});
  add_sample(b, 10, kPid);
  {
    ConvertOptions no_kernel = options;
    no_kernel.kernel_frames = false;
    Symbolizer symbolizer;
    const Profile p = symbolize_profile(raw, symbolizer, no_kernel);
    EXPECT_EQ(names_of(p, p.threads.at(0).samples.at(0).stack).size(), 1u);
  }
  ConvertOptions bad_kallsyms = options;
  bad_kallsyms.kallsyms_path = dir.file("no-such-kallsyms");
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw, symbolizer, bad_kallsyms);
  const auto frames = frames_of(p, p.threads.at(0).samples.at(0).stack);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(p.func_name(frames[1]->func), "0xffffffff81200000");
  EXPECT_EQ(frames[1]->category, Category::kKernel);
  EXPECT_EQ(p.meta.missing_modules, std::vector<std::string>{"[kernel.kallsyms]"});
}

// Kernel symbols the recording already read (ConvertOptions::kernel_symbols) are used instead of the
// file: the same frames as from the file, and none read from kallsyms_path.
TEST_F(ConvertFixture, KernelSymbolsReadByTheRecordingAreUsedInsteadOfTheFile) {
  const uint32_t b =
      raw.stacks.intern(std::vector<uint64_t>{0xffffffff81200010ull}, std::vector<uint64_t>{start("main")});
  add_sample(b, 10, kPid);
  Symbolizer from_file;
  const Profile want = symbolize_profile(raw, from_file, options);
  auto symbols = std::make_shared<KernelSymbols>();
  ASSERT_TRUE(symbols->load(options.kallsyms_path));
  ConvertOptions preloaded = options;
  preloaded.kallsyms_path = dir.file("no-such-kallsyms");
  preloaded.kernel_symbols = symbols;
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw, symbolizer, preloaded);
  const auto frames = frames_of(p, p.threads.at(0).samples.at(0).stack);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(p.func_name(frames[1]->func), "do_syscall_64");
  EXPECT_EQ(names_of(p, p.threads.at(0).samples.at(0).stack),
            names_of(want, want.threads.at(0).samples.at(0).stack));
  EXPECT_TRUE(p.meta.missing_modules.empty());
}

// A recording of processes the user named (a pid, a command) keeps every thread it saw, sampled or
// not: a thread blocked all along is never sampled by the perf_event backend without --off-cpu, yet it
// existed. It gets its name and lifetime and no sample; the other threads' samples are untouched.
TEST_F(ConvertFixture, UnsampledThreadsOfNamedProcessesKeepTheirTrack) {
  const uint32_t a = raw.stacks.intern({}, std::vector<uint64_t>{start("main")});
  raw.info.backend = "perf";
  raw.info.target = "pid 4242";
  RawThread& idle = raw.thread(kPid, kPid + 7);
  idle.start_ns = 50;
  idle.end_ns = 900;
  add_sample(a, 100, kPid);
  add_sample(a, 200, kPid);
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw, symbolizer, options);
  // In RawProfile order: fixture, worker, the idle thread.
  ASSERT_EQ(p.threads.size(), 3u);
  EXPECT_EQ(p.threads[0].tid, kPid);
  EXPECT_EQ(p.threads[0].samples.size(), 2u);
  EXPECT_EQ(p.threads[1].name, "worker");
  EXPECT_TRUE(p.threads[1].samples.empty());
  const Thread& t = thread(p, kPid + 7);
  EXPECT_EQ(t.name, "idle thread without samples");
  EXPECT_EQ(t.process_name, "fixture");
  EXPECT_FALSE(t.is_main);
  EXPECT_EQ(t.start_ns, 50u);
  EXPECT_EQ(t.end_ns, 900u);
  EXPECT_TRUE(t.samples.empty());
  EXPECT_TRUE(t.sample_sums.empty());
  EXPECT_EQ(profile_thread_count(raw), p.threads.size());

  // The same with eBPF and a command target.
  raw.info.backend = "bpf";
  raw.info.target = "./server --port 80";
  EXPECT_EQ(symbolize_profile(raw, symbolizer, options).threads.size(), 3u);
  EXPECT_EQ(profile_thread_count(raw), 3u);
}

// A system-wide, cgroup or continuous recording may know thousands of threads that never ran; a
// perf.data file does not say what was recorded: there only threads with samples (or losses) stay.
TEST_F(ConvertFixture, UnsampledThreadsOfSystemWideRecordingsAreLeftOut) {
  const uint32_t a = raw.stacks.intern({}, std::vector<uint64_t>{start("main")});
  add_sample(a, 100, kPid);
  Symbolizer symbolizer;
  for (const auto& [backend, target] :
       std::vector<std::pair<std::string, std::string>>{{"bpf", "all processes"},
                                                        {"bpf", "all processes while running ./server"},
                                                        {"bpf", "cgroup /sys/fs/cgroup/web"},
                                                        {"bpf", "continuous profile (3 chunks, ...)"},
                                                        {"perf.data", "perf record -p 4242"}}) {
    SCOPED_TRACE(backend + " " + target);
    raw.info.backend = backend;
    raw.info.target = target;
    const Profile p = symbolize_profile(raw, symbolizer, options);
    ASSERT_EQ(p.threads.size(), 1u);
    EXPECT_EQ(p.threads[0].tid, kPid);
    EXPECT_EQ(profile_thread_count(raw), 1u);
  }
}

// profile_thread_count (the summary of a capture, not symbolized) against the Threads the symbolized
// profile has: threads with samples, with released sums only, with lost records only, a thread the
// recorder never named, and a process with MIP counts but no samples (its main thread is added).
TEST_F(ConvertFixture, ThreadCountWithoutSymbolizingIsThatOfTheProfile) {
  const uint32_t a = raw.stacks.intern({}, std::vector<uint64_t>{start("main")});
  EXPECT_EQ(profile_thread_count(raw), 0u);
  add_sample(a, 100, kPid);
  add_sample(a, 110, kPid + 99);  // no RawThread
  raw.thread(kPid, kPid + 2).lost.stack_failures = 3;
  RawSampleSum sum;
  sum.pid = kPid;
  sum.tid = kPid + 3;
  sum.stack = a;
  sum.samples = 2;
  raw.released.push_back(sum);
  raw.process(5151).name = "counted only";
  RawMipSnapshot mip;
  mip.pid = 5151;
  mip.module = 0;
  mip.functions.push_back(RawMipFunction{});
  raw.mip_snapshots.push_back(mip);
  raw.mip_snapshots.push_back(mip);  // a second snapshot of the same process: still one main thread
  RawMipSnapshot bad = mip;
  bad.pid = 6161;
  bad.module = 99;  // no such module: skipped by the symbolizer, so no thread
  raw.mip_snapshots.push_back(bad);
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(raw, symbolizer, options);
  EXPECT_EQ(p.threads.size(), 5u);
  EXPECT_EQ(profile_thread_count(raw), p.threads.size());
}

// A library replaced at the same address mid-recording: samples before and after resolve differently.
TEST_F(ConvertFixture, MappingEpochsSeparateReusedAddresses) {
  const uint32_t other = raw.intern_module(FIXTURE_C_NOPIE, "");
  RawProcess& p = raw.process(kPid);
  const uint64_t fake = 0x600000000000ull;
  p.mappings.push_back(
      RawMapping{fake, fake + 0x1000, 0x1000, raw.intern_module("/nonexistent/first.so", ""), 0});
  p.mappings.push_back(RawMapping{fake, fake + 0x1000, 0x1000, other, 500});
  const uint32_t s = raw.stacks.intern({}, std::vector<uint64_t>{fake + 0x10});
  add_sample(s, 100, kPid);
  add_sample(s, 600, kPid);
  Symbolizer symbolizer;
  const Profile out = symbolize_profile(raw, symbolizer, options);
  const Thread& t = thread(out, kPid);
  ASSERT_EQ(t.samples.size(), 2u);
  ASSERT_NE(t.samples[0].stack, t.samples[1].stack);
  EXPECT_EQ(names_of(out, t.samples[0].stack), std::vector<std::string>{"first.so+0x1010"});
  EXPECT_NE(names_of(out, t.samples[1].stack)[0].find("sym_fixture_c_nopie"), 0u);
}

// One Frame per inline level, outer first, sharing address and native symbol. Needs the DWARF
// index; without it the address gives the outer function alone.
TEST_F(ConvertFixture, InlineChainsBecomeFramesPerLevel) {
  // The return address of the call to hpd_leaf made by the inlined hpd_inlined inside hpd_outer.
  std::istringstream dis(test::run("objdump -d --no-show-raw-insn '" FIXTURE_C_PIE "'"));
  std::string line;
  bool in_outer = false, take_next = false;
  uint64_t ret = 0;
  while (std::getline(dis, line) && ret == 0) {
    if (line.find("<hpd_outer>:") != std::string::npos)
      in_outer = true;
    else if (line.find(">:") != std::string::npos)
      in_outer = false;
    if (!in_outer || line.find(':') == std::string::npos || line[0] != ' ') continue;
    if (take_next) ret = std::stoull(line.substr(0, line.find(':')), nullptr, 16);
    if (line.find("call") != std::string::npos && line.find("<hpd_leaf>") != std::string::npos)
      take_next = true;
  }
  ASSERT_NE(ret, 0u);
  const uint32_t s = raw.stacks.intern({}, std::vector<uint64_t>{start("hpd_leaf"), kLoadBase + ret});
  add_sample(s, 10, kPid);
  Symbolizer symbolizer;
  const ModuleInfo& info = symbolizer.module_info(test::module_ref(FIXTURE_C_PIE));
  const Profile p = symbolize_profile(raw, symbolizer, options);
  const auto all = frames_of(p, p.threads.at(0).samples.at(0).stack, false);
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(p.func_name(all[0]->func), "hpd_outer");
  EXPECT_EQ(all[0]->inline_depth, 0);
  EXPECT_EQ(p.func_name(all.back()->func), "hpd_leaf");
  if (!info.dwarf_index) {
    EXPECT_EQ(all.size(), 2u);
    GTEST_SKIP() << "built without the DWARF index: no inline frames to check";
  }
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(p.func_name(all[1]->func), "hpd_inlined");
  EXPECT_EQ(all[1]->inline_depth, 1);
  EXPECT_EQ(all[1]->address, all[0]->address);
  EXPECT_EQ(all[1]->native_symbol, all[0]->native_symbol);
  EXPECT_GT(all[1]->line, 0u);
  EXPECT_NE(p.funcs[all[1]->func].file, kNoIndex);
}

}  // namespace
}  // namespace hpd

namespace hpd {
namespace {

// Real glibc frames, as this process maps libc: the functions are named without their ELF
// versions, and the profile's native symbols keep the versioned names.
TEST(ConvertGlibc, FramesWithoutVersionsNativeSymbolsWithThem) {
  std::ifstream maps("/proc/self/maps");
  RawProfile raw;
  RawProcess& p = raw.process(kPid);
  p.end_ns = 1;
  std::string libc;
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos || line.find("/libc.so") == std::string::npos) continue;
    std::istringstream f(line);
    std::string range, perms, offset;
    f >> range >> perms >> offset;
    if (perms.find('x') == std::string::npos) continue;
    libc = line.substr(slash);
    RawMapping m;
    m.start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    m.end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    m.file_offset = std::stoull(offset, nullptr, 16);
    m.module = raw.intern_module(libc, "");
    p.mappings.push_back(m);
  }
  ASSERT_FALSE(libc.empty());
  // Leaf clock_nanosleep (as a sleeping thread's IP) called from __libc_start_main.
  const auto sleep_fn = reinterpret_cast<uint64_t>(&::clock_nanosleep);
  const uint64_t start_main = reinterpret_cast<uint64_t>(::dlsym(RTLD_DEFAULT, "__libc_start_main"));
  ASSERT_NE(start_main, 0u);
  const uint64_t user[] = {sleep_fn + 4, start_main + 17};
  RawSample s;
  s.pid = s.tid = kPid;
  s.stack = raw.stacks.intern({}, user);
  raw.samples.push_back(s);
  Symbolizer symbolizer;
  const Profile profile = symbolize_profile(raw, symbolizer, ConvertOptions{});
  ASSERT_TRUE(profile.meta.missing_modules.empty());
  std::vector<std::string> names, native_names;
  for (uint32_t f : profile.stack_frames_root_first(profile.threads.at(0).samples.at(0).stack)) {
    if (profile.frames[f].inline_depth != 0) continue;
    names.push_back(profile.func_name(profile.frames[f].func));
    native_names.push_back(profile.strings[profile.native_symbols.at(profile.frames[f].native_symbol).name]);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"__libc_start_main", "clock_nanosleep"}));
  ASSERT_EQ(native_names.size(), 2u);
  EXPECT_EQ(native_names[0].rfind("__libc_start_main@", 0), 0u) << native_names[0];
  EXPECT_EQ(native_names[1].rfind("clock_nanosleep@", 0), 0u) << native_names[1];
  for (const std::string& name : profile.strings.strings()) {
    if (name.find("@GLIBC") == std::string::npos) continue;
    const bool native = std::any_of(profile.native_symbols.begin(), profile.native_symbols.end(),
                                    [&](const NativeSymbol& n) { return profile.strings[n.name] == name; });
    EXPECT_TRUE(native) << name << " is shown somewhere other than a native symbol";
  }
}

}  // namespace
}  // namespace hpd
