// Synthetic perf records through the perf decoder into the one builder (builder_feeds.h).
#include "builder_feeds.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>

namespace hpd {
namespace {

const uint64_t kUser = static_cast<uint64_t>(PERF_CONTEXT_USER);
const uint64_t kKernel = static_cast<uint64_t>(PERF_CONTEXT_KERNEL);

SampleRecord make_sample(int32_t pid, int32_t tid, uint32_t cpu, uint64_t time, std::optional<uint64_t> value,
                         std::vector<uint64_t> chain = {kUser, 0x401000, 0x402000}) {
  SampleRecord s;
  s.pid = pid;
  s.tid = tid;
  s.cpu = cpu;
  s.time = time;
  s.period = 1'000'000;
  s.read_value = value;
  s.callchain = std::move(chain);
  s.ip = s.callchain.size() > 1 ? s.callchain[1] : 0;
  s.id = 1;
  return s;
}

TEST(PerfEventDecoder, CpuDeltaFromPerThreadPerCpuCounter) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  builder.on_record(make_sample(10, 10, 0, 100, 1'000'100));
  builder.on_record(make_sample(10, 11, 0, 110, 1'000'050));  // another thread: its own counter
  builder.on_record(make_sample(10, 10, 1, 120, 1'000'000));  // same thread on CPU 1: another event
  builder.on_record(make_sample(10, 10, 0, 130, 2'000'300));
  ASSERT_EQ(profile.samples.size(), 4u);
  EXPECT_EQ(profile.samples[0].cpu_delta_ns, 1'000'100u);
  EXPECT_EQ(profile.samples[1].cpu_delta_ns, 1'000'050u);
  EXPECT_EQ(profile.samples[2].cpu_delta_ns, 1'000'000u);
  EXPECT_EQ(profile.samples[3].cpu_delta_ns, 1'000'200u);
  // A counter that went backwards belongs to a new event (reused tid): count from zero.
  builder.on_record(make_sample(10, 10, 0, 140, 500));
  EXPECT_EQ(profile.samples[4].cpu_delta_ns, 500u);
  EXPECT_EQ(builder.samples(), 5u);
}

// A thread that exited and a new one given its tid: the new thread's counter starts from zero, even
// when its first value is already above the old thread's last one on that CPU.
TEST(PerfEventDecoder, ATidGivenToANewThreadCountsFromZero) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  builder.on_record(TaskRecord{true, 10, 10, 11, 10, 50, {}});
  builder.on_record(make_sample(10, 11, 0, 100, 1'000'000));
  builder.on_record(TaskRecord{false, 10, 10, 11, 11, 110, {}});  // exits
  builder.on_record(TaskRecord{true, 10, 10, 11, 10, 120, {}});   // another thread, the same tid
  builder.on_record(make_sample(10, 11, 0, 130, 3'000'000));
  ASSERT_EQ(profile.samples.size(), 2u);
  EXPECT_EQ(profile.samples[0].cpu_delta_ns, 1'000'000u);
  EXPECT_EQ(profile.samples[1].cpu_delta_ns, 3'000'000u);
}

SampleId make_sample_id(int32_t pid, int32_t tid, uint64_t time, uint64_t id, uint32_t cpu = 0) {
  SampleId s;
  s.pid = pid;
  s.tid = tid;
  s.time = time;
  s.id = id;
  s.cpu = cpu;
  s.present = true;
  return s;
}

ReadRecord make_read(int32_t pid, int32_t tid, uint64_t id, uint64_t time, uint64_t value) {
  return ReadRecord{pid, tid, value, make_sample_id(pid, tid, time, id)};
}

// The CPU time of the samples of a thread, its tail included.
uint64_t thread_cpu_ns(const RawProfile& profile, int32_t tid) {
  uint64_t ns = 0;
  for (const RawSample& s : profile.samples)
    if (s.tid == tid && s.kind == SampleKind::kOnCpu) ns += s.cpu_delta_ns;
  return ns;
}

