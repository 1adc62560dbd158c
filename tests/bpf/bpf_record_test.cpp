// Privileged tests: real recordings through the eBPF backend on this kernel: the spinner with the
// perf backend's assertions, off-CPU samples (wall-clock vs CPU views), system-wide and cgroup
// recording, following a child across fork and exec, and clean release of every kernel resource.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "bpf/own_programs.h"
#include "cpu_clock.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/unique_fd.h"
#include "hpd/collect/recorder.h"
#include "hpd/export/report.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#include "proc/build_id.h"
#include "record_checks.h"
#include "record_until.h"
#include "subprocess.h"
#include "temp_cgroup.h"

namespace hpd {
namespace {

namespace fs = std::filesystem;

const std::string kOffCpuFixture = HPD_OFFCPU_FIXTURE;
const std::string kForker = HPD_FORKER_FIXTURE;

const std::string kChurn = HPD_CHURN_FIXTURE;

// Pid and command targets are sampled with per-thread task-clock events.
const SpinnerExpectations kBpfExpectations{"bpf", "task-clock", CpuTimeSource::kSchedRuntimeAtSample};

RecordOptions bpf_options() {
  RecordOptions options;
  options.backend = Backend::kBpf;
  return options;
}

// Samples of one process, on- and off-CPU.
size_t samples_of(const RawProfile& profile, int32_t pid, SampleKind kind = SampleKind::kOnCpu) {
  return static_cast<size_t>(
      std::count_if(profile.samples.begin(), profile.samples.end(),
                    [&](const RawSample& s) { return s.pid == pid && s.kind == kind; }));
}

// How many of a process's samples have their user leaf inside `function` of `path`.
size_t samples_in_function(const RawProfile& profile, int32_t pid, const std::string& path,
                           const std::string& function) {
  const auto range = function_file_range(path, function);
  EXPECT_TRUE(range) << function;
  const RawProcess* process = profile.find_process(pid);
  if (!range || process == nullptr) return 0;
  size_t n = 0;
  for (const RawSample& s : profile.samples) {
    if (s.pid != pid || s.stack == kNoIndex || s.kind != SampleKind::kOnCpu) continue;
    const auto user = profile.stacks.user_frames(s.stack);
    if (user.empty()) continue;
    const RawMapping* m = process->find_mapping(user[0], s.time_ns);
    if (m == nullptr || profile.modules[m->module].path != path) continue;
    const uint64_t offset = user[0] - m->start + m->file_offset;
    n += offset >= range->begin && offset < range->end;
  }
  return n;
}

TEST(BpfRecord, BackendIsAvailableHere) {
  std::string why = "unset";
  EXPECT_TRUE(bpf_backend_available(&why)) << why;
  EXPECT_EQ(why, "");
}

TEST(BpfRecord, LaunchedCommandWithLateThread) {
  const int fds_before = count_open_fds();
  rusage before;
  ::getrusage(RUSAGE_CHILDREN, &before);
  RecordOptions options = bpf_options();
  options.target.command = {spinner_path(), "1200", "400"};
  int progress_calls = 0;
  options.on_progress = [&](const RecordProgress&) { ++progress_calls; };
  const double steal_before = test::host_steal_ns();
  const RecordResult result = record(options);
  const double stolen_ns = test::host_steal_ns() - steal_before;
  rusage after;
  ::getrusage(RUSAGE_CHILDREN, &after);
  EXPECT_TRUE(result.target_exited);
  EXPECT_EQ(result.command_exit_status, 7);
  EXPECT_GE(progress_calls, 2);
  ASSERT_EQ(result.profile.processes.size(), 1u);
  const int32_t pid = result.profile.processes[0].pid;
  expect_spinner_profile(result, pid, cpu_ns(after) - cpu_ns(before), kBpfExpectations, stolen_ns);
  EXPECT_TRUE(result.backend_fallback_reason.empty());
  EXPECT_EQ(result.processes_without_maps, 0u);
  EXPECT_EQ(result.profile.lost.lost_records, 0u);

  // Single deltas: while a spinner's thread runs, each delta is one sampling interval. The program
  // brings sum_exec_runtime up to the sample (the kernel updates it only at ticks and switches: before,
  // 73% of the deltas were 0 and the rest lumps of a tick). Only samples that follow an on-CPU sample
  // of their thread count here: one after a wait for the CPU (an off-CPU sample of its thread between)
  // spans a preemption, and beside niced compilers, which preempt the threads often, about half of
  // those carried 0.55 intervals (and the next one the rest): p25 0.56-0.59, though the thread's total
  // stayed exact (checked above).
  std::map<int32_t, std::vector<const RawSample*>> by_thread;
  for (const RawSample& s : result.profile.samples) {
    if (s.pid == pid) by_thread[s.tid].push_back(&s);
  }
  std::vector<double> ratios;
  size_t after_a_wait = 0;
  for (auto& [tid, samples] : by_thread) {
    std::stable_sort(samples.begin(), samples.end(),
                     [](const RawSample* a, const RawSample* b) { return a->time_ns < b->time_ns; });
    for (size_t i = 1; i < samples.size(); ++i) {
      if (samples[i]->kind != SampleKind::kOnCpu) continue;
      if (samples[i - 1]->kind != SampleKind::kOnCpu) {
        ++after_a_wait;
        continue;
      }
      ratios.push_back(double(samples[i]->cpu_delta_ns) / double(result.profile.info.interval_ns));
    }
  }
  std::printf("on-CPU samples after an on-CPU sample of their thread: %zu; after a wait: %zu\n",
              ratios.size(), after_a_wait);
  ASSERT_GT(ratios.size(), 100u);
  std::sort(ratios.begin(), ratios.end());
  auto pct = [&](double p) { return ratios[size_t(p * double(ratios.size() - 1))]; };
  size_t within_10 = 0;
  for (double r : ratios) within_10 += r > 0.9 && r < 1.1;
  // The timer counts wall time while the thread is on the CPU, its CPU clock does not count the time
  // the hypervisor ran something else (steal): on a busy host many deltas are rightly below 1. At most
  // this share of the timer's time was stolen (all of the machine's steal on the spinner's threads):
  // spread evenly it takes that share from every delta, in bursts of an interval or more it empties
  // that share of the samples; either way the quantiles below 1 drop by no more than it.
  const double used_ns = double(cpu_ns(after) - cpu_ns(before));
  const double stolen_share = stolen_ns / (used_ns + stolen_ns);
  std::printf(
      "cpu delta / interval: p5 %.3f p25 %.3f p50 %.3f p75 %.3f p95 %.3f; within 10%%: %.1f%% of %zu; host "
      "steal %.1f%% of the timer's time at most\n",
      pct(0.05), pct(0.25), pct(0.5), pct(0.75), pct(0.95), 100.0 * double(within_10) / double(ratios.size()),
      ratios.size(), 100 * stolen_share);
  EXPECT_GE(pct(0.5), 0.9 - stolen_share);
  EXPECT_LE(pct(0.5), 1.1);
  // Lumps (73% zeros, the rest a tick's worth) put the first quartile at 0 and the third at 0 or 4.
  // A loaded machine spreads single deltas (the timer restarts at each switch-in, so samples come
  // early and late: within 10% only 52-56% of them in some runs) but keeps the middle half near one
  // interval (p25 0.986-0.998, p75 1.001-1.293 at load 7-14).
  EXPECT_GT(pct(0.25), 0.75 - stolen_share);
  EXPECT_LT(pct(0.75), 1.5);
  EXPECT_EQ(result.samples_with_stale_cpu_time, 0u);
  EXPECT_EQ(count_open_fds(), fds_before + held_module_files(result.profile));
}

// Processes that live a few milliseconds are gone before /proc/PID/maps can be read; the kernel's
// mmap records (MmapWatch) still place their samples, and their CPU time is complete. A shell starts the
// spinner 40 times, each burning 4 ms: most of their samples must land in spin_work, and each exec'd image
// must replace the shell's mappings (none of them may explain a spinner sample).
TEST(BpfRecord, ShortLivedProcessesResolveThroughMmapRecords) {
  for (const CallGraph graph : {CallGraph::kFp, CallGraph::kDwarf}) {
    SCOPED_TRACE(graph == CallGraph::kFp ? "fp" : "dwarf");
    RecordOptions options = bpf_options();
    options.call_graph = graph;
    options.target.command = {"/bin/sh", "-c", "for i in $(seq 40); do '" + spinner_path() + "' 4; done"};
    rusage before{}, after{};
    ::getrusage(RUSAGE_CHILDREN, &before);
    const double steal_before = test::host_steal_ns();
    const RecordResult result = record(options);
    const double stolen_ns = test::host_steal_ns() - steal_before;
    ::getrusage(RUSAGE_CHILDREN, &after);  // the shell, reaped by the recorder, and its children
    const RawProfile& p = result.profile;
    uint64_t profile_cpu_ns = 0;
    for (const RawSample& s : p.samples) profile_cpu_ns += s.cpu_delta_ns;
    size_t spinner_samples = 0, in_spin_work = 0, outside_any_mapping = 0, shell_mapping = 0;
    size_t spinners = 0;
    uint64_t spinner_cpu_ns = 0;
    // By name: most are gone before /proc/PID/exe could be read.
    const std::string comm = fs::path(spinner_path()).filename().string().substr(0, 15);
    for (const RawProcess& process : p.processes) {
      if (process.name != comm) continue;
      ++spinners;
      spinner_samples += samples_of(p, process.pid);
      in_spin_work += samples_in_function(p, process.pid, spinner_path(), "spin_work");
      for (const RawSample& s : p.samples) {
        if (s.pid != process.pid || s.stack == kNoIndex || s.kind != SampleKind::kOnCpu) continue;
        spinner_cpu_ns += s.cpu_delta_ns;
        const auto user = p.stacks.user_frames(s.stack);
        if (user.empty()) continue;
        const RawMapping* m = process.find_mapping(user[0], s.time_ns);
        if (m == nullptr) {
          ++outside_any_mapping;
        } else if (p.modules[m->module].path.find("dash") != std::string::npos ||
                   p.modules[m->module].path == "/bin/sh" || p.modules[m->module].path == "/usr/bin/sh") {
          ++shell_mapping;
        }
      }
    }
    EXPECT_GE(spinners, 30u) << "the shell's children were not recorded";
    ASSERT_GT(spinner_samples, 40u);
    EXPECT_GT(result.mmap_records, 0u);
    EXPECT_GE(in_spin_work, spinner_samples / 2)
        << in_spin_work << " of " << spinner_samples << " samples in spin_work";
    EXPECT_LE(outside_any_mapping, spinner_samples / 20) << "samples whose leaf lies in no known mapping";
    EXPECT_EQ(shell_mapping, 0u) << "the shell's image explained samples taken after the exec";
    // The CPU time in the profile is what the processes used (rusage of the shell and the spinners).
    // A thread's CPU time after its last sample comes with its freeing (HPD_EVENT_CPU_TAIL); without
    // it about half of a few-millisecond process's CPU time was missing.
    const uint64_t used_ns = cpu_ns(after) - cpu_ns(before);
    std::printf(
        "short-lived: %zu spinners, profile CPU %.1f ms (spinners %.1f), rusage %.1f ms; host steal %.1f ms, "
        "%.1f ms of it taken out of the samples' runtimes\n",
        spinners, profile_cpu_ns / 1e6, spinner_cpu_ns / 1e6, used_ns / 1e6, stolen_ns / 1e6,
        result.steal_taken_from_runtimes_ns / 1e6);
    EXPECT_GE(spinner_cpu_ns, spinners * 4'000'000) << "each spinner burns 4 ms";
    // Exact but for the runtimes of samples whose steal clock could not be read. A runtime brought up to
    // a sample's instant with the hypervisor's steal since the run queue's last update counted as the
    // thread's was 6-23% too much on a host that stole a quarter of the CPU: a process's last sample
    // had it, and nothing took it back (its end's CPU tail can only add).
    EXPECT_NEAR(double(profile_cpu_ns), double(used_ns), 0.02 * double(used_ns));
    // What the programs took out was stolen from the machine meanwhile (10 ms ticks in /proc/stat).
    EXPECT_LE(double(result.steal_taken_from_runtimes_ns), stolen_ns + 20e6);
    EXPECT_GT(result.cpu_tail_samples, 0u);
  }
}

TEST(BpfRecord, RunningProcessByPid) {
  const int fds_before = count_open_fds();
  test::Background spinner = spawn_held_spinner({"--wait-stdin", "--nap-ms", "150", "1000", "300"});
  const pid_t pid = spinner.pid();
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 1000 && !(read_exe(pid) == spinner_path() && read_process_state(pid) == 'S'); ++i) {
    usleep(5000);
  }
  ASSERT_EQ(read_exe(pid), spinner_path());
  RecordOptions options = bpf_options();
  options.target.pids = {spinner.pid()};
  options.duration_s = 20;
  options.on_progress = [&, sent = false](const RecordProgress&) mutable {
    if (!std::exchange(sent, true)) {
      EXPECT_TRUE(spinner.send("g"));
    }
  };
  const double steal_before = test::host_steal_ns();
  const RecordResult result = record(options);
  const double stolen_ns = test::host_steal_ns() - steal_before;
  EXPECT_TRUE(result.target_exited);
  rusage usage;
  ASSERT_EQ(spinner.wait(&usage), 7);
  expect_spinner_profile(result, pid, cpu_ns(usage), kBpfExpectations, stolen_ns);
  // The spinner's 150 ms nap at its end: a blocked interval of (at least) that length. (Its wait on
  // stdin began before the recording, whose programs never saw that switch-out; the main thread's
  // join of the late worker blocks only when it finishes first.)
  uint64_t longest_blocked_ns = 0;
  for (const RawSample& s : result.profile.samples)
    if (s.pid == pid && s.kind == SampleKind::kOffCpu)
      longest_blocked_ns = std::max(longest_blocked_ns, s.off_cpu_ns);
  EXPECT_GE(longest_blocked_ns, 150'000'000u);
  EXPECT_LT(longest_blocked_ns, 5'000'000'000u);
  EXPECT_EQ(count_open_fds(), fds_before + held_module_files(result.profile));
}

// A share (0..1) offcpu.c measured itself, from its line `format` ("... %lf of %lf s"): -1 when absent.
// "sleeper: waited W of T s": the sleeper's wall time in sleeper_wait; "sleeper: wait cpu C of T s":
// the CPU time it used inside sleeper_wait, of all it used.
double measured_share(const std::string& output_file, const char* format) {
  std::ifstream in(output_file);
  std::string line;
  while (std::getline(in, line)) {
    double part = 0, total = 0;
    if (std::sscanf(line.c_str(), format, &part, &total) == 2 && total > 0) return part / total;
  }
  return -1;
}

const ReportRow* row_named(const Report& report, const std::string& name) {
  for (const ReportRow& r : report.rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

TEST(BpfRecord, OffCpuSamplesGiveTheWallClockView) {
  const std::string out = fs::temp_directory_path() / ("hpd-offcpu-" + std::to_string(::getpid()) + ".txt");
  RecordOptions options = bpf_options();
  // Through a shell that execs the fixture: the recorded process changes image once.
  options.target.command = {"/bin/sh", "-c", "exec " + kOffCpuFixture + " 3 2 6 > " + out};
  const RecordResult result = record(options);
  ASSERT_EQ(result.command_exit_status, 0);
  const double real_share = measured_share(out, "sleeper: waited %lf of %lf s");
  const double wait_cpu_share = measured_share(out, "sleeper: wait cpu %lf of %lf s");
  fs::remove(out);
  ASSERT_GE(wait_cpu_share, 0.0);
  ASSERT_GT(real_share, 0.2);

  const RawProfile& raw = result.profile;
  int32_t sleeper = 0, spinner = 0;
  for (const RawThread& t : raw.threads) {
    if (t.name == "sleeper") sleeper = t.tid;
    if (t.name == "spinner") spinner = t.tid;
  }
  ASSERT_NE(sleeper, 0);
  ASSERT_NE(spinner, 0);
  uint64_t off_samples = 0;
  for (const RawSample& s : raw.samples) {
    if (s.kind != SampleKind::kOffCpu) continue;
    ++off_samples;
    EXPECT_EQ(s.cpu_delta_ns, 0u);
    EXPECT_GT(s.off_cpu_ns, 0u);
  }
  EXPECT_GT(off_samples, 100u);  // about one per 8 ms cycle of the sleeper

  Symbolizer symbolizer;
  const Profile profile = symbolize_profile(raw, symbolizer);
  ReportOptions ro;
  ro.limit = 0;
  ro.tid = sleeper;
  const Report report = compute_report(profile, ro);
  std::ostringstream text;
  print_report(report, text, ro);
  std::printf("%s", text.str().c_str());

  const ReportRow* wait = row_named(report, "sleeper_wait");
  const ReportRow* spin = row_named(report, "sleeper_spin");
  ASSERT_NE(wait, nullptr);
  ASSERT_NE(spin, nullptr);
  std::printf("sleeper_wait: wall %.1f%% (measured by the fixture %.1f%%), cpu %.2f%%\n",
              wait->total_wall_percent, 100 * real_share, wait->total_percent);
  // Wall clock: near its real share. CPU: what the thread used entering and leaving its sleeps, as its
  // own clock measured (a few percent: the kernel's sleep and switch paths, hpd's sched_switch program).
  // Its share of the on-CPU samples is less: hpd showed 0-1.6 points less on a quiet machine, -1.3 to
  // 1.2 beside other work, CI once over 2 points; perf record 0.4-3.0 less: the kernel charges a woken
  // thread from its wakeup, the idle CPU's way back included, and no timer samples that wait
  // (docs/architecture.md, "Timer samples and the context switch"). So the sample share is held from
  // above only, 3 points over the clock (a sleep counted as CPU would be tens of points). Its share of
  // the thread's CPU time is the clock's: the programs give that charged wait to the waiting-for-CPU
  // sample, whose stack is in sleeper_wait: not short of the clock by more than sampling's error, and over
  // it by no more than the sample share may be (beside four CPU hogs the samples alone were up to 1.3
  // points over, and the CPU time 0.2-1.6).
  std::printf("sleeper_wait: cpu %.2f%% (measured by the fixture %.2f%%: %.2f points not seen)\n",
              wait->total_percent, 100 * wait_cpu_share, 100 * wait_cpu_share - wait->total_percent);
  const double wait_cpu_time_share = double(wait->total_cpu_ns) / double(report.totals.cpu_ns);
  std::printf(
      "sleeper_wait: cpu time %.2f%% (%.2f ms of %.2f), fixture %.2f%%: %.2f points off; %llu waits "
      "charged %.2f ms\n",
      100 * wait_cpu_time_share, wait->total_cpu_ns / 1e6, report.totals.cpu_ns / 1e6, 100 * wait_cpu_share,
      100 * (wait_cpu_time_share - wait_cpu_share), (unsigned long long)result.waits_charged_as_cpu,
      result.waits_charged_ns / 1e6);
  EXPECT_GT(result.waits_charged_as_cpu, 0u);
  EXPECT_GT(100 * wait_cpu_time_share, 100 * wait_cpu_share - 1.5);
  EXPECT_LT(100 * wait_cpu_time_share, 100 * wait_cpu_share + 3.0);
  EXPECT_NEAR(wait->total_wall_percent, 100 * real_share, 12.0);
  EXPECT_LT(wait->total_percent, 100 * wait_cpu_share + 3.0);
  EXPECT_LT(wait->total_percent, 10.0);
  EXPECT_GT(spin->total_percent, 80.0);
  EXPECT_GT(wait->total_off_cpu_ns, 0u);

  // The spinner thread is on the CPU nearly all the time in both views.
  ro.tid = spinner;
  const Report spinning = compute_report(profile, ro);
  const ReportRow* all_the_time = row_named(spinning, "spin_all_the_time");
  ASSERT_NE(all_the_time, nullptr);
  EXPECT_GT(all_the_time->total_percent, 90.0);
  EXPECT_GT(all_the_time->total_wall_percent, 50.0);  // preemption on a busy machine is wall time too

  // Off-CPU frames are in the Idle category, so the Firefox Profiler can hide them.
  for (const Thread& t : profile.threads) {
    for (const Sample& s : t.samples) {
      if (s.kind != SampleKind::kOffCpu || s.stack == kNoIndex) continue;
      EXPECT_EQ(profile.frames[profile.stacks[s.stack].frame].category, Category::kIdle);
    }
  }
}

// A one-page ring (4 KiB, a handful of records) at a high rate with two busy threads: records are
// dropped for real. Every drop is attributed to the thread it belonged to, the per-thread counts add up
// to the totals, and symbolization and the report carry them.
TEST(BpfRecord, LossesAreCountedPerThreadAndReported) {
  RecordOptions options = bpf_options();
  options.frequency_hz = 4999;
  options.ring_pages = 1;
  options.target.command = {kOffCpuFixture, "1.5", "1", "1"};
  const RecordResult result = record(options);
  ASSERT_EQ(result.command_exit_status, 0);
  const RawProfile& raw = result.profile;
  ASSERT_GT(raw.lost.lost_records, 0u) << "a 4 KiB ring at 4999 Hz should overflow";
  ASSERT_EQ(result.threads_without_cpu_baseline, 0u);  // else some drops could have no thread

  LostCounts sum;
  size_t threads_with_losses = 0;
  for (const RawThread& t : raw.threads) {
    sum += t.lost;
    // The report lists every thread that lost anything: records, or a stack (a cfi walk that failed).
    if (t.lost.lost_records != 0 || t.lost.stack_failures != 0 || t.lost.truncated_stacks != 0)
      ++threads_with_losses;
  }
  EXPECT_EQ(sum.lost_records, raw.lost.lost_records);
  EXPECT_EQ(sum.stack_failures, raw.lost.stack_failures);
  EXPECT_EQ(sum.truncated_stacks, raw.lost.truncated_stacks);
  EXPECT_GE(threads_with_losses, 1u);

  Symbolizer symbolizer;
  const Profile profile = symbolize_profile(raw, symbolizer);
  EXPECT_EQ(profile.meta.lost.lost_records, raw.lost.lost_records);
  const Report report = compute_report(profile, ReportOptions{});
  uint64_t reported = 0;
  for (const ThreadLoss& l : report.totals.lost_by_thread) reported += l.lost.lost_records;
  EXPECT_EQ(reported, raw.lost.lost_records);
  EXPECT_EQ(report.totals.lost_by_thread.size(), threads_with_losses);

  std::ostringstream text;
  print_report(report, text, ReportOptions{});
  std::printf("%s", text.str().c_str());
  EXPECT_NE(text.str().find("Lost by thread:"), std::string::npos);
  for (const RawThread& t : raw.threads) {
    if (t.lost.lost_records == 0) continue;
    // Ten lines at most are printed; the fixture has three threads.
    EXPECT_NE(text.str().find("  tid " + std::to_string(t.tid) + " "), std::string::npos) << t.tid;
    EXPECT_NE(text.str().find(std::to_string(t.lost.lost_records) + " lost record"), std::string::npos);
  }
}

TEST(BpfRecord, EveryRingPageIsWrittenOnceAndTheRingStartsEmpty) {
  // hpd_warm_ring fills the ring with discarded records, one per page, before any event is attached,
  // and user space consumes them at once: every page is written, and no sample finds the ring full.
  RecordOptions options = bpf_options();
  options.frequency_hz = 999;
  options.ring_pages = 64;
  options.target.command = {spinner_path(), "300"};
  const RecordResult result = record(options);
  ASSERT_EQ(result.command_exit_status, 7);
  EXPECT_EQ(result.bpf_ring_pages_warmed, 64u);
  EXPECT_EQ(result.profile.lost.lost_records, 0u);
  ASSERT_EQ(result.profile.processes.size(), 1u);
  // About 300 samples: the spinner's thread spins for 300 ms at 999 Hz.
  EXPECT_GT(samples_of(result.profile, result.profile.processes[0].pid), 150u);
}

TEST(BpfRecord, OffCpuCanBeTurnedOff) {
  RecordOptions options = bpf_options();
  options.target.command = {kOffCpuFixture, "0.5", "1", "4"};
  options.off_cpu = Switch::kOff;
  const RecordResult result = record(options);
  ASSERT_EQ(result.command_exit_status, 0);
  // The fixture spins for part of its 0.5 s; on a loaded machine it may get a fraction of a CPU.
  EXPECT_GT(result.profile.samples.size(), 20u);
  for (const RawSample& s : result.profile.samples) EXPECT_EQ(s.kind, SampleKind::kOnCpu);
}

// The recording's own programs as the kernel's symbols it read name them (RecordResult::kernel_code_named:
// hpd then needs no new read of /proc/kallsyms for the timer samples that land in them): every function
// of them, the main ones named by their program's tag (hpd_exit, hpd_on_cpu, which have subprograms,
// are named by the whole program's tag, not their first function's) and the subprograms by their own.
// A launched command's table is read while the programs load and completed from them (own_programs.h):
// each is named as a read of /proc/kallsyms made with them loaded (during the recording) names it.
TEST(BpfRecord, TheKernelSymbolsReadNameTheRecordingsOwnPrograms) {
  RecordOptions options = bpf_options();
  options.target.command = {kOffCpuFixture, "0.3", "1", "4"};
  KernelSymbols loaded;
  options.on_attached = [&loaded] { loaded.load(); };
  const RecordResult result = record(options);
  ASSERT_EQ(result.command_exit_status, 0);
  ASSERT_NE(result.kernel_symbols, nullptr);
  ASSERT_FALSE(result.kernel_symbols->empty()) << "kallsyms unreadable: the test needs root";
  ASSERT_FALSE(loaded.empty());
  std::set<std::string> names;
  for (const auto& [start, end] : result.kernel_code_named) {
    const Location at = result.kernel_symbols->resolve(start);
    ASSERT_TRUE(at.found);
    EXPECT_EQ(at.symbol_address + result.kernel_symbols->base(), start) << at.symbol;
    EXPECT_GE(at.symbol_size, end - start) << at.symbol;
    EXPECT_TRUE(at.symbol.starts_with("bpf_prog_") && at.symbol.ends_with(" [bpf]")) << at.symbol;
    const Location read = loaded.resolve(start);
    EXPECT_EQ(read.symbol, at.symbol);
    EXPECT_EQ(read.symbol_address + loaded.base(), start) << read.symbol;
    // "bpf_prog_<16 hex digits>_<name> [bpf]"
    names.insert(at.symbol.substr(26, at.symbol.size() - 26 - 6));
  }
  std::string text;
  for (const std::string& n : names) text += " " + n;
  std::printf("named:%s\n", text.c_str());
  for (const char* program : {"hpd_on_cpu", "hpd_exit", "hpd_fork", "hpd_exec", "walk_user_cfi", "cfi_step"})
    EXPECT_TRUE(names.contains(program)) << program << " not named; named:" << text;
}

// The completion itself, made certain to be needed: a table read before the recording began lacks every
// program of it; completed from the programs this process holds while it records, it names each of their
// functions (main programs and subprograms, by the names their BTF gives) as a read made then does.
TEST(BpfRecord, ATableReadBeforeTheProgramsLoadedIsCompletedAsANewReadNamesThem) {
  using bpf_recording::JitedFunction;
  KernelSymbols before;
  ASSERT_TRUE(before.load()) << "kallsyms unreadable: the test needs root";
  RecordOptions options = bpf_options();
  options.target.command = {kOffCpuFixture, "0.2", "1", "2"};
  std::vector<JitedFunction> programs;
  std::vector<std::pair<uint64_t, uint64_t>> added;
  KernelSymbols now;
  options.on_attached = [&] {
    programs = bpf_recording::this_process_programs();
    added = bpf_recording::add_missing_functions(before, programs);
    now.load();
  };
  const RecordResult result = record(options);
  ASSERT_EQ(result.command_exit_status, 0);
  ASSERT_FALSE(now.empty());
  ASSERT_FALSE(programs.empty()) << "no BPF program open while recording";
  std::set<std::string> names;
  std::set<uint64_t> starts;
  for (const JitedFunction& f : programs) {
    ASSERT_FALSE(f.name.empty()) << std::hex << f.start;
    const Location completed = before.resolve(f.start), read = now.resolve(f.start);
    ASSERT_TRUE(read.found) << f.name;
    EXPECT_EQ(read.symbol_address + now.base(), f.start) << read.symbol;
    EXPECT_EQ(completed.symbol, read.symbol);
    EXPECT_EQ(f.name, read.symbol);
    EXPECT_EQ(completed.symbol_address + before.base(), f.start) << completed.symbol;
    EXPECT_GE(completed.symbol_size, f.end - f.start) << completed.symbol;
    EXPECT_TRUE(bpf_recording::names_function(before, f)) << f.name;
    names.insert(f.name);
    starts.insert(f.start);
  }
  // Every function was loaded after `before` was read, so each was added, once (a subprogram has a copy,
  // of the same name, in each program that calls it).
  EXPECT_EQ(added.size(), starts.size());
  std::string text;
  for (const std::string& n : names) text += " " + n;
  for (const char* function :
       {"_hpd_on_cpu [bpf]", "_hpd_exit [bpf]", "_walk_user_cfi [bpf]", "_cfi_step [bpf]"})
    EXPECT_NE(text.find(function), std::string::npos) << function << " not among:" << text;
}

TEST(BpfRecord, AllProcessesSeesUnrelatedProcesses) {
  // Both run until killed; the recording lasts until each has used 300 ms of CPU since the attach.
  test::Background spinning({spinner_path(), "600000"});
  test::Background sleeping({kOffCpuFixture, "600"});
  const pid_t a = spinning.pid(), b = sleeping.pid();
  ASSERT_TRUE(test::wait_until([&] {
    return read_exe(a) == spinner_path() && read_exe(b) == kOffCpuFixture;
  })) << "the fixtures did not exec";
  RecordOptions options = bpf_options();
  options.target.all_processes = true;
  test::RecordUntil until(options);
  until.cpu_of(a, 0.3).cpu_of(b, 0.3);
  const RecordResult result = record(options);
  spinning.kill();
  sleeping.kill();
  ASSERT_TRUE(until.met()) << "the fixtures did not get 300 ms of CPU in two minutes";
  const RawProfile& p = result.profile;
  EXPECT_EQ(p.info.target, "all processes");
  EXPECT_EQ(p.info.event, "cpu-clock");  // system-wide: per-CPU events
  // At 999 Hz, about one sample per ms of CPU the process used while recorded.
  EXPECT_GT(samples_of(p, a), size_t(until.cpu_at_stop(a) * 999 / 2));
  EXPECT_GT(samples_of(p, b), size_t(until.cpu_at_stop(b) * 999 / 2));
  EXPECT_EQ(samples_of(p, ::getpid()), 0u);  // the recorder leaves itself out
  // One track per thread: the fixture's three threads are told apart.
  std::set<int32_t> tids;
  for (const RawSample& s : p.samples) {
    if (s.pid == b) tids.insert(s.tid);
  }
  EXPECT_GE(tids.size(), 2u);
  const RawProcess* spinner = p.find_process(a);
  ASSERT_NE(spinner, nullptr);
  EXPECT_EQ(spinner->exe, spinner_path());
  EXPECT_GT(samples_in_function(p, a, spinner_path(), "spin_work"), samples_of(p, a) / 2);
  // --all takes no off-CPU samples unless asked: every context switch of the system would be one.
  EXPECT_EQ(samples_of(p, b, SampleKind::kOffCpu), 0u);
}

// hpd leaves what other tools see alone: a `perf record -g` started while hpd records the whole
// system writes a file `perf report` reads. (hpd's mmap events asked the kernel for build-ids; the
// kernel then marked the mmap records of every later event, perf's too, as carrying build-ids, and
// perf aborted on the device numbers it found there.) hpd reads the build-ids from the files.
TEST(BpfRecord, ConcurrentPerfRecordIsUndisturbed) {
  ASSERT_TRUE(test::have_tool("perf")) << "the test needs perf (linux-perf)";
  const fs::path dir = fs::temp_directory_path() / ("hpd-perf-beside-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::atomic<bool> stop{false}, recording{false};
  RecordOptions options = bpf_options();
  options.target.all_processes = true;
  options.duration_s = 120;
  options.stop = &stop;
  options.on_progress = [&](const RecordProgress&) { recording.store(true); };
  RecordResult result;
  std::exception_ptr error;
  std::thread recorder([&] {
    try {
      result = record(options);
    } catch (...) {
      error = std::current_exception();
    }
  });
  for (int i = 0; i < 600 && !recording.load() && !error; ++i) usleep(10000);
  // Programs exec'd and libraries mapped while both record.
  const std::string data = (dir / "perf.data").string();
  const test::RunResult perf =
      test::run({"perf", "record", "-g", "-o", data, "--", "/bin/sh", "-c",
                 "ls / >/dev/null; ls /usr >/dev/null; '" + spinner_path() + "' 300"});
  stop.store(true);
  recorder.join();
  if (error) std::rethrow_exception(error);
  EXPECT_TRUE(recording.load());
  EXPECT_EQ(perf.exit_code, 7) << perf.err;  // the spinner's exit status, passed on by perf
  EXPECT_EQ(perf.err.find("assertion failed"), std::string::npos) << perf.err;
  const test::RunResult report = test::run({"perf", "report", "-i", data, "--stdio"});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("spin_work"), std::string::npos) << report.out.substr(0, 2000) << report.err;
  // hpd's own recording still knows the spinner's build-id.
  UniqueFd exe(::open(spinner_path().c_str(), O_RDONLY | O_CLOEXEC));
  const std::string build_id = read_elf_build_id(exe.get());
  ASSERT_FALSE(build_id.empty());
  bool spinner_module = false;
  for (const RawModule& m : result.profile.modules) {
    if (m.path != spinner_path()) continue;
    spinner_module = true;
    EXPECT_EQ(m.build_id, build_id);
  }
  EXPECT_TRUE(spinner_module);
  fs::remove_all(dir);
}

// The churn fixture (a thread a millisecond, each waiting), started and held until 16 threads exist.
// go() lets every thread burn its CPU time and the fixture exit; wait() reaps it. Killed if the test
// ends early.
class Churn {
 public:
  Churn(int max_threads, int worker_cpu_ms)
      : process_({kChurn, std::to_string(max_threads), std::to_string(worker_cpu_ms)}, options()) {}

  [[nodiscard]] pid_t pid() const { return process_.pid(); }
  [[nodiscard]] bool ready() const { return process_.ready(); }
  bool go() const { return process_.send("g"); }
  // The exit status (exit code, or 128 + signal).
  int wait() { return process_.wait(); }

 private:
  static test::BackgroundOptions options() {
    test::BackgroundOptions o;
    o.ready_line = "ready";
    o.stdin_pipe = true;
    return o;
  }
  test::Background process_;
};

// Threads created while the recorder attaches to a running process: each has exactly one sampling
// event (inherited from its creator, or attached directly), never both, so no thread is sampled at
// twice the rate. The fixture starts a thread every millisecond until told to run them, so hundreds
// exist and more are being created while the recorder attaches.
TEST(BpfRecord, ThreadsBornDuringTheAttachAreSampledOnce) {
  const int fds_before = count_open_fds();
  Churn churn(2000, 6);
  ASSERT_TRUE(churn.ready());
  const pid_t pid = churn.pid();
  RecordOptions options = bpf_options();
  options.target.pids = {pid};
  // The recording ends when the fixture exits; the duration is a cap only a real break reaches. The
  // fixture's work is up to 2000 threads (as many as it started during the attach, which a loaded
  // machine slows) times 6 ms of CPU, two threads at a time: 12 s of CPU, which at a tenth of a CPU
  // each is a minute of wall time (a 30 s cap ended such recordings before the fixture did).
  options.duration_s = 300;
  options.off_cpu = Switch::kOff;
  // Once attached: every thread burns its CPU time, then the fixture exits.
  options.on_progress = [&, told = false](const RecordProgress&) mutable {
    if (!std::exchange(told, true)) {
      EXPECT_TRUE(churn.go());
    }
  };
  const double steal_before = test::host_steal_ns();
  const RecordResult result = record(options);
  const double stolen_ns = test::host_steal_ns() - steal_before;
  EXPECT_EQ(churn.wait(), 0);
  EXPECT_TRUE(result.target_exited) << "the fixture did not exit within the recording's 300 s cap";
  const RawProfile& p = result.profile;
  EXPECT_EQ(p.info.event, "task-clock");
  // Per thread: samples against the thread's CPU time (its deltas add up to sum_exec_runtime).
  struct PerThread {
    size_t samples = 0;
    uint64_t cpu_ns = 0;
  };
  std::map<int32_t, PerThread> threads;
  for (const RawSample& s : p.samples) {
    if (s.pid != pid || s.kind != SampleKind::kOnCpu) continue;
    ++threads[s.tid].samples;
    threads[s.tid].cpu_ns += s.cpu_delta_ns;
  }
  ASSERT_GT(threads.size(), 100u);  // a thread a millisecond during the eBPF programs' load alone
  size_t samples = 0;
  uint64_t cpu_ns = 0;
  // The timer (task-clock) counts the time the hypervisor took from the thread's virtual CPU while
  // the thread ran, its CPU time does not: each interval stolen can add a sample, to whichever thread
  // ran then (seen beside four CPU hogs and a CI run: 13 samples for a thread's 6.1 ms, deltas 918 360
  // 1864 0 0 1855 0 0 0 91 259 406 392 us). The samples above each thread's bound add up to no more
  // than the steal's intervals; a doubled event puts nearly every thread above it.
  double above = 0;
  std::string threads_above;
  for (const auto& [tid, t] : threads) {
    samples += t.samples;
    cpu_ns += t.cpu_ns;
    const double expected = double(t.cpu_ns) / double(p.info.interval_ns);
    // A doubled event shows as about twice the samples; the first sample of a thread may come from
    // either event, and an exited thread has one more for its CPU time after its last timer sample
    // (HPD_EVENT_CPU_TAIL), so two extra are allowed.
    const double bound = 1.3 * expected + 3;
    if (double(t.samples) > bound) {
      above += double(t.samples) - bound;
      threads_above += " " + std::to_string(tid) + ": " + std::to_string(t.samples) + " samples for " +
                       std::to_string(t.cpu_ns / 1000) + " us of CPU;";
    }
  }
  const double stolen_intervals = stolen_ns / double(p.info.interval_ns);
  std::printf("host steal %.1f ms (%.0f intervals); samples above the threads' bounds: %.0f\n",
              stolen_ns / 1e6, stolen_intervals, above);
  EXPECT_LE(above, stolen_intervals) << "threads above 1.3 x their CPU's samples + 3:" << threads_above;
  {
    int32_t worst = 0;
    double worst_excess = -1e9;
    for (const auto& [tid, t] : threads) {
      const double excess = double(t.samples) - double(t.cpu_ns) / double(p.info.interval_ns);
      if (excess > worst_excess) worst_excess = excess, worst = tid;
    }
    std::printf("worst thread %d: %zu samples, %.2f expected; deltas(us):", worst, threads[worst].samples,
                double(threads[worst].cpu_ns) / double(p.info.interval_ns));
    for (const RawSample& s : p.samples)
      if (s.tid == worst)
        std::printf(" %lu%s", (unsigned long)(s.cpu_delta_ns / 1000),
                    s.kind == SampleKind::kOnCpu ? "" : "x");
    std::printf("\n");
  }
  const double cpu_intervals = double(cpu_ns) / double(p.info.interval_ns);
  const double ratio = double(samples) / cpu_intervals;
  std::printf("churn: %zu threads, %zu samples, %.1f ms CPU, samples per interval of CPU %.3f\n",
              threads.size(), samples, double(cpu_ns) / 1e6, ratio);
  EXPECT_GT(ratio, 0.7);
  // Above, each interval stolen may add a sample (as for each thread's bound).
  EXPECT_LT(ratio, 1.2 + stolen_intervals / cpu_intervals);
  EXPECT_EQ(count_open_fds(), fds_before + held_module_files(result.profile));
}

// Runs `body` in a forked child and returns the line it produced ("error\t<what>" when it threw):
// for recordings under a lowered hard descriptor limit, which a process cannot raise again. The
// child exits with 0 once the line is written; a child that ended otherwise fails the test.
std::string line_from_child(const std::function<std::string()>& body) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return {};
  }
  const pid_t child = ::fork();
  if (child == 0) {
    std::string line;
    try {
      line = body();
    } catch (const std::exception& e) {
      line = std::string("error\t") + e.what();
    }
    _exit(::write(report[1], line.data(), line.size()) == static_cast<ssize_t>(line.size()) ? 0 : 6);
  }
  ::close(report[1]);
  std::string text;
  if (child < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
  } else {
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    char buffer[512];
    for (ssize_t n; (n = ::read(report[0], buffer, sizeof buffer)) > 0;)
      text.append(buffer, static_cast<size_t>(n));
  }
  ::close(report[0]);
  return text;
}

// With too few file descriptors left for two per thread, per-thread events give way to per-CPU ones
// (hpd holds other sessions' descriptors too): the recording still works, and everything is released.
TEST(BpfRecord, RunningOutOfDescriptorsFallsBackToPerCpuEvents) {
  constexpr int kThreads = 120;
  Churn churn(kThreads, 2);
  ASSERT_TRUE(churn.ready());
  const pid_t pid = churn.pid();
  // The fixture starts a thread a millisecond up to kThreads; wait until they all exist.
  for (int i = 0; i < 400 && list_threads(pid).size() < size_t{kThreads}; ++i) usleep(5000);
  ASSERT_GE(list_threads(pid).size(), size_t{kThreads});

  // A descriptor limit that passes the recorder's estimate (two per thread and 256 more) but, with
  // most of it taken, runs out some way into the attach. In a child process: a lowered hard limit
  // cannot be raised again without CAP_SYS_RESOURCE.
  const std::string line = line_from_child([&] {
    const rlim_t limit = 2 * (kThreads + 1) + 256 + 16;
    while (static_cast<rlim_t>(count_open_fds()) + 80 < limit) {
      if (::open("/dev/null", O_RDONLY | O_CLOEXEC) < 0) _exit(3);
    }
    const rlimit lowered{limit, limit};
    if (::setrlimit(RLIMIT_NOFILE, &lowered) != 0) _exit(4);
    const int fds_before = count_open_fds();
    RecordOptions options = bpf_options();
    options.target.pids = {pid};
    options.duration_s = 30;
    options.off_cpu = Switch::kOff;
    options.on_progress = [&, told = false](const RecordProgress&) mutable {
      if (!std::exchange(told, true) && !churn.go()) _exit(5);
    };
    const RecordResult result = record(options);
    return result.profile.info.event + " " + std::to_string(samples_of(result.profile, pid)) + " " +
           std::to_string(count_open_fds() - fds_before - held_module_files(result.profile));
  });
  EXPECT_EQ(churn.wait(), 0);
  std::string event;
  size_t samples = 0;
  long leaked = -1;
  std::istringstream words(line);
  words >> event >> samples >> leaked;
  EXPECT_EQ(event, "cpu-clock") << line;
  EXPECT_GT(samples, 50u);  // 120 threads x 2 ms of CPU at 999 Hz
  EXPECT_EQ(leaked, 0);     // every descriptor of the abandoned per-thread attach was closed
}

// The mmap watch opens one event per target per CPU. With many --pid targets and few descriptors
// left, opening it fails with EMFILE; the recording then goes on without it (each process's
// mappings read from /proc/PID/maps when it is first seen, as before the watch existed), says why,
// and closes what the watch had opened. The limit leaves room for everything else: the programs
// and their maps, one pidfd per target and the per-CPU sampling events.
TEST(BpfRecord, MmapWatchOutOfDescriptorsFallsBackToProcMaps) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GE(cpus, 2) << "with one CPU the watch needs no more descriptors than the pidfds";
  constexpr int kSleepers = 80;
  std::vector<std::unique_ptr<test::Background>> sleepers;
  for (int i = 0; i < kSleepers; ++i)
    sleepers.push_back(std::make_unique<test::Background>(std::vector<std::string>{"/bin/sleep", "60"}));
  test::Background spinner({spinner_path(), "600000"});  // killed at the end
  std::vector<int32_t> pids{spinner.pid()};
  for (const auto& s : sleepers) pids.push_back(s->pid());
  const rlim_t spare = pids.size() + 2 * static_cast<rlim_t>(cpus) + 64;
  ASSERT_LT(spare, pids.size() * static_cast<rlim_t>(cpus) + 24) << "no room between the two needs";

