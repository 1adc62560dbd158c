// Privileged tests of the cfi call graph (user stacks unwound inside the eBPF programs with tables
// compiled from each module's CFI), with default flags, on programs the test suite builds: glibc's
// qsort and snprintf under a frame-pointer program, threads blocked in their own wrappers around
// glibc's blocking calls (with and without frame pointers), a 200-deep recursion, rustc -O output,
// a library dlopen()ed while recording, a process started after the recording began, C++ exceptions and
// PLT calls, a signal handler, the vDSO, and row maps too small for every table. And, with
// --call-graph dwarf, the blocked and waiting samples of programs without frame pointers.
#include <elf.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "hpd/base/elf.h"
#include "hpd/collect/recorder.h"
#include "hpd/export/firefox_reader.h"
#include "hpd/export/report.h"
#include "hpd/model/profile.h"
#include "hpd/session/record_pipeline.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#include "hpd/unwind/cfi_table.h"
#include "temp_cgroup.h"

namespace hpd {
namespace {

const std::string kDir = HPD_CFI_FIXTURE_DIR;

// Default flags: what `hpctl record -- PROGRAM ARGS` does.
RecordResult record_default(const std::vector<std::string>& command) {
  RecordOptions options;
  options.target.command = command;
  return record(options);
}

struct Symbolized {
  RecordResult result;
  Profile profile;
};

Symbolized record_and_symbolize(const std::vector<std::string>& command) {
  Symbolized s{record_default(command), {}};
  Symbolizer symbolizer;
  s.profile = symbolize_profile(s.result.profile, symbolizer);
  return s;
}

// A recording through what `hpctl record` does with its result, for the summary's notes.
struct Summarized {
  RecordResult result;
  session::RecordSummary summary;
  std::optional<Profile> profile;  // the profile the output was written from
};

Summarized record_with_summary(RecordOptions& options, const std::string& name) {
  session::RecordRequest args;
  args.output = (std::filesystem::temp_directory_path() /
                 ("bpf_cfi_" + name + "." + std::to_string(::getpid()) + ".json.gz"))
                    .string();
  session::RecordingOutput output(args);
  output.attach(options, false);
  Summarized s{record(options), {}, {}};
  s.profile = output.finish(s.result);
  s.summary = session::summarize_recording(s.result, s.profile, output);
  std::filesystem::remove(args.output);
  return s;
}

// Function names of a sample's stack, leaf first.
std::vector<std::string> names_leaf_first(const Profile& p, uint32_t stack) {
  std::vector<std::string> out;
  if (stack == kNoIndex) return out;
  const auto frames = p.stack_frames_root_first(stack);
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) out.push_back(p.func_name(p.frames[*it].func));
  return out;
}

// Whether a function named `name` is among `names` (also as a compiler clone: "name.constprop.0").
bool contains(const std::vector<std::string>& names, const std::string& name) {
  for (const std::string& n : names) {
    if (n == name || n.rfind(name + ".", 0) == 0) return true;
  }
  return false;
}

// The report's "Complete stacks" share of on-CPU samples, in percent.
double report_complete_percent(const Profile& p, int32_t tid = 0) {
  ReportOptions ro;
  ro.limit = 0;
  ro.tid = tid;
  const Report report = compute_report(p, ro);
  const ReportTotals& t = report.totals;
  const uint64_t known = t.stacks_complete + t.stacks_truncated + t.stacks_failed;
  return known == 0 ? 0.0 : 100.0 * double(t.stacks_complete) / double(known);
}

void print_ends(const RecordResult& r) {
  const char* const kinds[2] = {"on-CPU", "off-CPU"};
  for (int k = 0; k < 2; ++k) {
    std::string text;
    for (const auto& [name, n] : r.user_stack_ends[k]) text += " " + name + "=" + std::to_string(n);
    std::printf("  %s walks ended:%s\n", kinds[k], text.c_str());
  }
  std::printf(
      "  tables: %llu of %llu modules, %llu rows (%.1f KiB of map), compiled in %.1f ms; %llu samples "
      "with tables pending, %llu with frame-pointer frames; %llu evicted, %llu refused for lack of room\n",
      static_cast<unsigned long long>(r.cfi.modules_loaded), static_cast<unsigned long long>(r.cfi.modules),
      static_cast<unsigned long long>(r.cfi.rows), r.cfi.map_bytes / 1024.0, r.cfi.compile_ns / 1e6,
      static_cast<unsigned long long>(r.cfi.samples_tables_pending),
      static_cast<unsigned long long>(r.cfi.samples_with_fp_frames),
      static_cast<unsigned long long>(r.cfi.modules_evicted),
      static_cast<unsigned long long>(r.cfi.modules_refused));
  for (const std::string& m : r.cfi.without_table) std::printf("  no table: %s\n", m.c_str());
}

TEST(BpfCfi, QsortAndSnprintfUnderAFramePointerProgramReachMain) {
  const Symbolized s = record_and_symbolize({kDir + "/sort_format", "3"});
  const RecordResult& r = s.result;
  EXPECT_EQ(r.profile.info.backend, "bpf");
  EXPECT_EQ(r.call_graph, CallGraph::kCfi);
  EXPECT_EQ(r.profile.info.call_graph, "auto:cfi");
  EXPECT_EQ(r.stack_copy_bytes, 0u);
  size_t on = 0, with_main = 0, in_libc_callback = 0, in_snprintf = 0;
  for (const Thread& t : s.profile.threads) {
    for (const Sample& sample : t.samples) {
      if (sample.kind != SampleKind::kOnCpu || sample.stack == kNoIndex) continue;
      const auto names = names_leaf_first(s.profile, sample.stack);
      ++on;
      with_main += contains(names, "main");
      in_libc_callback += contains(names, "compare_ints") && contains(names, "sort_round");
      in_snprintf += contains(names, "format_round") && contains(names, "__vsnprintf_internal");
    }
  }
  const double reach = on ? 100.0 * double(with_main) / double(on) : 0.0;
  const double reported = report_complete_percent(s.profile);
  std::printf(
      "cfi qsort/snprintf: %zu on-CPU samples, %.1f%% reach main (comparator under qsort: %zu, "
      "inside snprintf: %zu); the report says %.1f%% complete; %.0f bytes per sample in the ring\n",
      on, reach, in_libc_callback, in_snprintf, reported,
      on ? double(r.sample_bytes) / double(r.profile.samples.size()) : 0.0);
  print_ends(r);
  // About 3 s of CPU at 999 Hz on a quiet machine; on this shared VM the program may get a quarter of a
  // CPU (835 samples seen), so the bound only catches a recording that hardly sampled at all.
  ASSERT_GT(on, 500u) << "3 s at 999 Hz";
  EXPECT_GT(in_libc_callback, on / 20) << "the comparator called back from glibc's qsort";
  EXPECT_GT(in_snprintf, on / 20);
  EXPECT_GE(reach, 95.0);
  EXPECT_NEAR(reported, reach, 3.0);
  EXPECT_LE(double(r.sample_bytes) / double(r.profile.samples.size()), 1024.0);
  EXPECT_GE(r.cfi.modules_loaded, 2u);  // the program and libc at least
}

// Per blocking wrapper: its thread's name (the fixture names them) and what the kernel leaf contains.
struct Blocker {
  const char* thread;
  const char* wrapper;
  const char* kernel_leaf;
};
const Blocker kBlockers[] = {
    {"mutex_lock", "wait_in_mutex_lock", "futex"},
    {"pipe_read", "wait_in_pipe_read", "pipe_read"},
    {"poll", "wait_in_poll", "poll"},
    {"cond_wait", "wait_in_cond_wait", "futex"},
    {"nanosleep", "wait_in_nanosleep", "nanosleep"},
    {"join", "wait_in_join", "futex"},
};

void expect_blockers(const Symbolized& s, const std::string& fixture, CallGraph mode = CallGraph::kCfi) {
  SCOPED_TRACE(fixture);
  EXPECT_EQ(s.result.call_graph, mode);
  print_ends(s.result);
  for (const Blocker& b : kBlockers) {
    SCOPED_TRACE(b.wrapper);
    const Thread* thread = nullptr;
    for (const Thread& t : s.profile.threads) {
      if (t.name == b.thread) thread = &t;
    }
    ASSERT_NE(thread, nullptr) << "no thread named " << b.thread;
    ReportOptions ro;
    ro.limit = 0;
    ro.tid = thread->tid;
    const Report report = compute_report(s.profile, ro);
    double wrapper_wall = 0;
    for (const ReportRow& row : report.rows) {
      if (row.name == b.wrapper) wrapper_wall = row.total_wall_percent;
    }
    // The kernel leaf of the off-CPU time: the function that blocked, not the scheduler.
    uint64_t off_ns = 0, off_leaf_ns = 0, off_complete_ns = 0;
    std::map<std::string, uint64_t> leaves;
    for (const Sample& sample : thread->samples) {
      if (sample.kind != SampleKind::kOffCpu) continue;
      off_ns += sample.off_cpu_ns;
      const auto names = names_leaf_first(s.profile, sample.stack);
      if (!names.empty()) leaves[names[0]] += sample.off_cpu_ns;
      if (!names.empty() && names[0].find(b.kernel_leaf) != std::string::npos)
        off_leaf_ns += sample.off_cpu_ns;
      if (sample.stack_end == StackEnd::kComplete) off_complete_ns += sample.off_cpu_ns;
    }
    std::string top;
    for (const auto& [name, ns] : leaves) top += " " + name + "=" + std::to_string(ns / 1000000) + "ms";
    std::printf("  %s: %s holds %.1f%% of the wall; kernel leaves:%s; off-CPU complete %.1f%%\n",
                fixture.c_str(), b.wrapper, wrapper_wall, top.c_str(),
                off_ns ? 100.0 * double(off_complete_ns) / double(off_ns) : 0.0);
    EXPECT_GE(wrapper_wall, 90.0);
    ASSERT_GT(off_ns, 1'000'000'000u) << "the thread blocked for about 2 s";
    EXPECT_GE(double(off_leaf_ns), 0.9 * double(off_ns)) << "kernel leaf should contain " << b.kernel_leaf;
    EXPECT_GE(double(off_complete_ns), 0.9 * double(off_ns));
    EXPECT_EQ(leaves.count("__schedule") + leaves.count("schedule"), 0u);
  }
}

TEST(BpfCfi, BlockedThreadsShowTheirWrappersWithFramePointers) {
  expect_blockers(record_and_symbolize({kDir + "/blockers_fp", "2"}), "blockers_fp");
}
TEST(BpfCfi, BlockedThreadsShowTheirWrappersWithoutFramePointers) {
  expect_blockers(record_and_symbolize({kDir + "/blockers_nofp", "2"}), "blockers_nofp");
}

// --call-graph dwarf's off-CPU samples: of each kind (blocked, waiting for a CPU), how many and how
// much of their time have a complete stack through the function their thread started in (`root_of`
// names it per thread; "" for a thread not counted). Counted while that function runs: from the first
// sample of the thread whose stack holds it to the last (a main thread also waits inside the execve
// that starts the program, in the loader, and in exit() after main returned, where no stack holds
// main). Not counted either, but counted apart: a thread that creates threads waits on its way back
// from clone3 (the new thread takes the CPU), where glibc's __clone3 has no CFI (its FDE ends before
// the syscall, for the child's sake), so that no unwinder reaches main from there.
struct OffCpuReach {
  uint64_t samples = 0, reached = 0, ns = 0, reached_ns = 0;
  uint64_t in_clone3 = 0;  // stacks through __clone3 that do not reach the root
  double percent() const { return samples ? 100.0 * double(reached) / double(samples) : 0.0; }
  double percent_ns() const { return ns ? 100.0 * double(reached_ns) / double(ns) : 0.0; }
};

std::map<SampleKind, OffCpuReach> off_cpu_reach(const Profile& p,
                                                const std::function<std::string(const Thread&)>& root_of) {
  std::map<SampleKind, OffCpuReach> out;
  for (const Thread& t : p.threads) {
    const std::string root = root_of(t);
    if (root.empty()) continue;
    uint64_t from_ns = ~0ull, to_ns = 0;
    for (const Sample& sample : t.samples) {
      if (!contains(names_leaf_first(p, sample.stack), root)) continue;
      from_ns = std::min(from_ns, sample.time_ns);
      to_ns = std::max(to_ns, sample.time_ns);
    }
    for (const Sample& sample : t.samples) {
      if (!is_off_cpu_interval(sample.kind) || sample.time_ns < from_ns || sample.time_ns > to_ns) continue;
      OffCpuReach& r = out[sample.kind];
      const auto names = names_leaf_first(p, sample.stack);
      const bool reached = sample.stack_end == StackEnd::kComplete && contains(names, root);
      const bool in_clone3 = std::any_of(names.begin(), names.end(), [](const std::string& n) {
        return n.find("clone3") != std::string::npos;
      });
      if (!reached && in_clone3) {
        ++r.in_clone3;
        continue;
      }
      ++r.samples;
      r.ns += sample.off_cpu_ns;
      r.reached += reached;
      r.reached_ns += reached ? sample.off_cpu_ns : 0;
      if (!reached && r.samples - r.reached <= 5) {
        std::string text;
        for (const std::string& n : names) text += " " + n;
        std::printf("  not reaching %s (%s, end %d, %.3f ms):%s\n", root.c_str(), t.name.c_str(),
                    static_cast<int>(sample.stack_end), double(sample.off_cpu_ns) / 1e6, text.c_str());
      }
    }
  }
  for (const auto& [kind, r] : out) {
    std::printf(
        "  %s: %llu samples, %.1f%% reach their thread's root (%.1f%% of %.3f s); %llu more in "
        "__clone3 after its syscall\n",
        kind == SampleKind::kWaitCpu ? "waiting for a CPU" : "blocked",
        static_cast<unsigned long long>(r.samples), r.percent(), r.percent_ns(), double(r.ns) / 1e9,
        static_cast<unsigned long long>(r.in_clone3));
  }
  return out;
}

Symbolized record_dwarf(const std::vector<std::string>& command) {
  RecordOptions options;
  options.target.command = command;
  options.call_graph = CallGraph::kDwarf;
  Symbolized s{record(options), {}};
  Symbolizer symbolizer;
  s.profile = symbolize_profile(s.result.profile, symbolizer);
  return s;
}

// --call-graph dwarf copies the stack at each switch-out, but only while the ring is less than half full
// (the samples come first). A 64 KiB ring beside a fixture whose threads block and wake a thousand times
// a second fills past half: the copies left out are counted, each is an off-CPU record without a copy
// (or a record lost itself), and the summary says how many.
TEST(BpfDwarf, StackCopiesLeftOutOfAFullRingAreCountedAndSaid) {
  RecordOptions options;
  options.backend = Backend::kBpf;
  options.frequency_hz = 4999;
  options.ring_pages = 16;
  options.call_graph = CallGraph::kDwarf;
  options.target.command = {HPD_OFFCPU_FIXTURE, "1.5", "1", "1"};
  const Summarized s = record_with_summary(options, "copies_skipped");
  ASSERT_EQ(s.result.command_exit_status, 0);
  std::printf("copies skipped %llu; off-CPU records with a copy %llu, without %llu; lost records %llu\n",
              static_cast<unsigned long long>(s.result.stack_copies_skipped_ring_full),
              static_cast<unsigned long long>(s.result.off_cpu_with_stack_copy),
              static_cast<unsigned long long>(s.result.off_cpu_without_stack_copy),
              static_cast<unsigned long long>(s.result.profile.lost.lost_records));
  EXPECT_GT(s.result.stack_copies_skipped_ring_full, 0u) << "a 64 KiB ring of 32 KiB copies should fill";
  EXPECT_LE(s.result.stack_copies_skipped_ring_full,
            s.result.off_cpu_without_stack_copy + s.result.profile.lost.lost_records);
  const std::string said = "note: " + std::to_string(s.result.stack_copies_skipped_ring_full) +
                           " stack copies were not taken because the ring buffer was half full";
  EXPECT_TRUE(std::any_of(s.summary.notes.begin(), s.summary.notes.end(), [&](const std::string& n) {
    return n.rfind(said, 0) == 0;
  })) << said;
}

// --call-graph dwarf unwinds off-CPU stacks as it does on-CPU ones, from a copy of the user stack taken
// at the switch-out (issue #33: blocked and waiting samples of a program without frame pointers reached
// main 0% of the time, walked by frame pointer, while on-CPU samples reached it 99.9%). Six threads
// blocked in wrappers of their own: each wrapper holds its thread's wall time, and the blocked samples
// and the waits for a CPU after their wakeups reach the thread's first function.
TEST(BpfDwarf, BlockedAndWaitingSamplesOfAProgramWithoutFramePointersReachMain) {
  const Symbolized s = record_dwarf({kDir + "/blockers_nofp", "2"});
  expect_blockers(s, "blockers_nofp, --call-graph dwarf", CallGraph::kDwarf);
  std::printf("  off-CPU records with their switch-out's stack copy: %llu, without: %llu\n",
              static_cast<unsigned long long>(s.result.off_cpu_with_stack_copy),
              static_cast<unsigned long long>(s.result.off_cpu_without_stack_copy));
  EXPECT_GT(s.result.off_cpu_with_stack_copy, 0u);
  const auto reach = off_cpu_reach(s.profile, [](const Thread& t) -> std::string {
    if (t.tid == t.pid) return "main";
    return t.name == "joined" ? "sleeper" : "run";
  });
  for (const SampleKind kind : {SampleKind::kOffCpu, SampleKind::kWaitCpu}) {
    SCOPED_TRACE(kind == SampleKind::kWaitCpu ? "waiting for a CPU" : "blocked");
    ASSERT_TRUE(reach.count(kind));
    const OffCpuReach& r = reach.at(kind);
    EXPECT_GE(r.samples, 10u);
    EXPECT_LE(r.in_clone3, 7u) << "one per thread created at most";
    EXPECT_GE(r.percent(), 95.0);
    EXPECT_GE(r.percent_ns(), 95.0);
  }
}

// Two spinners pinned to one CPU (cpu_wait, without frame pointers): each waits for the CPU while the
// other runs, preempted at any instruction of its loop. Those waits, and the sleeper's blocked
// interval, reach the thread's first function with --call-graph dwarf.
TEST(BpfDwarf, PreemptedSamplesOfAProgramWithoutFramePointersReachTheirThreadsRoot) {
  const Symbolized s = record_dwarf({kDir + "/cpu_wait_nofp", "1500", "300"});
  EXPECT_EQ(s.result.call_graph, CallGraph::kDwarf);
  print_ends(s.result);
  const auto reach = off_cpu_reach(s.profile, [](const Thread& t) -> std::string {
    if (t.tid == t.pid) return "main";
    return t.name == "spin_a" || t.name == "spin_b" || t.name == "sleeper" ? "thread_main" : "";
  });
  ASSERT_TRUE(reach.count(SampleKind::kWaitCpu));
  const OffCpuReach& wait = reach.at(SampleKind::kWaitCpu);
  // Each spinner waits about half of its 1.5 s phase, in intervals of a few ms.
  EXPECT_GE(wait.samples, 50u);
  EXPECT_LE(wait.in_clone3, 3u) << "one per thread created at most";
  EXPECT_GE(wait.percent(), 95.0);
  EXPECT_GE(wait.percent_ns(), 95.0);
  ASSERT_TRUE(reach.count(SampleKind::kOffCpu));
  EXPECT_GE(reach.at(SampleKind::kOffCpu).percent_ns(), 95.0) << "the sleeper's 300 ms";
}

// hpctl's summary states the completeness of off-CPU stacks by time as well as by samples (issue #33:
// "90.8% complete" by samples where 30-60% of the off-CPU time was), with the report's figures. The
// fixture's six threads, its main thread and the thread joined block about 2 s each; with
// --call-graph fp over a program without frame pointers few of those stacks are complete, and the
// short intervals (the nanosleep thread's 50 ms naps, the waits after wakeups) weigh less by time.
TEST(BpfCfi, SummaryStatesOffCpuCompletenessByTime) {
  for (const CallGraph mode : {CallGraph::kCfi, CallGraph::kFp}) {
    SCOPED_TRACE(to_string(mode));
    RecordOptions options;
    options.target.command = {kDir + "/blockers_nofp", "2"};
    options.call_graph = mode;
    const Summarized s = record_with_summary(options, "completeness");
    ASSERT_TRUE(s.profile.has_value());
    std::string note;
    for (const std::string& n : s.summary.notes) {
      if (n.rfind("complete stacks:", 0) == 0) note = n;
    }
    std::printf("  %s: %s\n", to_string(mode), note.c_str());
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        note, m, std::regex(R"(off-CPU ([0-9.]+)% of ([0-9]+) samples, ([0-9.]+)% of their ([0-9.]+) s)")))
        << note;
    ReportOptions ro;
    ro.limit = 0;
    const ReportTotals t = compute_report(*s.profile, ro).totals;
    const uint64_t known = t.off_stacks_complete + t.off_stacks_truncated + t.off_stacks_failed;
    const uint64_t known_ns = t.off_stacks_complete_ns + t.off_stacks_truncated_ns + t.off_stacks_failed_ns;
    ASSERT_GT(known, 0u);
    ASSERT_GT(known_ns, 0u);
    EXPECT_EQ(std::stoull(m[2]), known);
    EXPECT_NEAR(std::stod(m[1]), 100.0 * double(t.off_stacks_complete) / double(known), 0.051);
    EXPECT_NEAR(std::stod(m[3]), 100.0 * double(t.off_stacks_complete_ns) / double(known_ns), 0.051);
    EXPECT_NEAR(std::stod(m[4]), double(known_ns) / 1e9, 0.006);
    // Eight threads blocked about 2 s each (the fixture's own sleeps; a loaded machine stretches them).
    EXPECT_GE(std::stod(m[4]), 8 * 2 * 0.9);
  }
}