// A thread created during the recording: its events are copies of its creator's (ids 1 and 2, CPUs 0
// and 1). At its exit each copy's final count comes in a READ record (after the exit record); what it
// counted after the thread's last sample on that CPU is the thread's tail, one sample without a stack,
// given once the pass after the exit's is done. The creator's counts less its copies' are its own.
TEST(PerfEventDecoder, ThreadsGetTheTimeAfterTheirLastSampleOnEachCpu) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  builder.add_direct_event(10, 10, 0, 1);
  builder.add_direct_event(10, 10, 1, 2);
  builder.on_record(TaskRecord{true, 10, 10, 11, 10, 50, {}});
  builder.on_record(TaskRecord{true, 10, 10, 11, 10, 50, {}});  // once per event of the creator
  SampleRecord a = make_sample(10, 11, 0, 100, 1'000'000);
  SampleRecord b = make_sample(10, 11, 1, 200, 3'000'000);
  b.id = 2;
  builder.on_record(a);
  builder.on_record(b);
  builder.on_record(make_sample(10, 10, 0, 210, 1'000'000));
  builder.on_record(TaskRecord{false, 10, 10, 11, 11, 300, {}});
  builder.on_record(TaskRecord{false, 10, 10, 11, 11, 300, {}});
  builder.on_record(make_read(10, 11, 1, 301, 1'400'000));  // CPU 0: 0.4 ms after its last sample
  builder.end_of_pass();
  EXPECT_EQ(builder.cpu_tails(), 0u);                       // its CPU 1 record may still come
  builder.on_record(make_read(10, 11, 2, 302, 3'100'000));  // CPU 1: 0.1 ms
  builder.end_of_pass();
  EXPECT_EQ(builder.cpu_tails(), 1u);
  EXPECT_EQ(thread_cpu_ns(profile, 11), 4'500'000u);
  EXPECT_EQ(profile.samples.back().stack, kNoIndex);
  EXPECT_EQ(profile.samples.back().stack_end, StackEnd::kUnknown);

  // The creator, at the end: each event's count holds its copies' final counts.
  builder.final_count(1, 1'400'000 + 1'700'000);  // 0.7 ms after its last sample on CPU 0
  builder.final_count(2, 3'100'000 + 250'000);    // never sampled on CPU 1
  builder.finish_cpu_tails(true);
  EXPECT_EQ(builder.cpu_tails(), 2u);
  EXPECT_EQ(thread_cpu_ns(profile, 10), 1'950'000u);
  EXPECT_EQ(builder.tails_unknown(), 0u);
}

// A creator whose copies still run when the recording ends: its count holds theirs, unknown; so are
// the running threads' own tails. Lost records: no count can be taken apart.
TEST(PerfEventDecoder, TailsThatCannotBeKnownAreNotGuessed) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  builder.add_direct_event(10, 10, 0, 1);
  builder.add_direct_event(20, 20, 0, 2);
  builder.on_record(TaskRecord{true, 10, 10, 11, 10, 50, {}});
  builder.on_record(make_sample(10, 10, 0, 100, 1'000'000));
  builder.on_record(make_sample(10, 11, 0, 110, 1'000'000));
  builder.on_record(make_sample(20, 20, 0, 120, 1'000'000));
  builder.final_count(1, 5'000'000);
  builder.final_count(2, 1'500'000);
  builder.finish_cpu_tails(true);
  EXPECT_EQ(builder.cpu_tails(), 1u);  // process 20's thread only
  EXPECT_EQ(thread_cpu_ns(profile, 20), 1'500'000u);
  EXPECT_EQ(thread_cpu_ns(profile, 10), 1'000'000u);
  EXPECT_EQ(builder.tails_unknown(), 2u);  // thread 10 (its copy runs) and thread 11

  RawProfile lossy;
  PerfFeed lost(lossy, {true, 127});
  lost.add_direct_event(20, 20, 0, 2);
  lost.on_record(make_sample(20, 20, 0, 120, 1'000'000));
  lost.final_count(2, 1'500'000);
  lost.finish_cpu_tails(false);
  EXPECT_EQ(lost.cpu_tails(), 0u);
  EXPECT_EQ(lost.tails_unknown(), 1u);
}

