// Unit tests for RawProfile: stack interning, module/process/thread tables, mapping lookup.
#include "hpd/model/raw_profile.h"

#include <fcntl.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace hpd {
namespace {

TEST(TargetScope, TellsWhatTheRecordersWroteApart) {
  // The targets as collect/ and hpd write them.
  EXPECT_EQ(target_scope(std::string(kAllProcessesTarget)), TargetScope::kAllProcesses);
  EXPECT_EQ(target_scope(std::string(kAllProcessesTarget) + " while running make -j2"),
            TargetScope::kAllProcesses);
  EXPECT_EQ(target_scope(std::string(kCgroupTargetPrefix) + "/sys/fs/cgroup/app.slice"),
            TargetScope::kCgroup);
  EXPECT_EQ(
      target_scope(std::string(kContinuousTargetPrefix) + " (3 chunks, 2026-12-04 01:00:00 to 01:01:30)"),
      TargetScope::kContinuous);
  EXPECT_EQ(target_scope("pid 12"), TargetScope::kNamed);
  EXPECT_EQ(target_scope("pids 3,4"), TargetScope::kNamed);
  EXPECT_EQ(target_scope("./a.out --all"), TargetScope::kNamed);
  EXPECT_EQ(target_scope("cgroupfs-tool"), TargetScope::kNamed);
  EXPECT_EQ(target_scope(""), TargetScope::kNamed);
}

TEST(SamplesNotTaken, CountsTheIntervalsASampleStandsForBeyondItsOwn) {
  SamplesNotTaken missed;
  const uint64_t ms = 1'000'000;
  missed.add(1 * ms, 1, ms);     // on time
  missed.add(1'400'000, 1, ms);  // late, rounds to one interval
  missed.add(600'000, 1, ms);    // the next one early: neither is a sample not taken
  EXPECT_EQ(missed.samples, 0u);
  missed.add(5 * ms + 200'000, 1, ms);  // four not taken, 4.2 ms beyond its own interval
  EXPECT_EQ(missed.samples, 4u);
  EXPECT_EQ(missed.ns, 4'200'000u);
  missed.add(10 * ms, 4, ms);  // four summed samples standing for ten intervals
  EXPECT_EQ(missed.samples, 10u);
  EXPECT_EQ(missed.ns, 10'200'000u);
  missed.add(50 * ms, 1, 0);  // no interval known: nothing said
  missed.add(50 * ms, 0, ms);
  EXPECT_EQ(missed.samples, 10u);
}

TEST(SamplesNotTaken, IsSaidOfNamedTargetsAboveOnePercentWithItsLikelyCause) {
  RecordingInfo info;
  info.target = "pid 12";
  info.backend = "perf";
  info.kernel_frames = false;
  info.frequency_hz = 1000;
  EXPECT_EQ(sampling_interval_ns(info), 1'000'000u);
  SamplesNotTaken missed;
  missed.add(31'000'000, 1, sampling_interval_ns(info));  // 30 not taken
  const std::string note = samples_not_taken_note(missed, 100, info);
  EXPECT_NE(note.find("at least 30 samples were not taken (23.1%"), std::string::npos) << note;
  EXPECT_NE(note.find("30 ms)"), std::string::npos) << note;
  EXPECT_NE(note.find("user mode only"), std::string::npos) << note;
  EXPECT_NE(note.find("on the same CPU"), std::string::npos) << note;
  // Below 1% of the samples taken, or fewer than 5: nothing.
  EXPECT_EQ(samples_not_taken_note(missed, 3001, info), "");
  SamplesNotTaken few;
  few.add(5'000'000, 1, 1'000'000);
  EXPECT_EQ(few.samples, 4u);
  EXPECT_EQ(samples_not_taken_note(few, 10, info), "");
  // Sampled with the kernel, or by the BPF backend: the timer or the ring, not the mode.
  info.kernel_frames = true;
  EXPECT_NE(samples_not_taken_note(missed, 100, info).find("fired late or their records were lost"),
            std::string::npos);
  info.backend = "bpf";
  EXPECT_EQ(samples_not_taken_note(missed, 100, info).find("on the same CPU"), std::string::npos);
  // A timer per CPU samples a thread by chance: never said of all processes, a cgroup, continuous.
  for (const std::string& target : {std::string(kAllProcessesTarget), std::string(kCgroupTargetPrefix) + "/x",
                                    std::string(kContinuousTargetPrefix) + " (2 chunks)"}) {
    info.target = target;
    EXPECT_EQ(samples_not_taken_note(missed, 100, info), "") << target;
  }
}

TEST(RawStackTable, InternsIdenticalStacksOnce) {
  RawStackTable table;
  const std::vector<uint64_t> k{0xffffffff81000010, 0xffffffff81000020};
  const std::vector<uint64_t> u{0x401000, 0x401100, 0x401200};
  const uint32_t a = table.intern(k, u);
  const uint32_t b = table.intern(k, u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(table.size(), 1u);
  ASSERT_EQ(table.kernel_frames(a).size(), 2u);
  ASSERT_EQ(table.user_frames(a).size(), 3u);
  EXPECT_EQ(table.kernel_frames(a)[1], 0xffffffff81000020u);
  EXPECT_EQ(table.user_frames(a)[2], 0x401200u);
}

TEST(RawStackTable, SplitPointDistinguishesStacks) {
  // The same address sequence split differently between kernel and user is a different stack.
  RawStackTable table;
  const std::vector<uint64_t> all{1, 2, 3};
  const uint32_t a = table.intern(std::span(all).first(1), std::span(all).subspan(1));
  const uint32_t b = table.intern(std::span(all).first(2), std::span(all).subspan(2));
  const uint32_t c = table.intern({}, all);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.user_frames(c).size(), 3u);
  EXPECT_EQ(table.kernel_frames(c).size(), 0u);
}

TEST(RawStackTable, ManyStacksStayDistinct) {
  RawStackTable table;
  for (uint64_t i = 0; i < 5000; ++i) {
    const std::vector<uint64_t> u{i, i + 1, i * 7};
    EXPECT_EQ(table.intern({}, u), i);
  }
  for (uint64_t i = 0; i < 5000; ++i) {
    const std::vector<uint64_t> u{i, i + 1, i * 7};
    EXPECT_EQ(table.intern({}, u), i);
  }
  EXPECT_EQ(table.size(), 5000u);
}

// The addresses are kept in blocks a stack never straddles: stacks of every depth, up to the deepest
// allowed (two full halves, more than any block), each read back whole and found again.
TEST(RawStackTable, StacksOfEveryDepthAreReadBackWholeAcrossBlocks) {
  RawStackTable table;
  std::vector<std::pair<std::vector<uint64_t>, std::vector<uint64_t>>> stacks;
  auto frames = [](uint64_t seed, size_t n) {
    std::vector<uint64_t> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = seed * 1000003 + i;
    return f;
  };
  for (uint64_t i = 0; i < 3000; ++i)
    stacks.emplace_back(frames(i, i % 7), frames(i + 5000, 1 + (i * 37) % 300));
  stacks.emplace_back(frames(9000, UINT16_MAX), frames(9001, UINT16_MAX));
  stacks.emplace_back(frames(9002, 1), frames(9003, 2));
  std::vector<uint64_t> all;
  for (size_t i = 0; i < stacks.size(); ++i) {
    const auto& [k, u] = stacks[i];
    ASSERT_EQ(table.intern(k, u), i);
    all.insert(all.end(), k.begin(), k.end());
    all.insert(all.end(), u.begin(), u.end());
  }
  for (size_t i = 0; i < stacks.size(); ++i) {
    const auto& [k, u] = stacks[i];
    const auto index = static_cast<uint32_t>(i);
    EXPECT_EQ(table.intern(k, u), i);
    const auto kernel = table.kernel_frames(index);
    const auto user = table.user_frames(index);
    EXPECT_EQ(std::vector<uint64_t>(kernel.begin(), kernel.end()), k) << i;
    EXPECT_EQ(std::vector<uint64_t>(user.begin(), user.end()), u) << i;
  }
  EXPECT_EQ(table.size(), stacks.size());
  EXPECT_EQ(table.addresses(), all);
  EXPECT_GE(table.address_bytes(), all.size() * sizeof(uint64_t));
}

TEST(HashedIndexSet, EntriesUnderOneHashAreToldApartByTheirValues) {
  // Entries whose hashes collide (one hash for all of them, as stacks or sums the hash cannot tell
  // apart) are found by their values.
  HashedIndexSet set;
  std::vector<uint64_t> values;
  for (uint32_t i = 0; i < 1000; ++i) {
    const auto is = [&](uint64_t v) { return [&values, v](uint32_t index) { return values[index] == v; }; };
    EXPECT_EQ(set.find(42, is(i * 3)), HashedIndexSet::kNone);
    values.push_back(i * 3);
    set.insert(42, i);
    EXPECT_EQ(set.find(42, is(i * 3)), i);
  }
  for (uint32_t i = 0; i < 1000; ++i)
    EXPECT_EQ(set.find(42, [&](uint32_t index) { return values[index] == i * 3; }), i);
  EXPECT_EQ(set.find(43, [](uint32_t) { return true; }), HashedIndexSet::kNone);
  EXPECT_EQ(set.size(), 1000u);
  set.clear();
  EXPECT_EQ(set.find(42, [](uint32_t) { return true; }), HashedIndexSet::kNone);
  EXPECT_EQ(set.bytes(), 0u);
}

TEST(RawProfile, ReleasedSamplesAreSummedPerKeyAcrossReleases) {
  // Samples of 300 threads over 40 stacks, both kinds and two stack ends, released in 5 rounds: each
  // key (thread, stack, kind, end) gets one sum holding exactly its samples, whatever round they
  // came in, as a plain map of the same samples counts them.
  RawProfile p;
  struct Want {
    uint64_t samples = 0, cpu = 0, first = UINT64_MAX, last = 0;
  };
  std::map<std::tuple<int32_t, int32_t, uint32_t, int, int>, Want> want;
  uint64_t x = 12345, time = 1000;
  const auto next = [&x] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x >> 33;
  };
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 20000; ++i) {
      RawSample s;
      s.pid = 100 + static_cast<int32_t>(next() % 30);
      s.tid = s.pid * 10 + static_cast<int32_t>(next() % 10);
      s.stack = static_cast<uint32_t>(next() % 40);
      s.kind = next() % 2 ? SampleKind::kOnCpu : SampleKind::kOffCpu;
      s.stack_end = next() % 2 ? StackEnd::kComplete : StackEnd::kFailed;
      s.cpu_delta_ns = next() % 1000;
      s.time_ns = time++;
      Want& w = want[{s.pid, s.tid, s.stack, static_cast<int>(s.kind), static_cast<int>(s.stack_end)}];
      ++w.samples;
      w.cpu += s.cpu_delta_ns;
      w.first = std::min(w.first, s.time_ns);
      w.last = std::max(w.last, s.time_ns);
      p.samples.push_back(s);
    }
    p.release_samples();
  }
  ASSERT_EQ(p.released.size(), want.size());
  for (const RawSampleSum& sum : p.released) {
    const auto it =
        want.find({sum.pid, sum.tid, sum.stack, static_cast<int>(sum.kind), static_cast<int>(sum.stack_end)});
    ASSERT_NE(it, want.end());
    EXPECT_EQ(sum.samples, it->second.samples);
    EXPECT_EQ(sum.cpu_delta_ns, it->second.cpu);
    EXPECT_EQ(sum.first_ns, it->second.first);
    EXPECT_EQ(sum.last_ns, it->second.last);
  }
}