  const std::string text = line_from_child([&] {
    const rlim_t limit = static_cast<rlim_t>(count_open_fds()) + spare;
    const rlimit lowered{limit, limit};
    if (::setrlimit(RLIMIT_NOFILE, &lowered) != 0) _exit(4);
    const int fds_before = count_open_fds();
    RecordOptions options = bpf_options();
    options.target.pids = pids;
    options.off_cpu = Switch::kOff;
    options.call_graph = CallGraph::kFp;
    test::RecordUntil until(options);
    until.cpu_of(spinner.pid(), 0.3);
    const RecordResult result = record(options);
    if (!until.met()) return std::string("the spinner did not get 300 ms of CPU in two minutes");
    // At 999 Hz, about one sample per ms of the spinner's CPU while recorded: at least half of them.
    const size_t floor = static_cast<size_t>(until.cpu_at_stop(spinner.pid()) * 999 / 2);
    return std::to_string(samples_of(result.profile, spinner.pid())) + "\t" + std::to_string(floor) + "\t" +
           std::to_string(samples_in_function(result.profile, spinner.pid(), spinner_path(), "spin_work")) +
           "\t" + std::to_string(result.mmap_records) + "\t" +
           std::to_string(count_open_fds() - fds_before - held_module_files(result.profile)) + "\t" +
           result.mmap_watch_fallback_reason;
  });
  std::vector<std::string> fields;
  for (std::istringstream in(text); !in.eof();) std::getline(in, fields.emplace_back(), '\t');
  ASSERT_EQ(fields.size(), 6u) << text;
  const size_t samples = std::stoul(fields[0]), floor = std::stoul(fields[1]),
               in_spin_work = std::stoul(fields[2]);
  EXPECT_GT(samples, floor);
  // Resolved through /proc/PID/maps: the spinner lives throughout.
  EXPECT_GT(in_spin_work, samples * 8 / 10);
  EXPECT_EQ(fields[3], "0") << "no mmap records: the watch is not running";
  EXPECT_EQ(fields[4], "0") << "descriptors left open";
  EXPECT_NE(fields[5].find("new mappings"), std::string::npos) << fields[5];
  EXPECT_NE(fields[5].find(std::strerror(EMFILE)), std::string::npos) << fields[5];
}

TEST(BpfRecord, CgroupSeesOnlyItsProcesses) {
  const int fds_before = count_open_fds();
  std::optional<testing::TempCgroup> cgroup(std::in_place, cgroup2_mount());
  ASSERT_TRUE(cgroup->ok()) << "cannot create a cgroup under the cgroup v2 mount '" << cgroup2_mount()
                            << "': " << std::strerror(errno);
  const std::string path = cgroup->path();
  // Both spin until killed; the recording lasts until each has used 300 ms of CPU since the attach,
  // so that the one outside had every chance to be (wrongly) sampled.
  test::Background inside = spawn_held_spinner({"--wait-stdin", "600000"});
  test::Background outside = spawn_held_spinner({"--wait-stdin", "600000"});
  const pid_t inside_pid = inside.pid(), outside_pid = outside.pid();
  ASSERT_TRUE(cgroup->add(inside_pid));
  for (test::Background* s : {&inside, &outside}) ASSERT_TRUE(s->send("g"));
  RecordOptions options = bpf_options();
  options.target.cgroup = cgroup->name();  // relative to the mount
  test::RecordUntil until(options);
  until.cpu_of(inside_pid, 0.3).cpu_of(outside_pid, 0.3);
  const RecordResult result = record(options);
  inside.kill();
  outside.kill();
  cgroup.reset();
  EXPECT_FALSE(fs::exists(path));
  ASSERT_TRUE(until.met()) << "the spinners did not get 300 ms of CPU in two minutes";
  const RawProfile& p = result.profile;
  EXPECT_EQ(p.info.target, "cgroup " + path);
  // At 999 Hz, about one sample per ms of CPU the spinner used while recorded.
  EXPECT_GT(samples_of(p, inside_pid), size_t(until.cpu_at_stop(inside_pid) * 999 / 2));
  EXPECT_EQ(samples_of(p, outside_pid), 0u);
  for (const RawSample& s : p.samples) EXPECT_EQ(s.pid, inside_pid);
  EXPECT_EQ(count_open_fds(), fds_before + held_module_files(result.profile));
}

TEST(BpfRecord, ForkedAndExecedChildIsFollowedWhenAsked) {
  for (const bool follow : {true, false}) {
    SCOPED_TRACE(follow ? "following children" : "not following children");
    RecordOptions options = bpf_options();
    options.target.command = {kForker, spinner_path(), "400"};
    options.follow_children = follow;
    const RecordResult result = record(options);
    EXPECT_EQ(result.command_exit_status, 7);  // the spinner's exit code, passed on
    const RawProfile& p = result.profile;
    // The launched program by its image (the processes are listed as their records came, and the
    // child's may come first: seen under load), and the child by its samples: of the processes with
    // that image, and of the others, the one sampled most. A fixture built with AddressSanitizer has
    // more processes of each image: at its exit the leak checker forks a tracer, which a recording
    // that follows children records too (a few samples, the image of the process it checks).
    const auto most_sampled = [&](const auto& wanted) {
      const RawProcess* best = nullptr;
      for (const RawProcess& process : p.processes) {
        if (wanted(process) && (best == nullptr || samples_of(p, process.pid) > samples_of(p, best->pid)))
          best = &process;
      }
      return best;
    };
    const RawProcess* forker_process =
        most_sampled([](const RawProcess& process) { return process.exe == kForker; });
    ASSERT_NE(forker_process, nullptr) << "no process of " << kForker;
    const int32_t forker = forker_process->pid;
    EXPECT_GT(samples_in_function(p, forker, kForker, "forker_spin"), 20u);
    const RawProcess* child = most_sampled([&](const RawProcess& process) { return process.pid != forker; });
    if (child != nullptr && samples_of(p, child->pid) == 0) child = nullptr;
    if (!follow) {
      EXPECT_EQ(child, nullptr);
      continue;
    }
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->name, "hpd_collect_spi");  // its comm after the exec
    EXPECT_EQ(child->exe, spinner_path());
    EXPECT_GT(child->start_ns, p.info.start_mono_ns);
    const RawThread* main_thread = p.find_thread(child->pid, child->pid);
    ASSERT_NE(main_thread, nullptr);
    EXPECT_EQ(main_thread->name, "hpd_collect_spi");
    const size_t in_spin = samples_in_function(p, child->pid, spinner_path(), "spin_work");
    EXPECT_GT(in_spin, samples_of(p, child->pid) / 2) << in_spin << " of " << samples_of(p, child->pid);
    // The forker's image, inherited at fork, ended at the exec.
    bool ended = false;
    for (const RawMapping& m : child->mappings)
      ended = ended || (m.unmapped_ns != 0 && p.modules[m.module].path == kForker);
    // Every process's mappings and times, so that a failure (seen once in a fresh-clone run with four
    // CPU hogs) says whether the child inherited the forker's image at all, and when each ended.
    const auto mappings_of = [&](const RawProcess& process) {
      std::string text = "pid " + std::to_string(process.pid) + " " + process.exe + " start " +
                         std::to_string(process.start_ns - p.info.start_mono_ns) + " ns after the start:\n";
      for (const RawMapping& m : process.mappings) {
        text += "  " + (m.module < p.modules.size() ? p.modules[m.module].path : std::string("?")) +
                " seen " + std::to_string(m.time_ns) + " ended " + std::to_string(m.unmapped_ns) + "\n";
      }
      return text;
    };
    std::string all;
    for (const RawProcess& process : p.processes) all += mappings_of(process);
    EXPECT_TRUE(ended) << "the child's mappings hold no ended " << kForker << "\n" << all;
  }
}