// A task that also inherited copies of another thread's events (created while its process was being
// attached) keeps its own events' samples: a READ record of a copy it does not keep adds nothing to its
// tail, though it still comes off the count of the event it was copied from.
TEST(PerfEventDecoder, ATailCountsOnlyTheEventsItsThreadKeeps) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  builder.add_direct_event(10, 10, 0, 1);
  builder.add_direct_event(10, 9, 0, 7);  // thread 9's, which thread 11 also inherited
  builder.set_own_event_ids(10, {1});
  builder.on_record(TaskRecord{true, 10, 10, 11, 10, 50, {}});
  SampleRecord s = make_sample(10, 11, 0, 100, 1'000'000);
  builder.on_record(s);
  builder.on_record(TaskRecord{false, 10, 10, 11, 11, 200, {}});
  builder.on_record(make_read(10, 11, 7, 201, 9'000'000));  // a copy of an event it does not keep
  builder.on_record(make_read(10, 11, 1, 201, 1'200'000));
  builder.end_of_pass();
  builder.end_of_pass();
  EXPECT_EQ(thread_cpu_ns(profile, 11), 1'200'000u);
  builder.final_count(1, 1'200'000 + 300'000);
  builder.finish_cpu_tails(true);
  EXPECT_EQ(thread_cpu_ns(profile, 10), 0u);  // no sample: no tail (nothing to attach it to)
  EXPECT_EQ(builder.cpu_tails(), 1u);
  EXPECT_EQ(builder.tails_unknown(), 1u);  // thread 9: its count was not read
}

SwitchRecord make_switch(int32_t tid, uint64_t time, bool out, bool preempt = false, uint32_t cpu = 0,
                         uint64_t id = 1) {
  SwitchRecord r;
  r.out = out;
  r.preempt = preempt;
  r.sample_id = make_sample_id(10, tid, time, id, cpu);
  return r;
}

// Switch records become off-CPU samples from a switch-out to the thread's next switch-in: blocked, or
// waiting for a CPU when the kernel flagged the switch-out PREEMPT. The rings are per CPU, so a
// switch-in may be read before its switch-out (in the same pass, or one pass earlier); a switch-in
// with no switch-out before it (the thread was off the CPU when recording began) makes nothing. No
// stack is taken, and that is no failed stack. Threads still off the CPU at the end get an interval
// up to it.
TEST(PerfEventDecoder, ContextSwitchesBecomeBlockedAndWaitingIntervals) {
  RawProfile profile;
  PerfFeed builder(profile, {false, 127});
  builder.add_maps(10, parse_maps("00001000-00005000 r-xp 00000000 08:01 11 /usr/bin/app\n"), 0);
  builder.set_own_event_ids(11, {1});
  builder.on_record(make_switch(11, 50, false));  // in, nothing before it
  builder.on_record(make_switch(11, 100, true, true, 0));
  builder.on_record(make_switch(11, 400, false, false, 1));
  builder.on_record(make_switch(12, 900, false, false, 1));  // read before its switch-out at 200
  builder.on_record(make_switch(12, 200, true, false, 0));
  builder.on_record(make_switch(13, 1000, false, false, 1));  // its switch-out comes in the next pass
  builder.end_of_pass();
  ASSERT_EQ(profile.samples.size(), 2u);
  builder.on_record(make_switch(13, 700, true, true, 0));
  builder.on_record(make_switch(11, 2000, true, false, 1));      // still blocked at the end
  builder.on_record(make_switch(11, 2000, true, false, 1, 99));  // the copy from an inherited event
  builder.end_of_pass();
  builder.finish_off_cpu(2500);
  ASSERT_EQ(profile.samples.size(), 4u);
  std::sort(profile.samples.begin(), profile.samples.end(),
            [](const RawSample& a, const RawSample& b) { return a.time_ns < b.time_ns; });
  const auto expect = [&](size_t i, int32_t tid, uint64_t time, uint64_t off, SampleKind kind) {
    const RawSample& s = profile.samples[i];
    EXPECT_EQ(s.tid, tid) << i;
    EXPECT_EQ(s.time_ns, time) << i;
    EXPECT_EQ(s.off_cpu_ns, off) << i;
    EXPECT_EQ(s.kind, kind) << i;
    EXPECT_EQ(s.cpu_delta_ns, 0u) << i;
    EXPECT_EQ(s.stack, kNoIndex) << i;
    EXPECT_EQ(s.stack_end, StackEnd::kUnknown) << i;
  };
  expect(0, 11, 100, 300, SampleKind::kWaitCpu);
  expect(1, 12, 200, 700, SampleKind::kOffCpu);
  expect(2, 13, 700, 300, SampleKind::kWaitCpu);
  expect(3, 11, 2000, 500, SampleKind::kOffCpu);
  EXPECT_EQ(profile.lost.stack_failures, 0u);
}