TEST(RawProfile, ModulesAreKeyedByPathAndBuildId) {
  RawProfile p;
  const uint32_t a = p.intern_module("/usr/lib/libc.so.6", "abcd");
  const uint32_t b = p.intern_module("/usr/lib/libc.so.6", "abcd");
  const uint32_t c = p.intern_module("/usr/lib/libc.so.6", "ef01");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(p.modules.size(), 2u);
  EXPECT_EQ(p.modules[c].build_id, "ef01");
}

TEST(RawProfile, ProcessesAndThreads) {
  RawProfile p;
  p.process(10).name = "app";
  p.thread(10, 10).name = "app";
  p.thread(10, 11).name = "worker";
  p.thread(20, 11).name = "other";  // a tid reused in another process is another thread
  EXPECT_EQ(p.processes.size(), 1u);
  EXPECT_EQ(p.threads.size(), 3u);
  ASSERT_NE(p.find_thread(10, 11), nullptr);
  EXPECT_EQ(p.find_thread(10, 11)->name, "worker");
  EXPECT_EQ(p.find_thread(20, 11)->name, "other");
  EXPECT_EQ(p.find_thread(30, 11), nullptr);
  EXPECT_EQ(p.find_process(10)->name, "app");
  EXPECT_EQ(p.find_process(11), nullptr);
}