// glibc's clone3 ends its CFI before its syscall, for the sake of the child, which starts there on its
// new, empty stack (issue #33). A new thread preempted (or sampled) before its first return to user mode
// is at that pc: its whole user stack is that one frame, its root, and the walk now says it is complete
// (before, it stepped on by frame pointer into junk and failed). The creating thread waits there too on
// its way back (the new thread takes the CPU), where clone3 has set up no frame: its return address is
// at sp, and its stack now reaches main (before, it failed at clone3). The fixture's main thread alone
// creates 4,000 threads, 32 at a time, each burning 200 us. Checked on the written profile (the Firefox
// export): the samples at clone3 of the new threads and of their creator, and the summary's
// completeness against the samples whose outermost user frame is the thread's root (clone3 for the new
// threads, _start for the main one), on-CPU and off-CPU. Without the change (two runs, load 10): the
// new threads' samples at clone3 7 of 18 and 19 of 31 complete (the others taken in ret_from_fork, with
// a junk second frame), their creator's 1,708 and 3,353 there none, off-CPU stacks 54.1% and 14.8%
// complete; with it, all of them, off-CPU 99.9-100%. (Not covered: a new thread interrupted in user
// mode at the instruction right after the syscall, where no system call is in the registers any more:
// 0-2 samples a run, failed.)
TEST(BpfCfi, NewThreadsAndTheirCreatorAtClone3HaveCompleteStacks) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("bpf_cfi_storm." + std::to_string(::getpid()) + ".json.gz"))
          .string();
  // Per kind (0 on-CPU, 1 off-CPU): samples whose end is known, complete ones, those reaching the root.
  uint64_t known[2] = {}, complete[2] = {}, rooted[2] = {};
  // The new threads' samples at clone3 taken in the kernel on their way out of the fork, and those taken
  // later (in user mode: a page fault on the first touch of the new stack, or an interrupt).
  uint64_t child = 0, child_complete = 0, child_one_frame = 0, child_later = 0, child_later_complete = 0,
           parent = 0, parent_reached = 0;
  std::string note;
  // A timer sample lands in a new thread's way out of the fork only when the machine lets it: seen
  // 11-25 a run at load 10, 1-3 beside four CPU hogs, and once there none in 4,000 threads. Recorded
  // again, up to five times, until one did: hpd that lost those samples, or never took them, fails
  // all five.
  for (int attempt = 0; attempt < 5 && child == 0; ++attempt) {
    RecordOptions options;
    options.target.command = {kDir + "/thread_storm", "4000", "32", "200"};
    session::RecordRequest args;
    args.output = out;
    session::RecordingOutput output(args);
    output.attach(options, false);
    RecordResult result = record(options);
    const std::optional<Profile> written = output.finish(result);
    const session::RecordSummary summary = session::summarize_recording(result, written, output);
    ASSERT_EQ(result.command_exit_status, 0);
    print_ends(result);
    const Profile p = read_firefox_file(out);
    std::filesystem::remove(out);

    const auto is_clone = [](const std::string& n) { return n == "clone3" || n == "__clone3"; };
    for (int k = 0; k < 2; ++k) known[k] = complete[k] = rooted[k] = 0;
    child = child_complete = child_one_frame = child_later = child_later_complete = 0;
    parent = parent_reached = 0;
    const auto add = [&](const Thread& t, uint32_t stack, SampleKind kind, StackEnd end, uint64_t n) {
      std::vector<std::string> user;  // leaf first (an off-CPU sample's frames all have its category)
      bool from_fork = false;         // in the kernel on the new thread's way out of clone3
      if (stack != kNoIndex) {
        const auto frames = p.stack_frames_root_first(stack);
        for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
          const Frame& f = p.frames[*it];
          if (f.category != Category::kKernel &&
              (f.lib == kNoIndex || p.libs[f.lib].name != "[kernel.kallsyms]"))
            user.push_back(p.func_name(f.func));
          else if (p.func_name(f.func) == "ret_from_fork")
            from_fork = true;
        }
      }
      const bool main_thread = t.tid == t.pid;
      if (!user.empty() && is_clone(user.front())) {
        if (main_thread) {
          parent += n;
          if (end == StackEnd::kComplete && contains(user, "main")) parent_reached += n;
        } else {
          if (from_fork) {
            child += n;
            if (end == StackEnd::kComplete) child_complete += n;
            if (user.size() == 1) child_one_frame += n;
          } else {
            child_later += n;
            if (end == StackEnd::kComplete) child_later_complete += n;
          }
        }
      }
      if (end != StackEnd::kComplete && end != StackEnd::kTruncated && end != StackEnd::kFailed) return;
      const int k = is_off_cpu_interval(kind) ? 1 : 0;
      known[k] += n;
      if (end == StackEnd::kComplete) complete[k] += n;
      if (!user.empty() && (main_thread ? user.back() == "_start" : is_clone(user.back()))) rooted[k] += n;
    };
    for (const Thread& t : p.threads) {
      if (t.pid != result.profile.processes.at(0).pid) continue;
      for (const Sample& sample : t.samples) add(t, sample.stack, sample.kind, sample.stack_end, 1);
      for (const SampleSum& sum : t.sample_sums) add(t, sum.stack, sum.kind, sum.stack_end, sum.samples);
    }
    note.clear();
    for (const std::string& n : summary.notes)
      if (n.rfind("complete stacks:", 0) == 0) note = n;
    std::printf(
        "  %s\n  new threads at clone3 on their way out of the fork: %llu samples, %llu complete, %llu of "
        "one frame; later (in user mode): %llu, %llu complete; their creator there: %llu, %llu reaching "
        "main\n",
        note.c_str(), static_cast<unsigned long long>(child), static_cast<unsigned long long>(child_complete),
        static_cast<unsigned long long>(child_one_frame), static_cast<unsigned long long>(child_later),
        static_cast<unsigned long long>(child_later_complete), static_cast<unsigned long long>(parent),
        static_cast<unsigned long long>(parent_reached));
  }
  // Seen: 1-25 of the new threads on their way out (more threads are runnable than there are CPUs),
  // 100-3,400 of their creator.
  ASSERT_GT(child, 0u) << "no sample of a new thread before its first return to user mode";
  EXPECT_EQ(child_complete, child);
  EXPECT_EQ(child_one_frame, child);
  ASSERT_GT(parent, 0u) << "no sample of the creator on its way back from clone3";
  EXPECT_GE(double(parent_reached), 0.95 * double(parent));

  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      note, m,
      std::regex(R"(on-CPU ([0-9.]+)% of ([0-9]+) samples; off-CPU ([0-9.]+)% of ([0-9]+) samples)")))
      << note;
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(k == 0 ? "on-CPU" : "off-CPU");
    ASSERT_GT(known[k], 0u);
    const double stated = std::stod(m[k == 0 ? 1 : 3]);
    EXPECT_EQ(std::stoull(m[k == 0 ? 2 : 4]), known[k]);
    EXPECT_NEAR(stated, 100.0 * double(complete[k]) / double(known[k]), 0.051);
    const double shown = 100.0 * double(rooted[k]) / double(known[k]);
    std::printf("  %s: stated %.1f%% complete, %.1f%% of the exported stacks reach their thread's root\n",
                k == 0 ? "on-CPU" : "off-CPU", stated, shown);
    EXPECT_NEAR(shown, stated, 1.0);
    EXPECT_GE(stated, 95.0);
  }
}