TEST(PerfEventDecoder, CpuDeltaFallsBackToPeriod) {
  RawProfile profile;
  PerfFeed builder(profile, {false, 127});
  builder.on_record(make_sample(10, 10, 0, 100, std::nullopt));
  builder.on_record(make_sample(10, 10, 0, 200, 99));  // read values ignored when not configured
  ASSERT_EQ(profile.samples.size(), 2u);
  EXPECT_EQ(profile.samples[0].cpu_delta_ns, 1'000'000u);
  EXPECT_EQ(profile.samples[1].cpu_delta_ns, 1'000'000u);
}

TEST(PerfEventDecoder, StacksAreSplitInternedAndClassified) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 4});
  // A user process: a sample without user frames failed (a kernel thread would have no mappings).
  builder.add_maps(1, parse_maps("00001000-00005000 r-xp 00000000 08:01 11 /usr/bin/app\n"), 0);
  builder.on_record(make_sample(1, 1, 0, 1, 10, {kKernel, 0xffffffff81000001, kUser, 0x1000, 0x2000}));
  builder.on_record(make_sample(1, 1, 0, 2, 20, {kKernel, 0xffffffff81000001, kUser, 0x1000, 0x2000}));
  builder.on_record(
      make_sample(1, 1, 0, 3, 30, {kUser, 0x1000, 0x2000, 0x3000, 0x4000}));      // hits max_stack 4
  builder.on_record(make_sample(1, 1, 0, 4, 40, {kKernel, 0xffffffff81000001}));  // no user frames
  ASSERT_EQ(profile.samples.size(), 4u);
  EXPECT_EQ(profile.samples[0].stack, profile.samples[1].stack);
  const uint32_t s0 = profile.samples[0].stack;
  ASSERT_NE(s0, kNoIndex);
  EXPECT_EQ(profile.stacks.kernel_frames(s0).size(), 1u);
  ASSERT_EQ(profile.stacks.user_frames(s0).size(), 2u);
  EXPECT_EQ(profile.stacks.user_frames(s0)[0], 0x1000u);
  EXPECT_EQ(profile.samples[0].stack_end, StackEnd::kComplete);
  EXPECT_EQ(profile.samples[2].stack_end, StackEnd::kTruncated);
  EXPECT_EQ(profile.samples[3].stack_end, StackEnd::kFailed);
  EXPECT_EQ(profile.lost.truncated_stacks, 1u);
  EXPECT_EQ(profile.lost.stack_failures, 1u);
}

