// Synthetic eBPF ring-buffer records through the eBPF decoder into the one builder (builder_feeds.h).
#include "builder_feeds.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#define NOINLINE_FOR_TEST __attribute__((noinline))

namespace hpd {
namespace {

hpd_event_header header(uint32_t type, int32_t pid, int32_t tid, uint64_t time, const char* comm) {
  hpd_event_header h{};
  h.type = type;
  h.cpu = 1;
  h.pid = pid;
  h.tid = tid;
  h.time_ns = time;
  std::memcpy(h.comm, comm, std::min(std::strlen(comm), sizeof h.comm));
  return h;
}

// The bytes the program would write: the record cut after its frames.
std::vector<uint8_t> sample_bytes(uint32_t type, int32_t pid, int32_t tid, uint64_t time, const char* comm,
                                  std::vector<uint64_t> kernel, std::vector<uint64_t> user,
                                  uint64_t delta = 0, uint64_t off = 0, uint16_t user_end = HPD_USER_END_ROOT,
                                  uint32_t flags = 0) {
  hpd_sample_event e{};
  e.header = header(type, pid, tid, time, comm);
  e.cpu_delta_ns = delta;
  e.off_cpu_ns = off;
  e.user_end = user_end;
  e.flags = flags;
  e.kernel_frames = static_cast<uint16_t>(kernel.size());
  e.user_frames = static_cast<uint16_t>(user.size());
  size_t i = 0;
  for (uint64_t a : kernel) e.ips[i++] = a;
  for (uint64_t a : user) e.ips[i++] = a;
  const size_t size = offsetof(hpd_sample_event, ips) + i * sizeof(uint64_t);
  std::vector<uint8_t> bytes(size);
  std::memcpy(bytes.data(), &e, size);
  return bytes;
}

std::vector<MapsEntry> maps(const char* text) {
  return parse_maps(text);
}

TEST(BpfEventDecoder, OnAndOffCpuSamplesWithStacks) {
  RawProfile profile;
  BpfFeed builder(profile, {1000});
  builder.add_initial_process(10, maps("00400000-00402000 r-xp 00000000 08:01 5 /usr/bin/app\n"));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 10, 10, 2000, "app", {0xffffffff81000010},
                                 {0x400100, 0x400200}, 1'000'000));
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 10, 11, 2500, "worker", {0xffffffff81000020},
                                 {0x400300, 0x400200}, 0, 7'000'000));
  ASSERT_EQ(profile.samples.size(), 2u);
  const RawSample& on = profile.samples[0];
  EXPECT_EQ(on.kind, SampleKind::kOnCpu);
  EXPECT_EQ(on.cpu_delta_ns, 1'000'000u);
  EXPECT_EQ(on.cpu, 1);
  EXPECT_EQ(on.stack_end, StackEnd::kComplete);
  ASSERT_NE(on.stack, kNoIndex);
  ASSERT_EQ(profile.stacks.kernel_frames(on.stack).size(), 1u);
  ASSERT_EQ(profile.stacks.user_frames(on.stack).size(), 2u);
  EXPECT_EQ(profile.stacks.user_frames(on.stack)[0], 0x400100u);
  const RawSample& off = profile.samples[1];
  EXPECT_EQ(off.kind, SampleKind::kOffCpu);
  EXPECT_EQ(off.cpu_delta_ns, 0u);
  EXPECT_EQ(off.off_cpu_ns, 7'000'000u);
  EXPECT_EQ(off.time_ns, 2500u);
  const RawThread* worker = profile.find_thread(10, 11);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(worker->name, "worker");
  EXPECT_EQ(worker->start_ns, 1000u);  // existed when the recording began
  EXPECT_EQ(profile.find_process(10)->name, "app");
  EXPECT_EQ(builder.samples(), 2u);
}

TEST(BpfEventDecoder, TheWalkEndDecidesCompleteness) {
  RawProfile profile;
  BpfFeed builder(profile, {0});
  builder.add_initial_process(30, maps("00400000-00402000 r-xp 00000000 08:01 5 /usr/bin/app\n"));
  const uint16_t ends[] = {HPD_USER_END_ROOT,      HPD_USER_END_FP_ZERO,   HPD_USER_END_DEPTH,
                           HPD_USER_END_NO_CFI,    HPD_USER_END_FP_BROKEN, HPD_USER_END_UNSUPPORTED,
                           HPD_USER_END_NO_GROWTH, HPD_USER_END_NONE};
  const StackEnd
      want[] = {StackEnd::kComplete, StackEnd::kComplete, StackEnd::kTruncated,
                StackEnd::kFailed,   StackEnd::kFailed,   StackEnd::kFailed,
                StackEnd::kFailed,   StackEnd::kUnknown};  // a walk that does not say: not known complete
  for (size_t i = 0; i < std::size(ends); ++i)
    builder.on_record(
        sample_bytes(HPD_EVENT_ON_CPU, 30, 30, 10 + i, "app", {}, {0x400100, 0x400200}, 0, 0, ends[i]));
  builder.on_record(
      sample_bytes(HPD_EVENT_OFF_CPU, 30, 30, 40, "app", {}, {0x400100}, 0, 5, HPD_USER_END_ROOT));
  ASSERT_EQ(profile.samples.size(), std::size(ends) + 1);
  for (size_t i = 0; i < std::size(ends); ++i) EXPECT_EQ(profile.samples[i].stack_end, want[i]) << i;
  EXPECT_EQ(builder.user_ends()[0][HPD_USER_END_ROOT], 1u);
  EXPECT_EQ(builder.user_ends()[0][HPD_USER_END_NO_CFI], 1u);
  EXPECT_EQ(builder.user_ends()[1][HPD_USER_END_ROOT], 1u);
}

TEST(BpfEventDecoder, OffCpuKernelStacksStartAtTheBlockingFunction) {
  RawProfile profile;
  BpfFeed builder(profile, {0});
  // 0x...100 and 0x...200 stand for __schedule and schedule, 0x...300 for the function that blocked.
  builder.set_scheduler_frames([](uint64_t a) { return a == 0xffffffff81000100 || a == 0xffffffff81000200; });
  builder.add_initial_process(10, maps("00400000-00402000 r-xp 00000000 08:01 5 /usr/bin/app\n"));
  const std::vector<uint64_t> kernel = {0xffffffff81000100, 0xffffffff81000200, 0xffffffff81000300,
                                        0xffffffff81000200};
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 10, 10, 50, "app", kernel, {0x400100}, 0, 7));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 10, 10, 60, "app", kernel, {0x400100}, 1));
  ASSERT_EQ(profile.samples.size(), 2u);
  const auto off = profile.stacks.kernel_frames(profile.samples[0].stack);
  // Only the leading scheduler frames go; a later frame of the same function stays.
  EXPECT_EQ(std::vector<uint64_t>(off.begin(), off.end()),
            (std::vector<uint64_t>{0xffffffff81000300, 0xffffffff81000200}));
  EXPECT_EQ(profile.stacks.kernel_frames(profile.samples[1].stack).size(), 4u);  // on-CPU: untouched
}

