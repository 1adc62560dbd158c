// Privileged integration tests: hpctl records real fixture programs through the real kernel's
// perf_event, and the written profiles are checked for structure and for the known CPU split.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cpu_clock.h"
#include "firefox_lint.h"
#include "fixture_truth.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtures = HPD_FIXTURE_DIR;

// Parameterized by the recording backend: every test runs through perf_event and through eBPF.
class RecordTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fs::permissions(dir_, fs::perms::all);  // the unprivileged-user test writes here too
  }
  static std::string test_name() {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) c = c == '/' ? '-' : c;
    return name;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // `hpctl record --backend B` followed by `args`.
  std::vector<std::string> record(std::vector<std::string> args) const {
    std::vector<std::string> argv{kHpctl, "record", "--backend", GetParam()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // Loads, lints and returns a written Firefox profile; lint problems fail the test.
  json load_profile(const std::string& file) {
    json profile = testing::load_json_maybe_gzip(file);
    const auto problems = testing::lint_firefox_profile(profile);
    for (const auto& p : problems) ADD_FAILURE() << file << ": " << p;
    return profile;
  }

  // `hpctl report --json --limit 0 FILE`, parsed.
  json report(const std::string& file) {
    RunResult r = run({kHpctl, "report", "--json", "--limit", "0", file});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  }

  // Kept when the test fails: its recordings and logs are what to look at.
  hpd::testing::TempDir tmp_{"hpd-it-" + test_name(), hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
};

// One function's row in the JSON report, or a null json when absent.
json function_row(const json& report, const std::string& name) {
  for (const auto& f : report.at("functions")) {
    if (f.at("name").get<std::string>() == name) return f;
  }
  return json();
}

double self_percent(const json& report, const std::string& name) {
  json row = function_row(report, name);
  return row.is_null() ? 0.0 : row.at("self_percent").get<double>();
}

double total_percent(const json& report, const std::string& name) {
  json row = function_row(report, name);
  return row.is_null() ? 0.0 : row.at("total_percent").get<double>();
}

// Samples of the thread with this name in a Firefox profile.
size_t thread_samples(const json& profile, const std::string& name) {
  for (const auto& t : profile.at("threads")) {
    if (t.at("name").get<std::string>() == name) return t.at("samples").at("length").get<size_t>();
  }
  return 0;
}

// Whether any sample of the named thread has a frame whose function is `func`.
bool thread_has_function(const json& profile, const std::string& thread, const std::string& func) {
  const auto& shared = profile.at("shared");
  const auto& strings = shared.at("stringArray");
  const auto& stack_frame = shared.at("stackTable").at("frame");
  const auto& prefix_offset = shared.at("stackTable").at("prefixOffset");
  const auto& frame_func = shared.at("frameTable").at("func");
  const auto& func_name = shared.at("funcTable").at("name");
  for (const auto& t : profile.at("threads")) {
    if (t.at("name").get<std::string>() != thread) continue;
    for (const auto& s : t.at("samples").at("stack")) {
      if (s.is_null()) continue;
      for (int64_t i = s.get<int64_t>();;) {
        const auto f = frame_func[stack_frame[i].get<size_t>()].get<size_t>();
        if (strings[func_name[f].get<size_t>()].get<std::string>() == func) return true;
        const auto off = prefix_offset[i].get<int64_t>();
        if (off == 0) break;
        i -= off;
      }
    }
  }
  return false;
}

// The shares the tests hold cpu_split's leaves to (30/20/40/10) are those of its construction: checked
// here on this machine, each leaf's calls timed in batches on the thread's own CPU clock.
TEST(CpuSplitFixture, ItsLeavesSplitTheCpuAsConstructed) {
  RunResult r = run({kFixtures + "/cpu_split", "--measure", "3000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::printf("%s", r.out.c_str());
  const std::map<std::string, double> constructed{
      {"leaf_a", 30}, {"leaf_b", 20}, {"leaf_c", 40}, {"leaf_d", 10}};
  for (const auto& [leaf, share] : constructed) {
    const double measured = fixture_field(r.out, "cpu_split:", leaf);
    ASSERT_GE(measured, 0) << leaf << " in " << r.out;
    // Measured here (2026-12-03): within 0.2 points of the construction in 16 runs beside the README's
    // test command (a sum of the batches instead of their median: up to 0.72).
    EXPECT_NEAR(measured, share, 1.0) << leaf;
  }
}

TEST_P(RecordTest, LaunchedCommandHasTheKnownCpuSplit) {
  const std::string out = path("cpu.json.gz");
  // Fixed work (about 2.5 s of CPU), so the sample count does not depend on how busy the machine is.
  const double steal_before = host_steal_ns();
  RunResult r = run(record(
      {"-F", "999", "-o", out, "--no-report", "-q", "--", kFixtures + "/cpu_split", "--rounds", "10000"}));
  const double stolen_s = (host_steal_ns() - steal_before) / 1e9;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(out));
  json profile = load_profile(out);
  json rep = report(out);

  const double samples = rep.at("totals").at("samples").get<double>();
  EXPECT_GT(samples, 1000) << "about 2.5 s of CPU at 999 Hz expected";
  // Exclusive shares by construction: 30/20/40/10 (CpuSplitFixture checks them on this machine; the
  // tolerance is for sampling noise and the loop's overhead).
  EXPECT_NEAR(self_percent(rep, "leaf_a"), 30, 5);
  EXPECT_NEAR(self_percent(rep, "leaf_b"), 20, 5);
  EXPECT_NEAR(self_percent(rep, "leaf_c"), 40, 5);
  EXPECT_NEAR(self_percent(rep, "leaf_d"), 10, 4);
  // Inclusive shares of the callers.
  EXPECT_NEAR(total_percent(rep, "parent_ab"), 50, 6);
  EXPECT_GT(total_percent(rep, "run_round"), 93);
  EXPECT_GT(total_percent(rep, "main"), 93);
  // CPU time from the per-sample thread CPU deltas against the CPU time the fixture measured itself
  // (CLOCK_PROCESS_CPUTIME_ID; the machine may be loaded, so wall time is no reference).
  const double cpu_s = rep.at("totals").at("cpu_ns").get<double>() / 1e9;
  const auto at = r.out.find("cpu ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double fixture_cpu_s = std::stod(r.out.substr(at + 4));
  std::printf("profile CPU %.3f s, fixture's clock %.3f s, host steal %.3f s\n", cpu_s, fixture_cpu_s,
              stolen_s);
  // perf_event's thread CPU is its task-clock counter, which runs on while the hypervisor has the
  // thread's virtual CPU (its CPU clock does not): ahead by up to the steal. eBPF's is the scheduler's
  // runtime, which leaves the steal out as the clock does.
  const double tolerance_s = 0.05 * fixture_cpu_s + 0.02;
  EXPECT_LE(cpu_s, fixture_cpu_s + tolerance_s + (GetParam() == "perf" ? stolen_s : 0));
  EXPECT_GE(cpu_s, fixture_cpu_s - tolerance_s);
  // The main thread's samples carry CPU deltas in the profile itself.
  const auto& t0 = profile.at("threads").at(0);
  EXPECT_EQ(t0.at("samples").at("threadCPUDelta").size(), t0.at("samples").at("length").get<size_t>());
}

TEST_P(RecordTest, AttachByPidSeesAThreadStartedLater) {
  // In CPU time: the late worker starts once the main thread used 1 s (hpctl attaches with a fraction
  // of that CPU, and the machine shares its CPUs alike), then spins 1 s of its own. The recording
  // ends when the target exits (--duration is only a cap).
  Background target({kFixtures + "/threads", "2", "1"});
  ASSERT_TRUE(wait_for_cpu(target.pid(), 0.02)) << "the fixture did not start";
  const std::string out = path("threads.json");
  RunResult r = run(
      record({"--pid", std::to_string(target.pid()), "--duration", "120", "-o", out, "--no-report", "-q"}),
      180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json profile = load_profile(out);
  EXPECT_GT(thread_samples(profile, "late-worker"), 300u);
  EXPECT_TRUE(thread_has_function(profile, "late-worker", "late_thread_spin"));
  EXPECT_TRUE(thread_has_function(profile, "threads", "main_thread_spin"));
  EXPECT_EQ(target.wait(), 0);
}

TEST_P(RecordTest, TargetExitingMidRecordingStillGivesACompleteProfile) {
  Background target({kFixtures + "/cpu_split", "--rounds", "6000"});  // about 1.5 s of CPU
  const std::string out = path("exit.json.gz");
  const auto start = std::chrono::steady_clock::now();
  RunResult r = run(
      record({"--pid", std::to_string(target.pid()), "--duration", "120", "-o", out, "-q", "--no-report"}));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(took, 90) << "the recording should end when the target exits, not at --duration";
  json profile = load_profile(out);
  json rep = report(out);
  EXPECT_GT(rep.at("totals").at("samples").get<double>(), 200);
  EXPECT_GT(total_percent(rep, "run_round"), 80);
}

TEST_P(RecordTest, CtrlCEndsTheRecordingAndWritesTheProfile) {
  Background target({kFixtures + "/cpu_split", "600"});  // killed at the end
  const std::string out = path("sigint.json.gz");
  Background recorder(record({"--pid", std::to_string(target.pid()), "-o", out, "-q", "--no-report"}));
  // The recorder is attaching once it holds perf_event descriptors (the eBPF backend opens its mmap
  // watch before its sampling events): then 1 s of the target's CPU time, most of it sampled.
  ASSERT_TRUE(wait_until([&] { return holds_perf_event(recorder.pid()); })) << "the recorder never attached";
  const double attaching_cpu = process_cpu_seconds(target.pid());
  ASSERT_TRUE(wait_for_cpu(target.pid(), attaching_cpu + 1.0));
  kill(recorder.pid(), SIGINT);
  EXPECT_EQ(recorder.wait(), 0);
  json profile = load_profile(out);
  EXPECT_GT(thread_samples(profile, "cpu_split"), 100u);
}

TEST_P(RecordTest, RecordPrintsTheReport) {
  const std::string out = path("printed.json.gz");
  RunResult r = run(record({"-o", out, "--", kFixtures + "/cpu_split", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("leaf_c"), std::string::npos) << r.out;
  // Not a terminal: whole names, never cut with an ellipsis (hpctl report --width fits a terminal).
  EXPECT_EQ(r.out.find("\xE2\x80\xA6"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("wrote"), std::string::npos) << r.err;
}

// Every function name of a Firefox profile.
std::vector<std::string> function_names(const json& profile) {
  const auto& strings = profile.at("shared").at("stringArray");
  std::vector<std::string> out;
  for (const auto& n : profile.at("shared").at("funcTable").at("name"))
    out.push_back(strings[n.get<size_t>()]);
  return out;
}

// The vDSO named from the image the process mapped: a clock-reading loop spends most of its CPU
// time in clock_gettime, which must show by name (no "[vdso]+0x..." frames) in the Firefox
// profile, in the report, and in a .hpr capture converted afterwards. Names carry no ELF versions.
TEST_P(RecordTest, VdsoFunctionsAreNamed) {
  const std::string fixture = kFixtures + "/clock_reader";
  const auto check = [&](const std::string& firefox, const std::string& what) {
    SCOPED_TRACE(what);
    const json profile = load_profile(firefox);
    bool named = false;
    for (const std::string& name : function_names(profile)) {
      EXPECT_EQ(name.find("[vdso]+0x"), std::string::npos) << name;
      EXPECT_EQ(name.find("@GLIBC"), std::string::npos) << name;
      named = named || name == "__vdso_clock_gettime" || name == "clock_gettime";
    }
    EXPECT_TRUE(named);
    const json rep = report(firefox);
    const double self =
        std::max(self_percent(rep, "__vdso_clock_gettime"), self_percent(rep, "clock_gettime"));
    // The loop does nothing but read the clock: most of its on-CPU samples are in the vDSO (93% here).
    EXPECT_GT(self, 40.0) << rep.dump();
    for (const auto& f : rep.at("functions")) {
      EXPECT_EQ(f.at("name").get<std::string>().find("[vdso]"), std::string::npos) << f.dump();
    }
  };
  const std::string direct = path("clock.json.gz");
  RunResult r = run(record({"-o", direct, "--", fixture}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  check(direct, "recorded to Firefox");
  const std::string capture = path("clock.hpr");
  r = run(record({"-o", capture, "--", fixture}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string converted = path("converted.json");
  r = run({kHpctl, "convert", capture, "-o", converted});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("[vdso]"), std::string::npos) << r.err;  // not among the missing modules
  check(converted, "captured, then converted");
  const json rep = report(capture);
  EXPECT_GT(std::max(self_percent(rep, "__vdso_clock_gettime"), self_percent(rep, "clock_gettime")), 40.0);
}

TEST_P(RecordTest, MissingPidIsAClearError) {
  const std::string out = path("none.json.gz");
  // pid_max is at most 4194304, so this pid cannot exist.
  RunResult r = run(record({"--pid", "4194305", "-o", out, "--duration", "1"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no process with pid 4194305"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_P(RecordTest, UnwritableOutputIsRefusedBeforeRecording) {
  const auto start = std::chrono::steady_clock::now();
  RunResult r = run(record({"-o", path("no/such/dir/out.json.gz"), "--", kFixtures + "/cpu_split", "5"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot write"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 4)
      << "the command must not have been run";

  r = run(record({"-o", dir_.string(), "--", kFixtures + "/cpu_split", "5"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
}

TEST_P(RecordTest, AbsurdFrequenciesAreRefused) {
  for (const char* f : {"0", "1000000"}) {
    const std::string out = path(std::string("f") + f + ".json");
    RunResult r = run(record({"-F", f, "-o", out, "--", kFixtures + "/cpu_split", "1"}));
    EXPECT_NE(r.exit_code, 0) << f;
    EXPECT_NE(r.err.find("frequency"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST_P(RecordTest, CommandThatCannotRunIsAClearError) {
  const std::string out = path("nocmd.json");
  RunResult r = run(record({"-o", out, "--", "/nonexistent/hpd-no-such-command"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot run"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_P(RecordTest, UnprivilegedUserIsToldWhatIsMissing) {
  std::ifstream paranoid_file("/proc/sys/kernel/perf_event_paranoid");
  int paranoid = 0;
  paranoid_file >> paranoid;
  ASSERT_GE(paranoid, 2) << "this test needs the default perf_event_paranoid (2 or more)";
  Background target({kFixtures + "/cpu_split", "10"});  // root's process: not the user's to record
  const std::string out = path("unpriv.json.gz");
  RunResult r =
      run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", kHpctl, "record",
           "--backend", GetParam(), "--pid", std::to_string(target.pid()), "-o", out, "--duration", "1"});
  EXPECT_NE(r.exit_code, 0);
  if (GetParam() == "bpf") {
    EXPECT_NE(r.err.find("CAP_BPF"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--backend perf"), std::string::npos) << r.err;
  } else {
    EXPECT_NE(r.err.find("perf_event_paranoid"), std::string::npos) << r.err;
  }
  EXPECT_NE(r.err.find("CAP_PERFMON"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// --cfi-rows reaches the eBPF row map: with room for the program's own table but not for libc's
// (about 28,000 rows), libc is refused and named, the summary gives the capacity asked for and the one
// that would have held libc's table (which then does), and the stacks still reach the program's functions
// (by frame pointer through libc). Default flags otherwise.
TEST(RecordCfiRows, SmallRowMapRefusesLibcAndSaysSo) {
  hpd::testing::TempDir tmp{"hpd-it-cfi-rows", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const std::string out = tmp.path() + "/small.json.gz";
  RunResult r = run({kHpctl, "record", "--backend", "bpf", "--cfi-rows", "3000", "--no-report", "-o", out,
                     "--", kFixtures + "/cpu_split_nofp", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(" of 3000 rows"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("modules refused"), std::string::npos) << r.err;
  const size_t refused = r.err.find("the CFI row map is full");
  ASSERT_NE(refused, std::string::npos) << r.err;
  const size_t line_start = r.err.rfind('\n', refused);
  EXPECT_NE(r.err.substr(line_start, refused - line_start).find("libc.so"), std::string::npos) << r.err;

  // The summary names the row map that would have held every table; recorded again with it, nothing is
  // refused.
  const std::string advice = "cfi: --cfi-rows ";
  const size_t at = r.err.find(advice);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string rows = std::to_string(std::strtoull(r.err.c_str() + at + advice.size(), nullptr, 10));
  EXPECT_GT(std::stoull(rows), 3000u) << r.err;
  EXPECT_NE(r.err.find("would have held the tables refused beside those loaded"), std::string::npos) << r.err;
  RunResult again = run({kHpctl, "record", "--backend", "bpf", "--cfi-rows", rows, "--no-report", "-o", out,
                         "--", kFixtures + "/cpu_split_nofp", "1"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find(" of " + rows + " rows"), std::string::npos) << again.err;
  EXPECT_EQ(again.err.find("the CFI row map is full"), std::string::npos) << again.err;
  EXPECT_EQ(again.err.find(advice), std::string::npos) << again.err;

  // The default map holds libc: nothing refused.
  RunResult d = run({kHpctl, "record", "--backend", "bpf", "--no-report", "-o", out, "--",
                     kFixtures + "/cpu_split_nofp", "1"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.err.find(" of 4194304 rows"), std::string::npos) << d.err;
  EXPECT_EQ(d.err.find("the CFI row map is full"), std::string::npos) << d.err;
}

TEST(RecordCfiRows, RowMapsOutOfRangeAreRefusedBeforeRecording) {
  for (const char* rows : {"0", "33554433", "-5"}) {
    RunResult r = run({kHpctl, "record", "--cfi-rows", rows, "-o", "/tmp/hpd-never-written.json", "--",
                       kFixtures + "/cpu_split", "1"});
    EXPECT_NE(r.exit_code, 0) << rows;
    EXPECT_NE(r.err.find("--cfi-rows"), std::string::npos) << rows << ": " << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RecordTest, ::testing::Values("perf", "bpf"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// What a summary or report says of the samples not taken (samples_not_taken_note): "at least N samples
// were not taken (P% of those ..., M ms)"; zeros when it says nothing.
struct NotTaken {
  uint64_t samples = 0;
  double ms = 0;
};
NotTaken samples_not_taken(const std::string& text) {
  NotTaken n;
  const size_t at = text.find(" samples were not taken (");
  if (at == std::string::npos) return n;
  size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(text[start - 1]))) --start;
  n.samples = std::stoull(text.substr(start, at - start));
  const size_t ms_at = text.find(" ms)", at);
  const size_t comma = text.rfind(", ", ms_at);
  if (ms_at != std::string::npos && comma != std::string::npos && comma > at)
    n.ms = std::stod(text.substr(comma + 2, ms_at - comma - 2));
  return n;
}

// perf_event rings beyond the user's perf_event_mlock_kb allowance (shared by all of the user's
// processes: for root, a perf record running beside takes it) are charged to RLIMIT_MEMLOCK unless the
// process has CAP_IPC_LOCK, which hpd's unit does not grant. Over that limit the recording maps smaller
// rings and says so, where it failed ("cannot map a perf ring buffer"), and loses nothing for it: here
// an unprivileged user (nobody, whose allowance no test shares) recording its own command with 1 MiB of
// locked memory, default flags otherwise.
TEST(RecordPerfRings, ALockedMemoryLimitGivesSmallerRingsAndSaysSo) {
  hpd::testing::TempDir tmp{"hpd-it-rings", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0777), 0);
  const std::string out = tmp.path() + "/rings.json.gz";
  const RunResult r = run({"prlimit", "--memlock=1048576:1048576", "setpriv", "--reuid=65534",
                           "--regid=65534", "--clear-groups", "--inh-caps=-all", kHpctl, "record", "--local",
                           "--backend", "perf", "-o", out, "--", kFixtures + "/cpu_split", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string said = "note: perf ring buffers of ";
  const size_t at = r.err.find(said);
  ASSERT_NE(at, std::string::npos) << r.err;
  const uint64_t mapped = std::stoull(r.err.substr(at + said.size()));
  const size_t asked_at = r.err.find("not the ", at);
  ASSERT_NE(asked_at, std::string::npos) << r.err;
  const uint64_t asked = std::stoull(r.err.substr(asked_at + 8));
  EXPECT_LT(mapped, asked) << r.err;
  EXPECT_GE(mapped, 64u) << r.err;
  // Nothing goes unaccounted: the samples taken and the records the smaller rings could not hold (a
  // reader kept from its CPU fills 1 MiB of 32 KiB stack copies in 64 ms; the CI's loaded machine lost
  // some) cover the program's own CPU time, one sample per interval.
  const std::string cpu_said = "rounds, cpu ";
  const size_t cpu_at = r.out.find(cpu_said);
  ASSERT_NE(cpu_at, std::string::npos) << r.out;
  const double cpu_s = std::stod(r.out.substr(cpu_at + cpu_said.size()));
  const size_t samples_at = r.out.find("hpd report: ");
  const size_t lost_at = r.out.find("Lost: ");
  ASSERT_NE(samples_at, std::string::npos) << r.out;
  ASSERT_NE(lost_at, std::string::npos) << r.out;
  const size_t interval_at = r.out.find(", interval ");
  ASSERT_NE(interval_at, std::string::npos) << r.out;
  const double samples = std::stod(r.out.substr(samples_at + 12));
  const double lost = std::stod(r.out.substr(lost_at + 6));
  const double interval_s = std::stod(r.out.substr(interval_at + 11)) / 1e3;  // "interval 1.001 ms"
  // Nor does a sample the kernel did not take, which the report counts when it matters (on the CI's
  // loaded machine 35 of 500, 7%: a user not allowed kernel samples gets none while in the kernel).
  const double not_taken = static_cast<double>(samples_not_taken(r.out).samples);
  EXPECT_GE(samples + lost + not_taken, 0.95 * cpu_s / interval_s) << r.out;
  EXPECT_GT(samples, 0) << r.out;
  const RunResult report = run({kHpctl, "report", out});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("on-CPU samples"), std::string::npos) << report.out;
}

// A user whom perf_event_paranoid allows user-mode samples only (nobody, paranoid 2, no daemon: the
// perf backend) gets no sample while a thread runs in the kernel; the thread's CPU clock runs on, and
// the next sample's CPU ms holds that time. The sample counts and the shares made of them do not, and
// the summary, the report and the Firefox profile say how many samples were not taken and how much
// CPU time they stood for: here a program that spends as much CPU time in the kernel (reading
// /dev/zero) as in user mode, each phase timed on its own thread clock, the reads on their own. It
// runs on one CPU: the counter hpd reads is per thread and CPU, and the time a thread spent on a CPU
// after its last sample there is in its tail, a sample of its own (the next test).
TEST(RecordKernelExcluded, SamplesNotTakenInTheKernelAreCountedAndSaid) {
  hpd::testing::TempDir tmp{"hpd-it-notaken", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0777), 0);
  std::ifstream paranoid("/proc/sys/kernel/perf_event_paranoid");
  int level = 0;
  ASSERT_TRUE(paranoid >> level);
  ASSERT_GE(level, 2) << "this test needs a kernel that refuses kernel samples to unprivileged users";
  const std::string out = tmp.path() + "/kernel_split.json.gz";
  const RunResult r = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                           kHpctl, "record", "--local", "--backend", "perf", "-o", out, "--", "taskset", "-c",
                           "0", kFixtures + "/kernel_split", "0.3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, double> measured = fixture_truth(r.out, "kernel_split");
  ASSERT_EQ(measured.size(), 3u) << r.out;
  const double kernel_cpu = measured["kernel_ns"], read_cpu = measured["read_ns"],
               user_cpu = measured["user_ns"];
  ASSERT_GT(read_cpu, kernel_cpu / 2) << r.out;

  const NotTaken said = samples_not_taken(r.err);
  ASSERT_GT(said.samples, 0u) << r.err;
  EXPECT_NE(r.err.find("sampled user mode only"), std::string::npos) << r.err;
  const size_t samples_at = r.out.find("hpd report: ");
  const size_t interval_at = r.out.find(", interval ");
  ASSERT_NE(samples_at, std::string::npos) << r.out;
  ASSERT_NE(interval_at, std::string::npos) << r.out;
  const double samples = std::stod(r.out.substr(samples_at + 12));
  const double interval_ns = std::stod(r.out.substr(interval_at + 11)) * 1e6;
  // The CPU time said not sampled is the kernel phase's: at least the time inside its reads, less one
  // interval per sample taken in it (the user mode between its reads: a few), and at most its whole
  // CPU time and what a late timer left unsampled in the user phase (a fifth of it, on a loaded
  // machine).
  EXPECT_GE(said.ms * 1e6, 0.8 * read_cpu) << r.out << r.err;
  EXPECT_LE(said.ms * 1e6, kernel_cpu + 0.2 * user_cpu) << r.err;
  // The samples taken and those not taken are the program's CPU time in intervals: the count said is
  // what was missing, not a guess (the start of the process before main adds a little).
  const double called_for = (kernel_cpu + user_cpu) / interval_ns;
  EXPECT_GE(samples + static_cast<double>(said.samples), 0.9 * called_for) << r.out << r.err;
  EXPECT_LE(samples + static_cast<double>(said.samples), 1.2 * called_for + 10) << r.out << r.err;
  // The report of the file says it too, and the Firefox profile carries the sentence.
  EXPECT_EQ(samples_not_taken(r.out).samples, said.samples) << r.out;
  const RunResult report = run({kHpctl, "report", out});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(samples_not_taken(report.out).samples, said.samples) << report.out;
  const RunResult json_report = run({kHpctl, "report", out, "--json", "--limit", "0"});
  ASSERT_EQ(json_report.exit_code, 0) << json_report.err;
  const nlohmann::json totals = nlohmann::json::parse(json_report.out).at("totals");
  EXPECT_EQ(totals.at("samples_not_taken").at("samples").get<uint64_t>(), said.samples) << json_report.out;
  EXPECT_NEAR(totals.at("samples_not_taken").at("cpu_ns").get<double>() / 1e6, said.ms, 1.0)
      << json_report.out;
  const std::string profile = testing::load_json_maybe_gzip(out).dump();
  EXPECT_NE(profile.find("Samples not taken"), std::string::npos);
  EXPECT_NE(profile.find(std::to_string(said.samples) + " samples were not taken"), std::string::npos);
}

// The counter behind a sample's CPU ms is per thread and CPU: the time a thread ran on a CPU after its
// last sample there is in no sample's delta. For such a user that can be a whole stretch in the kernel:
// here the program reads /dev/zero on one CPU for half its kernel phase, then moves to another CPU for
// good, and its CPU ms were 510-558 of its own 600 (three runs). hpd reads each event's final count
// when the recording ends and gives the thread the rest as one more sample (its CPU tail, without a
// stack): the thread's CPU ms are its own clock's.
TEST(RecordKernelExcluded, AThreadThatLeavesACpuKeepsTheTimeItRanThereUnsampled) {
  hpd::testing::TempDir tmp{"hpd-it-cputail", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0777), 0);
  ASSERT_GE(::sysconf(_SC_NPROCESSORS_ONLN), 2) << "the fixture moves between two CPUs";
  const std::string out = tmp.path() + "/kernel_split.json.gz";
  const RunResult r =
      run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", kHpctl, "record",
           "--local", "--backend", "perf", "-o", out, "--", kFixtures + "/kernel_split", "0.3", "--migrate"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::map<std::string, double> measured = fixture_truth(r.out, "kernel_split");
  ASSERT_EQ(measured.size(), 3u) << r.out;
  const double own_cpu = measured["kernel_ns"] + measured["user_ns"];
  const RunResult json_report = run({kHpctl, "report", out, "--json", "--limit", "0"});
  ASSERT_EQ(json_report.exit_code, 0) << json_report.err;
  const nlohmann::json totals = nlohmann::json::parse(json_report.out).at("totals");
  const double cpu_ns = totals.at("cpu_ns").get<double>();
  // main's own two phases, and a little more (the process's start before main, its exit); the
  // task-clock counter also counts what the hypervisor stole from the vCPU, which the thread's clock
  // leaves out (3% at most here).
  EXPECT_GE(cpu_ns, 0.99 * own_cpu) << r.out << r.err;
  EXPECT_LE(cpu_ns, 1.03 * own_cpu + 5e6) << r.out << r.err;
  EXPECT_GE(totals.at("samples_without_stack").get<uint64_t>(), 1u)
      << "no CPU tail sample" << json_report.out;
}

}  // namespace
}  // namespace hpd::test