TEST(RawProcess, LaterMappingReplacesEarlierFromItsTime) {
  RawProcess proc;
  proc.mappings.push_back({0x1000, 0x2000, 0, 0, 0});
  proc.mappings.push_back({0x1000, 0x2000, 0x3000, 1, 500});
  ASSERT_NE(proc.find_mapping(0x1800, 100), nullptr);
  EXPECT_EQ(proc.find_mapping(0x1800, 100)->module, 0u);
  EXPECT_EQ(proc.find_mapping(0x1800, 600)->module, 1u);
  EXPECT_EQ(proc.find_mapping(0x2000, 600), nullptr);  // end is exclusive
  EXPECT_EQ(proc.find_mapping(0x0fff, 600), nullptr);
}

TEST(RawProcess, MappingsUnmappedAtExecNoLongerMatch) {
  RawProcess proc;
  RawMapping old_image{0x1000, 0x2000, 0, 0, 0};
  old_image.unmapped_ns = 300;  // the process exec'd at t=300
  proc.mappings.push_back(old_image);
  proc.mappings.push_back({0x5000, 0x6000, 0, 1, 300});
  EXPECT_EQ(proc.find_mapping(0x1800, 100)->module, 0u);
  EXPECT_EQ(proc.find_mapping(0x1800, 400), nullptr);
  EXPECT_EQ(proc.find_mapping(0x5800, 400)->module, 1u);
}