// The user leaf of a sample in user mode is the interrupted instruction; of one taken in the kernel,
// the outermost kernel frame says how the thread entered: a system call's entry (the leaf is after the
// `syscall`) or an interrupt's (the interrupted instruction). Without kallsyms, or with a chain cut
// by the depth limit, it is left to the builder's presumption.
TEST(PerfEventDecoder, UserLeafFromTheModeAndTheKernelEntry) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 8});
  builder.add_maps(1, parse_maps("00001000-00005000 r-xp 00000000 08:01 11 /usr/bin/app\n"), 0);
  constexpr uint64_t kSyscallEntry = 0xffffffff81e00080, kIrqEntry = 0xffffffff81e01000;
  const auto user_mode = [](SampleRecord s) {
    s.misc = PERF_RECORD_MISC_USER;
    return s;
  };
  const auto kernel_mode = [](SampleRecord s) {
    s.misc = PERF_RECORD_MISC_KERNEL;
    return s;
  };
  builder.on_record(kernel_mode(
      make_sample(1, 1, 0, 1, 10, {kKernel, 0xffffffff81000001, kSyscallEntry, kUser, 0x1000, 0x2000})));
  builder.set_syscall_entries([](uint64_t a) { return a == kSyscallEntry; });
  builder.on_record(user_mode(make_sample(1, 1, 0, 2, 20, {kUser, 0x1000, 0x2000})));
  builder.on_record(kernel_mode(
      make_sample(1, 1, 0, 3, 30, {kKernel, 0xffffffff81000001, kSyscallEntry, kUser, 0x1000, 0x2000})));
  builder.on_record(kernel_mode(
      make_sample(1, 1, 0, 4, 40, {kKernel, 0xffffffff81000001, kIrqEntry, kUser, 0x1000, 0x2000})));
  ASSERT_EQ(profile.samples.size(), 4u);
  const auto leaf = [&](size_t i) { return profile.stacks[profile.samples[i].stack].user_leaf; };
  EXPECT_EQ(leaf(0), UserLeaf::kAfterSyscall);  // presumed: no entries known yet
  EXPECT_EQ(leaf(1), UserLeaf::kInterrupted);
  EXPECT_EQ(leaf(2), UserLeaf::kAfterSyscall);
  EXPECT_EQ(leaf(3), UserLeaf::kInterrupted);
  EXPECT_EQ(profile.samples[0].stack, profile.samples[2].stack);
  EXPECT_NE(profile.samples[2].stack, profile.samples[3].stack);
}

TEST(PerfEventDecoder, ThreadsProcessesForkExitComm) {
  RawProfile profile;
  int described = 0;
  PerfFeed builder(profile, {true, 127}, {}, [&](RawProcess&) { ++described; });
  builder.on_record(CommRecord{20, 20, "server", true, {}});
  Mmap2Record m;
  m.pid = 20;
  m.address = 0x400000;
  m.length = 0x1000;
  m.prot = PROT_READ | PROT_EXEC;
  m.filename = "/usr/bin/server";
  m.build_id = "abcd";
  m.sample_id.present = true;
  m.sample_id.time = 5;
  builder.on_record(m);
  builder.on_record(m);  // a duplicate is stored once
  Mmap2Record data = m;
  data.prot = PROT_READ;
  data.filename = "/data/file";
  builder.on_record(data);  // not executable: ignored

  builder.on_record(TaskRecord{true, 20, 20, 21, 20, 50, {}});  // new thread
  builder.on_record(CommRecord{20, 21, "worker", false, {}});
  builder.on_record(TaskRecord{true, 30, 20, 30, 21, 60, {}});  // fork: new process
  builder.on_record(make_sample(30, 30, 0, 70, 1000));
  builder.on_record(TaskRecord{false, 20, 20, 21, 21, 80, {}});  // thread exit
  builder.on_record(TaskRecord{false, 30, 30, 30, 30, 90, {}});  // process exit

  const RawProcess* server = profile.find_process(20);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->name, "server");
  ASSERT_EQ(server->mappings.size(), 1u);
  EXPECT_EQ(profile.modules[server->mappings[0].module].path, "/usr/bin/server");
  EXPECT_EQ(profile.modules[server->mappings[0].module].build_id, "abcd");
  EXPECT_EQ(server->mappings[0].time_ns, 5u);
  EXPECT_EQ(server->end_ns, 0u);

  const RawThread* worker = profile.find_thread(20, 21);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(worker->name, "worker");
  EXPECT_EQ(worker->start_ns, 50u);
  EXPECT_EQ(worker->end_ns, 80u);

  const RawProcess* child = profile.find_process(30);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->start_ns, 60u);
  EXPECT_EQ(child->end_ns, 90u);
  EXPECT_EQ(child->mappings.size(), 1u);  // the address space was copied at fork
  EXPECT_EQ(child->name, "server");
  const RawThread* child_thread = profile.find_thread(30, 30);
  ASSERT_NE(child_thread, nullptr);
  EXPECT_EQ(child_thread->name, "worker");  // comm is inherited from the forking thread
  ASSERT_EQ(profile.samples.size(), 1u);
  EXPECT_EQ(profile.samples[0].pid, 30);
  // The exec'd process; the forked one copies its parent's description (fork copies the process).
  EXPECT_EQ(described, 1);
}