TEST(BpfRecord, StopFlagAndErrorsReleaseEverything) {
  const int fds_before = count_open_fds();
  for (int round = 0; round < 3; ++round) {
    test::Background spinner = spawn_held_spinner({"20000"});
    std::atomic<bool> stop{false};
    RecordOptions options = bpf_options();
    options.target.pids = {spinner.pid()};
    options.stop = &stop;
    // The flag is honoured at the recorder's next tick: no progress is reported after it is set (a
    // condition, not a bound on the elapsed time, which a loaded machine stretches).
    int progress_after_stop = 0;
    options.on_progress = [&](const RecordProgress& p) {
      if (stop) ++progress_after_stop;
      if (p.elapsed_s > 0.3) stop = true;  // what hpctl's SIGINT handler does
    };
    const RecordResult result = record(options);
    EXPECT_TRUE(stop);
    EXPECT_EQ(progress_after_stop, 0) << "round " << round;
    // The spinner burns 20 s of CPU: the recording ended by the flag, not by the target's end.
    EXPECT_FALSE(result.target_exited);
    EXPECT_GT(result.profile.samples.size(), 10u);
    spinner.kill();
    EXPECT_EQ(count_open_fds(), fds_before + held_module_files(result.profile)) << "round " << round;
  }
  // A failure after the programs were loaded and attached.
  RecordOptions missing = bpf_options();
  missing.target.command = {"hpd-no-such-command-xyz"};
  try {
    record(missing);
    ADD_FAILURE() << "expected an error";
  } catch (const RecordError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot run 'hpd-no-such-command-xyz': No such file or directory");
  }
  EXPECT_EQ(count_open_fds(), fds_before);
}