// A switch-out of a runnable thread (preempted, or yielding in TASK_RUNNING: the program sets
// HPD_SAMPLE_PREEMPTED for both) is time spent waiting for a CPU, not blocked; its kernel stack loses
// the scheduler frames too, leaving the preemption point. The flag means nothing on an on-CPU record.
TEST(BpfEventDecoder, RunnableSwitchOutsAreWaitsForTheCpu) {
  RawProfile profile;
  BpfFeed builder(profile, {0});
  builder.set_scheduler_frames([](uint64_t a) { return a == 0xffffffff81000100; });
  builder.add_initial_process(10, maps("00400000-00402000 r-xp 00000000 08:01 5 /usr/bin/app\n"));
  const std::vector<uint64_t> preempted = {0xffffffff81000100, 0xffffffff81000400};  // __schedule, irq exit
  const std::vector<uint64_t> blocked = {0xffffffff81000100, 0xffffffff81000300};    // __schedule, futex
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 10, 10, 50, "app", preempted, {0x400100}, 0, 3'000'000,
                                 HPD_USER_END_ROOT, HPD_SAMPLE_PREEMPTED));
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 10, 10, 60, "app", blocked, {0x400200}, 0, 9'000'000));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 10, 10, 70, "app", {}, {0x400100}, 1'000'000, 0,
                                 HPD_USER_END_ROOT, HPD_SAMPLE_PREEMPTED));
  hpd_sample_event still{};  // runnable when the recording ended
  still.header = header(HPD_EVENT_OFF_CPU, 10, 10, 80, "app");
  still.flags = HPD_SAMPLE_PREEMPTED;
  still.user_frames = 1;
  still.ips[0] = 0x400100;
  builder.on_still_off_cpu(still, 580);
  ASSERT_EQ(profile.samples.size(), 4u);
  EXPECT_EQ(profile.samples[0].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(profile.samples[0].off_cpu_ns, 3'000'000u);
  EXPECT_EQ(profile.samples[0].cpu_delta_ns, 0u);
  const auto leaf = profile.stacks.kernel_frames(profile.samples[0].stack);
  EXPECT_EQ(std::vector<uint64_t>(leaf.begin(), leaf.end()), std::vector<uint64_t>{0xffffffff81000400});
  EXPECT_EQ(profile.samples[1].kind, SampleKind::kOffCpu);
  EXPECT_EQ(profile.samples[1].off_cpu_ns, 9'000'000u);
  EXPECT_EQ(profile.samples[2].kind, SampleKind::kOnCpu);
  EXPECT_EQ(profile.samples[2].cpu_delta_ns, 1'000'000u);
  EXPECT_EQ(profile.samples[3].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(profile.samples[3].off_cpu_ns, 500u);
}

// A blocked switch-out whose wakeup the sched_wakeup program saw (woken_ns) becomes two samples with
// the switch-out's stack: blocked up to the wakeup, then waiting for a CPU from the wakeup on. Without
// a wakeup inside the interval, all of it stays blocked; a runnable switch-out waits all along.
TEST(BpfEventDecoder, BlockedIntervalsSplitAtTheirWakeup) {
  RawProfile profile;
  BpfFeed builder(profile, {0});
  builder.set_scheduler_frames([](uint64_t a) { return a == 0xffffffff81000100; });
  builder.add_initial_process(10, maps("00400000-00402000 r-xp 00000000 08:01 5 /usr/bin/app\n"));
  const std::vector<uint64_t> blocked = {0xffffffff81000100, 0xffffffff81000300};  // __schedule, futex
  // On an off-CPU record the on-CPU delta's place holds woken_ns.
  const std::vector<uint8_t> woken = sample_bytes(HPD_EVENT_OFF_CPU, 10, 10, 1000, "app", blocked,
                                                  {0x400200, 0x400100}, 6'001'000, 9'000'000);
  builder.on_record(woken);
  EXPECT_EQ(builder.unwind_counters().sample_bytes, woken.size());  // one record, counted once
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 10, 10, 20'000'000, "app", blocked, {0x400200}, 0,
                                 4'000'000));  // no wakeup seen
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 10, 10, 30'000'000, "app", blocked, {0x400200},
                                 34'000'000, 4'000'000));  // woken at the switch-in: nothing to split
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 10, 10, 40'000'000, "app", blocked, {0x400200},
                                 41'000'000, 3'000'000, HPD_USER_END_ROOT, HPD_SAMPLE_PREEMPTED));
  hpd_sample_event still{};  // blocked when the recording ended, woken before its end
  still.header = header(HPD_EVENT_OFF_CPU, 10, 10, 50'000'000, "app");
  still.woken_ns = 50'000'700;
  still.user_frames = 1;
  still.ips[0] = 0x400200;
  builder.on_still_off_cpu(still, 50'001'500);
  still.woken_ns = 50'002'000;  // woken after the end: blocked until then
  builder.on_still_off_cpu(still, 50'001'500);
  still.woken_ns = 0;  // still blocked: no wakeup is missing
  builder.on_still_off_cpu(still, 50'001'500);

  ASSERT_EQ(profile.samples.size(), 9u);
  const auto& s = profile.samples;
  EXPECT_EQ(s[0].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[0].time_ns, 1000u);
  EXPECT_EQ(s[0].off_cpu_ns, 6'000'000u);
  EXPECT_EQ(s[0].cpu_delta_ns, 0u);
  EXPECT_EQ(s[1].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(s[1].time_ns, 6'001'000u);
  EXPECT_EQ(s[1].off_cpu_ns, 3'000'000u);
  EXPECT_EQ(s[1].cpu_delta_ns, 0u);
  EXPECT_EQ(s[1].stack, s[0].stack);  // where it blocked, the scheduler's frames dropped
  const auto leaf = profile.stacks.kernel_frames(s[1].stack);
  EXPECT_EQ(std::vector<uint64_t>(leaf.begin(), leaf.end()), std::vector<uint64_t>{0xffffffff81000300});
  EXPECT_EQ(s[1].stack_end, s[0].stack_end);
  EXPECT_EQ(s[2].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[2].off_cpu_ns, 4'000'000u);
  EXPECT_EQ(s[3].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[3].off_cpu_ns, 4'000'000u);
  EXPECT_EQ(s[4].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(s[4].time_ns, 40'000'000u);
  EXPECT_EQ(s[4].off_cpu_ns, 3'000'000u);
  EXPECT_EQ(s[5].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[5].off_cpu_ns, 700u);
  EXPECT_EQ(s[6].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(s[6].time_ns, 50'000'700u);
  EXPECT_EQ(s[6].off_cpu_ns, 800u);
  EXPECT_EQ(s[7].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[7].off_cpu_ns, 1500u);
  EXPECT_EQ(s[8].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[8].off_cpu_ns, 1500u);
  EXPECT_EQ(builder.blocked_split_at_wakeup(), 2u);
  // Only the interval that ended without one: the one woken at its switch-in had its wakeup.
  EXPECT_EQ(builder.blocked_without_wakeup(), 1u);
  EXPECT_EQ(builder.waits_charged_as_cpu(), 0u);
}

// What the scheduler charged the thread for its wait after the wakeup (charged_ns, which the programs
// took out of its next on-CPU delta) is the CPU of its waiting-for-CPU sample, the blocked part keeping
// none; a record still in the programs' map at the end holds the wakeup's run queue clock there, which
// is no CPU time.
TEST(BpfEventDecoder, TheWaitsChargedCpuGoesToItsWaitingSample) {
  RawProfile profile;
  BpfFeed builder(profile, {0});
  builder.add_initial_process(10, maps("00400000-00402000 r-xp 00000000 08:01 5 /usr/bin/app\n"));
  hpd_sample_event e{};
  e.header = header(HPD_EVENT_OFF_CPU, 10, 10, 1000, "app");
  e.woken_ns = 6'001'000;
  e.off_cpu_ns = 6'020'000;
  e.charged_ns = 12'345;
  e.user_end = HPD_USER_END_ROOT;
  e.user_frames = 1;
  e.ips[0] = 0x400200;
  std::vector<uint8_t> bytes(offsetof(hpd_sample_event, ips) + sizeof(uint64_t));
  std::memcpy(bytes.data(), &e, bytes.size());
  builder.on_record(bytes);
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 10, 10, 7'000'000, "app", {}, {0x400100}, 900'000));
  // Not split (no wakeup inside the interval): the charge, had the programs given one, stays its CPU.
  e.header.time_ns = 8'000'000;
  e.woken_ns = 0;
  e.off_cpu_ns = 1'000'000;
  e.charged_ns = 500;
  std::memcpy(bytes.data(), &e, bytes.size());
  builder.on_record(bytes);
  e.header.time_ns = 10'000'000;
  e.woken_ns = 10'000'700;
  e.charged_ns = 987'654'321'000;  // in the map: the run queue's clock_task at the wakeup
  builder.on_still_off_cpu(e, 10'001'500);

  ASSERT_EQ(profile.samples.size(), 6u);
  const auto& s = profile.samples;
  EXPECT_EQ(s[0].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[0].cpu_delta_ns, 0u);
  EXPECT_EQ(s[0].off_cpu_ns, 6'000'000u);
  EXPECT_EQ(s[1].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(s[1].cpu_delta_ns, 12'345u);
  EXPECT_EQ(s[1].off_cpu_ns, 20'000u);
  EXPECT_EQ(s[2].kind, SampleKind::kOnCpu);
  EXPECT_EQ(s[2].cpu_delta_ns, 900'000u);
  EXPECT_EQ(s[3].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[3].cpu_delta_ns, 500u);
  EXPECT_EQ(s[4].kind, SampleKind::kOffCpu);
  EXPECT_EQ(s[5].kind, SampleKind::kWaitCpu);
  EXPECT_EQ(s[4].cpu_delta_ns + s[5].cpu_delta_ns, 0u);
  EXPECT_EQ(builder.waits_charged_as_cpu(), 2u);
  EXPECT_EQ(builder.waits_charged_ns(), 12'845u);
}

TEST(BpfEventDecoder, StackFailuresAndTruncationAreCountedPerThread) {
  RawProfile profile;
  BpfFeed builder(profile, {0});
  builder.add_initial_process(20, maps("00400000-00402000 r-xp 00000000 08:01 5 /usr/bin/app\n"));
  std::vector<uint64_t> deep(HPD_MAX_USER_FRAMES, 0x400100);
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 20, 21, 1, "t", {}, deep, 0, 0, HPD_USER_END_DEPTH));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 20, 21, 2, "t", {0xffffffff81000010}, {0x400100}, 0, 0,
                                 HPD_USER_END_READ_FAULT));
  builder.on_record(
      sample_bytes(HPD_EVENT_ON_CPU, 20, 22, 3, "u", {0xffffffff81000010}, {}));  // no user frames
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 20, 22, 4, "u", {}, {0x400100}, 5, 0, HPD_USER_END_ROOT,
                                 HPD_SAMPLE_NO_BASELINE));
  ASSERT_EQ(profile.samples.size(), 4u);
  EXPECT_EQ(profile.samples[0].stack_end, StackEnd::kTruncated);
  EXPECT_EQ(profile.samples[1].stack_end, StackEnd::kFailed);
  EXPECT_EQ(profile.samples[2].stack_end, StackEnd::kFailed);  // a user process without user frames
  EXPECT_EQ(profile.samples[3].stack_end, StackEnd::kComplete);
  EXPECT_EQ(profile.lost.truncated_stacks, 1u);
  EXPECT_EQ(profile.lost.stack_failures, 2u);
  EXPECT_EQ(profile.find_thread(20, 21)->lost.truncated_stacks, 1u);
  EXPECT_EQ(profile.find_thread(20, 21)->lost.stack_failures, 1u);
  EXPECT_EQ(profile.find_thread(20, 22)->lost.stack_failures, 1u);
  EXPECT_EQ(builder.samples_without_baseline(), 1u);

  hpd_task_event exit{};
  exit.header = header(HPD_EVENT_EXIT, 20, 21, 50, "t");
  exit.ringbuf_drops = 3;
  builder.on_record(bytes_of(exit));
  builder.add_thread_drops(20, 22, 2);
  EXPECT_EQ(profile.find_thread(20, 21)->lost.lost_records, 3u);
  EXPECT_EQ(profile.find_thread(20, 21)->end_ns, 50u);
  EXPECT_EQ(profile.find_thread(20, 22)->lost.lost_records, 2u);
}

TEST(BpfEventDecoder, MalformedRecordsAreCountedNotUsed) {
  RawProfile profile;
  BpfFeed builder(profile, {0});
  builder.on_record({});
  std::vector<uint8_t> sample = sample_bytes(HPD_EVENT_ON_CPU, 1, 1, 1, "x", {}, {0x1000, 0x2000});
  sample.resize(sample.size() - 4);  // cut inside the frames
  builder.on_record(sample);
  hpd_sample_event lying{};
  lying.header = header(HPD_EVENT_ON_CPU, 1, 1, 1, "x");
  lying.user_frames = HPD_MAX_USER_FRAMES + 1;
  builder.on_record(bytes_of(lying));
  hpd_event_header unknown = header(99, 1, 1, 1, "x");
  builder.on_record(bytes_of(unknown));
  std::vector<uint8_t> fork = bytes_of(hpd_fork_event{});
  fork[0] = HPD_EVENT_FORK;
  fork.resize(sizeof(hpd_event_header));  // without the parent fields
  builder.on_record(fork);
  EXPECT_EQ(builder.malformed_records(), 5u);
  EXPECT_TRUE(profile.samples.empty());
}

// An on-CPU record with user registers (ip, sp) and `stack` bytes of stack copy after its frames.
std::vector<uint8_t> sample_with_copy(int32_t pid, uint64_t time, std::vector<uint64_t> user, uint64_t ip,
                                      uint64_t sp, const std::vector<uint8_t>& stack) {
  std::vector<uint8_t> bytes = sample_bytes(HPD_EVENT_ON_CPU, pid, pid, time, "x", {}, std::move(user));
  hpd_sample_event e{};
  std::memcpy(&e, bytes.data(), bytes.size());
  e.regs[16] = ip;
  e.regs[7] = sp;
  e.regs_valid = (1u << 16) | (1u << 7);
  e.stack_bytes = static_cast<uint32_t>(stack.size());
  std::memcpy(bytes.data(), &e, offsetof(hpd_sample_event, ips));
  bytes.insert(bytes.end(), stack.begin(), stack.end());
  return bytes;
}

// cfi mode: an on-CPU record whose walk met a table not published yet (with registers ip, sp, bp and a
// copy of the stack) waits for a second walk, and every later record of its process waits behind it;
// other processes' records go on. Released, they reach the sink in their order, the held one with the
// second walk's stack; one still waiting at the end keeps its first walk and is counted as such.
// An on-CPU record whose walk met a table not published yet, with registers ip, sp, bp and a copy of the
// stack.
std::vector<uint8_t> pending_sample(int32_t pid, uint64_t time) {
  std::vector<uint8_t> bytes =
      sample_with_copy(pid, time, {0x400100, 0x9999}, 0x400100, 0x7000, std::vector<uint8_t>(64, 0));
  hpd_sample_event e{};
  std::memcpy(&e, bytes.data(), offsetof(hpd_sample_event, ips));
  e.regs[6] = 0x7010;
  e.regs_valid |= 1u << 6;
  e.flags = HPD_SAMPLE_TABLES_PENDING;
  e.user_end = HPD_USER_END_FP_BROKEN;
  std::memcpy(bytes.data(), &e, offsetof(hpd_sample_event, ips));
  return bytes;
}

TEST(BpfEventDecoder, SamplesWaitingForTheirTablesAreHeldInOrderAndWalkedAgain) {
  BpfEventDecoder decoder;
  std::vector<int32_t> held_pids;
  decoder.hold_pending_walks([&](int32_t pid) { held_pids.push_back(pid); }, 1 << 20);
  struct Seen {
    int32_t pid;
    uint64_t time;
    std::vector<uint64_t> user;
    StackEnd end;
    bool regs;
    bool exit;
  };
  std::vector<Seen> seen;
  const EventSink sink = [&](const Event& event) {
    if (const auto* s = std::get_if<SampleEvent>(&event))
      seen.push_back(
          {s->pid, s->time_ns, {s->user.begin(), s->user.end()}, s->walk_end, s->regs.has_value(), false});
    if (const auto* x = std::get_if<ExitEvent>(&event))
      seen.push_back({x->pid, x->time_ns, {}, {}, false, true});
  };
  decoder.decode(pending_sample(10, 100), sink);
  decoder.decode(sample_bytes(HPD_EVENT_ON_CPU, 10, 10, 200, "a", {}, {0x400200, 0x400300}), sink);
  decoder.decode(sample_bytes(HPD_EVENT_ON_CPU, 20, 20, 250, "b", {}, {0x500000}), sink);
  hpd_task_event exit{};
  exit.header = header(HPD_EVENT_EXIT, 10, 10, 300, "a");
  decoder.decode({reinterpret_cast<const uint8_t*>(&exit), sizeof exit}, sink);
  ASSERT_EQ(seen.size(), 1u) << "process 10 waits; process 20 goes on";
  EXPECT_EQ(seen[0].pid, 20);
  EXPECT_EQ(held_pids, std::vector<int32_t>{10});
  EXPECT_TRUE(decoder.holding());
  EXPECT_EQ(decoder.walks_held(), 1u);

  int walks = 0;
  const auto wait = [&](const hpd_sample_event&, std::span<const uint8_t>, BpfEventDecoder::UserWalk&) {
    ++walks;
    return BpfEventDecoder::HeldWalk::kWait;
  };
  // Its mappings may be unread (taken after the last read of the mappings): not even asked.
  decoder.release_held(wait, 50, sink, false);
  EXPECT_EQ(walks, 0);
  decoder.release_held(wait, 1000, sink, false);
  EXPECT_EQ(walks, 1);
  EXPECT_EQ(seen.size(), 1u);

  const auto walked = [&](const hpd_sample_event& e, std::span<const uint8_t> stack,
                          BpfEventDecoder::UserWalk& out) {
    EXPECT_EQ(e.regs[16], 0x400100u);
    EXPECT_EQ(e.regs[7], 0x7000u);
    EXPECT_EQ(e.regs[6], 0x7010u);
    EXPECT_EQ(stack.size(), 64u);
    out.ips = {0x400100, 0x400180, 0x400190};
    out.end = HPD_USER_END_ROOT;
    return BpfEventDecoder::HeldWalk::kWalked;
  };
  decoder.release_held(walked, 1000, sink, false);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[1].time, 100u);
  EXPECT_EQ(seen[1].user, (std::vector<uint64_t>{0x400100, 0x400180, 0x400190}));
  EXPECT_EQ(seen[1].end, StackEnd::kComplete);
  EXPECT_FALSE(seen[1].regs) << "the copy served the second walk; the builder does not unwind it";
  EXPECT_EQ(seen[2].time, 200u);
  EXPECT_TRUE(seen[3].exit);
  EXPECT_FALSE(decoder.holding());
  EXPECT_EQ(decoder.on_cpu_rewalked(), 1u);
  EXPECT_EQ(decoder.samples_tables_pending(), 0u);

  // The end of the recording: a record whose tables never came keeps its first walk, counted.
  decoder.decode(pending_sample(30, 400), sink);
  decoder.release_held(wait, ~uint64_t{0}, sink, true);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[4].user, (std::vector<uint64_t>{0x400100, 0x9999}));
  EXPECT_EQ(seen[4].end, StackEnd::kFailed);
  EXPECT_EQ(decoder.samples_tables_pending(), 1u);
  EXPECT_EQ(decoder.on_cpu_rewalked(), 1u);

  // Past the bound on held bytes, everything goes as it is at once.
  BpfEventDecoder small;
  small.hold_pending_walks(nullptr, 100);
  seen.clear();
  small.decode(pending_sample(10, 100), sink);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_FALSE(small.holding());
  EXPECT_EQ(small.samples_tables_pending(), 1u);

  // Past the bound with several processes waiting (system-wide, a cold cache): the process holding the
  // most gives its records up as they are; the others keep waiting for their second walk.
  const size_t record = pending_sample(10, 100).size();
  BpfEventDecoder bounded;
  bounded.hold_pending_walks(nullptr, record * 5 / 2);
  seen.clear();
  bounded.decode(pending_sample(10, 100), sink);
  bounded.decode(pending_sample(20, 150), sink);
  EXPECT_TRUE(seen.empty());
  bounded.decode(pending_sample(10, 200), sink);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].pid, 10);
  EXPECT_EQ(seen[0].time, 100u);
  EXPECT_EQ(seen[1].time, 200u);
  EXPECT_EQ(seen[1].end, StackEnd::kFailed);
  EXPECT_EQ(bounded.samples_tables_pending(), 2u);
  EXPECT_TRUE(bounded.holding());
  EXPECT_EQ(bounded.walks_held(), 1u);
  bounded.release_held(walked, 1000, sink, false);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].pid, 20);
  EXPECT_EQ(seen[2].end, StackEnd::kComplete);
  EXPECT_EQ(bounded.on_cpu_rewalked(), 1u);
  EXPECT_FALSE(bounded.holding());
}