// An exec's COMM record divides the old image's mappings from the new one's; the old ones end once a
// sample shows the new image running, since a sample inside execve still holds the old registers.
TEST(PerfEventDecoder, ExecEndsTheOldImagesMappings) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  // The old image, seen in /proc at the start, and a library it mapped during the recording.
  builder.add_maps(40, parse_maps("00400000-00401000 r-xp 00000000 08:01 11 /usr/bin/launcher\n"), 0);
  Mmap2Record lib;
  lib.pid = lib.tid = 40;
  lib.address = 0x7f0000000000;
  lib.length = 0x2000;
  lib.prot = PROT_READ | PROT_EXEC;
  lib.filename = "/usr/lib/libold.so";
  lib.sample_id.present = true;
  lib.sample_id.time = 100;
  builder.on_record(lib);

  CommRecord exec{40, 40, "target", true, {}};
  exec.sample_id.present = true;
  exec.sample_id.time = 500;
  builder.on_record(exec);
  // The new image maps its executable at the same address, and the same file at the same place.
  Mmap2Record image = lib;
  image.address = 0x400000;
  image.length = 0x1000;
  image.filename = "/usr/bin/target";
  image.sample_id.time = 510;
  builder.on_record(image);
  Mmap2Record again = lib;
  again.sample_id.time = 520;
  builder.on_record(again);
  // Inside execve, before it sets the new registers: a kernel sample with the old image's user address.
  SampleRecord in_execve =
      make_sample(40, 40, 0, 530, std::nullopt, {kKernel, 0xffffffff81000000, kUser, 0x7f0000000100});
  in_execve.misc = PERF_RECORD_MISC_KERNEL;
  builder.on_record(in_execve);
  const RawProcess* p = profile.find_process(40);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->mappings.size(), 4u);  // the re-mapped library is a new mapping, not a duplicate
  EXPECT_EQ(p->mappings[0].unmapped_ns, 0u) << "the old image ended before the new one ran";
  // The new image running in user mode ends the old one.
  SampleRecord running = make_sample(40, 40, 0, 600, std::nullopt, {kUser, 0x400100});
  running.misc = PERF_RECORD_MISC_USER;
  builder.on_record(running);

  EXPECT_EQ(p->name, "target");
  EXPECT_EQ(p->mappings[0].unmapped_ns, 600u);
  EXPECT_EQ(p->mappings[1].unmapped_ns, 600u);
  EXPECT_EQ(p->mappings[2].unmapped_ns, 0u);
  EXPECT_EQ(p->mappings[3].unmapped_ns, 0u);
  auto module_at = [&](uint64_t address, uint64_t time) -> std::string {
    const RawMapping* m = p->find_mapping(address, time);
    return m == nullptr ? "" : profile.modules[m->module].path;
  };
  EXPECT_EQ(module_at(0x400100, 300), "/usr/bin/launcher");
  EXPECT_EQ(module_at(0x400100, 600), "/usr/bin/target");
  // Inside execve the old image still answers where the new one has no mapping yet.
  EXPECT_EQ(module_at(0x400100, 505), "/usr/bin/launcher");
  EXPECT_EQ(module_at(0x7f0000000100, 530), "/usr/lib/libold.so");
  EXPECT_EQ(module_at(0x7f0000000100, 300), "/usr/lib/libold.so");
  EXPECT_EQ(p->find_mapping(0x7f0000000100, 600), &p->mappings[3]);
}