// The cgroup v2 mount, from /proc/self/mounts ("" when there is none).
std::string cgroup2_mount_point() {
  std::ifstream mounts("/proc/self/mounts");
  std::string device, dir, type, rest;
  while (mounts >> device >> dir >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2") return dir;
  }
  return "";
}

// A thread that blocks before its process's tables are published is walked by frame pointer at its
// switch-out; its stack cannot change until it runs again, so the recorder reads it and walks it again
// once the tables are published, while the thread still waits. In a cgroup recording a process's tables
// are compiled only once it was sampled, so the threads of blockers_nofp started inside the cgroup
// after the recording began, with no start-up pause, block before their tables exist: without the
// second walk, each wrapper's 2 s would end in frame-pointer junk (the program has no frame pointers).
TEST(BpfCfi, ThreadsThatBlockedBeforeTheirTablesAreWalkedAgainWhileTheyWait) {
  testing::TempCgroup cgroup(cgroup2_mount_point());
  ASSERT_TRUE(cgroup.ok()) << "cannot create a cgroup under '" << cgroup2_mount_point() << "'";
  RecordOptions options;
  options.target.cgroup = cgroup.name();
  // The shell moves itself into the cgroup, then becomes the program.
  options.target.command = {
      "/bin/sh", "-c", "echo $$ > " + cgroup.path() + "/cgroup.procs && exec " + kDir + "/blockers_nofp 2 0"};
  Symbolized s{record(options), {}};
  Symbolizer symbolizer;
  s.profile = symbolize_profile(s.result.profile, symbolizer);
  std::printf("  %llu off-CPU stacks walked again, %llu samples with tables pending\n",
              static_cast<unsigned long long>(s.result.cfi.off_cpu_rewalked),
              static_cast<unsigned long long>(s.result.cfi.samples_tables_pending));
  expect_blockers(s, "blockers_nofp in a cgroup, blocking at once");
  // The threads that blocked before their tables (on a quiet machine all six: 11-17 walks again, the
  // nanosleep one waking every 50 ms). How many did depends on how fast the program starts against how
  // fast its tables come: with four CPU hogs beside a CI run 2 of them, the others blocking after their
  // tables were published (walked right at once, as expect_blockers saw). At least one did, or the
  // second walk was not tested here.
  EXPECT_GE(s.result.cfi.off_cpu_rewalked, 1u);
}