// A recording without end (hpd's continuous collection) bounds how long a record waits: one whose
// tables never come (its process exited before they were published) is decoded as the programs walked
// it once it waited max_age, counted, and its process's records behind it go on; not before.
TEST(BpfEventDecoder, ARecordThatWaitedItsMaximumAgeGoesAsItIs) {
  BpfEventDecoder decoder;
  decoder.hold_pending_walks(nullptr, 1 << 20, 1000);
  std::vector<std::pair<int32_t, uint64_t>> seen;
  const EventSink sink = [&](const Event& event) {
    if (const auto* s = std::get_if<SampleEvent>(&event)) seen.emplace_back(s->pid, s->time_ns);
  };
  decoder.decode(pending_sample(10, 100), sink);
  decoder.decode(sample_bytes(HPD_EVENT_ON_CPU, 10, 10, 200, "a", {}, {0x400200, 0x400300}), sink);
  int asked = 0;
  const auto wait = [&](const hpd_sample_event&, std::span<const uint8_t>, BpfEventDecoder::UserWalk&) {
    ++asked;
    return BpfEventDecoder::HeldWalk::kWait;
  };
  decoder.release_held(wait, 1099, sink, false);  // waited 999
  EXPECT_TRUE(seen.empty());
  EXPECT_TRUE(decoder.holding());
  decoder.release_held(wait, 1100, sink, false);  // waited 1000
  EXPECT_EQ(asked, 2) << "asked each time: its tables may have come";
  EXPECT_EQ(seen, (std::vector<std::pair<int32_t, uint64_t>>{{10, 100}, {10, 200}}));
  EXPECT_FALSE(decoder.holding());
  EXPECT_EQ(decoder.samples_tables_pending(), 1u);
  EXPECT_EQ(decoder.on_cpu_rewalked(), 0u);
}