TEST(PerfEventDecoder, MapsAndBuildIdLookup) {
  RawProfile profile;
  std::vector<std::string> looked_up;
  PerfFeed builder(profile, {true, 127}, [&](int32_t, uint64_t, uint64_t, const std::string& path) {
    looked_up.push_back(path);
    MappedModule found;
    found.build_id = path == "[vdso]" ? "" : "feed";
    return found;
  });
  std::vector<MapsEntry> maps(4);
  maps[0] = MapsEntry{0x1000, 0x2000, 0, true, false, true, false, 8, 1, 5, "/bin/app", false};
  maps[1] = MapsEntry{0x3000, 0x4000, 0, true, true, false, false, 0, 0, 0, "[heap]", false};
  maps[2] = MapsEntry{0x5000, 0x6000, 0, true, false, true, false, 0, 0, 0, "[vdso]", false};
  maps[3] = MapsEntry{0x7000, 0x8000, 0, true, false, true, false, 0, 0, 0, "", false};
  builder.add_maps(7, maps, 0);
  const RawProcess* p = profile.find_process(7);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->mappings.size(), 3u);
  EXPECT_EQ(profile.modules[p->mappings[0].module].build_id, "feed");
  EXPECT_EQ(profile.modules[p->mappings[1].module].path, "[vdso]");
  EXPECT_EQ(profile.modules[p->mappings[1].module].build_id, "");
  EXPECT_EQ(profile.modules[p->mappings[2].module].path, "[anon]");
  EXPECT_EQ(looked_up, (std::vector<std::string>{"/bin/app", "[vdso]"}));
  EXPECT_NE(p->find_mapping(0x1800, 100), nullptr);
}

TEST(PerfEventDecoder, DropsInheritedCopiesOfALateAttachedThread) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  builder.set_own_event_ids(42, {7, 8});
  auto own = make_sample(40, 42, 0, 1, 100);
  own.id = 7;
  auto inherited = make_sample(40, 42, 0, 1, 100);
  inherited.id = 3;
  builder.on_record(own);
  builder.on_record(inherited);
  auto other_thread = make_sample(40, 41, 0, 1, 100);
  other_thread.id = 3;
  builder.on_record(other_thread);
  EXPECT_EQ(profile.samples.size(), 2u);
  EXPECT_EQ(builder.duplicate_samples(), 1u);
}

// A child process attached at the start may have inherited some events of its parent too; the tasks
// it creates inherit copies of both sets, and its rule (its own events' samples only) is theirs, until
// the task exits and its tid may go to another.
TEST(PerfEventDecoder, TasksCreatedByALateAttachedTaskKeepItsOwnEventsOnly) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  builder.set_own_event_ids(42, {7, 8});
  builder.on_record(TaskRecord{true, 50, 42, 50, 42, 100, {}});  // 42 forks process 50
  auto sample = [&](int32_t pid, int32_t tid, uint64_t id, uint64_t time) {
    auto s = make_sample(pid, tid, 0, time, 100);
    s.id = id;
    builder.on_record(s);
  };
  sample(50, 50, 8, 200);  // the copy of 42's own event
  sample(50, 50, 3, 200);  // the copy of what 42 inherited
  EXPECT_EQ(profile.samples.size(), 1u);
  EXPECT_EQ(builder.duplicate_samples(), 1u);
  builder.on_record(TaskRecord{false, 50, 42, 50, 50, 300, {}});  // 50 exits
  builder.on_record(TaskRecord{true, 50, 41, 50, 41, 400, {}});   // a task of 41 gets tid 50
  sample(50, 50, 3, 500);
  EXPECT_EQ(profile.samples.size(), 2u);
  EXPECT_EQ(builder.duplicate_samples(), 1u);
}

TEST(PerfEventDecoder, LostAndThrottleCounts) {
  RawProfile profile;
  PerfFeed builder(profile, {true, 127});
  builder.on_record(LostRecord{1, 25, {}});
  builder.on_record(LostRecord{1, 5, {}});
  builder.on_record(ThrottleRecord{false, 1, 1, 1, {}});
  builder.on_record(ThrottleRecord{true, 2, 1, 1, {}});
  builder.on_record(OtherRecord{99});
  EXPECT_EQ(profile.lost.lost_records, 30u);
  EXPECT_EQ(profile.lost.throttle_events, 1u);
  EXPECT_EQ(module_path_for("//anon"), "[anon]");
  EXPECT_EQ(module_path_for("/lib/x.so"), "/lib/x.so");
  EXPECT_EQ(module_path_for("[uprobes-trampo"), "[uprobes-trampoline]");
}

}  // namespace
}  // namespace hpd
