// The rules of the one RawProfile builder, fed events directly (RawProfileBuilderRules), and one
// story written as each backend's ring would hold it, decoded by each backend's decoder into the same
// builder, which must tell the same story (BothBackends).
#include "raw_profile_builder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "builder_feeds.h"
#include "perf_record_bytes.h"

namespace hpd {
namespace {

constexpr uint64_t kStart = 1000;  // the recording's start in these tests

std::vector<MapsEntry> maps(const char* text) {
  return parse_maps(text);
}

SampleEvent sample_event(int32_t pid, int32_t tid, uint64_t time, std::span<const uint64_t> user,
                         std::span<const uint64_t> kernel = {}, StackEnd walk_end = StackEnd::kComplete) {
  SampleEvent e;
  e.time_ns = time;
  e.pid = pid;
  e.tid = tid;
  e.cpu_delta_ns = 1'000'000;
  e.user = user;
  e.kernel = kernel;
  e.walk_end = walk_end;
  return e;
}

std::string module_at(const RawProfile& profile, int32_t pid, uint64_t address, uint64_t time) {
  const RawProcess* p = profile.find_process(pid);
  if (p == nullptr) return "(no process)";
  const RawMapping* m = p->find_mapping(address, time);
  return m == nullptr ? "(none)" : profile.modules[m->module].path;
}

class RawProfileBuilderRules : public ::testing::Test {
 protected:
  RawProfile profile;
  int described = 0;
  RawProfileBuilder builder{profile, BuilderConfig{TrackerConfig{kStart}, false},
                            SystemLookups{{}, {}, [this](RawProcess& p) {
                                            ++described;
                                            p.exe = "/described/" + std::to_string(p.pid);
                                          }}};
  const std::vector<uint64_t> shell_stack = {0x400100, 0x400200};
};

// A process or thread first seen through a sample existed before the recording; its fork, if it comes
// later (perf reads its per-CPU rings one after another), is the truth of its start.
TEST_F(RawProfileBuilderRules, FirstSeenWithoutForkStartsAtTheRecordingStartUntilItsForkComes) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  builder.on_event(sample_event(10, 11, 5000, shell_stack));
  EXPECT_EQ(profile.find_thread(10, 11)->start_ns, kStart);
  builder.on_event(sample_event(20, 20, 5100, shell_stack));  // a child whose fork record comes after
  EXPECT_EQ(profile.find_process(20)->start_ns, kStart);
  EXPECT_EQ(described, 1);  // described from /proc when first seen
  builder.on_event(ForkEvent{20, 20, 10, 10, 4900, {}});
  EXPECT_EQ(profile.find_process(20)->start_ns, 4900u);
  EXPECT_EQ(profile.find_thread(20, 20)->start_ns, 4900u);
  EXPECT_EQ(module_at(profile, 20, 0x400100, 5100), "/bin/sh");  // the parent's mappings, from the fork
  builder.on_event(ForkEvent{10, 12, 10, 10, 6000, {}});
  EXPECT_EQ(profile.find_thread(10, 12)->start_ns, 6000u);
  builder.on_event(ForkEvent{10, 11, 10, 10, 4000, {}});  // a fork of a thread seen before it came
  EXPECT_EQ(profile.find_thread(10, 11)->start_ns, 4000u);
}

// fork copies the address space (only what is mapped at the fork), the name, path and arguments.
TEST_F(RawProfileBuilderRules, ForkCopiesLiveMappingsAndTheDescription) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"
                                                   "00500000-00501000 r-xp 00000000 08:01 6 /bin/gone\n"));
  RawProcess& parent = profile.process(10);
  parent.name = "sh";
  parent.exe = "/bin/sh";
  parent.cmdline = {"sh", "-c", "x"};
  parent.mappings[1].unmapped_ns = 1500;
  builder.on_event(ForkEvent{11, 11, 10, 10, 2000, "sh"});
  const RawProcess* child = profile.find_process(11);
  ASSERT_NE(child, nullptr);
  ASSERT_EQ(child->mappings.size(), 1u);
  EXPECT_EQ(child->mappings[0].time_ns, 2000u);
  EXPECT_EQ(child->name, "sh");
  EXPECT_EQ(child->exe, "/bin/sh");
  EXPECT_EQ(child->cmdline, (std::vector<std::string>{"sh", "-c", "x"}));
  EXPECT_EQ(described, 0);  // /proc may already show a later image
  EXPECT_EQ(profile.find_thread(11, 11)->name, "sh");
  // A parent unknown to the profile: nothing to copy, the child is described.
  builder.on_event(ForkEvent{31, 31, 30, 30, 2100, {}});
  EXPECT_EQ(described, 1);
  EXPECT_EQ(profile.find_process(31)->start_ns, 2100u);
}