// A process forked while its parent's records are held waits behind them: its fork must reach the builder
// after the parent's exec and mappings (what the child inherits), its own records after its fork. (A
// child decoded first was described from /proc, which showed its own later image: its inherited
// mappings were lost, seen once in BpfRecord.ForkedAndExecedChildIsFollowedWhenAsked under load.)
TEST(BpfEventDecoder, AProcessForkedWhileItsParentsRecordsAreHeldWaitsBehindThem) {
  BpfEventDecoder decoder;
  decoder.hold_pending_walks(nullptr, 1 << 20);
  std::vector<std::string> seen;
  const EventSink sink = [&](const Event& event) {
    if (const auto* s = std::get_if<SampleEvent>(&event))
      seen.push_back("sample " + std::to_string(s->pid) + "@" + std::to_string(s->time_ns));
    if (const auto* x = std::get_if<ExecEvent>(&event))
      seen.push_back("exec " + std::to_string(x->pid) + "@" + std::to_string(x->time_ns));
    if (const auto* f = std::get_if<ForkEvent>(&event))
      seen.push_back("fork " + std::to_string(f->parent_pid) + ">" + std::to_string(f->pid) + "@" +
                     std::to_string(f->time_ns));
  };
  const auto exec = [](int32_t pid, uint64_t time) {
    hpd_task_event e{};
    e.header = header(HPD_EVENT_EXEC, pid, pid, time, "x");
    return bytes_of(e);
  };
  const auto fork = [](int32_t parent, int32_t child, uint64_t time) {
    hpd_fork_event f{};
    f.header = header(HPD_EVENT_FORK, child, child, time, "x");
    f.parent_pid = parent;
    f.parent_tid = parent;
    return bytes_of(f);
  };
  decoder.decode(pending_sample(10, 100), sink);
  decoder.decode(exec(10, 150), sink);
  decoder.decode(fork(10, 11, 200), sink);
  decoder.decode(sample_bytes(HPD_EVENT_ON_CPU, 20, 20, 250, "b", {}, {0x500000}), sink);
  decoder.decode(exec(11, 300), sink);
  decoder.decode(sample_bytes(HPD_EVENT_ON_CPU, 11, 11, 350, "c", {}, {0x600000}), sink);
  decoder.decode(fork(11, 12, 400), sink);  // a grandchild: behind them too
  decoder.decode(sample_bytes(HPD_EVENT_ON_CPU, 12, 12, 450, "d", {}, {0x600000}), sink);
  EXPECT_EQ(seen, std::vector<std::string>{"sample 20@250"}) << "process 10 waits, and its children with it";
  const auto walked = [](const hpd_sample_event&, std::span<const uint8_t>, BpfEventDecoder::UserWalk& out) {
    out.ips = {0x400100, 0x400180};
    out.end = HPD_USER_END_ROOT;
    return BpfEventDecoder::HeldWalk::kWalked;
  };
  decoder.release_held(walked, 1000, sink, false);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"sample 20@250", "sample 10@100", "exec 10@150", "fork 10>11@200",
                                      "exec 11@300", "sample 11@350", "fork 11>12@400", "sample 12@450"}));
  EXPECT_FALSE(decoder.holding());
  // Released, the child's records go straight on again.
  decoder.decode(sample_bytes(HPD_EVENT_ON_CPU, 11, 11, 500, "c", {}, {0x600000}), sink);
  EXPECT_EQ(seen.back(), "sample 11@500");
  // A parent whose records do not wait: its child's fork goes on at once.
  decoder.decode(fork(20, 21, 600), sink);
  EXPECT_EQ(seen.back(), "fork 20>21@600");
  EXPECT_FALSE(decoder.holding());
}