// The share of on-CPU samples of functions named `leaf` whose stack is complete and holds every
// name of `must`.
void expect_complete(const Symbolized& s, const std::string& leaf, const std::vector<std::string>& must,
                     double min_percent, size_t min_depth = 0) {
  size_t in_leaf = 0, whole = 0, deepest = 0;
  for (const Thread& t : s.profile.threads) {
    for (const Sample& sample : t.samples) {
      if (sample.kind != SampleKind::kOnCpu || sample.stack == kNoIndex) continue;
      const auto names = names_leaf_first(s.profile, sample.stack);
      bool hit = false;
      for (const std::string& n : names) hit = hit || n.find(leaf) != std::string::npos;
      if (!hit) continue;
      ++in_leaf;
      bool ok = sample.stack_end == StackEnd::kComplete && names.size() >= min_depth;
      for (const std::string& m : must) ok = ok && contains(names, m);
      whole += ok;
      deepest = std::max(deepest, names.size());
    }
  }
  const double percent = in_leaf ? 100.0 * double(whole) / double(in_leaf) : 0.0;
  std::printf("  %zu samples in %s, %.1f%% complete through main, deepest %zu frames\n", in_leaf,
              leaf.c_str(), percent, deepest);
  print_ends(s.result);
  ASSERT_GT(in_leaf, 300u);
  EXPECT_GE(percent, min_percent);
}