std::string error_of(const RecordOptions& options) {
  try {
    validate_record_options(options);
  } catch (const RecordError& e) {
    return e.what();
  }
  return "";
}

TEST(BpfRecord, OptionErrorsAreActionable) {
  RecordOptions all_perf;
  all_perf.target.all_processes = true;
  all_perf.backend = Backend::kPerf;
  EXPECT_EQ(error_of(all_perf), record_problem_text(OptionProblem::kAllWithPerf));
  RecordOptions no_cgroup;
  no_cgroup.target.cgroup = "hpd-no-such-cgroup";
  EXPECT_EQ(error_of(no_cgroup),
            "no cgroup at " + cgroup2_mount() + "/hpd-no-such-cgroup: No such file or directory");
  RecordOptions not_cgroup;
  not_cgroup.target.cgroup = "/tmp";
  EXPECT_NE(error_of(not_cgroup).find("/tmp is not in a cgroup v2 hierarchy"), std::string::npos);
  RecordOptions both;
  both.target.all_processes = true;
  both.target.cgroup = cgroup2_mount();
  EXPECT_EQ(error_of(both), record_problem_text(TargetProblem::kAllAndCgroup));
  RecordOptions pid_and_all;
  pid_and_all.target.all_processes = true;
  pid_and_all.target.pids = {1};
  EXPECT_EQ(error_of(pid_and_all), record_problem_text(TargetProblem::kPidsAndSystemWide));
  RecordOptions all_with_command;
  all_with_command.target.all_processes = true;
  all_with_command.target.command = {"true"};
  EXPECT_EQ(error_of(all_with_command), "");
}

}  // namespace
}  // namespace hpd
