// Privileged integration tests: the truth at the edges of a sample, against fixtures that know it.
// - The leaf of a sample is the instruction the thread was interrupted at when it was interrupted or
//   preempted (tests/fixtures/leaf_edge.c: a busy function whose first byte is sampled all the time,
//   laid out right after a function that never runs, preempted by a thread pinned to its CPU): its
//   on-CPU and its waiting-for-CPU samples give it its own CPU clock share, and none lands on the
//   function before it.
// - The CPU a thread uses after its last sample goes where it was, not to the last sample's stack
//   (tests/fixtures/exit_children.c: 200 forked processes, each burning 2 ms in one function after a
//   random warm-up and exiting).
// - `--pid` of a parent follows every child: those forked before the attach that still run, and those
//   forked after it (exit_children ... held: 100 children alive and waiting at the attach, then run
//   one at a time, and 100 forked one after the other), each with its pid in the profile, and the
//   function's CPU; with too few descriptors for all of their events, the note's count of children
//   left is what the profile lacks.
// - The exit stacks of programs that live two milliseconds, and a parent's wait in vfork, are whole:
//   locally, and through hpd for an unprivileged user the test makes (useradd).
// Recorded by hpctl into a capture (default flags: eBPF; then --backend perf), read back by `hpctl
// report --json` and `hpctl convert`.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_clock.h"
#include "firefox_lint.h"
#include "fixture_truth.h"
#include "hpd/base/proc_files.h"
#include "hpd_harness.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "test_user.h"

using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtures = HPD_FIXTURE_DIR;

// The row of function `name` in a report, or null.
const json* row_of(const json& report, const std::string& name) {
  for (const json& f : report.at("functions")) {
    if (f.at("name") == name) return &f;
  }
  return nullptr;
}

double number(const json* row, const char* key) {
  return row == nullptr ? 0.0 : row->at(key).get<double>();
}

class EdgeTruthTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  json report(const std::string& capture, const std::vector<std::string>& filter) {
    std::vector<std::string> args = {kHpctl, "report", capture, "--json", "--limit", "0"};
    args.insert(args.end(), filter.begin(), filter.end());
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? json::parse(r.out) : json::object();
  }

  // `waits`: the backend takes a stack when a thread is switched out (eBPF; perf_event's switch
  // records have none).
  void check_leaf(const std::vector<std::string>& flags, const std::string& what, bool waits_expected) {
    SCOPED_TRACE(what);
    const std::string capture = path(what + ".hpr");
    std::vector<std::string> record = {kHpctl, "record", "-o", capture, "--no-report"};
    record.insert(record.end(), flags.begin(), flags.end());
    record.insert(record.end(), {"--", kFixtures + "/leaf_edge", "1500"});
    const RunResult r = run(record);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const double tid = fixture_field(r.out, "leaf_edge: hot", "tid");
    const double hot_ns = fixture_field(r.out, "leaf_edge: hot", "hot_cpu_ns");
    const double thread_ns = fixture_field(r.out, "leaf_edge: hot", "thread_cpu_ns");
    ASSERT_GT(tid, 0) << r.out;
    ASSERT_GT(thread_ns, 0) << r.out;
    const double truth = 100.0 * hot_ns / thread_ns;

    // The Firefox export, sample by sample: the user leaf of each sample of the hot thread (its
    // innermost frame outside the kernel), and where in its function that frame's address lies.
    const std::string firefox = path(what + ".json.gz");
    const RunResult conv = run({kHpctl, "convert", capture, "-o", firefox});
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    const json profile = testing::load_json_maybe_gzip(firefox);
    for (const auto& problem : testing::lint_firefox_profile(profile)) ADD_FAILURE() << problem;
    const json& shared = profile.at("shared");
    const json& strings = shared.at("stringArray");
    const json& func_name = shared.at("funcTable").at("name");
    const json& func_resource = shared.at("funcTable").at("resource");
    const json& resource_lib = shared.at("resourceTable").at("lib");
    const json& frame_func = shared.at("frameTable").at("func");
    const json& frame_category = shared.at("frameTable").at("category");
    const json& frame_subcategory = shared.at("frameTable").at("subcategory");
    const json& frame_address = shared.at("frameTable").at("address");
    const json& frame_symbol = shared.at("frameTable").at("nativeSymbol");
    const json& symbol_address = shared.at("nativeSymbols").at("address");
    const json& symbol_size = shared.at("nativeSymbols").at("functionSize");
    const json& stack_frame = shared.at("stackTable").at("frame");
    const json& prefix_offset = shared.at("stackTable").at("prefixOffset");
    const json& libs = profile.at("libs");
    // Off-CPU samples end in the writer's leaf frame in Idle; a wait's has the subcategory "Waiting for
    // CPU" (docs/firefox-export.md).
    size_t idle_category = SIZE_MAX, waiting_subcategory = SIZE_MAX;
    const json& categories = profile.at("meta").at("categories");
    for (size_t c = 0; c < categories.size(); ++c) {
      if (categories[c].at("name") != "Idle") continue;
      idle_category = c;
      const json& subs = categories[c].at("subcategories");
      for (size_t k = 0; k < subs.size(); ++k) {
        if (subs[k] == "Waiting for CPU") waiting_subcategory = k;
      }
    }
    ASSERT_NE(idle_category, SIZE_MAX);
    ASSERT_NE(waiting_subcategory, SIZE_MAX);
    const auto in_kernel = [&](size_t frame) {
      const json& resource = func_resource[frame_func[frame].get<size_t>()];
      if (!resource.is_number() || resource.get<int64_t>() < 0) return false;
      const json& lib = resource_lib[resource.get<size_t>()];
      return lib.is_number() && libs[lib.get<size_t>()].at("name") == "[kernel.kallsyms]";
    };
    double on_all = 0, on_hot = 0, on_before = 0;
    size_t waits = 0, waits_hot = 0, waits_before = 0, hot_leaves = 0;
    for (const json& t : profile.at("threads")) {
      if (!t.at("tid").is_number() || t.at("tid").get<double>() != tid) continue;
      const json& samples = t.at("samples");
      for (size_t i = 0; i < samples.at("stack").size(); ++i) {
        const json& stack = samples.at("stack")[i];
        if (stack.is_null()) continue;
        size_t s = stack.get<size_t>();
        const size_t leaf = stack_frame[s].get<size_t>();
        const bool idle_leaf = frame_category[leaf].get<size_t>() == idle_category;
        const bool waiting = idle_leaf && frame_subcategory[leaf].get<size_t>() == waiting_subcategory;
        if (idle_leaf) {  // the writer's leaf: the sample's own stack is its prefix
          if (prefix_offset[s].get<size_t>() == 0) continue;
          s -= prefix_offset[s].get<size_t>();
        }
        // Waits are judged in hot_phase, where the thread spins: before it, the thread waits for its
        // CPU in the barrier and in pin_to_cpu a few times, wherever the CPU time goes (5 of 383 waits
        // there made hot_spin's share 1.03 points less than its CPU's, on a machine that preempted it less).
        bool in_phase = false;
        for (size_t up = s;; up -= prefix_offset[up].get<size_t>()) {
          const size_t f = stack_frame[up].get<size_t>();
          in_phase = in_phase || strings[func_name[frame_func[f].get<size_t>()].get<size_t>()] == "hot_phase";
          if (prefix_offset[up].get<size_t>() == 0) break;
        }
        if (waiting && !in_phase) continue;
        // Up from the leaf to the first frame outside the kernel.
        while (in_kernel(stack_frame[s].get<size_t>()) && prefix_offset[s].get<size_t>() != 0)
          s -= prefix_offset[s].get<size_t>();
        const auto frame = stack_frame[s].get<size_t>();
        const std::string name = strings[func_name[frame_func[frame].get<size_t>()].get<size_t>()];
        const double delta = samples.at("threadCPUDelta")[i].get<double>();
        if (waiting) {
          ++waits;
          waits_hot += name == "hot_spin";
          waits_before += name == "never_runs";
        } else {
          on_all += delta;
          on_hot += name == "hot_spin" ? delta : 0;
          on_before += name == "never_runs" ? delta : 0;
        }
        if (name != "hot_spin" || frame_symbol[frame].is_null()) continue;
        // No hot_spin leaf lies before its first byte (one byte back from it is never_runs).
        ++hot_leaves;
        const auto symbol = frame_symbol[frame].get<size_t>();
        const auto start = symbol_address[symbol].get<int64_t>();
        const auto address = frame_address[frame].get<int64_t>();
        EXPECT_GE(address, start) << "a hot_spin leaf before its first byte";
        if (symbol_size[symbol].is_number()) {
          EXPECT_LT(address, start + symbol_size[symbol].get<int64_t>());
        }
      }
    }
    const double on_share = 100.0 * on_hot / std::max(on_all, 1.0);
    const double wait_share =
        100.0 * static_cast<double>(waits_hot) / static_cast<double>(std::max<size_t>(waits, 1));
    std::printf(
        "%s: hot_spin truth %.2f%% of the thread's CPU; by user leaf: on-CPU %.2f%% of %.1f ms, waiting for "
        "CPU in hot_phase %.2f%% of %zu samples; never_runs %.1f ms on-CPU and %zu waiting samples\n",
        what.c_str(), truth, on_share, on_all / 1e6, wait_share, waits, on_before / 1e6, waits_before);
    EXPECT_GT(hot_leaves, 100u);
    EXPECT_NEAR(on_share, truth, 1.0);
    EXPECT_EQ(on_before, 0) << "CPU on a function that never runs";
    if (waits_expected) {
      // Preempted again and again by the hog: hundreds of samples waiting for a CPU in hot_phase.
      ASSERT_GT(waits, 100u) << "the hot thread hardly waited: the CPU was not shared";
      EXPECT_NEAR(wait_share, truth, 1.0);
      EXPECT_EQ(waits_before, 0u) << "waiting samples on a function that never runs";
    }
  }

  void check_exit_tail(const std::vector<std::string>& flags, const std::string& what) {
    SCOPED_TRACE(what);
    constexpr int kChildren = 200;
    // Forked, not exec'd: with the eBPF backend the first sample after an exec comes late (1.3-1.8 ms
    // of CPU after the one before it, where perf_event's comes after one period), and its CPU time,
    // the exec's included, goes to the function it lands in, 20% more than burn_child's own.
    const std::string capture = path(what + ".hpr");
    std::vector<std::string> record = {kHpctl, "record", "-o", capture, "--no-report"};
    record.insert(record.end(), flags.begin(), flags.end());
    record.insert(record.end(), {"--", kFixtures + "/exit_children", std::to_string(kChildren), "2000"});
    const double steal_before = host_steal_ns();
    const RunResult r = run(record);
    const double stolen_ns = host_steal_ns() - steal_before;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::set<int64_t> pids;
    const double truth_ns = children_truth(r.out, pids);
    ASSERT_EQ(pids.size(), static_cast<size_t>(kChildren)) << r.out;
    const json rep = report(capture, {});
    check_burn_child(rep, what, truth_ns, pids.size(), stolen_ns, StealSide::kBelow);
    // The tail is put on the stack where the thread exited, from do_exit down: not on the exit
    // tracepoint's frames in front of it, which are hpd's hook (they were, in every recording without
    // off-CPU samples: 38% of a --all recording's CPU beside a loop of `ls`). One tail per child would
    // be kChildren samples there; the timer samples that land in hpd's exit program itself (about 12 us
    // per exit, bpf_stats) are its real cost and stay, a few.
    double on_hook = 0;
    std::string hooks;
    for (const json& row : rep.at("functions")) {
      const std::string name = row.at("name").get<std::string>();
      if (name.rfind("__traceiter_", 0) != 0 && name.rfind("__bpf_trace_", 0) != 0 &&
          name.rfind("bpf_trace_run", 0) != 0)
        continue;
      const double self = row.at("self_samples").get<double>();
      on_hook += self;
      if (self > 0) hooks += " " + name;
    }
    EXPECT_LT(on_hook, kChildren / 10.0) << hooks;
    const json* do_exit = row_of(rep, "do_exit");
    ASSERT_NE(do_exit, nullptr) << "no exit stack reaches do_exit";
    EXPECT_GE(number(do_exit, "total_samples"), static_cast<double>(kChildren) / 2);
  }

  // The children's lines of exit_children in `out`: the sum of their burn_ns, and their pids.
  static double children_truth(const std::string& out, std::set<int64_t>& pids) {
    double truth_ns = 0;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      const double burned = fixture_field(line, "exit_children: child", "burn_ns");
      if (burned < 0) continue;
      truth_ns += burned;
      pids.insert(static_cast<int64_t>(fixture_field(line, "exit_children: child", "pid")));
    }
    return truth_ns;
  }

  // Which way the hypervisor's steal moves burn_child's CPU. perf_event's thread CPU is the task-clock
  // counter, which runs on while a thread's virtual CPU is stolen and the thread's CPU clock (the truth)
  // does not: above. eBPF's is the scheduler's runtime, without the steal, but its samples come by the
  // same timer: a child whose CPU ends in the tail (its burn, then exit, within three sampling
  // periods) has its second sample after two periods of the timer, which are two periods of CPU less
  // the steal in them, so burn_child keeps that much less, and its exit that much more: below.
  enum class StealSide { kAbove, kBelow };

  // burn_child's CPU in a capture's report against `truth_ns`, within 5%. `stolen_ns`: what the
  // hypervisor took from the machine's CPUs while the children burned, allowed on `side`.
  // `lost_records`: records the kernel dropped, each at most one sample of an interval.
  void check_burn_child(const json& rep, const std::string& what, double truth_ns, size_t children,
                        double stolen_ns, StealSide side, uint64_t lost_records = 0) {
    ASSERT_TRUE(rep.contains("functions"));
    const json* burn = row_of(rep, "burn_child");
    ASSERT_NE(burn, nullptr) << "burn_child not in the report";
    const double got_ns = number(burn, "total_cpu_ns");
    std::printf(
        "%s: burn_child truth %.1f ms in %zu children; hpd %.1f ms (%.1f%%), %.0f samples; host steal %.1f "
        "ms\n",
        what.c_str(), truth_ns / 1e6, children, got_ns / 1e6, 100.0 * got_ns / truth_ns,
        number(burn, "total_samples"), stolen_ns / 1e6);
    EXPECT_LE(got_ns, 1.05 * truth_ns + (side == StealSide::kAbove ? stolen_ns : 0));
    const double interval_ns = rep.at("totals").at("interval_ns").get<double>();
    EXPECT_GE(got_ns, 0.95 * truth_ns - static_cast<double>(lost_records) * interval_ns -
                          (side == StealSide::kBelow ? stolen_ns : 0));
  }

  // The processes of exit_children_nofp whose lines are in `out` (the children, 2 ms each) that `capture`
  // met (a loop beside a recording runs before and after it): their samples reach _start, and each has an
  // exit stack that does. An exit stack goes through `_Exit`, the call that exits; below it the kernel's
  // do_exit, when the kernel's frames are given.
  void check_exit_stacks(const std::string& capture, const std::string& out, const std::string& what) {
    SCOPED_TRACE(what);
    std::set<int64_t> pids;
    children_truth(read_text_file(out), pids);
    const std::string collapsed = capture + ".collapsed";
    const RunResult conv = run({kHpctl, "convert", capture, "-o", collapsed, "--per-process"});
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    // "exit_children_n (PID);_start;__libc_start_main;...;do_exit N": the process's samples, root first.
    double samples = 0, whole = 0, exits = 0, exits_whole = 0;
    std::set<int64_t> met;
    std::istringstream lines(read_text_file(collapsed));
    for (std::string line; std::getline(lines, line);) {
      const size_t open = line.find(" ("), close = line.find(')');
      const size_t count_at = line.rfind(' ');
      if (open == std::string::npos || close == std::string::npos || close > count_at) continue;
      const int64_t pid = std::stoll(line.substr(open + 2, close - open - 2));
      if (pids.count(pid) == 0) continue;
      met.insert(pid);
      const double n = std::stod(line.substr(count_at + 1));
      const std::string stack = line.substr(0, count_at);
      const bool reaches_root = stack.find(";_start;__libc_start_main;") != std::string::npos;
      samples += n;
      whole += reaches_root ? n : 0;
      if (stack.find(";_Exit;") != std::string::npos || stack.ends_with(";_Exit")) {
        exits += n;
        exits_whole += reaches_root ? n : 0;
      }
    }
    std::printf(
        "%s: %zu of %zu processes of exit_children_nofp met: %.0f samples, %.1f%% reach _start; %.0f exit "
        "stacks, %.1f%% reach _start\n",
        what.c_str(), met.size(), pids.size(), samples, 100 * whole / std::max(samples, 1.0), exits,
        100 * exits_whole / std::max(exits, 1.0));
    ASSERT_GE(met.size(), 20u) << "the loop hardly ran, or the recording met few of its processes";
    // One exit stack per process recorded whole (the first and the last may be cut by the recording's ends).
    EXPECT_GE(exits, 0.8 * static_cast<double>(met.size()));
    EXPECT_GE(exits_whole, 0.85 * exits);
    EXPECT_GE(whole, 0.9 * samples);
  }

  // vfork_wait's parent (its line in `out`: pid, and the time it was blocked in vfork by its clock) in
  // `capture`: its wall time in vfork is that time, and reaches its caller.
  void check_vfork_wait(const std::string& capture, const std::string& out, const std::string& what) {
    SCOPED_TRACE(what);
    const double pid = fixture_field(out, "vfork_wait:", "pid");
    const double blocked_ns = fixture_field(out, "vfork_wait:", "blocked_ns");
    ASSERT_GT(pid, 0) << out;
    ASSERT_GT(blocked_ns, 0) << out;
    const std::string collapsed = capture + ".collapsed";
    const RunResult conv =
        run({kHpctl, "convert", capture, "-o", collapsed, "--weight", "wall", "--per-process"});
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    // The parent's wall time in vfork (the children, until their exec, share its stack and run spawn_child
    // too: they are other processes).
    const std::string parent = "vfork_wait (" + std::to_string(static_cast<int64_t>(pid)) + ");";
    double in_vfork = 0, in_caller = 0;
    std::istringstream lines(read_text_file(collapsed));
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(parent, 0) != 0) continue;
      // vfork, then the kernel's frames when they are given, or nothing (the leaf).
      const std::string stack = line.substr(0, line.rfind(' '));
      const size_t at = stack.find(";vfork");
      if (at == std::string::npos || (at + 6 != stack.size() && stack[at + 6] != ';')) continue;
      const double ns = std::stod(line.substr(line.rfind(' ') + 1));
      in_vfork += ns;
      if (stack.find(";main;spawn_child;vfork") != std::string::npos) in_caller += ns;
    }
    std::printf(
        "%s: vfork_wait blocked %.1f ms in vfork by its clock; hpd %.1f ms in vfork, %.1f%% of it under "
        "main;spawn_child\n",
        what.c_str(), blocked_ns / 1e6, in_vfork / 1e6, 100 * in_caller / std::max(in_vfork, 1.0));
    EXPECT_NEAR(in_vfork, blocked_ns, 0.1 * blocked_ns);
    EXPECT_GE(in_caller, 0.95 * in_vfork);
  }

  // `hpctl record --pid` of exit_children ... held, attached while half of its children are alive and
  // waiting; the go-ahead once the recording started: with perf_event, once hpctl holds an event per CPU
  // for every thread of the parent and of those children (or, when it never does, after a while, so that
  // the profile says what it missed); with eBPF, once hpctl marks its start (HPD_TIMING's "started",
  // written after the children it found were made targets).
  // `fd_limit` (0: none): hpctl runs under prlimit --nofile with it; it then leaves the children whose
  // events would take the last 256 descriptors (kReservedDescriptors), says how many, and the others
  // are recorded.
  void check_pid_children(const std::vector<std::string>& flags, const std::string& what,
                          size_t fd_limit = 0) {
    SCOPED_TRACE(what);
    constexpr int kChildren = 200;
    const std::string out = path(what + ".out");
    const std::string capture = path(what + ".hpr");
    BackgroundOptions launch;
    launch.ready_line = "ready";
    launch.stdin_pipe = true;
    Background parent({kFixtures + "/exit_children", std::to_string(kChildren), "2000", "held", out}, launch);
    ASSERT_TRUE(parent.ready());
    const std::string err = path(what + ".record.err");
    std::vector<std::string> record = {"/bin/sh", "-c", "exec \"$@\" 2>" + err, "sh"};
    if (fd_limit != 0)
      record.insert(record.end(),
                    {"prlimit", "--nofile=" + std::to_string(fd_limit) + ":" + std::to_string(fd_limit)});
    const bool perf = std::find(flags.begin(), flags.end(), "perf") != flags.end();
    if (!perf) record.insert(record.end(), {"env", "HPD_TIMING=1"});
    record.insert(record.end(), {kHpctl, "--local", "record", "--pid", std::to_string(parent.pid()), "-o",
                                 capture, "--no-report"});
    record.insert(record.end(), flags.begin(), flags.end());
    BackgroundOptions quiet;
    quiet.stdout_path = path(what + ".record.out");
    Background recorder(record, quiet);
    const auto cpus = static_cast<size_t>(::sysconf(_SC_NPROCESSORS_ONLN));
    const size_t events = cpus * (1 + kChildren / 2);
    const auto descriptors = [](pid_t pid) {
      size_t n = 0;
      std::error_code ec;
      for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
           !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++n;
      return n;
    };
    // With a limit, the attach ends where one more child's events would enter the reserve.
    const auto attach_done = [&] {
      const size_t held = perf_events_held(recorder.pid());
      return held >= events ||
             (fd_limit != 0 && held >= cpus && descriptors(recorder.pid()) + 256 + cpus > fd_limit);
    };
    const auto started = [&] { return read_text_file(err).find("hpd-timing started ") != std::string::npos; };
    const bool attached = wait_until(
        [&] { return (perf ? attach_done() : started()) || !process_running(recorder.pid()); }, 30);
    if (perf) {
      EXPECT_TRUE(attached && process_running(recorder.pid()))
          << "hpctl holds " << perf_events_held(recorder.pid()) << " perf events, not one per CPU for the "
          << "parent and each of its " << kChildren / 2 << " children (" << events << ")";
    } else {
      EXPECT_TRUE(attached && process_running(recorder.pid())) << read_text_file(err);
    }
    const double steal_before = host_steal_ns();  // the children burn after the go-ahead
    ASSERT_TRUE(parent.send("x"));
    ASSERT_EQ(parent.wait(), 0);
    ASSERT_EQ(recorder.wait(), 0) << read_text_file(err);
    const double stolen_ns = host_steal_ns() - steal_before;

    std::set<int64_t> pids;
    const double truth_ns = children_truth(read_text_file(out), pids);
    ASSERT_EQ(pids.size(), static_cast<size_t>(kChildren));
    const json rep = report(capture, {});
    ASSERT_TRUE(rep.contains("totals"));
    std::set<int64_t> seen;
    for (const json& t : rep.at("totals").at("time_by_thread")) {
      const auto pid = t.at("pid").get<int64_t>();
      if (pids.contains(pid) && t.at("samples").get<double>() > 0) seen.insert(pid);
    }
    std::printf("%s: %zu of %d children with samples in the profile\n", what.c_str(), seen.size(), kChildren);
    if (fd_limit == 0) {
      // Every child is in the profile, but for what the kernel dropped from a full ring (a reader that
      // fell behind on a loaded machine): the report counts it, and each child without samples says
      // its samples may be among those records.
      const auto lost = rep.at("totals").at("lost").at("lost_records").get<uint64_t>();
      EXPECT_LE(static_cast<size_t>(kChildren) - seen.size(), lost)
          << seen.size() << " of " << kChildren << " children have samples";
      for (const json& u : rep.at("totals").at("unsampled_threads")) {
        if (!pids.contains(u.at("pid").get<int64_t>())) continue;
        EXPECT_NE(u.at("why").get<std::string>().find("lost when the ring was full"), std::string::npos)
            << u.dump();
      }
      check_burn_child(rep, what, truth_ns, pids.size(), stolen_ns,
                       perf ? StealSide::kAbove : StealSide::kBelow, lost);
      return;
    }
    // The note says how many of the children alive at the attach were left; the others and every
    // child forked after it are in the profile.
    const std::string said = read_text_file(err);
    const size_t at =
        said.find(" or more child processes the targets had when the recording began were not recorded");
    ASSERT_NE(at, std::string::npos) << said;
    const size_t n = std::strtoul(said.c_str() + said.rfind(' ', at - 1) + 1, nullptr, 10);
    std::printf("%s: the note says %zu children were left\n", what.c_str(), n);
    EXPECT_GT(n, 0u);
    EXPECT_LT(n, static_cast<size_t>(kChildren / 2));
    // But for what the kernel dropped from a full ring, as above (2026-12-04 on an idle machine, dwarf's
    // 32 KiB stack copies: 15 records lost, 161 children with samples of the 166 recorded).
    const auto lost = rep.at("totals").at("lost").at("lost_records").get<uint64_t>();
    EXPECT_LE(seen.size(), static_cast<size_t>(kChildren) - n);
    EXPECT_GE(seen.size() + lost, static_cast<size_t>(kChildren) - n) << lost << " records lost";
  }

  hpd::testing::TempDir tmp_{"hpd-edge-truth", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const std::filesystem::path dir_{tmp_.path()};
};