TEST(BpfCfi, DeepRecursionIsComplete) {
  const Symbolized s = record_and_symbolize({kDir + "/recursion", "2"});
  expect_complete(s, "spin_at_bottom", {"descend", "main"}, 95.0, 203);
}

// Bad input: another program carrying the build-id of `recursion` (anyone can link one with
// -Wl,--build-id=0x...) is recorded first; its table must not serve `recursion` afterwards, nor in the
// same recording: tables are keyed by the file they were compiled from, not by its build-id alone.
// (Through hpd, one user's program would otherwise unwind the stacks of everyone's.)
TEST(BpfCfi, ProgramCarryingAnotherProgramsBuildIdDoesNotLendItsTable) {
  const std::string genuine = kDir + "/recursion";
  const std::optional<std::string> id = file_build_id(genuine);
  ASSERT_TRUE(id && !id->empty());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bpf_cfi_impostor." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string impostor = (dir / "impostor").string();
  const std::string build = "gcc -O2 -g -fomit-frame-pointer -Wl,--build-id=0x" + *id + " " +
                            std::string(HPD_CFI_SOURCE_DIR) + "/sort_format.c -o " + impostor;
  ASSERT_EQ(std::system(build.c_str()), 0) << build;
  ASSERT_EQ(file_build_id(impostor).value_or(""), *id);
  const Symbolized first = record_and_symbolize({impostor, "0.5"});
  ASSERT_GT(first.result.profile.sample_count(), 0u);
  const Symbolized s = record_and_symbolize({genuine, "1"});
  expect_complete(s, "spin_at_bottom", {"descend", "main"}, 95.0, 203);
  // Both in one recording (started together: their tables are compiled while they run, hence 90%).
  const Symbolized both =
      record_and_symbolize({"/bin/sh", "-c", impostor + " 0.5 & " + genuine + " 1; wait"});
  expect_complete(both, "spin_at_bottom", {"descend", "main"}, 90.0, 203);
  std::filesystem::remove_all(dir);
}

TEST(BpfCfi, RustProgramIsComplete) {
  const Symbolized s = record_and_symbolize({kDir + "/rust_loop", "2"});
  expect_complete(s, "rust_loop::churn", {"main"}, 95.0);
}