// The old image's mappings end when the new image is seen running: at an exec record written after
// execve set the registers, or else at the first sample that shows the new image.
TEST_F(RawProfileBuilderRules, ExecEndsTheOldImageWhenTheNewOneIsSeenRunning) {
  for (const bool image_running : {true, false}) {
    RawProfile p;
    RawProfileBuilder b(p, BuilderConfig{TrackerConfig{kStart}, false});
    b.processes().add_initial_process(40, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
    b.on_event(ExecStartEvent{40, 3000});
    b.on_event(MmapEvent{40, 3010, 0x500000, 0x1000, 0, "/usr/bin/new", ""});
    b.on_event(ExecEvent{40, 40, 3020, "new", image_running, false});
    EXPECT_EQ(p.find_process(40)->name, "new");
    EXPECT_EQ(p.find_thread(40, 40)->name, "new");
    // Inside execve: the old registers still point into the old image.
    SampleEvent in_execve = sample_event(40, 40, 3030, shell_stack, {}, StackEnd::kComplete);
    b.on_event(in_execve);
    EXPECT_EQ(module_at(p, 40, 0x400100, 3030), image_running ? "(none)" : "/bin/sh") << image_running;
    const std::vector<uint64_t> new_stack = {0x500100};
    b.on_event(sample_event(40, 40, 3100, new_stack));  // only the new image maps 0x500100
    const RawMapping& old = p.find_process(40)->mappings[0];
    EXPECT_EQ(old.unmapped_ns, image_running ? 3020u : 3100u);
    EXPECT_EQ(module_at(p, 40, 0x400100, 2000), "/bin/sh");
    EXPECT_EQ(module_at(p, 40, 0x500100, 3100), "/usr/bin/new");
  }
  // A sample taken in user mode proves it as well, wherever its address lies.
  RawProfile p;
  RawProfileBuilder b(p, BuilderConfig{TrackerConfig{kStart}, false});
  b.processes().add_initial_process(40, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  b.on_event(ExecStartEvent{40, 3000});
  b.on_event(ExecEvent{40, 40, 3000, "new", false, false});
  SampleEvent user = sample_event(40, 40, 3200, {});
  user.user_mode = true;
  b.on_event(user);
  EXPECT_EQ(p.find_process(40)->mappings[0].unmapped_ns, 3200u);
}

// A sample taken inside execve after the new registers were set (here off the CPU, its user address the
// new image's) shows the new image before the exec record comes: the record belongs to the exec that
// began at the start record, whose window that sample closed. The new image's first mappings (the
// program, ld.so, the vDSO: mapped before the record's time) stay its own. Once they were ended at the
// record's time, and a program that exited before the maps could be read lost its own functions (CI:
// a local `record --calls` showed the program's call counts as bare addresses).
TEST_F(RawProfileBuilderRules, ExecRecordAfterASampleOfTheNewImageKeepsItsFirstMappings) {
  builder.processes().add_initial_process(45, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  builder.on_event(ExecStartEvent{45, 3000});
  builder.on_event(MmapEvent{45, 3010, 0x500000, 0x1000, 0, "/usr/bin/new", ""});
  const std::vector<uint64_t> new_stack = {0x500100};
  builder.on_event(sample_event(45, 45, 3015, new_stack));
  builder.on_event(ExecEvent{45, 45, 3020, "new", true, false});
  builder.on_event(MmapEvent{45, 3030, 0x600000, 0x1000, 0, "/usr/lib/libc.so", ""});
  const RawProcess& p = *profile.find_process(45);
  EXPECT_EQ(p.mappings[0].unmapped_ns, 3015u);  // the old image, ended by the sample
  EXPECT_EQ(module_at(profile, 45, 0x400100, 2000), "/bin/sh");
  for (const uint64_t t : {uint64_t{3015}, uint64_t{3100}, UINT64_MAX})
    EXPECT_EQ(module_at(profile, 45, 0x500100, t), "/usr/bin/new") << t;
  EXPECT_EQ(module_at(profile, 45, 0x600100, UINT64_MAX), "/usr/lib/libc.so");
  // The next exec is a new window again.
  builder.on_event(ExecStartEvent{45, 4000});
  builder.on_event(MmapEvent{45, 4010, 0x700000, 0x1000, 0, "/usr/bin/third", ""});
  builder.on_event(ExecEvent{45, 45, 4020, "third", true, false});
  EXPECT_EQ(module_at(profile, 45, 0x500100, 4100), "(none)");
  EXPECT_EQ(module_at(profile, 45, 0x700100, 4100), "/usr/bin/third");
}

// A mapping record of the replaced image that comes after its exec began explains that image's
// samples and ends with it; one made after the exec began is the new image's.
TEST_F(RawProfileBuilderRules, LateMappingsOfTheOldImageEndWithIt) {
  builder.processes().add_initial_process(50, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  builder.on_event(ExecStartEvent{50, 3000});
  builder.on_event(ExecEvent{50, 50, 3050, "new", true, false});
  builder.on_event(MmapEvent{50, 2500, 0x600000, 0x1000, 0, "/usr/lib/old.so", ""});
  EXPECT_EQ(module_at(profile, 50, 0x600100, 2600), "/usr/lib/old.so");
  EXPECT_EQ(module_at(profile, 50, 0x600100, 3100), "(none)");
  EXPECT_EQ(builder.processes().mmaps_recorded(), 1u);
}

// Mappings of a process not in the profile wait for its first record; an exit of a process never
// seen drops them; a thread that exits unseen adds nothing.
TEST_F(RawProfileBuilderRules, MappingsWaitForTheirProcessAndUnseenExitsAddNothing) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  builder.on_event(MmapEvent{60, 2100, 0x700000, 0x1000, 0, "/usr/bin/short", "abcd"});
  builder.on_event(MmapEvent{70, 2100, 0x800000, 0x1000, 0, "/usr/bin/unrelated", ""});
  EXPECT_EQ(profile.find_process(60), nullptr);
  builder.on_event(ForkEvent{60, 60, 10, 10, 2000, {}});
  EXPECT_EQ(module_at(profile, 60, 0x700100, 2200), "/usr/bin/short");
  builder.on_event(ExitEvent{70, 70, 2300, 0});
  builder.on_event(ForkEvent{70, 70, 10, 10, 2400, {}});  // a later process behind the same pid
  EXPECT_EQ(module_at(profile, 70, 0x800100, 2500), "(none)");
  builder.on_event(ExitEvent{10, 99, 2500, 0});
  EXPECT_EQ(profile.find_thread(10, 99), nullptr);
  builder.on_event(ExitEvent{10, 98, 2500, 4});  // but one that lost records is shown with them
  EXPECT_EQ(profile.find_thread(10, 98)->lost.lost_records, 4u);
  // The process ends with its leader; later thread exits extend it.
  builder.on_event(ForkEvent{60, 61, 60, 60, 2600, {}});
  builder.on_event(ExitEvent{60, 60, 3000, 0});
  builder.on_event(ExitEvent{60, 61, 3100, 0});
  EXPECT_EQ(profile.find_process(60)->end_ns, 3100u);
  EXPECT_EQ(profile.find_thread(60, 60)->end_ns, 3000u);
}

// A mapping whose record comes with what the live process told of its file (the eBPF session asks
// once, for its unwind tables and the profile) is not asked of again: not for a known process, not
// when it waited for its process. A vDSO of hpd's own image waits without a copy and gets it back.
TEST(RawProfileBuilderLookups, WhatTheLiveProcessToldIsNotAskedAgain) {
  RawProfile profile;
  int asked = 0;
  RawProfileBuilder builder{profile, BuilderConfig{TrackerConfig{kStart}, false},
                            SystemLookups{{},
                                          [&](int32_t, uint64_t, uint64_t, const std::string&) {
                                            ++asked;
                                            MappedModule m;
                                            m.build_id = "0a5ced";
                                            return m;
                                          },
                                          {}}};
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  ASSERT_EQ(asked, 1);
  MappedModule lib;
  lib.build_id = "11b0";
  lib.file = std::make_shared<const HeldFile>(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_GE(lib.file->fd(), 0);
  MmapEvent known{10, 2000, 0x500000, 0x1000, 0, "/usr/lib/libknown.so", ""};
  known.found = &lib;
  builder.on_event(known);
  EXPECT_EQ(asked, 1);
  const RawProcess& sh = *profile.find_process(10);
  ASSERT_EQ(sh.mappings.size(), 2u);
  EXPECT_EQ(profile.modules[sh.mappings[1].module].build_id, "11b0");
  EXPECT_EQ(profile.modules[sh.mappings[1].module].file, lib.file);

  // Process 60's mappings come before its fork; 70's without an answer are asked of at its fork.
  ASSERT_FALSE(own_vdso().empty());
  MappedModule vdso;
  vdso.image = own_vdso();
  vdso.build_id = "7d50";
  MmapEvent v{60, 2100, 0x600000, own_vdso().size(), 0, "[vdso]", ""};
  v.found = &vdso;
  MmapEvent l{60, 2100, 0x700000, 0x1000, 0, "/usr/lib/libknown.so", ""};
  l.found = &lib;
  builder.on_event(v);
  builder.on_event(l);
  builder.on_event(MmapEvent{70, 2100, 0x800000, 0x1000, 0, "/usr/bin/unasked", ""});
  vdso.image.clear();  // what the event pointed to is gone once the event is handled
  EXPECT_EQ(profile.find_process(60), nullptr);
  builder.on_event(ForkEvent{60, 60, 10, 10, 2000, {}});
  EXPECT_EQ(asked, 1);
  const RawMapping* vm = profile.find_process(60)->find_mapping(0x600100, 2200);
  ASSERT_NE(vm, nullptr);
  EXPECT_EQ(profile.modules[vm->module].path, "[vdso]");
  EXPECT_EQ(profile.modules[vm->module].build_id, "7d50");
  EXPECT_EQ(profile.modules[vm->module].image, own_vdso());
  const RawMapping* lm = profile.find_process(60)->find_mapping(0x700100, 2200);
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ(profile.modules[lm->module].file, lib.file);
  builder.on_event(ForkEvent{70, 70, 10, 10, 2000, {}});
  EXPECT_EQ(asked, 2);
  const RawMapping* um = profile.find_process(70)->find_mapping(0x800100, 2200);
  ASSERT_NE(um, nullptr);
  EXPECT_EQ(profile.modules[um->module].build_id, "0a5ced");
}

// perf reads its per-CPU rings one after another: a thread's exit (on one CPU's ring) can come before
// its fork (on another's). The fork then ends the thread it creates; an exit older than the fork was
// an earlier thread's with the same tid and ends nothing.
TEST_F(RawProfileBuilderRules, AnExitReadBeforeItsForkStillEndsTheThread) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  builder.on_event(ExitEvent{10, 11, 3000, 0});
  EXPECT_EQ(profile.find_thread(10, 11), nullptr);  // nothing to end yet, and no track of its own
  builder.on_event(ForkEvent{10, 11, 10, 10, 2000, {}});
  ASSERT_NE(profile.find_thread(10, 11), nullptr);
  EXPECT_EQ(profile.find_thread(10, 11)->start_ns, 2000u);
  EXPECT_EQ(profile.find_thread(10, 11)->end_ns, 3000u);
  EXPECT_EQ(profile.find_process(10)->end_ns, 0u);  // a thread's exit does not end a live process

  // A child process whose leader's exit came first ends with it.
  builder.on_event(ExitEvent{20, 20, 4000, 0});
  builder.on_event(ForkEvent{20, 20, 10, 10, 3500, {}});
  EXPECT_EQ(profile.find_thread(20, 20)->end_ns, 4000u);
  EXPECT_EQ(profile.find_process(20)->end_ns, 4000u);

  // tid 12 exited at 1500 (an earlier thread); the thread forked at 5000 with that tid still runs.
  builder.on_event(ExitEvent{10, 12, 1500, 0});
  builder.on_event(ForkEvent{10, 12, 10, 10, 5000, {}});
  EXPECT_EQ(profile.find_thread(10, 12)->end_ns, 0u);
  // and the remembered exit was used up: a later fork with the tid is not ended by it either.
  builder.on_event(ForkEvent{10, 12, 10, 10, 6000, {}});
  EXPECT_EQ(profile.find_thread(10, 12)->end_ns, 0u);
}

// Names: the latest a record shows wins; the main thread's names the process.
TEST_F(RawProfileBuilderRules, ThreadNamesFollowTheirRecords) {
  builder.on_event(ForkEvent{10, 11, 10, 10, 2000, {}});
  builder.on_event(CommEvent{10, 10, 2000, "main"});
  builder.on_event(ForkEvent{10, 12, 10, 10, 2100, {}});
  EXPECT_EQ(profile.find_thread(10, 12)->name, "main");  // its creator's until it renames itself
  builder.on_event(CommEvent{10, 12, 2200, "io"});
  SampleEvent s = sample_event(10, 11, 2300, {});
  s.comm = "worker";
  builder.on_event(s);
  EXPECT_EQ(profile.find_thread(10, 12)->name, "io");
  EXPECT_EQ(profile.find_thread(10, 11)->name, "worker");
  EXPECT_EQ(profile.find_process(10)->name, "main");
}

// An exec the client may not follow: later samples are dropped, mappings end, nothing is described.
TEST_F(RawProfileBuilderRules, UnfollowedExecDropsWhatFollows) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  profile.process(10).name = "sh";
  builder.on_event(sample_event(10, 10, 2000, shell_stack));
  builder.on_event(ExecEvent{10, 10, 2500, "setuid-prog", true, true});
  builder.on_event(sample_event(10, 10, 2600, shell_stack));
  EXPECT_EQ(profile.samples.size(), 1u);
  EXPECT_EQ(builder.unfollowed_samples(), 1u);
  EXPECT_EQ(profile.find_process(10)->name, "sh");
  EXPECT_EQ(described, 0);
  EXPECT_EQ(profile.find_process(10)->mappings[0].unmapped_ns, 2500u);
}

// How a stack ended: the collector's word, a user process without user frames failed, a kernel thread
// complete, a full kernel part truncates, an unreadable kernel part fails.
TEST_F(RawProfileBuilderRules, StackEnds) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  const std::vector<uint64_t> kernel = {0xffffffff81000010};
  builder.on_event(sample_event(10, 10, 2000, shell_stack));                            // complete
  builder.on_event(sample_event(10, 10, 2001, shell_stack, {}, StackEnd::kTruncated));  // truncated
  builder.on_event(sample_event(10, 10, 2002, shell_stack, {}, StackEnd::kUnknown));    // unknown
  builder.on_event(sample_event(10, 10, 2003, {}, kernel));                             // failed
  builder.on_event(sample_event(2, 2, 2004, {}, kernel));                               // kernel thread
  SampleEvent full = sample_event(10, 10, 2005, shell_stack, kernel);
  full.kernel_truncated = true;
  builder.on_event(full);  // truncated
  SampleEvent unreadable = sample_event(10, 10, 2006, shell_stack, kernel);
  unreadable.kernel_failed = true;
  builder.on_event(unreadable);  // failed
  SampleEvent lost = sample_event(10, 10, 2007, shell_stack);
  lost.user_state_lost = true;
  builder.on_event(lost);  // failed
  const StackEnd want[] = {StackEnd::kComplete, StackEnd::kTruncated, StackEnd::kUnknown, StackEnd::kFailed,
                           StackEnd::kComplete, StackEnd::kTruncated, StackEnd::kFailed,  StackEnd::kFailed};
  ASSERT_EQ(profile.samples.size(), std::size(want));
  for (size_t i = 0; i < std::size(want); ++i) EXPECT_EQ(profile.samples[i].stack_end, want[i]) << i;
  EXPECT_EQ(profile.lost.stack_failures, 3u);
  EXPECT_EQ(profile.lost.truncated_stacks, 2u);
  EXPECT_EQ(profile.find_thread(10, 10)->lost.stack_failures, 3u);
  EXPECT_EQ(profile.samples[0].stack, profile.samples[1].stack);  // interned once
  EXPECT_EQ(builder.processes().processes_without_maps(), 0u);
  // User frames that no mapping of a process without any can place: counted once per image.
  builder.on_event(sample_event(80, 80, 3000, shell_stack));
  builder.on_event(sample_event(80, 80, 3001, shell_stack));
  EXPECT_EQ(builder.processes().processes_without_maps(), 1u);
}

// The CPU after a thread's last sample goes to the stack where it exited, never to an older stack;
// without one, to no stack at all (unattributed).
// A collection that drops what is over (continuous mode, RecordOptions::forget_before): the processes
// and threads that exited before the time, and every stack no sample held names, go; what the builder
// keeps for the threads that stay (an exit stack waiting for its CPU tail) follows their new places, and
// the tail still gets that stack's frames. A pid seen again is described anew.
TEST_F(RawProfileBuilderRules, ForgettingWhatExitedKeepsTheWaitingExitStacks) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  for (int32_t pid = 20; pid < 60; ++pid) {
    builder.on_event(ForkEvent{pid, pid, 10, 10, 1500, {}});
    const std::vector<uint64_t> own = {0x400100 + static_cast<uint64_t>(pid), 0x400200};
    builder.on_event(sample_event(pid, pid, 1600, own));
    builder.on_event(ExitEvent{pid, pid, 1700 + static_cast<uint64_t>(pid), 0});
  }
  builder.on_event(ForkEvent{10, 11, 10, 10, 1800, {}});
  const std::vector<uint64_t> exit_user = {0x400300, 0x400200};
  SampleEvent at_exit = sample_event(10, 11, 2400, exit_user);
  at_exit.at_exit = true;
  builder.on_event(at_exit);
  EXPECT_EQ(profile.stacks.size(), 41u);
  profile.samples.clear();  // written out, as continuous mode does with each chunk
  const int described_before = described;

  builder.forget_exited(1740);               // 20..39 exited before it
  EXPECT_EQ(profile.processes.size(), 21u);  // 10 and 40..59
  EXPECT_EQ(profile.find_process(39), nullptr);
  EXPECT_NE(profile.find_process(40), nullptr);
  EXPECT_EQ(profile.stacks.size(), 1u);  // only the exit stack still waits for its tail
  builder.on_event(ExitEvent{10, 11, 2500, 0});
  builder.on_event(CpuTailEvent{10, 11, 2600, 700});
  ASSERT_EQ(profile.samples.size(), 1u);
  const RawSample& tail = profile.samples[0];
  EXPECT_EQ(tail.tid, 11);
  EXPECT_EQ(tail.cpu_delta_ns, 700u);
  ASSERT_NE(tail.stack, kNoIndex);
  EXPECT_EQ(std::vector<uint64_t>(profile.stacks.user_frames(tail.stack).begin(),
                                  profile.stacks.user_frames(tail.stack).end()),
            exit_user);
  // A sample of a forgotten pid: a process first seen, described from the system again.
  builder.on_event(sample_event(25, 25, 3000, shell_stack));
  EXPECT_EQ(described, described_before + 1);
  EXPECT_EQ(profile.find_process(25)->start_ns, kStart);
  EXPECT_EQ(builder.samples(), 41u);
}