NOINLINE_FOR_TEST int leaf_of_this_test(int x) {
  return x * 3 + 1;
}

TEST(BpfEventDecoder, StackCopiesAreCheckedAndGarbageStacksDoNotCrash) {
  const int32_t self = ::getpid();
  const auto ip = reinterpret_cast<uint64_t>(&leaf_of_this_test);
  std::vector<uint8_t> garbage(512);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 37 + 11);

  for (const bool dwarf : {false, true}) {
    RawProfile profile;
    BpfFeedConfig config{0};
    config.dwarf = dwarf;
    config.stack_copy_bytes = 512;
    BpfFeed builder(profile, config);
    Unwinder unwinder;
    builder.set_unwinder(&unwinder);
    builder.add_initial_process(self, read_proc_maps(self));

    std::vector<uint8_t> short_copy = sample_with_copy(self, 5, {ip}, ip, 0x7000, garbage);
    short_copy.resize(short_copy.size() - 8);  // the copy is cut
    builder.on_record(short_copy);
    std::vector<uint8_t> huge = sample_with_copy(self, 5, {ip}, ip, 0x7000, {});
    hpd_sample_event e{};
    std::memcpy(&e, huge.data(), huge.size());
    e.stack_bytes = HPD_MAX_STACK_COPY + 8;
    std::memcpy(huge.data(), &e, offsetof(hpd_sample_event, ips));
    builder.on_record(huge);
    EXPECT_EQ(builder.malformed_records(), 2u);

    // fp: the chain's leaf stays first; dwarf: the walk starts at ip, whatever the garbage holds.
    builder.on_record(sample_with_copy(self, 10, dwarf ? std::vector<uint64_t>{} : std::vector<uint64_t>{ip},
                                       ip, 0x7ff000001000, garbage));
    ASSERT_EQ(profile.samples.size(), 1u);
    const RawSample& s = profile.samples[0];
    ASSERT_NE(s.stack, kNoIndex);
    const auto user = profile.stacks.user_frames(s.stack);
    ASSERT_FALSE(user.empty());
    EXPECT_EQ(user[0], ip);
    EXPECT_EQ(builder.unwind_counters().unwound, dwarf ? 1u : 0u);
    if (dwarf) {
      EXPECT_NE(s.stack_end, StackEnd::kUnknown);
    }
    EXPECT_GT(builder.unwind_counters().sample_bytes, garbage.size());
  }
}