TEST(BpfCfi, LibraryOpenedWhileRecordingIsComplete) {
  const Symbolized s = record_and_symbolize({kDir + "/late_loader", kDir + "/liblate.so", "0.5", "2"});
  expect_complete(s, "late_inner", {"late_work", "main"}, 90.0);
}

TEST(BpfCfi, ProcessStartedAfterRecordingBeganIsComplete) {
  const Symbolized s = record_and_symbolize({kDir + "/late_starter", "0.5", kDir + "/recursion", "2"});
  expect_complete(s, "spin_at_bottom", {"descend", "main"}, 90.0, 203);
  const RecordResult& r = s.result;
  const double pending = r.profile.samples.empty() ? 0.0
                                                   : 100.0 * double(r.cfi.samples_tables_pending) /
                                                         double(r.profile.samples.size());
  std::printf("  %.2f%% of samples walked by frame pointer while tables were loading\n", pending);
  EXPECT_LT(pending, 5.0);
}

// Busy loops beside a test (as on a loaded CI machine), killed when it ends.
class CpuHogs {
 public:
  explicit CpuHogs(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        for (;;) __asm__ volatile("" ::: "memory");
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~CpuHogs() {
    for (const pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (const pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  CpuHogs(const CpuHogs&) = delete;
  CpuHogs& operator=(const CpuHogs&) = delete;
  [[nodiscard]] size_t count() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

// Whether a frame of the sample's stack lies in a module whose file is named `lib`.
bool in_lib(const Profile& p, uint32_t stack, const std::string& lib) {
  if (stack == kNoIndex) return false;
  for (const uint32_t f : p.stack_frames_root_first(stack)) {
    const uint32_t l = p.frames[f].lib;
    if (l != kNoIndex && l < p.libs.size() && p.libs[l].name == lib) return true;
  }
  return false;
}

// A program without frame pointers that spins from its first instruction in main, in a library it
// links, and then in one it dlopen()s. Its libraries (and ld.so, the vDSO) are mapped only after the
// exec, and their mappings are published from the mmap records: the programs' walk of the samples
// taken before that stands in frame pointers, which in this program reach nothing. Those samples are
// walked again with the tables once they are published, so that they reach main (and call_opened)
// like the others, with the tables warm (not compiled) and CPU hogs beside the program.
TEST(BpfCfi, SamplesTakenBeforeTheTablesArePublishedAreWalkedAgain) {
  const std::vector<std::string> command = {kDir + "/early_start", kDir + "/liblate.so", "0.15", "0.15"};
  // Its tables are compiled here, kept in the process (and on disk when a cache is configured): the
  // recording that counts finds them ready.
  ASSERT_GT(record_default(command).profile.sample_count(), 0u);
  CpuHogs hogs(4);
  ASSERT_EQ(hogs.count(), 4u);
  RecordOptions options;
  options.target.command = command;
  const auto [r, summary, written] = record_with_summary(options, "early");
  Symbolizer symbolizer;
  const Profile p = symbolize_profile(r.profile, symbolizer);

  size_t on = 0, complete = 0, linked = 0, linked_main = 0, opened = 0, opened_caller = 0;
  for (const Thread& t : p.threads) {
    for (const Sample& sample : t.samples) {
      if (sample.kind != SampleKind::kOnCpu) continue;
      ++on;
      const bool whole = sample.stack_end == StackEnd::kComplete;
      complete += whole;
      const auto names = names_leaf_first(p, sample.stack);
      if (!whole) {
        std::string text;
        for (const std::string& n : names) text += " " + n;
        std::printf("  incomplete (%d):%s\n", static_cast<int>(sample.stack_end), text.c_str());
      }
      if (in_lib(p, sample.stack, "libearly.so")) {
        ++linked;
        linked_main += whole && contains(names, "late_work") && contains(names, "main");
      } else if (in_lib(p, sample.stack, "liblate.so")) {
        ++opened;
        opened_caller += whole && contains(names, "late_work") && contains(names, "call_opened") &&
                         contains(names, "main");
      }
    }
  }
  auto percent = [](size_t part, size_t whole) { return whole ? 100.0 * double(part) / double(whole) : 0.0; };
  std::printf(
      "early samples: %zu on-CPU, %.1f%% complete; linked library %zu, %.1f%% reach main; dlopen()ed "
      "library %zu, %.1f%% reach call_opened and main\n",
      on, percent(complete, on), linked, percent(linked_main, linked), opened,
      percent(opened_caller, opened));
  for (const std::string& note : summary.notes) {
    if (note.rfind("cfi:", 0) == 0) std::printf("  summary: %s\n", note.c_str());
  }
  print_ends(r);
  // 0.15 CPU seconds per phase at 999 Hz.
  ASSERT_GT(linked, 75u);
  ASSERT_GT(opened, 75u);
  EXPECT_GE(percent(complete, on), 95.0);
  EXPECT_GE(percent(linked_main, linked), 95.0);
  EXPECT_GE(percent(opened_caller, opened), 95.0);
  // What the summary says is what was counted, and it accounts for the incomplete stacks: a walk that
  // lacked its tables is the only way this program's stacks fail, but one.
  static const std::regex kept_line(
      R"(cfi: (\d+) samples \([0-9.]+%\) were walked by frame pointer: a table)");
  static const std::regex again_line(
      R"(cfi: (\d+) samples taken before the tables they needed were in the eBPF maps were walked again with )"
      R"(the tables \((\d+) on-CPU, from a copy of their stack; (\d+) off-CPU)");
  uint64_t stated_kept = 0, stated_again = 0, stated_on = 0, stated_off = 0;
  for (const std::string& note : summary.notes) {
    std::smatch m;
    if (std::regex_search(note, m, kept_line)) stated_kept = std::stoull(m[1]);
    if (std::regex_search(note, m, again_line)) {
      stated_again = std::stoull(m[1]);
      stated_on = std::stoull(m[2]);
      stated_off = std::stoull(m[3]);
    }
  }
  EXPECT_EQ(stated_kept, r.cfi.samples_tables_pending);
  EXPECT_EQ(stated_on, r.cfi.on_cpu_rewalked);
  EXPECT_EQ(stated_off, r.cfi.off_cpu_rewalked);
  EXPECT_EQ(stated_again, stated_on + stated_off);
  // Besides those, ld.so's lazy binding (_dl_runtime_resolve realigns the stack and keeps the CFA in
  // rbx, a rule the tables do not express) ends a walk as unsupported, which the recording counts.
  uint64_t unsupported = 0;
  for (const auto& [name, n] : r.user_stack_ends[0]) unsupported += name == "unsupported CFI row" ? n : 0;
  EXPECT_LE(on - complete, stated_kept + unsupported) << "incomplete stacks the summary does not account for";
  // The program's first samples came before its libraries' mappings were published: a window this test
  // is about, which the programs' walks noticed.
  EXPECT_GT(stated_kept + stated_again, 0u);
}

// The file offset of a section of a 64-bit ELF image, or 0.
uint64_t section_offset(const std::string& image, const char* name) {
  if (image.size() < sizeof(Elf64_Ehdr)) return 0;
  Elf64_Ehdr eh;
  std::memcpy(&eh, image.data(), sizeof eh);
  auto shdr = [&](size_t i) {
    Elf64_Shdr sh{};
    const size_t at = eh.e_shoff + i * sizeof(Elf64_Shdr);
    if (at + sizeof sh <= image.size()) std::memcpy(&sh, image.data() + at, sizeof sh);
    return sh;
  };
  const Elf64_Shdr strings = shdr(eh.e_shstrndx);
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr sh = shdr(i);
    if (strings.sh_offset + sh.sh_name < image.size() &&
        std::strcmp(image.data() + strings.sh_offset + sh.sh_name, name) == 0)
      return sh.sh_offset;
  }
  return 0;
}

// Bad input: a program whose .eh_frame_hdr is damaged (its version byte) gets no table; the recording
// goes on, its frames are walked by frame pointer (it has them), and the summary names the module.
TEST(BpfCfi, ModuleWithDamagedCfiFallsBackToFramePointersAndIsNamed) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bpf_cfi_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ifstream in(kDir + "/sort_format", std::ios::binary);
  std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const uint64_t hdr = section_offset(image, ".eh_frame_hdr");
  ASSERT_NE(hdr, 0u);
  image[hdr] = 7;  // version 1 is the only one
  // Another build-id too: tables are cached by build-id, and sort_format's may be compiled already.
  const uint64_t note = section_offset(image, ".note.gnu.build-id");
  ASSERT_NE(note, 0u);
  image[note + 16] = static_cast<char>(image[note + 16] ^ 0x5a);  // after namesz, descsz, type and "GNU"
  const std::string damaged = (dir / "sort_format_damaged").string();
  {
    std::ofstream out(damaged, std::ios::binary);
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
  }
  ::chmod(damaged.c_str(), 0755);
  const Symbolized s = record_and_symbolize({damaged, "1.5"});
  std::filesystem::remove_all(dir);
  print_ends(s.result);
  bool named = false;
  for (const std::string& m : s.result.cfi.without_table)
    named = named || (m.find("sort_format_damaged") != std::string::npos &&
                      m.find("eh_frame_hdr") != std::string::npos);
  EXPECT_TRUE(named) << "the summary names the module and why";
  EXPECT_GT(s.result.cfi.samples_with_fp_frames, 0u);
  size_t on = 0, with_main = 0;
  for (const Thread& t : s.profile.threads) {
    for (const Sample& sample : t.samples) {
      if (sample.kind != SampleKind::kOnCpu || sample.stack == kNoIndex) continue;
      ++on;
      with_main += contains(names_leaf_first(s.profile, sample.stack), "main");
    }
  }
  std::printf("  damaged CFI: %zu on-CPU samples, %zu reach main through frame pointers\n", on, with_main);
  ASSERT_GT(on, 200u);
  // Frames of the program itself are fp-walked; libc's keep their table, so a chain through qsort
  // back into the program and on to main holds as long as the program's frames keep rbp.
  EXPECT_GT(with_main, on / 2);
}

// Rows of a module's table, as the recording compiles it.
size_t rows_of(const std::string& path) {
  const auto table = compile_cfi_table({path}, "", {});
  EXPECT_FALSE(table->rows.empty()) << path << ": " << table->error;
  return table->rows.size();
}

// Rows of the vDSO's table (every process maps the same image): this process's own.
size_t vdso_rows() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("[vdso]") == std::string::npos) continue;
    const uint64_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    const uint64_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    const auto table = compile_cfi_table_image(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(start), end - start), "[vdso]");
    EXPECT_FALSE(table->rows.empty()) << table->error;
    return table->rows.size();
  }
  ADD_FAILURE() << "no [vdso] in /proc/self/maps";
  return 0;
}