// An exit that says a CPU tail follows is awaited until that tail comes (the recorder reads on until
// then); one that says none does not count, nor does a forgotten thread's.
TEST_F(RawProfileBuilderRules, ExitsWithATailToComeAreAwaitedUntilItComes) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  builder.on_event(ForkEvent{10, 11, 10, 10, 1500, {}});
  builder.on_event(ForkEvent{10, 12, 10, 10, 1500, {}});
  builder.on_event(sample_event(10, 11, 2000, shell_stack));
  builder.on_event(sample_event(10, 12, 2000, shell_stack));
  EXPECT_EQ(builder.tails_awaited(), 0u);
  builder.on_event(ExitEvent{10, 11, 2500, 0, true});
  builder.on_event(ExitEvent{10, 12, 2500, 0, false});
  EXPECT_EQ(builder.tails_awaited(), 1u);
  builder.on_event(CpuTailEvent{10, 12, 2600, 0});  // not awaited: no change
  EXPECT_EQ(builder.tails_awaited(), 1u);
  builder.on_event(CpuTailEvent{10, 11, 2600, 0});  // zero CPU still ends the wait
  EXPECT_EQ(builder.tails_awaited(), 0u);

  builder.on_event(ForkEvent{10, 13, 10, 10, 2700, {}});
  builder.on_event(ExitEvent{10, 13, 2800, 0, true});
  EXPECT_EQ(builder.tails_awaited(), 1u);
  builder.on_event(ExitEvent{10, 10, 2900, 0, false});
  builder.forget_exited(3000);
  EXPECT_EQ(builder.tails_awaited(), 0u);
}