// Right after an exec the dynamic loader has not mapped the libraries yet, so the maps read for the
// exec record may lack libc: a sample in libc soon after must read them again at once, not 200 ms
// later (every libc sample in between would fail to unwind). A read that finds nothing still makes
// the next one wait.
TEST(BpfEventDecoder, MapsAreReadAgainAtOnceAfterAnExecWhenASampleMissesThem) {
  const int32_t self = ::getpid();
  const auto in_libc = reinterpret_cast<uint64_t>(::dlsym(RTLD_DEFAULT, "getpid"));
  ASSERT_NE(in_libc, 0u);
  const std::vector<MapsEntry> all = read_proc_maps(self);
  std::vector<MapsEntry> before_libc;
  for (const MapsEntry& m : all) {
    if (m.path.find("libc.so") == std::string::npos) before_libc.push_back(m);
  }
  ASSERT_LT(before_libc.size(), all.size());
  RawProfile profile;
  BpfFeedConfig config{0};
  config.dwarf = true;
  config.stack_copy_bytes = 512;
  int reads = 0;
  BpfFeed builder(profile, config, [&](int32_t) { return ++reads == 1 ? before_libc : all; });
  Unwinder unwinder;
  builder.set_unwinder(&unwinder);
  builder.add_initial_process(self, before_libc);
  hpd_task_event exec{};
  exec.header = header(HPD_EVENT_EXEC, self, self, 1'000, "x");
  builder.on_record(bytes_of(exec));
  EXPECT_EQ(reads, 1);

  const std::vector<uint8_t> stack(64, 0);
  builder.on_record(sample_with_copy(self, 2'000, {}, in_libc, 0x7ff000001000, stack));
  EXPECT_EQ(reads, 2);  // 1 us after the exec read, far inside the 200 ms interval
  ASSERT_EQ(profile.samples.size(), 1u);
  const RawProcess* process = profile.find_process(self);
  ASSERT_NE(process, nullptr);
  const RawMapping* libc = process->find_mapping(in_libc, 2'000);
  ASSERT_NE(libc, nullptr);
  EXPECT_NE(profile.modules[libc->module].path.find("libc.so"), std::string::npos);
  EXPECT_NE(profile.samples[0].stack_end, StackEnd::kUnknown);

  // An address no read can find: one more read, then the interval applies again.
  builder.on_record(sample_with_copy(self, 3'000, {}, 0x10, 0x7ff000001000, stack));
  EXPECT_EQ(reads, 3);
  builder.on_record(sample_with_copy(self, 4'000, {}, 0x20, 0x7ff000001000, stack));
  EXPECT_EQ(reads, 3);
}

// With an mmap source that lost no record, an exec's mappings are all in its records: its maps are not
// read again at the exec (in a system-wide recording: an open, a read and a lookup per mapping, for
// every exec). Once the source lost records, or the tracker dropped some that waited, they are.
TEST(BpfEventDecoder, MapsAreNotReadAtAnExecWhileTheMappingRecordsAreWhole) {
  RawProfile profile;
  int reads = 0;
  BpfFeed builder(profile, {100}, [&](int32_t) {
    ++reads;
    return std::vector<MapsEntry>{};
  });
  uint64_t lost = 0;
  builder.set_mmap_source([] {}, [&] { return lost; });
  builder.add_initial_process(70, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  const auto exec = [&](uint64_t start_ns, uint64_t address, const char* path) {
    builder.on_exec_start(70, start_ns);
    builder.on_mmap(70, address, 0x1000, 0, path, "", start_ns + 10);
    hpd_task_event e{};
    e.header = header(HPD_EVENT_EXEC, 70, 70, start_ns + 50, "new");
    builder.on_record(bytes_of(e));
  };
  exec(1'000, 0x500000, "/usr/bin/new");
  EXPECT_EQ(reads, 0);
  const RawProcess* p = profile.find_process(70);
  ASSERT_NE(p, nullptr);
  const RawMapping* m = p->find_mapping(0x500010, 2'000);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(profile.modules[m->module].path, "/usr/bin/new");
  lost = 3;
  exec(3'000, 0x600000, "/usr/bin/third");
  EXPECT_EQ(reads, 1);
  // Without a count of what the source lost, the maps are read at every exec, as before.
  RawProfile other;
  int other_reads = 0;
  BpfFeed without(other, {100}, [&](int32_t) {
    ++other_reads;
    return std::vector<MapsEntry>{};
  });
  without.set_mmap_source([] {});
  without.add_initial_process(70, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  hpd_task_event e{};
  e.header = header(HPD_EVENT_EXEC, 70, 70, 1'050, "new");
  without.on_exec_start(70, 1'000);
  without.on_record(bytes_of(e));
  EXPECT_EQ(other_reads, 1);
}

TEST(BpfEventDecoder, OffCpuRecordsKeepTheirFramePointerChainInDwarfMode) {
  RawProfile profile;
  BpfFeedConfig config{0};
  config.dwarf = true;
  BpfFeed builder(profile, config);
  Unwinder unwinder;
  builder.set_unwinder(&unwinder);
  builder.add_initial_process(10, maps("00400000-00402000 r-xp 00000000 08:01 5 /usr/bin/app\n"));
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 10, 10, 50, "app", {}, {0x400100, 0x400200}, 0, 7));
  ASSERT_EQ(profile.samples.size(), 1u);
  const auto user = profile.stacks.user_frames(profile.samples[0].stack);
  EXPECT_EQ(std::vector<uint64_t>(user.begin(), user.end()), (std::vector<uint64_t>{0x400100, 0x400200}));
  EXPECT_EQ(profile.samples[0].stack_end, StackEnd::kComplete);
  EXPECT_EQ(builder.unwind_counters().unwound, 0u);
}

// dwarf mode with off-CPU samples: the switch-out's copy of the stack (HPD_EVENT_SWITCH_STACK) comes
// before the off-CPU record of that switch-out (same thread and time), whose user stack is then unwound
// from it, both samples of a split interval alike; a record without its copy (another time, or none)
// keeps the programs' frame-pointer chain and is counted; an exit drops the thread's copy.
TEST(BpfEventDecoder, OffCpuRecordsAreUnwoundFromTheirSwitchOutsCopyInDwarfMode) {
  const int32_t self = ::getpid();
  const auto ip = reinterpret_cast<uint64_t>(&leaf_of_this_test);
  RawProfile profile;
  BpfFeedConfig config{0};
  config.dwarf = true;
  config.stack_copy_bytes = 512;
  BpfFeed builder(profile, config);
  builder.expect_switch_stacks();
  Unwinder unwinder;
  builder.set_unwinder(&unwinder);
  builder.add_initial_process(self, read_proc_maps(self));
  const auto switch_stack = [&](int32_t tid, uint64_t time) {
    std::vector<uint8_t> bytes =
        sample_with_copy(self, time, {}, ip, 0x7ff000001000, std::vector<uint8_t>(64, 0));
    hpd_sample_event e{};
    std::memcpy(&e, bytes.data(), offsetof(hpd_sample_event, ips));
    e.header.type = HPD_EVENT_SWITCH_STACK;
    e.header.tid = tid;
    std::memcpy(bytes.data(), &e, offsetof(hpd_sample_event, ips));
    return bytes;
  };
  const std::vector<uint64_t> chain{0x400100, 0x400200};
  builder.on_record(switch_stack(self, 50));
  builder.on_record(switch_stack(self + 1, 55));  // another thread's: not this record's
  // Blocked from 50, woken at 70, switched in at 90: two samples, both from the copy.
  std::vector<uint8_t> blocked = sample_bytes(HPD_EVENT_OFF_CPU, self, self, 50, "x", {}, chain, 0, 40);
  hpd_sample_event b{};
  std::memcpy(&b, blocked.data(), offsetof(hpd_sample_event, ips));
  b.woken_ns = 70;
  std::memcpy(blocked.data(), &b, offsetof(hpd_sample_event, ips));
  builder.on_record(blocked);
  ASSERT_EQ(profile.samples.size(), 2u);
  EXPECT_EQ(builder.unwind_counters().unwound, 2u);
  for (const RawSample& s : profile.samples) {
    const auto user = profile.stacks.user_frames(s.stack);
    ASSERT_FALSE(user.empty());
    EXPECT_EQ(user[0], ip) << "unwound from the copy's registers, not the chain";
    EXPECT_NE(s.stack_end, StackEnd::kUnknown);
  }
  EXPECT_EQ(profile.samples[1].kind, SampleKind::kWaitCpu);
  // The copy went with its record: a later record of the same switch-out time has none.
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, self, self, 50, "x", {}, chain, 0, 5));
  // A record whose switch-out's copy is not the one kept (lost) keeps its chain.
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, self, self + 1, 60, "x", {}, chain, 0, 5));
  ASSERT_EQ(profile.samples.size(), 4u);
  for (size_t i = 2; i < 4; ++i) {
    const auto user = profile.stacks.user_frames(profile.samples[i].stack);
    EXPECT_EQ(std::vector<uint64_t>(user.begin(), user.end()), chain);
  }
  EXPECT_EQ(builder.unwind_counters().unwound, 2u);
  EXPECT_EQ(builder.off_cpu_with_stack_copy(), 1u);
  EXPECT_EQ(builder.off_cpu_without_stack_copy(), 2u);
  // An exit drops the thread's copy: the record at 55 finds none.
  hpd_task_event exit{};
  exit.header = header(HPD_EVENT_EXIT, self, self + 1, 57, "x");
  builder.on_record(bytes_of(exit));
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, self, self + 1, 55, "x", {}, chain, 0, 5));
  EXPECT_EQ(builder.off_cpu_without_stack_copy(), 3u);
  // A copy cut short is malformed, not used.
  std::vector<uint8_t> cut = switch_stack(self, 80);
  cut.resize(cut.size() - 8);
  builder.on_record(cut);
  EXPECT_EQ(builder.malformed_records(), 1u);
}

TEST(BpfEventDecoder, ForkCopiesMappingsAndExecEndsThem) {
  RawProfile profile;
  std::vector<int32_t> maps_read;
  std::vector<MapsEntry> child_maps = maps("00500000-00501000 r-xp 00000000 08:01 9 /usr/bin/child\n");
  int described = 0;
  BpfFeed builder(
      profile, {100},
      [&](int32_t pid) {
        maps_read.push_back(pid);
        return pid == 31 ? child_maps : std::vector<MapsEntry>{};
      },
      {},
      [&](RawProcess& p) {
        ++described;
        p.exe = "/usr/bin/child";
      });
  builder.add_initial_process(30, maps("00400000-00401000 r-xp 00000000 08:01 5 /usr/bin/parent\n"));
  profile.process(30).name = "parent";

  hpd_fork_event thread{};
  thread.header = header(HPD_EVENT_FORK, 30, 32, 150, "parent");
  thread.parent_pid = 30;
  thread.parent_tid = 30;
  builder.on_record(bytes_of(thread));
  hpd_fork_event child{};
  child.header = header(HPD_EVENT_FORK, 31, 31, 200, "parent");
  child.parent_pid = 30;
  child.parent_tid = 30;
  builder.on_record(bytes_of(child));
  EXPECT_TRUE(maps_read.empty());  // a fork copies; /proc may already show a later image
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 31, 31, 250, "parent", {}, {0x400010}));

  hpd_task_event exec{};
  exec.header = header(HPD_EVENT_EXEC, 31, 31, 300, "child");
  builder.on_record(bytes_of(exec));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 31, 31, 350, "child", {}, {0x500010}));

  const RawThread* t = profile.find_thread(30, 32);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->start_ns, 150u);
  const RawProcess* c = profile.find_process(31);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->start_ns, 200u);
  EXPECT_EQ(c->name, "child");  // named by its new comm
  EXPECT_EQ(c->exe, "/usr/bin/child");
  EXPECT_EQ(profile.find_thread(31, 31)->name, "child");
  ASSERT_EQ(c->mappings.size(), 2u);
  EXPECT_EQ(c->mappings[0].unmapped_ns, 300u);  // the inherited image ended at the exec
  EXPECT_EQ(c->mappings[1].time_ns, 300u);
  EXPECT_EQ(maps_read, std::vector<int32_t>{31});
  const RawMapping* before = c->find_mapping(0x400010, 250);
  ASSERT_NE(before, nullptr);
  EXPECT_EQ(profile.modules[before->module].path, "/usr/bin/parent");
  EXPECT_EQ(c->find_mapping(0x400010, 350), nullptr);
  const RawMapping* after = c->find_mapping(0x500010, 350);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(profile.modules[after->module].path, "/usr/bin/child");
  EXPECT_EQ(described, 1);
  EXPECT_EQ(builder.processes_without_maps(), 0u);
}

TEST(BpfEventDecoder, UnknownProcessesAreReadOnceAndCountedWhenGone) {
  RawProfile profile;
  int reads = 0;
  BpfFeed builder(profile, {0, 1000}, [&](int32_t) {
    ++reads;
    return std::vector<MapsEntry>{};  // exited before its maps could be read
  });
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 40, 40, 10, "gone", {}, {0x400010}));
  builder.on_record(
      sample_bytes(HPD_EVENT_ON_CPU, 40, 40, 20, "gone", {}, {0x400010}));  // within the interval
  EXPECT_EQ(reads, 1);
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 40, 40, 2000, "gone", {}, {0x400010}));
  EXPECT_EQ(reads, 2);  // re-read once the interval passed
  EXPECT_EQ(builder.processes_without_maps(), 1u);
  EXPECT_EQ(profile.samples.size(), 3u);
  // A kernel thread has no maps and no user frames: not counted.
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 2, 2, 30, "kthreadd", {0xffffffff81000010}, {}));
  EXPECT_EQ(builder.processes_without_maps(), 1u);
  EXPECT_EQ(profile.samples.back().stack_end, StackEnd::kComplete);
}