// A row map too small for libc: the recording goes on, libc's frames are walked by frame pointer, and
// the summary names libc and says the map was full.
TEST(BpfCfi, ModuleRefusedForLackOfRoomIsNamed) {
  const std::string program = kDir + "/sort_format";
  RecordOptions options;
  options.target.command = {program, "1.5"};
  // The program's rows and a little more; libc has tens of thousands.
  options.cfi_row_capacity = static_cast<uint32_t>(rows_of(program) + 500);
  ASSERT_LT(options.cfi_row_capacity, rows_of("/lib/x86_64-linux-gnu/libc.so.6"));
  // Through what `hpctl record` does with the result: the summary's notes.
  const auto [r, summary, written] = record_with_summary(options, "refused");
  print_ends(r);
  std::vector<std::string> cfi_notes;
  for (const std::string& note : summary.notes) {
    if (note.rfind("cfi:", 0) != 0) continue;
    std::printf("  summary: %s\n", note.c_str());
    // Where tables came from (the disk cache, or tables kept from an earlier recording of this test
    // binary when its tests share a process) is no part of the order checked below.
    if (note.find("kept by hpd") == std::string::npos && note.find("unwind-table cache") == std::string::npos)
      cfi_notes.push_back(note);
  }
  // The table line with the capacity, the line saying the map was full, then the refused modules first.
  ASSERT_GE(cfi_notes.size(), 3u);
  EXPECT_NE(cfi_notes[0].find(" of " + std::to_string(options.cfi_row_capacity) + " rows"), std::string::npos)
      << cfi_notes[0];
  EXPECT_NE(cfi_notes[1].find("the row map was full"), std::string::npos) << cfi_notes[1];
  EXPECT_NE(cfi_notes[1].find("modules refused"), std::string::npos) << cfi_notes[1];
  EXPECT_NE(cfi_notes[2].find("frame pointers for"), std::string::npos) << cfi_notes[2];
  EXPECT_NE(cfi_notes[2].find("the CFI row map is full"), std::string::npos) << cfi_notes[2];
  // After the modules, the row map that would have held them.
  bool advised = false;
  for (size_t i = 3; i < cfi_notes.size(); ++i)
    advised = advised || cfi_notes[i].rfind("cfi: --cfi-rows ", 0) == 0;
  EXPECT_TRUE(advised) << "the summary gives the --cfi-rows that would have held libc's table";
  bool libc_named = false;
  for (const std::string& m : r.cfi.without_table)
    libc_named = libc_named || (m.find("libc.so.6") != std::string::npos &&
                                m.find("the CFI row map is full") != std::string::npos);
  EXPECT_TRUE(libc_named) << "the summary names libc and why it was walked by frame pointer";
  EXPECT_GE(r.cfi.modules_refused, 1u);
  EXPECT_EQ(r.cfi.row_capacity, options.cfi_row_capacity);
  EXPECT_LE(r.cfi.rows, r.cfi.row_capacity);
  EXPECT_GE(r.cfi.modules_loaded, 1u);  // the program's own table fits
  EXPECT_GT(r.cfi.samples_with_fp_frames, 0u) << "libc's frames were stepped by frame pointer";
  EXPECT_GT(r.profile.samples.size(), 100u);  // 1.5 s at 999 Hz; this VM may give it a quarter of a CPU
}