TEST_F(RawProfileBuilderRules, CpuTailGoesToTheExitStackOrToNoStack) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  builder.on_event(sample_event(10, 10, 2000, shell_stack));
  SampleEvent off = sample_event(10, 10, 2100, {});
  off.kind = SampleKind::kOffCpu;
  off.off_cpu_ns = 50;
  builder.on_event(off);
  const std::vector<uint64_t> exit_user = {0x400300, 0x400200};
  const std::vector<uint64_t> exit_kernel = {0xffffffff81000100};
  SampleEvent at_exit = sample_event(10, 10, 2400, exit_user, exit_kernel);
  at_exit.at_exit = true;
  at_exit.cpu_delta_ns = 0;
  at_exit.user_leaf = UserLeaf::kAfterSyscall;
  builder.on_event(at_exit);
  EXPECT_EQ(profile.samples.size(), 2u);  // not a sample of its own
  builder.on_event(ExitEvent{10, 10, 2500, 0});
  builder.on_event(CpuTailEvent{10, 10, 2600, 700});
  builder.on_event(CpuTailEvent{10, 10, 2600, 700});  // once
  builder.on_event(CpuTailEvent{11, 11, 2600, 700});  // never sampled
  ASSERT_EQ(profile.samples.size(), 3u);
  const RawSample& tail = profile.samples[2];
  EXPECT_EQ(tail.kind, SampleKind::kOnCpu);
  EXPECT_EQ(tail.cpu_delta_ns, 700u);
  EXPECT_EQ(tail.time_ns, 2500u);
  ASSERT_NE(tail.stack, kNoIndex);
  EXPECT_NE(tail.stack, profile.samples[0].stack);
  EXPECT_EQ(std::vector<uint64_t>(profile.stacks.user_frames(tail.stack).begin(),
                                  profile.stacks.user_frames(tail.stack).end()),
            exit_user);
  EXPECT_EQ(profile.stacks[tail.stack].user_leaf, UserLeaf::kAfterSyscall);
  EXPECT_EQ(builder.samples(), 2u);
  EXPECT_EQ(builder.cpu_tails(), 1u);

  // No exit stack came (its record was lost): the tail is the thread's, with no stack.
  builder.on_event(sample_event(10, 12, 3000, shell_stack));
  builder.on_event(ExitEvent{10, 12, 3100, 0});
  builder.on_event(CpuTailEvent{10, 12, 3200, 900});
  ASSERT_EQ(profile.samples.size(), 5u);
  EXPECT_EQ(profile.samples[4].stack, kNoIndex);
  EXPECT_EQ(profile.samples[4].tid, 12);
  EXPECT_EQ(profile.samples[4].cpu_delta_ns, 900u);
  EXPECT_EQ(profile.samples[4].time_ns, 3100u);
  EXPECT_EQ(builder.cpu_tails(), 2u);
}