// With ASLR off, or a program executing itself, the new image maps a file where the old image had it.
// The old image's mapping still serves until the exec record, but it is not the new image's: the new
// mapping must be kept, or the file's code has no mapping once the old one ends.
TEST(BpfEventDecoder, NewImageMappingTheOldImagesFileAtTheSamePlaceKeepsIt) {
  RawProfile profile;
  BpfFeed builder(profile, {100}, [](int32_t) { return std::vector<MapsEntry>{}; });
  builder.add_initial_process(60,
                              maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"
                                   "7f0000000000-7f0000002000 r-xp 00000000 08:01 6 /usr/lib/libc.so.6\n"));
  builder.set_mmap_source([] {});
  builder.on_exec_start(60, 210);
  builder.on_mmap(60, 0x500000, 0x1000, 0, "/usr/bin/new", "", 220);
  builder.on_mmap(60, 0x7f0000000000, 0x2000, 0, "/usr/lib/libc.so.6", "", 230);
  hpd_task_event exec{};
  exec.header = header(HPD_EVENT_EXEC, 60, 60, 250, "new");
  builder.on_record(bytes_of(exec));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 60, 60, 260, "new", {}, {0x7f0000000100, 0x500010}));

  const RawProcess* p = profile.find_process(60);
  ASSERT_NE(p, nullptr);
  const auto module_at = [&](uint64_t address, uint64_t time) -> std::string {
    const RawMapping* m = p->find_mapping(address, time);
    return m == nullptr ? "(none)" : profile.modules[m->module].path;
  };
  EXPECT_EQ(module_at(0x7f0000000100, 260), "/usr/lib/libc.so.6") << "the new image's libc was dropped";
  EXPECT_EQ(module_at(0x500010, 260), "/usr/bin/new");
  EXPECT_EQ(module_at(0x400010, 260), "(none)");
  EXPECT_EQ(module_at(0x400010, 240), "/bin/sh") << "inside execve, before the exec record";
  size_t libc_mappings = 0;
  for (const RawMapping& m : p->mappings) libc_mappings += m.start == 0x7f0000000000;
  EXPECT_EQ(libc_mappings, 2u);
}