TEST_F(EdgeTruthTest, PreemptedLeafIsTheInterruptedInstruction) {
  check_leaf({}, "default", true);
}

TEST_F(EdgeTruthTest, PreemptedLeafIsTheInterruptedInstructionPerf) {
  check_leaf({"--backend", "perf", "--off-cpu"}, "perf", false);
}

TEST_F(EdgeTruthTest, CpuAfterTheLastSampleGoesWhereTheThreadWas) {
  check_exit_tail({}, "default");
}

// Without off-CPU samples (as --all records by default) the kernel's symbols are read at the start all
// the same: the exit stacks' tracepoint frames are known and left out.
TEST_F(EdgeTruthTest, CpuAfterTheLastSampleGoesWhereTheThreadWasWithoutOffCpu) {
  check_exit_tail({"--no-off-cpu"}, "no-off-cpu");
}

// A recording of the whole machine beside a program that lives two milliseconds, started again and again
// (a build, a shell script): built as users build it (-O2 -g, no frame pointers, over Debian's libc), each
// process's stacks are whole only when walked with its tables, which are still being put in place for it
// when it exits. Its exit stack (where the CPU after its last sample goes) is walked again with them, as
// its on-CPU samples are, and the samples taken in its exit once its memory is being released (which no
// walk can read) have its exit stack's user part: before, 5% of the exit stacks reached _start (the rest
// were `_Exit` alone: the exit program took no copy of the stack) and 72% of the processes' samples; with
// the second walk 92% and 97%; with both 97-100% and 97-99%, on a quiet machine.
TEST_F(EdgeTruthTest, ExitStacksOfShortLivedProgramsAreWalkedWithTheirTables) {
  const std::string out = path("short.out");
  const std::string stop = path("short.stop");
  // The program's tables in the unwind-table cache first, as a machine that ran it before has them: what
  // is measured is the wait for each new process's tables, not for their compilation, which on a
  // loaded machine with a cold cache may outlast the recording (a gap of its own: docs/architecture.md).
  const RunResult warm = run({kHpctl, "record", "-q", "-o", path("warm.hpr"), "--no-report", "--",
                              kFixtures + "/exit_children_nofp", "1", "2000"});
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  Background loop({"/bin/sh", "-c", "while [ ! -e \"$1\" ]; do \"$2\" 1 2000 >> \"$3\" || exit 1; done", "sh",
                   stop, kFixtures + "/exit_children_nofp", out});
  // The loop's first process has run: the recording meets it at full speed.
  while (read_text_file(out).empty()) ::usleep(10'000);
  const std::string capture = path("short.hpr");
  const RunResult r = run({kHpctl, "record", "--all", "-d", "3", "-o", capture, "--no-report"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  { std::ofstream touch(stop); }
  EXPECT_EQ(loop.wait(), 0) << "a child of the loop failed";
  check_exit_stacks(capture, out, "--all");
}

// A parent blocked in vfork while its child readies itself (a shell, make, posix_spawn's callers of old):
// glibc's vfork pops its return address into rdi across the system call, a rule the rows once called
// unsupported, so every stack of that wait was `vfork` alone (0% of the time in its caller, default
// flags). The rows now say so, and the programs' walk and the second walks take rdi from the sampled
// frame: its wall time in vfork reaches spawn_child and main.
TEST_F(EdgeTruthTest, TimeBlockedInVforkIsInItsCaller) {
  const std::string capture = path("vfork.hpr");
  const RunResult r =
      run({kHpctl, "record", "-o", capture, "--no-report", "--", kFixtures + "/vfork_wait", "40", "20"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  check_vfork_wait(capture, r.out, "local");
}

// A static executable built as users build one (-O2 -g -static) has no .eh_frame_hdr: its .eh_frame is read
// entry after entry (it was walked by frame pointer, and without frame pointers no stack of it was whole).
// When it execs another static program, loaded at the same address with other code and other rows there,
// the new image's samples are walked with its own rows even when the recorder falls behind the exec (here
// stopped while it happens): the kernel's copy of the old image's mappings goes at the exec, and the samples
// are walked again once the new image is published. Before, every sample the new image took before the
// recorder saw its exec was walked with the old image's rows, into frames that never were (half of these).
TEST_F(EdgeTruthTest, StaticExecutablesAndExecsBetweenThemAreWalkedWithTheirOwnRows) {
  const std::string a = kFixtures + "/exec_static_a", b = kFixtures + "/exec_static_b";
  const std::string capture = path("static.hpr");
  BackgroundOptions options;
  options.ready_line = "exec_static: ready";
  options.stdin_pipe = true;
  // Each image's: at 999 Hz about 12 samples. The new image's are taken while hpctl is stopped, each with
  // a 16 KiB copy of its stack, which the ring (1 MiB at 999 Hz) keeps while it is less than half full.
  constexpr int kSpinMs = 12;
  Background recorder(
      {kHpctl, "record", "-o", capture, "--no-report", "--", a, "1", std::to_string(kSpinMs), b, a, "hold"},
      options);
  ASSERT_TRUE(recorder.ready()) << "exec_static_a did not start";
  // The program is hpctl's child; it exits while hpctl is stopped, and stays a zombie until hpctl goes on.
  const std::vector<int32_t> children = list_child_processes(recorder.pid());
  ASSERT_FALSE(children.empty()) << "no child of hpctl " << recorder.pid();
  const pid_t program = children.front();
  ASSERT_EQ(::kill(recorder.pid(), SIGSTOP), 0);
  ASSERT_TRUE(recorder.send("x"));
  for (int i = 0; i < 60'000 && read_process_state(program) != 'Z'; ++i) ::usleep(1'000);
  const char last = read_process_state(program);
  ::kill(recorder.pid(), SIGCONT);
  ASSERT_EQ(last, 'Z') << "exec_static_b did not finish within a minute";
  ASSERT_EQ(recorder.wait(), 0);

  const std::string collapsed = path("static.collapsed");
  const RunResult conv = run({kHpctl, "convert", capture, "-o", collapsed});
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  // The samples in spin (and below it: clock_gettime, the vDSO, the kernel), whole only as
  // _start;__libc_start_main;__libc_start_call_main;main;work_outer;work_inner;spin.
  const std::string whole_prefix =
      "_start;__libc_start_main;__libc_start_call_main;main;work_outer;work_inner;spin";
  double in_spin = 0, whole = 0;
  std::string wrong;
  std::istringstream lines(read_text_file(collapsed));
  for (std::string line; std::getline(lines, line);) {
    const std::string stack = ";" + line.substr(0, line.rfind(' ')) + ";";
    if (stack.find(";spin;") == std::string::npos) continue;
    const double n = std::stod(line.substr(line.rfind(' ') + 1));
    in_spin += n;
    const bool ok = line.rfind(whole_prefix + ";", 0) == 0 || line.rfind(whole_prefix + " ", 0) == 0;
    whole += ok ? n : 0;
    if (!ok && wrong.size() < 2000) wrong += line + "\n";
  }
  std::printf("exec_static a -> b: %.0f samples in spin, %.1f%% whole\n", in_spin,
              100 * whole / std::max(in_spin, 1.0));
  // Both images' (a's alone would be half).
  EXPECT_GE(in_spin, 2 * kSpinMs * 0.8);
  EXPECT_GE(whole, 0.95 * in_spin) << "stacks in spin that are not main's chain:\n" << wrong;
}

// The same two edges recorded by hpd for an unprivileged user of the machine (made by the test), who
// launches the programs through it: hpd walks her processes' exit stacks and vfork waits again with their
// tables, as a local recording does, from the copies of her stacks its programs took.
class EdgeTruthAsUser : public EdgeTruthTest {
 protected:
  static void SetUpTestSuite() { user_ = make_test_user("hpdtest-edge-" + std::to_string(::getpid())); }
  static void TearDownTestSuite() { remove_test_user(user_); }
  // `hpctl record ARGS` as the user, through `hpd`.
  static std::vector<std::string> record_as_user(const Hpd& hpd, std::vector<std::string> args) {
    std::vector<std::string> argv = {kHpctl, "--socket", hpd.socket(), "--daemon", "record"};
    argv.insert(argv.end(), args.begin(), args.end());
    return user_.run_as(std::move(argv));
  }
  static TestUser user_;
};

TestUser EdgeTruthAsUser::user_;

// 40 processes of exit_children_nofp one after the other, the children of her shell: what hpd follows
// for her (she may not record the whole machine). Her first recording puts the program's tables in hpd's
// keeping, as the local test's warm-up puts them in the cache on disk.
TEST_F(EdgeTruthAsUser, ExitStacksOfShortLivedProgramsAreWalkedWithTheirTables) {
  Hpd hpd;
  const std::string program = kFixtures + "/exit_children_nofp";
  const RunResult warm = run(record_as_user(
      hpd, {"-q", "-o", hpd.out_dir() + "/warm.hpr", "--no-report", "--", program, "1", "2000"}));
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  const std::string out = hpd.out_dir() + "/short.out";
  const std::string capture = hpd.out_dir() + "/short.hpr";
  const RunResult r = run(record_as_user(
      hpd, {"-o", capture, "--no-report", "--", "/bin/sh", "-c",
            "i=0; while [ $i -lt 40 ]; do \"$1\" 1 2000 >> \"$2\" || exit 1; i=$((i + 1)); done", "sh",
            program, out}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("recorded by hpd"), std::string::npos) << r.err;
  check_exit_stacks(capture, out, "hpd, as a user");
}

TEST_F(EdgeTruthAsUser, TimeBlockedInVforkIsInItsCaller) {
  Hpd hpd;
  const std::string capture = hpd.out_dir() + "/vfork.hpr";
  const RunResult r =
      run(record_as_user(hpd, {"-o", capture, "--no-report", "--", kFixtures + "/vfork_wait", "40", "20"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("recorded by hpd"), std::string::npos) << r.err;
  check_vfork_wait(capture, r.out, "hpd, as a user");
}

// `--pid` with default flags (eBPF, cfi): the children alive at the attach are found and made targets.
TEST_F(EdgeTruthTest, PidFollowsChildrenForkedBeforeAndAfterTheAttach) {
  check_pid_children({}, "pid-bpf");
}

// `--pid` with the perf backend, default flags (dwarf here) and frame pointers.
TEST_F(EdgeTruthTest, PidFollowsChildrenForkedBeforeAndAfterTheAttachPerf) {
  check_pid_children({"--backend", "perf"}, "pid-perf");
}

TEST_F(EdgeTruthTest, PidFollowsChildrenForkedBeforeAndAfterTheAttachPerfFp) {
  check_pid_children({"--backend", "perf", "--call-graph", "fp"}, "pid-perf-fp");
}

// Too few descriptors for the events of every child alive at the attach: the recording goes on, and
// the note's count of children left is what the profile lacks.
TEST_F(EdgeTruthTest, PidWithTooFewDescriptorsForItsChildrenSaysHowManyItLeft) {
  if (!have_tool("prlimit")) GTEST_SKIP() << "prlimit (util-linux) is not installed";
  // A child takes a descriptor per CPU (its mmap watch) and two per thread (its sampling event).
  const auto cpus = static_cast<size_t>(::sysconf(_SC_NPROCESSORS_ONLN));
  check_pid_children({}, "pid-bpf-limit", 400 + 4 * cpus);
}

TEST_F(EdgeTruthTest, PidWithTooFewDescriptorsForItsChildrenSaysHowManyItLeftPerf) {
  if (!have_tool("prlimit")) GTEST_SKIP() << "prlimit (util-linux) is not installed";
  check_pid_children({"--backend", "perf"}, "pid-perf-limit", 400);
}

// Not with --backend perf: perf_event takes no sample at a thread's exit, so the CPU after a thread's
// last sample is not recorded there (lost, not given to an older stack); 200 children of 2 ms gave
// 92.9-101% of the truth between runs. Issue #33 keeps it open.

}  // namespace
}  // namespace hpd::test