// A thread's last samples were given CPU time that was not its own (their runtime, brought up to the
// sample's instant, counted steal the programs could not read): its tail says by how much, and that
// comes off those samples, the latest first, none below zero, no other thread's and no off-CPU record's.
// The thread's total is then its final CPU time.
TEST_F(RawProfileBuilderRules, ExcessCpuOfAnExitedThreadComesOffItsLastSamples) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  builder.on_event(ForkEvent{10, 11, 10, 10, 1500, {}});
  builder.on_event(sample_event(10, 11, 2000, shell_stack));  // 1 ms each
  builder.on_event(sample_event(10, 10, 2050, shell_stack));
  SampleEvent last = sample_event(10, 11, 2100, shell_stack);
  last.cpu_delta_ns = 300'000;
  builder.on_event(last);
  SampleEvent off = sample_event(10, 11, 2200, {});
  off.kind = SampleKind::kOffCpu;
  off.cpu_delta_ns = 0;
  off.off_cpu_ns = 50;
  builder.on_event(off);
  builder.on_event(ExitEvent{10, 11, 2500, 0, true});
  builder.on_event(CpuTailEvent{10, 11, 2600, 0, 500'000});
  ASSERT_EQ(profile.samples.size(), 4u);
  EXPECT_EQ(profile.samples[0].cpu_delta_ns, 800'000u);    // 200 us of it
  EXPECT_EQ(profile.samples[1].cpu_delta_ns, 1'000'000u);  // thread 10's
  EXPECT_EQ(profile.samples[2].cpu_delta_ns, 0u);          // all of its 300 us
  EXPECT_EQ(builder.cpu_taken_back_ns(), 500'000u);
  EXPECT_EQ(builder.cpu_excess_left_ns(), 0u);
  EXPECT_EQ(builder.threads_with_cpu_excess(), 1u);
  EXPECT_EQ(builder.tails_awaited(), 0u);
  EXPECT_EQ(builder.cpu_tails(), 0u);  // no CPU time of its own: no sample added

  // More than its samples had: they come down to zero, the rest is counted as left.
  builder.on_event(CpuTailEvent{10, 10, 2700, 0, 1'500'000});
  EXPECT_EQ(profile.samples[1].cpu_delta_ns, 0u);
  EXPECT_EQ(builder.cpu_taken_back_ns(), 1'500'000u);
  EXPECT_EQ(builder.cpu_excess_left_ns(), 500'000u);
}

// A thread past its exit stack never returns to user mode: a later sample of its exit whose walk failed
// (its memory being released) from the same user instruction has the exit stack's user part, complete;
// one from another instruction, one taken before the exit stack, or one of a thread whose exit stack
// failed too keeps its failed walk.
TEST_F(RawProfileBuilderRules, SamplesInTheExitAfterItsStackHaveItsUserStack) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  const std::vector<uint64_t> exit_user = {0x400300, 0x400200, 0x400100};
  const std::vector<uint64_t> kernel = {0xffffffff81000100};
  const std::vector<uint64_t> leaf_only = {0x400300};
  const std::vector<uint64_t> other_leaf = {0x400310};
  // Before the exit stack: a failed walk stays failed.
  builder.on_event(sample_event(10, 10, 2300, leaf_only, kernel, StackEnd::kFailed));
  SampleEvent at_exit = sample_event(10, 10, 2400, exit_user, kernel);
  at_exit.at_exit = true;
  builder.on_event(at_exit);
  builder.on_event(sample_event(10, 10, 2500, leaf_only, kernel, StackEnd::kFailed));
  builder.on_event(sample_event(10, 10, 2600, other_leaf, kernel, StackEnd::kFailed));
  ASSERT_EQ(profile.samples.size(), 3u);
  EXPECT_EQ(profile.samples[0].stack_end, StackEnd::kFailed);
  EXPECT_EQ(profile.samples[1].stack_end, StackEnd::kComplete);
  const auto user = profile.stacks.user_frames(profile.samples[1].stack);
  EXPECT_EQ(std::vector<uint64_t>(user.begin(), user.end()), exit_user);
  const auto own_kernel = profile.stacks.kernel_frames(profile.samples[1].stack);
  EXPECT_EQ(std::vector<uint64_t>(own_kernel.begin(), own_kernel.end()), kernel);
  EXPECT_EQ(profile.samples[2].stack_end, StackEnd::kFailed);
  EXPECT_EQ(builder.samples_after_exit_stack(), 1u);
  EXPECT_EQ(profile.lost.stack_failures, 2u);

  // An exit stack whose own walk failed gives nothing.
  SampleEvent failed_exit = sample_event(10, 11, 2400, leaf_only, kernel, StackEnd::kFailed);
  failed_exit.at_exit = true;
  builder.on_event(failed_exit);
  builder.on_event(sample_event(10, 11, 2500, leaf_only, kernel, StackEnd::kFailed));
  EXPECT_EQ(profile.samples.back().stack_end, StackEnd::kFailed);
  EXPECT_EQ(builder.samples_after_exit_stack(), 1u);
}

// What a sample's user leaf is, as the collector says, or presumed from its kernel part when it does
// not say; two stacks of the same addresses with different leaves are two stacks.
TEST_F(RawProfileBuilderRules, UserLeafAsTheCollectorSaysOrPresumed) {
  builder.processes().add_initial_process(10, maps("00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n"));
  const std::vector<uint64_t> kernel = {0xffffffff81000100};
  SampleEvent interrupted = sample_event(10, 10, 2000, shell_stack, kernel);
  interrupted.user_leaf = UserLeaf::kInterrupted;
  builder.on_event(interrupted);
  SampleEvent after_syscall = sample_event(10, 10, 2001, shell_stack, kernel);
  after_syscall.user_leaf = UserLeaf::kAfterSyscall;
  builder.on_event(after_syscall);
  builder.on_event(sample_event(10, 10, 2002, shell_stack, kernel));  // unsaid, under kernel frames
  builder.on_event(sample_event(10, 10, 2003, shell_stack));          // unsaid, no kernel frames
  ASSERT_EQ(profile.samples.size(), 4u);
  EXPECT_EQ(profile.stacks[profile.samples[0].stack].user_leaf, UserLeaf::kInterrupted);
  EXPECT_EQ(profile.stacks[profile.samples[1].stack].user_leaf, UserLeaf::kAfterSyscall);
  EXPECT_NE(profile.samples[0].stack, profile.samples[1].stack);
  EXPECT_EQ(profile.samples[2].stack, profile.samples[1].stack);
  EXPECT_EQ(profile.stacks[profile.samples[3].stack].user_leaf, UserLeaf::kInterrupted);
}

TEST_F(RawProfileBuilderRules, LostRecordsAndThrottles) {
  builder.on_event(LostEvent{25, 0});
  builder.on_event(LostEvent{0, 1});
  builder.on_event(ThreadLostEvent{10, 11, 3});
  EXPECT_EQ(profile.lost.lost_records, 25u);  // a thread's count is part of the total counted apart
  EXPECT_EQ(profile.lost.throttle_events, 1u);
  EXPECT_EQ(profile.find_thread(10, 11)->lost.lost_records, 3u);
}

// ---- One story, as each backend's rings hold it, into the same builder. ----

constexpr uint64_t kPerfSampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID |
                                     PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_READ |
                                     PERF_SAMPLE_CALLCHAIN;
const RecordLayout kPerfLayout{kPerfSampleType, 0, true};

std::vector<uint8_t> perf_sample(int32_t pid, int32_t tid, uint64_t time, uint64_t counter,
                                 const std::vector<uint64_t>& user) {
  PerfRecordBytes b(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
  b.u64(user.front()).u32(pid).u32(tid).u64(time).u64(1).u32(1).u32(0).u64(1'000'000).u64(counter);
  b.u64(user.size() + 1).u64(static_cast<uint64_t>(PERF_CONTEXT_USER));
  for (const uint64_t a : user) b.u64(a);
  return b.done();
}
std::vector<uint8_t> perf_task(bool fork, int32_t pid, int32_t ppid, int32_t tid, int32_t ptid,
                               uint64_t time) {
  return PerfRecordBytes(fork ? PERF_RECORD_FORK : PERF_RECORD_EXIT, 0)
      .u32(pid)
      .u32(ppid)
      .u32(tid)
      .u32(ptid)
      .u64(time)
      .trailer(pid, tid, time, 1, 0)
      .done();
}
std::vector<uint8_t> perf_comm(int32_t pid, int32_t tid, const std::string& name, bool exec, uint64_t time) {
  return PerfRecordBytes(PERF_RECORD_COMM, exec ? PERF_RECORD_MISC_COMM_EXEC : 0)
      .u32(pid)
      .u32(tid)
      .str(name)
      .trailer(pid, tid, time, 1, 0)
      .done();
}
std::vector<uint8_t> perf_mmap(int32_t pid, uint64_t start, uint64_t length, const std::string& path,
                               uint64_t time) {
  const uint8_t device[24] = {};  // maj, min, ino, ino_generation
  return PerfRecordBytes(PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER)
      .u32(pid)
      .u32(pid)
      .u64(start)
      .u64(length)
      .u64(0)
      .raw(device, sizeof device)
      .u32(PROT_READ | PROT_EXEC)
      .u32(MAP_PRIVATE)
      .str(path)
      .trailer(pid, pid, time, 1, 0)
      .done();
}

hpd_event_header bpf_header(uint32_t type, int32_t pid, int32_t tid, uint64_t time, const char* comm) {
  hpd_event_header h{};
  h.type = type;
  h.cpu = 1;
  h.pid = pid;
  h.tid = tid;
  h.time_ns = time;
  std::memcpy(h.comm, comm, std::min(std::strlen(comm), sizeof h.comm));
  return h;
}
// As the program writes it: cut after its frames.
std::vector<uint8_t> bpf_sample(int32_t pid, int32_t tid, uint64_t time, const char* comm, uint64_t delta,
                                const std::vector<uint64_t>& user) {
  hpd_sample_event e{};
  e.header = bpf_header(HPD_EVENT_ON_CPU, pid, tid, time, comm);
  e.cpu_delta_ns = delta;
  e.user_end = HPD_USER_END_FP_ZERO;
  e.user_frames = static_cast<uint16_t>(user.size());
  for (size_t i = 0; i < user.size(); ++i) e.ips[i] = user[i];
  const size_t size = offsetof(hpd_sample_event, ips) + user.size() * sizeof(uint64_t);
  std::vector<uint8_t> bytes(size);
  std::memcpy(bytes.data(), &e, size);
  return bytes;
}
std::vector<uint8_t> bpf_fork(int32_t pid, int32_t tid, int32_t ppid, int32_t ptid, uint64_t time,
                              const char* comm) {
  hpd_fork_event e{};
  e.header = bpf_header(HPD_EVENT_FORK, pid, tid, time, comm);
  e.parent_pid = ppid;
  e.parent_tid = ptid;
  return bytes_of(e);
}
std::vector<uint8_t> bpf_task(uint32_t type, int32_t pid, int32_t tid, uint64_t time, const char* comm) {
  hpd_task_event e{};
  e.header = bpf_header(type, pid, tid, time, comm);
  return bytes_of(e);
}

// A shell (pid 100, there when the recording began) forks a child (200) that runs in the shell's
// image, execs a worker that maps its executable and libc, starts a thread (201) that names itself
// "io" and runs; both exit. perf_event: one ring of perf records. eBPF: the programs' ring, and the
// mmap watch's perf records (the exec's start and the mappings) delivered before the exec record.
TEST(BothBackends, TellTheSameStoryThroughTheOneBuilder) {
  const std::vector<uint64_t> in_shell = {0x400100, 0x400200};
  const std::vector<uint64_t> in_worker = {0x500100, 0x7f0000000100};
  const std::vector<uint64_t> in_thread = {0x7f0000000200, 0x500300};
  const char* shell_maps = "00400000-00401000 r-xp 00000000 08:01 5 /bin/sh\n";

  RawProfile perf;
  {
    PerfFeed feed(perf, PerfDecoderConfig{true, 127, false, 0}, {}, {}, kStart);
    feed.builder().processes().add_initial_process(100, maps(shell_maps));
    perf.process(100).name = "sh";
    std::vector<std::vector<uint8_t>> ring = {
        perf_task(true, 200, 100, 200, 100, 2000),
        perf_sample(200, 200, 2100, 1'000'000, in_shell),
        perf_comm(200, 200, "worker", true, 3000),
        perf_mmap(200, 0x500000, 0x1000, "/usr/bin/worker", 3010),
        perf_mmap(200, 0x7f0000000000, 0x2000, "/usr/lib/libc.so.6", 3020),
        perf_sample(200, 200, 3500, 3'000'000, in_worker),
        perf_task(true, 200, 200, 201, 200, 4000),
        perf_comm(200, 201, "io", false, 4100),
        perf_sample(200, 201, 4200, 500'000, in_thread),
        perf_task(false, 200, 200, 201, 201, 4500),
        perf_task(false, 200, 200, 200, 200, 5000),
    };
    for (const auto& bytes : ring) {
      const auto record = decode_record(bytes, kPerfLayout);
      ASSERT_TRUE(record);
      feed.on_record(*record);
    }
  }
  RawProfile bpf;
  {
    BpfFeed feed(bpf, BpfFeedConfig{kStart});
    feed.add_initial_process(100, maps(shell_maps));
    bpf.process(100).name = "sh";
    // The mmap watch's records go through the perf decoder's helpers, as bpf_session_reading.cpp does.
    const auto watch = [&](const std::vector<uint8_t>& bytes) {
      const auto record = decode_record(bytes, kPerfLayout);
      ASSERT_TRUE(record);
      if (const auto* m = std::get_if<Mmap2Record>(&*record)) {
        feed.on_mmap(m->pid, m->address, m->length, m->page_offset, m->filename, m->build_id,
                     time_of(m->sample_id));
      } else if (const auto* c = std::get_if<CommRecord>(&*record)) {
        feed.on_exec_start(c->pid, time_of(c->sample_id));
      }
    };
    feed.on_record(bpf_fork(200, 200, 100, 100, 2000, "sh"));
    feed.on_record(bpf_sample(200, 200, 2100, "sh", 1'000'000, in_shell));
    watch(perf_comm(200, 200, "worker", true, 3000));
    watch(perf_mmap(200, 0x500000, 0x1000, "/usr/bin/worker", 3010));
    watch(perf_mmap(200, 0x7f0000000000, 0x2000, "/usr/lib/libc.so.6", 3020));
    feed.on_record(bpf_task(HPD_EVENT_EXEC, 200, 200, 3030, "worker"));
    feed.on_record(bpf_sample(200, 200, 3500, "worker", 2'000'000, in_worker));
    feed.on_record(bpf_fork(200, 201, 200, 200, 4000, "worker"));
    feed.on_record(bpf_sample(200, 201, 4200, "io", 500'000, in_thread));
    feed.on_record(bpf_task(HPD_EVENT_EXIT, 200, 201, 4500, "io"));
    feed.on_record(bpf_task(HPD_EVENT_EXIT, 200, 200, 5000, "worker"));
    EXPECT_EQ(feed.malformed_records(), 0u);
  }

  for (const RawProfile* p : {&perf, &bpf}) {
    SCOPED_TRACE(p == &perf ? "perf" : "bpf");
    const RawProcess* child = p->find_process(200);
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->name, "worker");
    EXPECT_EQ(child->start_ns, 2000u);
    EXPECT_EQ(child->end_ns, 5000u);
    ASSERT_EQ(child->mappings.size(), 3u);
    EXPECT_EQ(child->mappings[0].time_ns, 2000u);  // the shell's image, copied at the fork
    EXPECT_EQ(module_at(*p, 200, 0x400100, 2100), "/bin/sh");
    EXPECT_EQ(module_at(*p, 200, 0x500100, 3500), "/usr/bin/worker");
    EXPECT_EQ(module_at(*p, 200, 0x7f0000000100, 3500), "/usr/lib/libc.so.6");
    EXPECT_EQ(module_at(*p, 200, 0x400100, 3500), "(none)");
    const RawThread* main = p->find_thread(200, 200);
    const RawThread* io = p->find_thread(200, 201);
    ASSERT_NE(main, nullptr);
    ASSERT_NE(io, nullptr);
    EXPECT_EQ(main->name, "worker");
    EXPECT_EQ(io->name, "io");
    EXPECT_EQ(main->start_ns, 2000u);
    EXPECT_EQ(io->start_ns, 4000u);
    EXPECT_EQ(io->end_ns, 4500u);
    EXPECT_EQ(main->end_ns, 5000u);
    ASSERT_EQ(p->samples.size(), 3u);
  }
  // The samples: same times, threads, CPU time and stacks (each profile interns its own).
  for (size_t i = 0; i < 3; ++i) {
    const RawSample& a = perf.samples[i];
    const RawSample& b = bpf.samples[i];
    EXPECT_EQ(a.time_ns, b.time_ns) << i;
    EXPECT_EQ(a.tid, b.tid) << i;
    EXPECT_EQ(a.cpu_delta_ns, b.cpu_delta_ns) << i;
    EXPECT_EQ(a.stack_end, StackEnd::kComplete) << i;
    EXPECT_EQ(b.stack_end, StackEnd::kComplete) << i;
    const auto ua = perf.stacks.user_frames(a.stack);
    const auto ub = bpf.stacks.user_frames(b.stack);
    EXPECT_EQ(std::vector<uint64_t>(ua.begin(), ua.end()), std::vector<uint64_t>(ub.begin(), ub.end())) << i;
  }
  // What each ring knows of the exec's end: the eBPF exec record (after execve set the registers),
  // perf's first sample in the new image. Both lie between the exec's start and that sample.
  EXPECT_EQ(bpf.find_process(200)->mappings[0].unmapped_ns, 3030u);
  EXPECT_EQ(perf.find_process(200)->mappings[0].unmapped_ns, 3500u);
}

}  // namespace
}  // namespace hpd