// Two programs one after the other under a shell, in a row map that holds the shell's modules and
// only one of the two programs' tables: when the second starts, the first (exited, mapped by no
// followed process) is evicted to make room, nothing is refused, and both are unwound completely.
TEST(BpfCfi, TablesOfExitedProgramsAreEvictedToMakeRoom) {
  const std::string first = kDir + "/sort_format";
  const std::string second = kDir + "/recursion";
  size_t shell_rows = 0;
  // What `ldd /bin/sh` lists (the vDSO has no file).
  for (const std::string& m :
       {std::filesystem::canonical("/bin/sh").string(), std::string("/lib/x86_64-linux-gnu/libc.so.6"),
        std::string("/lib64/ld-linux-x86-64.so.2")})
    shell_rows += rows_of(m);
  shell_rows += vdso_rows();
  const size_t a = rows_of(first), b = rows_of(second);
  RecordOptions options;
  options.target.command = {"/bin/sh", "-c", first + " 1.5; " + second + " 1.5"};
  options.cfi_row_capacity = static_cast<uint32_t>(shell_rows + std::max(a, b) + std::min(a, b) / 2);
  std::printf("  row map of %u rows: the shell's modules %zu, %s %zu, %s %zu\n", options.cfi_row_capacity,
              shell_rows, first.c_str(), a, second.c_str(), b);
  Symbolized s{record(options), {}};
  Symbolizer symbolizer;
  s.profile = symbolize_profile(s.result.profile, symbolizer);
  print_ends(s.result);
  EXPECT_GE(s.result.cfi.modules_evicted, 1u);
  EXPECT_EQ(s.result.cfi.modules_refused, 0u);
  expect_complete(s, "_round", {"main"}, 90.0);  // sort_round and format_round
  expect_complete(s, "spin_at_bottom", {"descend", "main"}, 90.0, 203);
}

// Whether some name of `names` contains `part` (C++ names come with their parameters).
bool has_part(const std::vector<std::string>& names, const std::string& part) {
  for (const std::string& n : names) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

// C++ without frame pointers: time under a catch handler (after a throw through six frames and
// libgcc's unwinder), then in a shared library's leaf reached through the PLT in short calls. Stacks
// reach main, and each phase's share of the samples is the share of the thread's CPU time the
// program measured for it itself.
TEST(BpfCfi, ExceptionsAndPltCallsReachMainInTheirMeasuredShares) {
  const std::string truth_path =
      std::filesystem::temp_directory_path().string() + "/bpf_cfi_exc_plt." + std::to_string(::getpid());
  const Symbolized s = record_and_symbolize({kDir + "/exc_plt", "1.5", truth_path});
  std::ifstream truth_file(truth_path);
  long long exception_ns = 0, handler_ns = 0, plt_ns = 0;
  truth_file >> exception_ns >> handler_ns >> plt_ns;
  std::filesystem::remove(truth_path);
  ASSERT_GT(exception_ns, 0) << "the fixture wrote no measurement";
  ASSERT_GT(plt_ns, 0);
  size_t on = 0, with_main = 0, in_exception = 0, in_handler = 0, in_plt_phase = 0, in_leaf = 0, in_stub = 0,
         in_unwinder = 0;
  for (const Thread& t : s.profile.threads) {
    for (const Sample& sample : t.samples) {
      if (sample.kind != SampleKind::kOnCpu || sample.stack == kNoIndex) continue;
      const auto names = names_leaf_first(s.profile, sample.stack);
      if (!has_part(names, "exception_phase") && !has_part(names, "plt_phase")) {
        // Start-up and exit (the dynamic loader, exit handlers): neither phase, but still a stack.
        ++on;
        with_main += has_part(names, "main") || has_part(names, "_start");
        continue;
      }
      ++on;
      with_main += contains(names, "main");
      if (has_part(names, "exception_phase")) {
        ++in_exception;
        in_handler += has_part(names, "spin_in_handler");
        in_unwinder += has_part(names, "_Unwind_");
      } else {
        ++in_plt_phase;
        in_leaf += has_part(names, "spin_leaf") && has_part(names, "lib_spin");
        in_stub += !names.empty() && names.front().find("@plt") != std::string::npos;
      }
    }
  }
  const double phases = double(in_exception + in_plt_phase);
  const double truth_exception = 100.0 * double(exception_ns) / double(exception_ns + plt_ns);
  const double seen_exception = phases > 0 ? 100.0 * double(in_exception) / phases : 0.0;
  const double truth_handler = 100.0 * double(handler_ns) / double(exception_ns + plt_ns);
  const double seen_handler = phases > 0 ? 100.0 * double(in_handler) / phases : 0.0;
  const double reach = on ? 100.0 * double(with_main) / double(on) : 0.0;
  std::printf(
      "exceptions and PLT: %zu on-CPU samples, %.1f%% reach main; exception phase %.1f%% of the samples "
      "(measured %.1f%% of the CPU), its handler %.1f%% (measured %.1f%%), %zu in libgcc's unwinder; PLT "
      "phase: %zu samples, %zu in the library's leaf, %zu in PLT stubs\n",
      on, reach, seen_exception, truth_exception, seen_handler, truth_handler, in_unwinder, in_plt_phase,
      in_leaf, in_stub);
  print_ends(s.result);
  ASSERT_GT(on, 500u);
  EXPECT_GE(reach, 95.0);
  EXPECT_NEAR(seen_exception, truth_exception, 5.0);
  EXPECT_NEAR(seen_handler, truth_handler, 5.0);
  EXPECT_GT(in_leaf, size_t(in_plt_phase / 2)) << "the library's spinning leaf, under lib_spin";
}

// The vDSO has no file: its table is compiled from the image the process mapped. A program spending
// its time in clock_gettime (answered in the vDSO) is unwound from the vDSO's frames to main.
TEST(BpfCfi, VdsoFramesAreUnwoundToMain) {
  const Symbolized s = record_and_symbolize({kDir + "/vdso_spin", "3"});
  bool vdso_loaded = true;
  for (const std::string& m : s.result.cfi.without_table)
    vdso_loaded = vdso_loaded && m.find("[vdso]") == std::string::npos;
  EXPECT_TRUE(vdso_loaded) << "the vDSO has a table";
  expect_complete(s, "__vdso_clock_gettime", {"read_clock_until", "main"}, 95.0);
}

// A signal handler's samples are unwound through the kernel's signal frame (glibc's __restore_rt,
// whose CFI says where the interrupted registers are) into the interrupted loop and on to main.
TEST(BpfCfi, SignalHandlerFramesReachTheInterruptedCodeAndMain) {
  const Symbolized s = record_and_symbolize({kDir + "/signal_spin", "2"});
  expect_complete(s, "spin_in_signal_handler", {"on_alarm", "interrupted_loop", "main"}, 90.0);
}

TEST(BpfCfi, ProgramWithoutUnwindTablesIsWalkedByFramePointer) {
  // chain_fp_nocfi: frame pointers, no CFI of its own (only crt's FDEs): its pcs lie in no FDE.
  const Symbolized s = record_and_symbolize({std::string(HPD_UNWIND_FIXTURE_DIR) + "/chain_fp_nocfi", "1.5"});
  expect_complete(s, "chain_d", {"chain_c", "chain_b", "chain_a", "main"}, 90.0);
}

}  // namespace
}  // namespace hpd