TEST(StackEnd, Names) {
  EXPECT_STREQ(to_string(StackEnd::kComplete), "complete");
  EXPECT_STREQ(to_string(StackEnd::kTruncated), "truncated");
  EXPECT_STREQ(to_string(StackEnd::kFailed), "failed");
  EXPECT_STREQ(to_string(StackEnd::kUnknown), "unknown");
}

// A block of `size` bytes is sampled with probability 1 - exp(-size/mean): its weight is the inverse.
TEST(AllocSampleScale, IsTheInverseOfTheSamplingProbability) {
  EXPECT_EQ(alloc_sample_scale(0, 4096), 0.0);
  EXPECT_EQ(alloc_sample_scale(64, 0), 0.0);
  // size = mean: 1 / (1 - 1/e).
  EXPECT_NEAR(alloc_sample_scale(4096, 4096), 1.0 / (1.0 - 0.36787944117144233), 1e-12);
  // Much larger than the mean: always sampled, weight 1.
  EXPECT_DOUBLE_EQ(alloc_sample_scale(uint64_t{1} << 30, 4096), 1.0);
  // Much smaller: about mean/size + 1/2 (the series of x / (1 - exp(-x))), not mean/size.
  EXPECT_NEAR(alloc_sample_scale(1, 524288), 524288.5, 1e-3);
}

}  // namespace
}  // namespace hpd