// A process gone before /proc could be read: the kernel's mmap records place its samples. Records of
// a process not seen yet wait for its first record. The exec's start (the kernel's COMM record,
// before the new image is mapped) divides the old image's mappings from the new one's; the old ones
// serve until the eBPF exec record, since a sample taken inside execve until then still holds the
// old image's user registers. A late record of the old image ends with it; a record arriving only
// when a sample misses is fetched through the mmap source.
TEST(BpfEventDecoder, MmapRecordsPlaceSamplesOfProcessesThatAreGone) {
  RawProfile profile;
  BpfFeed builder(profile, {100}, [](int32_t) { return std::vector<MapsEntry>{}; });
  builder.add_initial_process(50, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  std::vector<std::function<void()>> late;  // records the mmap source has not delivered yet
  builder.set_mmap_source([&] {
    for (auto& deliver : late) deliver();
    late.clear();
  });

  hpd_fork_event fork{};
  fork.header = header(HPD_EVENT_FORK, 51, 51, 200, "sh");
  fork.parent_pid = 50;
  fork.parent_tid = 50;
  // The child's records come before its fork record is handled: they wait.
  builder.on_exec_start(51, 210);
  builder.on_mmap(51, 0x600000, 0x1000, 0, "/usr/bin/short", "abcd", 220);
  builder.on_mmap(51, 0x700000, 0x2000, 0x1000, "/usr/lib/libc.so.6", "", 230);
  builder.on_mmap(51, 0x800000, 0x1000, 0, "/bin/old-image", "", 205);  // before the exec began
  builder.on_mmap(99, 0x900000, 0x1000, 0, "/usr/bin/unrelated", "", 240);
  builder.on_record(bytes_of(fork));
  hpd_task_event exec{};
  exec.header = header(HPD_EVENT_EXEC, 51, 51, 250, "short");
  builder.on_record(bytes_of(exec));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 51, 51, 260, "short", {}, {0x600010, 0x700100}));
  // Mapped by the running program (dlopen); its record is only drained when a sample misses it.
  late.push_back([&] { builder.on_mmap(51, 0xa00000, 0x1000, 0, "/usr/lib/plugin.so", "", 265); });
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 51, 51, 270, "short", {}, {0xa00010}));
  hpd_task_event exit{};
  exit.header = header(HPD_EVENT_EXIT, 99, 99, 280, "unrelated");
  builder.on_record(bytes_of(exit));

  const RawProcess* c = profile.find_process(51);
  ASSERT_NE(c, nullptr);
  const auto module_at = [&](uint64_t address, uint64_t time) -> std::string {
    const RawMapping* m = c->find_mapping(address, time);
    return m == nullptr ? "(none)" : profile.modules[m->module].path;
  };
  EXPECT_EQ(module_at(0x600010, 260), "/usr/bin/short");
  EXPECT_EQ(module_at(0x700100, 260), "/usr/lib/libc.so.6");
  EXPECT_EQ(module_at(0xa00010, 270), "/usr/lib/plugin.so");
  EXPECT_EQ(module_at(0x400010, 260), "(none)") << "the shell's image survived the exec";
  EXPECT_EQ(module_at(0x800010, 260), "(none)") << "a mapping of the old image was kept";
  const RawMapping* shell = c->find_mapping(0x400010, 205);
  ASSERT_NE(shell, nullptr);
  EXPECT_EQ(shell->unmapped_ns, 250u);  // the exec record, not where the exec began (210)
  EXPECT_EQ(module_at(0x400010, 240), "/bin/sh") << "a sample inside execve, before its registers were set";
  EXPECT_EQ(module_at(0x600010, 240), "/usr/bin/short") << "the new image, mapped before the exec record";
  EXPECT_EQ(builder.processes_without_maps(), 0u);
  // The old image's record that came late still explains that image's samples, and ended with it.
  EXPECT_EQ(module_at(0x800010, 240), "/bin/old-image");
  EXPECT_EQ(builder.mmaps_recorded(), 4u);
  EXPECT_EQ(profile.find_process(99), nullptr);
  for (const RawModule& m : profile.modules) EXPECT_NE(m.path, "/usr/bin/unrelated");
  bool build_id_kept = false;
  for (const RawModule& m : profile.modules)
    build_id_kept |= m.path == "/usr/bin/short" && m.build_id == "abcd";
  EXPECT_TRUE(build_id_kept);
}

// The exit record of process `pid` (one thread) at `exit_ns`, then its CPU tail at `free_ns`.
void exit_and_tail(BpfFeed& builder, int32_t pid, uint64_t exit_ns, uint64_t free_ns, uint64_t cpu_ns) {
  hpd_task_event exit{};
  exit.header = header(HPD_EVENT_EXIT, pid, pid, exit_ns, "short");
  builder.on_record(bytes_of(exit));
  hpd_task_event tail{};
  tail.header = header(HPD_EVENT_CPU_TAIL, pid, pid, free_ns, "short");
  tail.cpu_tail_ns = cpu_ns;
  builder.on_record(bytes_of(tail));
}

// The CPU time a thread used after its last timer sample comes when its task is freed: a sample of
// its own at the thread's end, with no stack when no exit stack came (never the last sample's). A
// thread without samples gets none.
TEST(BpfEventDecoder, CpuTailAfterTheLastSampleBecomesASample) {
  RawProfile profile;
  BpfFeed builder(profile, {100});
  builder.add_initial_process(60, maps("00400000-00401000 r-xp 00000000 08:01 5 /usr/bin/short\n"));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 60, 60, 200, "short", {}, {0x400010}, 1'000'000));
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 60, 60, 250, "short", {}, {0x400020}, 0, 5));
  exit_and_tail(builder, 60, 300, 400, 700'000);
  exit_and_tail(builder, 61, 300, 400, 700'000);  // never sampled: no tail

  ASSERT_EQ(profile.samples.size(), 3u);
  const RawSample& added = profile.samples[2];
  EXPECT_EQ(added.kind, SampleKind::kOnCpu);
  EXPECT_EQ(added.cpu_delta_ns, 700'000u);
  EXPECT_EQ(added.stack, kNoIndex);  // no exit stack came: unattributed, not the last sample's stack
  EXPECT_EQ(added.time_ns, 300u);    // at the thread's end
  EXPECT_EQ(builder.cpu_tails(), 1u);
  EXPECT_EQ(profile.find_process(61), nullptr);
}

// The exit record's stack is where the tail goes; the in-syscall flag says the user leaf is after a
// `syscall`, its absence that the thread was interrupted there (preempted, here, under kernel frames).
TEST(BpfEventDecoder, ExitStackTakesTheTailAndTheLeafKindComesFromTheRecord) {
  RawProfile profile;
  BpfFeed builder(profile, {100});
  builder.add_initial_process(60, maps("00400000-00401000 r-xp 00000000 08:01 5 /usr/bin/short\n"));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 60, 60, 200, "short", {}, {0x400010}, 1'000'000));
  builder.on_record(sample_bytes(HPD_EVENT_OFF_CPU, 60, 60, 250, "short", {0xffffffff81000020},
                                 {0x400020, 0x400100}, 0, 5, HPD_USER_END_ROOT, HPD_SAMPLE_PREEMPTED));
  builder.on_record(sample_bytes(HPD_EVENT_EXIT_STACK, 60, 60, 290, "short", {0xffffffff81000030},
                                 {0x400040, 0x400100}, 0, 0, HPD_USER_END_ROOT, HPD_SAMPLE_IN_SYSCALL));
  exit_and_tail(builder, 60, 300, 400, 700'000);

  ASSERT_EQ(profile.samples.size(), 3u);
  const RawSample& waited = profile.samples[1];
  EXPECT_EQ(waited.kind, SampleKind::kWaitCpu);
  EXPECT_EQ(profile.stacks[waited.stack].user_leaf, UserLeaf::kInterrupted);
  const RawSample& added = profile.samples[2];
  EXPECT_EQ(added.cpu_delta_ns, 700'000u);
  ASSERT_NE(added.stack, kNoIndex);
  EXPECT_EQ(profile.stacks.user_frames(added.stack)[0], 0x400040u);
  EXPECT_EQ(profile.stacks[added.stack].user_leaf, UserLeaf::kAfterSyscall);
  EXPECT_EQ(builder.cpu_tails(), 1u);
}

TEST(BpfEventDecoder, ThreadRenamesAndStillOffCpuThreads) {
  RawProfile profile;
  BpfFeed builder(profile, {0});
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 50, 51, 10, "threads", {}, {}));
  builder.on_record(sample_bytes(HPD_EVENT_ON_CPU, 50, 51, 20, "late-worker", {}, {}));
  EXPECT_EQ(profile.find_thread(50, 51)->name, "late-worker");

  hpd_sample_event pending{};
  pending.header = header(HPD_EVENT_OFF_CPU, 50, 51, 100, "late-worker");
  pending.user_frames = 1;
  pending.ips[0] = 0x1234;
  builder.on_still_off_cpu(pending, 600);
  ASSERT_EQ(profile.samples.size(), 3u);
  EXPECT_EQ(profile.samples[2].kind, SampleKind::kOffCpu);
  EXPECT_EQ(profile.samples[2].off_cpu_ns, 500u);
  EXPECT_EQ(profile.samples[2].time_ns, 100u);
}

}  // namespace
}  // namespace hpd