namespace hpd {
namespace {

// A recording that outlives what it records (continuous mode) drops the processes and threads that
// exited before the time given, and the threads that did in processes that go on, but never one a
// sample still held names; what stays is found by pid and tid as before, with all it had.
TEST(RawProfileForget, DropsWhatExitedBeforeUnlessASampleHeldNamesIt) {
  RawProfile p;
  const uint32_t module = p.intern_module("/usr/bin/sort", "ab");
  for (int32_t pid = 1; pid <= 100; ++pid) {
    RawProcess& process = p.process(pid);
    process.name = "sort";
    process.cmdline = {"sort", "-R"};
    process.end_ns = 1000 + static_cast<uint64_t>(pid);  // exits 1001..1100
    process.mappings.push_back(RawMapping{0x1000, 0x2000, 0, module, 0, 0});
    p.thread(pid, pid).end_ns = process.end_ns;
  }
  p.process(200).name = "server";  // runs on, with a thread that exited and one that runs
  p.thread(200, 200);
  p.thread(200, 201).end_ns = 1010;
  p.thread(200, 202).end_ns = 1090;
  RawSample held;
  held.pid = 7;  // exited at 1007, but its sample is still to be written out
  held.tid = 7;
  p.samples.push_back(held);

  const RawProfile::Forgotten f = p.forget_exited(1051);
  EXPECT_EQ(f.pids.size(), 49u);       // 1..50 but 7
  EXPECT_EQ(f.tids.size(), 50u);       // their threads and 201
  EXPECT_EQ(p.processes.size(), 52u);  // 7, 51..100, 200
  EXPECT_EQ(p.threads.size(), 53u);    // 7, 51..100, 200, 202
  ASSERT_EQ(f.threads.size(), 103u);   // old index -> new
  for (int32_t pid = 1; pid <= 100; ++pid) {
    const bool kept = pid == 7 || pid > 50;
    EXPECT_EQ(p.find_process(pid) != nullptr, kept) << pid;
    EXPECT_EQ(p.find_thread(pid, pid) != nullptr, kept) << pid;
    EXPECT_EQ(f.threads[static_cast<size_t>(pid - 1)] != kNoIndex, kept) << pid;
    if (!kept) continue;
    EXPECT_EQ(p.find_process(pid)->cmdline.size(), 2u);
    EXPECT_EQ(p.find_process(pid)->mappings.size(), 1u);
    EXPECT_EQ(p.find_process(pid)->end_ns, 1000u + static_cast<uint64_t>(pid));
    EXPECT_EQ(&p.threads[f.threads[static_cast<size_t>(pid - 1)]], p.find_thread(pid, pid));
  }
  EXPECT_EQ(p.find_process(200)->name, "server");
  EXPECT_NE(p.find_thread(200, 200), nullptr);
  EXPECT_EQ(p.find_thread(200, 201), nullptr);
  EXPECT_EQ(p.find_thread(200, 202)->end_ns, 1090u);
  // Added again afterwards: a new entry, not a stale index.
  p.process(3).name = "again";
  EXPECT_EQ(p.find_process(3)->name, "again");
  EXPECT_EQ(p.find_process(200)->name, "server");
}

// A module no process left maps lets its held file go (a deleted program's disk space is freed); one a
// process still maps keeps it; the module itself stays, found again by its path and build-id.
TEST(RawProfileForget, ModulesNoProcessMapsLetTheirFilesGo) {
  RawProfile p;
  const auto held = [] {
    UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    return std::make_shared<const HeldFile>(fd.release());
  };
  const uint32_t gone = p.intern_module("/srv/app/v1/app", "01");
  const uint32_t running = p.intern_module("/srv/app/v2/app", "02");
  p.modules[gone].file = held();
  p.modules[running].file = held();
  const std::weak_ptr<const HeldFile> gone_file = p.modules[gone].file;
  p.process(10).end_ns = 100;
  p.process(10).mappings.push_back(RawMapping{0x1000, 0x2000, 0, gone, 0, 0});
  p.process(20).mappings.push_back(RawMapping{0x1000, 0x2000, 0, running, 0, 0});
  EXPECT_EQ(p.release_unmapped_module_files(), 0u);  // both still mapped
  p.forget_exited(200);
  EXPECT_EQ(p.release_unmapped_module_files(), 1u);
  EXPECT_TRUE(gone_file.expired());
  EXPECT_EQ(p.modules[gone].file, nullptr);
  EXPECT_NE(p.modules[running].file, nullptr);
  EXPECT_EQ(p.intern_module("/srv/app/v1/app", "01"), gone);
  EXPECT_EQ(p.release_unmapped_module_files(), 0u);
}

// The stacks nothing names any more go, with their addresses; those the held samples, the released
// sums, the allocations and the caller (`also`) name stay, renumbered in all of them with their
// frames, and interning one again finds it.
TEST(RawProfileForget, KeepsOnlyTheStacksSomethingNames) {
  RawProfile p;
  std::vector<uint32_t> index;
  for (uint64_t i = 0; i < 1000; ++i) {
    const std::vector<uint64_t> user{0x400000 + i, 0x500000, 0x600000 + i % 7};
    index.push_back(p.stacks.intern({}, user));
  }
  const auto frames = [&](uint32_t stack) {
    const auto u = p.stacks.user_frames(stack);
    return std::vector<uint64_t>(u.begin(), u.end());
  };
  RawSample sample;
  sample.stack = index[900];
  p.samples.push_back(sample);
  RawSample released = sample;
  released.stack = index[10];
  p.samples.push_back(released);
  p.release_samples();  // the sum names stack 10
  p.samples.push_back(sample);
  RawAllocation a;
  a.stack = index[500];
  p.allocations.push_back(a);
  const std::vector<uint32_t> also{index[42]};
  const std::vector<uint64_t> f10 = frames(index[10]), f42 = frames(index[42]), f500 = frames(index[500]),
                              f900 = frames(index[900]);

  const std::vector<uint32_t> renumbered = p.forget_unused_stacks(also);
  EXPECT_EQ(p.stacks.size(), 4u);
  EXPECT_EQ(p.stacks.addresses().size(), 12u);
  // The memory the kept stacks use, not only their count (what the table holds stays for the next).
  EXPECT_LE(p.stacks.used_bytes(), 12 * sizeof(uint64_t) + 4 * (sizeof(RawStack) + 16));
  ASSERT_EQ(renumbered.size(), 1000u);
  EXPECT_EQ(std::count(renumbered.begin(), renumbered.end(), kNoIndex), 996);
  EXPECT_EQ(frames(p.samples[0].stack), f900);
  EXPECT_EQ(frames(p.allocations[0].stack), f500);
  EXPECT_EQ(frames(renumbered[index[42]]), f42);
  ASSERT_EQ(p.released.size(), 2u);
  const auto sum10 = std::find_if(p.released.begin(), p.released.end(),
                                  [&](const RawSampleSum& s) { return frames(s.stack) == f10; });
  ASSERT_NE(sum10, p.released.end());
  // Interning a kept stack finds it; a dropped one is new; a later release adds to the renumbered sum.
  EXPECT_EQ(p.stacks.intern({}, f900), p.samples[0].stack);
  EXPECT_EQ(p.stacks.intern({}, f10), sum10->stack);
  const std::vector<uint64_t> gone{0x400000 + 3, 0x500000, 0x600000 + 3};
  EXPECT_EQ(p.stacks.intern({}, gone), 4u);
  p.release_samples();
  ASSERT_EQ(p.released.size(), 2u);
  for (const RawSampleSum& sum : p.released) EXPECT_EQ(sum.samples, frames(sum.stack) == f900 ? 2u : 1u);
}

// A table that let its stacks go interns the next ones in the memory it held: as many stacks again,
// other ones and of other depths, take no more heap than the first generation's most, each reads back
// its own frames, and what is used counts only those in it.
TEST(RawStackTable, StacksInternedAfterARetainReuseTheMemoryTheOthersHeld) {
  RawStackTable table;
  const auto stack_of = [](uint64_t generation, uint64_t i) {
    std::vector<uint64_t> user(2 + (i + generation) % 30);
    for (size_t k = 0; k < user.size(); ++k) user[k] = (generation << 40) + (i << 8) + k;
    return user;
  };
  constexpr uint64_t kStacks = 20000;
  for (uint64_t i = 0; i < kStacks; ++i) table.intern({}, stack_of(0, i));
  const size_t held = table.memory_bytes();
  const size_t used = table.used_bytes();
  EXPECT_LE(used, held);
  std::vector<bool> keep(kStacks, false);
  keep[7] = keep[19999] = true;
  const std::vector<uint32_t> renumbered = table.retain(keep);
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(renumbered[7], 0u);
  EXPECT_EQ(renumbered[19999], 1u);
  EXPECT_EQ(table.memory_bytes(), held);                  // held for the next stacks...
  EXPECT_LT(table.used_bytes(), 100 * sizeof(uint64_t));  // ...but not used
  for (uint64_t generation = 1; generation <= 3; ++generation) {
    std::vector<uint32_t> index;
    for (uint64_t i = 0; i < kStacks; ++i) index.push_back(table.intern({}, stack_of(generation, i)));
    EXPECT_EQ(table.size(), kStacks + 2);
    EXPECT_LE(table.memory_bytes(), held) << generation;
    EXPECT_GT(table.used_bytes(), used / 2) << generation;
    for (uint64_t i = 0; i < kStacks; i += 997) {
      const auto user = table.user_frames(index[i]);
      EXPECT_EQ(std::vector<uint64_t>(user.begin(), user.end()), stack_of(generation, i)) << i;
      EXPECT_EQ(table.intern({}, stack_of(generation, i)), index[i]);
    }
    // The two kept from the first generation are still found and read back.
    EXPECT_EQ(table.intern({}, stack_of(0, 7)), 0u);
    const auto last = table.user_frames(1);
    EXPECT_EQ(std::vector<uint64_t>(last.begin(), last.end()), stack_of(0, 19999));
    std::vector<bool> keep_first(table.size(), false);
    keep_first[0] = keep_first[1] = true;
    table.retain(keep_first);
  }
}

// A sum counts the samples not taken of its samples one at a time: a sample of 1.6 intervals and one of
// 0.6 are one not taken, as their note says before and after they are released, though their 2.2
// intervals together would call for none.
TEST(RawProfile, ReleasedSumsCountSamplesNotTakenSampleBySample) {
  RawProfile p;
  p.info.target = "pid 7";
  p.info.interval_ns = 1'000'000;
  const uint32_t stack = p.stacks.intern({}, std::vector<uint64_t>{0x400000});
  for (int i = 0; i < 20; ++i) {
    RawSample s;
    s.pid = 7;
    s.tid = 7;
    s.stack = stack;
    s.time_ns = 1000 + static_cast<uint64_t>(i);
    s.cpu_delta_ns = i % 2 == 0 ? 1'600'000 : 600'000;
    p.samples.push_back(s);
  }
  const std::string held = samples_not_taken_note(p);
  EXPECT_NE(held.find("at least 10 samples were not taken"), std::string::npos) << held;
  p.release_samples();
  ASSERT_EQ(p.released.size(), 1u);
  EXPECT_EQ(p.released[0].not_taken.samples, 10u);
  EXPECT_EQ(p.released[0].not_taken.ns, 10u * 600'000);
  EXPECT_EQ(samples_not_taken_note(p), held);
  // Merged when the sums let go of their stacks, still counted.
  p.forget_released_stacks({});
  EXPECT_EQ(samples_not_taken_note(p), held);
}

// The released sums let go of their stacks: sums of one thread, kind, stack end and epoch become one,
// their counts, times and extremes added; every stack only they named goes; the held samples', the
// allocations' and the caller's stay, renumbered; a new stack generation begins.
TEST(RawProfileForget, ReleasedSumsLetGoOfTheirStacksAndMerge) {
  RawProfile p;
  std::vector<uint32_t> index;
  for (uint64_t i = 0; i < 100; ++i)
    index.push_back(p.stacks.intern({}, std::vector<uint64_t>{0x400000 + i}));
  const auto sample = [](int32_t tid, uint32_t stack, SampleKind kind, StackEnd end, uint64_t time,
                         uint64_t cpu, uint64_t off) {
    RawSample s;
    s.pid = 7;
    s.tid = tid;
    s.stack = stack;
    s.kind = kind;
    s.stack_end = end;
    s.time_ns = time;
    s.cpu_delta_ns = cpu;
    s.off_cpu_ns = off;
    return s;
  };
  // Thread 7: three stacks on-CPU complete, one failed; thread 8: one off-CPU.
  p.samples = {sample(7, index[1], SampleKind::kOnCpu, StackEnd::kComplete, 300, 10, 0),
               sample(7, index[2], SampleKind::kOnCpu, StackEnd::kComplete, 100, 20, 0),
               sample(7, index[3], SampleKind::kOnCpu, StackEnd::kComplete, 500, 40, 0),
               sample(7, index[3], SampleKind::kOnCpu, StackEnd::kFailed, 200, 80, 0),
               sample(8, index[4], SampleKind::kOffCpu, StackEnd::kComplete, 400, 0, 1000)};
  p.release_samples();
  ASSERT_EQ(p.released.size(), 5u);
  p.samples = {sample(7, index[50], SampleKind::kOnCpu, StackEnd::kComplete, 600, 5, 0)};
  RawAllocation a;
  a.stack = index[60];
  p.allocations.push_back(a);
  const std::vector<uint32_t> also{index[70]};
  const size_t bytes_before = p.stack_memory_bytes();

  const std::vector<uint32_t> renumbered = p.forget_released_stacks(also);
  EXPECT_EQ(p.stack_generation, 1u);
  EXPECT_TRUE(p.released_stacks_forgotten);
  EXPECT_EQ(p.stacks.size(), 3u);
  EXPECT_LT(p.stack_memory_bytes(), bytes_before);
  ASSERT_EQ(renumbered.size(), 100u);
  EXPECT_EQ(renumbered[index[1]], kNoIndex);
  EXPECT_EQ(p.stacks.user_frames(p.samples[0].stack)[0], 0x400000u + 50);
  EXPECT_EQ(p.stacks.user_frames(p.allocations[0].stack)[0], 0x400000u + 60);
  EXPECT_EQ(p.stacks.user_frames(renumbered[index[70]])[0], 0x400000u + 70);
  ASSERT_EQ(p.released.size(), 3u);
  const RawSampleSum& complete = p.released[0];
  EXPECT_EQ(complete.tid, 7);
  EXPECT_EQ(complete.stack, kNoIndex);
  EXPECT_EQ(complete.stack_end, StackEnd::kComplete);
  EXPECT_EQ(complete.samples, 3u);
  EXPECT_EQ(complete.cpu_delta_ns, 70u);
  EXPECT_EQ(complete.first_ns, 100u);
  EXPECT_EQ(complete.last_ns, 500u);
  EXPECT_EQ(p.released[1].stack_end, StackEnd::kFailed);
  EXPECT_EQ(p.released[1].cpu_delta_ns, 80u);
  EXPECT_EQ(p.released[2].tid, 8);
  EXPECT_EQ(p.released[2].off_cpu_ns, 1000u);
  // Later releases add to the merged sums: a sample of a stack still kept keeps its own sum.
  p.release_samples();
  ASSERT_EQ(p.released.size(), 4u);
  EXPECT_EQ(p.released[3].samples, 1u);
  EXPECT_NE(p.released[3].stack, kNoIndex);
  p.samples = {sample(7, kNoIndex, SampleKind::kOnCpu, StackEnd::kComplete, 50, 1, 0)};
  p.release_samples();
  ASSERT_EQ(p.released.size(), 4u);
  EXPECT_EQ(p.released[0].samples, 4u);
  EXPECT_EQ(p.released[0].first_ns, 50u);
  // The kernel addresses of the stacks let go stay known (the kernel symbols kept name them).
  const uint32_t with_kernel = p.stacks.intern(std::vector<uint64_t>{0xffffffff81000200, 0xffffffff81000100},
                                               std::vector<uint64_t>{0x400000});
  EXPECT_EQ(p.kernel_addresses(), (std::vector<uint64_t>{0xffffffff81000100, 0xffffffff81000200}));
  ASSERT_NE(with_kernel, kNoIndex);
  // Again: the generation counts on.
  p.forget_released_stacks({});
  EXPECT_EQ(p.kernel_addresses(), (std::vector<uint64_t>{0xffffffff81000100, 0xffffffff81000200}));
  EXPECT_EQ(p.stack_generation, 2u);
  EXPECT_EQ(p.stacks.size(), 1u);  // the allocation's
  EXPECT_EQ(p.released.size(), 3u);
}

// Released by thread only (a capture not symbolized at the end): one sum per thread, kind and stack
// end, without stack or epoch, adding up what the sums by stack do; the profile says its sums no longer
// know their stacks, and the stacks stay in the table until they are let go.
TEST(RawProfileRelease, ByThreadSumsWithoutStacksAddUpToTheSumsByStack) {
  RawProfile by_stack, by_thread;
  for (RawProfile* p : {&by_stack, &by_thread}) {
    p->info.frequency_hz = 1000;  // a 1 ms interval
    const uint32_t module = p->intern_module("/usr/bin/prog", "ab");
    // A mapping in the middle: sums by stack tell samples on its two sides apart (epochs).
    p->process(7).mappings.push_back(RawMapping{0x400000, 0x500000, 0, module, 250, 0});
    for (uint64_t i = 0; i < 40; ++i) {
      RawSample s;
      s.pid = 7;
      s.tid = 7 + static_cast<int32_t>(i % 2);
      s.stack = p->stacks.intern({}, std::vector<uint64_t>{0x400000 + i % 10});
      s.kind = i % 3 == 2 ? SampleKind::kOffCpu : SampleKind::kOnCpu;
      s.stack_end = i % 5 == 4 ? StackEnd::kFailed : StackEnd::kComplete;
      s.time_ns = 10 * i;
      s.cpu_delta_ns = s.kind == SampleKind::kOnCpu ? 1'000'000 + 100'000 * (i % 3) : 0;
      s.off_cpu_ns = s.kind == SampleKind::kOffCpu ? 5000 + i : 0;
      p->samples.push_back(s);
      if (i % 16 == 15)
        p->release_samples(p == &by_thread ? RawProfile::ReleasedSums::kByThread
                                           : RawProfile::ReleasedSums::kByStack);
    }
  }
  by_stack.release_samples();
  by_thread.release_samples(RawProfile::ReleasedSums::kByThread);
  EXPECT_FALSE(by_stack.released_stacks_forgotten);
  EXPECT_TRUE(by_thread.released_stacks_forgotten);
  EXPECT_EQ(by_thread.sample_offset, 40u);
  EXPECT_TRUE(by_thread.samples.empty());
  EXPECT_EQ(by_thread.stacks.size(), 10u);  // not let go by the release itself
  // 2 threads x {on-CPU, off-CPU} x {complete, failed}, each met.
  EXPECT_EQ(by_thread.released.size(), 8u);
  EXPECT_GT(by_stack.released.size(), by_thread.released.size());
  std::map<std::tuple<int32_t, SampleKind, StackEnd>, RawSampleSum> expected;
  for (const RawSampleSum& s : by_stack.released) {
    RawSampleSum& e = expected[{s.tid, s.kind, s.stack_end}];
    if (e.samples == 0) {
      e.first_ns = s.first_ns;
      e.last_ns = s.last_ns;
    }
    e.samples += s.samples;
    e.cpu_delta_ns += s.cpu_delta_ns;
    e.off_cpu_ns += s.off_cpu_ns;
    e.first_ns = std::min(e.first_ns, s.first_ns);
    e.last_ns = std::max(e.last_ns, s.last_ns);
    e.not_taken.add(s.not_taken);
  }
  ASSERT_EQ(expected.size(), by_thread.released.size());
  for (const RawSampleSum& s : by_thread.released) {
    SCOPED_TRACE(std::to_string(s.tid) + " " + std::to_string(static_cast<int>(s.kind)) + " " +
                 to_string(s.stack_end));
    EXPECT_EQ(s.pid, 7);
    EXPECT_EQ(s.stack, kNoIndex);
    EXPECT_EQ(s.epoch, 0u);
    const RawSampleSum& e = expected.at({s.tid, s.kind, s.stack_end});
    EXPECT_EQ(s.samples, e.samples);
    EXPECT_EQ(s.cpu_delta_ns, e.cpu_delta_ns);
    EXPECT_EQ(s.off_cpu_ns, e.off_cpu_ns);
    EXPECT_EQ(s.first_ns, e.first_ns);
    EXPECT_EQ(s.last_ns, e.last_ns);
    EXPECT_EQ(s.not_taken.samples, e.not_taken.samples);
    EXPECT_EQ(s.not_taken.ns, e.not_taken.ns);
  }
  EXPECT_EQ(samples_not_taken_note(by_thread), samples_not_taken_note(by_stack));
}

}  // namespace
}  // namespace hpd
