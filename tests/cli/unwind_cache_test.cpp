// Privileged integration tests of the unwind-table cache on disk (hpd/collect/unwind_cache.h) through
// hpctl: with the cache warmed by a previous recording, `hpctl record --all` beside a running program
// built without frame pointers unwinds that program's samples to main from the start (its tables are
// loaded from the cache before sampling, not compiled while it is sampled); with an empty cache the
// same recording reaches main too (samples taken while the tables were compiled are walked again from
// a copy of their stack); a cache directory that is full or read-only is said once and the recording
// goes on.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "cpu_clock.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kCfiFixtures = HPD_CFI_FIXTURE_DIR;

// hpctl with the user's cache directory set to `cache_home` (env, so that it holds whatever this
// process's environment says).
std::vector<std::string> hpctl(const std::string& cache_home, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"env", "XDG_CACHE_HOME=" + cache_home, kHpctl};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// The first number of the summary line matching `pattern` (a regular expression with one group), or -1.
long long summary_number(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stoll(m[1].str());
}

// On-CPU samples of a recording (of process `pid` when not 0) and how many of them reach main, from
// `hpctl report --json`.
struct MainShare {
  uint64_t samples = 0;
  uint64_t with_main = 0;
  double percent() const { return samples ? 100.0 * double(with_main) / double(samples) : 0.0; }
};
MainShare main_share(const std::string& capture, pid_t pid = 0) {
  std::vector<std::string> argv{kHpctl, "report", capture, "--json", "--limit", "0", "--function", "^main$"};
  if (pid != 0) argv.insert(argv.end(), {"--pid", std::to_string(pid)});
  const RunResult rep = run(argv);
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  MainShare share;
  if (rep.exit_code != 0) return share;
  const json report = json::parse(rep.out);
  share.samples = report.at("totals").at("samples").get<uint64_t>();
  for (const auto& f : report.at("functions")) {
    if (f.at("name") == "main") share.with_main = f.at("total_samples").get<uint64_t>();
  }
  return share;
}

size_t cache_files(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) n += e.path().extension() == ".cfi" ? 1 : 0;
  return n;
}

// `hpctl record --all` (its cache directory `cache_home`) while the program `pid` runs: ended once the
// program has used 0.6 s of CPU since the recorder opened its sampling events (a loaded machine
// stretches the recording, not the test). Its summary, and the program's on-CPU samples (off-CPU
// samples are off for --all) and those that reach main.
struct AllRecording {
  std::string summary;
  MainShare share;
};
AllRecording record_all_beside(pid_t pid, const std::string& cache_home, testing::TempDir& tmp,
                               const std::string& extra_env = "") {
  AllRecording r;
  const std::string out = tmp.file("all.hpr");
  const std::string err = tmp.file("all.err");
  std::vector<std::string> argv{"sh", "-c",  "exec \"$@\" 2>" + err,
                                "sh", "env", "XDG_CACHE_HOME=" + cache_home};
  if (!extra_env.empty()) argv.push_back(extra_env);
  argv.insert(argv.end(), {kHpctl, "record", "--all", "-o", out, "--no-report"});
  Background recorder(argv);
  EXPECT_TRUE(wait_until([&] { return holds_perf_event(recorder.pid()); })) << "the recorder never attached";
  const double at_attach = process_cpu_seconds(pid);
  EXPECT_TRUE(wait_for_cpu(pid, at_attach + 0.6));
  ::kill(recorder.pid(), SIGINT);
  EXPECT_EQ(recorder.wait(), 0);
  r.summary = run({"cat", err}).out;
  std::printf("--all recording:\n%s", r.summary.c_str());
  r.share = main_share(out, pid);
  std::printf("program: %llu on-CPU samples, %llu (%.1f%%) reach main\n",
              static_cast<unsigned long long>(r.share.samples),
              static_cast<unsigned long long>(r.share.with_main), r.share.percent());
  return r;
}

class UnwindCacheCli : public ::testing::Test {
 protected:
  testing::TempDir tmp_{
      std::string("hpd-uc-") + ::testing::UnitTest::GetInstance()->current_test_info()->name(),
      testing::TempDir::Cleanup::kKeepOnFailure};
  const std::string cache_home_ = tmp_.file("cache-home");
};

TEST_F(UnwindCacheCli, WarmCacheAllRecordingReachesMainWithoutFramePointers) {
  // A 200-deep recursion built -O2 -fomit-frame-pointer: a frame-pointer walk of it never reaches main.
  Background program({kCfiFixtures + "/recursion", "600"});
  ASSERT_TRUE(wait_for_cpu(program.pid(), 0.05)) << "the program did not start";

  // A previous recording of it compiles its modules' tables (the program, libc, the loader) and
  // stores them.
  const RunResult warm = run(hpctl(cache_home_, {"record", "--pid", std::to_string(program.pid()), "-d",
                                                 "0.5", "-o", tmp_.file("warm.hpr"), "--no-report"}));
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  std::printf("warming recording:\n%s", warm.err.c_str());
  ASSERT_GE(cache_files(cache_home_ + "/hpd"), 3u) << warm.err;

  const AllRecording all = record_all_beside(program.pid(), cache_home_, tmp_);
  const std::string& out = all.summary;
  const MainShare& share = all.share;
  ASSERT_GE(share.samples, 300u);
  EXPECT_GE(share.percent(), 95.0);
  // Its tables came from the cache: the summary says how many were loaded from it.
  EXPECT_GE(summary_number(out, R"(cfi: (\d+) tables loaded from the unwind-table cache)"), 3) << out;
  // Samples walked by frame pointer because their tables were not in the eBPF maps yet are other
  // processes' (modules met for the first time): at most the program's samples that did not reach main
  // can be among them.
  const long long pending =
      summary_number(out, R"(cfi: (\d+) samples \(.*\) were walked by frame pointer: a table they needed)");
  std::printf("samples walked by frame pointer for want of their tables (all processes): %lld\n", pending);
}

// >= 95% of the program's samples of a cold-cache --all recording reach main, but for the stack copies
// the summary says were not taken because the ring was half full (a reader behind on a loaded machine:
// those samples keep their frame-pointer walk; counted for all processes, so an upper bound of the
// program's).
void expect_reaches_main(const AllRecording& all) {
  const long long skipped = std::max(
      0LL, summary_number(all.summary, R"(note: (\d+) stack copies were not taken because the ring)"));
  std::printf(
      "%llu of %llu samples reach main (%.1f%%); stack copies skipped with the ring half full: %lld\n",
      static_cast<unsigned long long>(all.share.with_main),
      static_cast<unsigned long long>(all.share.samples), all.share.percent(), skipped);
  EXPECT_GE(static_cast<double>(all.share.with_main) + static_cast<double>(skipped),
            0.95 * static_cast<double>(all.share.samples))
      << all.summary;
}

TEST_F(UnwindCacheCli, ColdCacheAllRecordingReachesMainWithoutFramePointers) {
  // The same program and recording with an empty cache directory: its tables are compiled while it is
  // sampled. Its samples taken before they were published carry a copy of their stack and are walked
  // again with them (issue 31: "a module met for the first time is compiled before its process's
  // samples are taken, or those samples are walked again once it is ready").
  Background program({kCfiFixtures + "/recursion", "600"});
  ASSERT_TRUE(wait_for_cpu(program.pid(), 0.05)) << "the program did not start";
  const AllRecording all = record_all_beside(program.pid(), cache_home_, tmp_);
  ASSERT_GE(all.share.samples, 300u);
  expect_reaches_main(all);
  // Nothing came from the cache: the tables were compiled in this recording.
  EXPECT_EQ(summary_number(all.summary, R"(cfi: (\d+) tables loaded from the unwind-table cache)"), 0)
      << all.summary;
}

TEST_F(UnwindCacheCli, ColdCacheSamplesWaitOnlyForTheTablesTheirStacksNeed) {
  // One module of the program comes late: the dynamic loader's table (no stack of its busy main thread
  // passes through it) is loaded no sooner than a minute after the start, as a large library's table
  // beside busy compilers may come only after the recording (HPD_CFI_LATE_TABLE, the test's way to it).
  // A held sample is walked again once the tables its own stack needs are in, not once every module of
  // its process has one: before, all of the program's samples waited for the loader's table and kept
  // their frame-pointer walk (85.7% of the program's samples reached main, none of those taken before its
  // own tables were in).
  Background program({kCfiFixtures + "/recursion", "600"});
  ASSERT_TRUE(wait_for_cpu(program.pid(), 0.05)) << "the program did not start";
  const AllRecording all =
      record_all_beside(program.pid(), cache_home_, tmp_, "HPD_CFI_LATE_TABLE=/ld-linux-x86-64.so.2:60000");
  ASSERT_GE(all.share.samples, 300u);
  expect_reaches_main(all);
  EXPECT_GE(summary_number(all.summary, R"(cfi: (\d+) samples taken before the tables they needed were in)"),
            1)
      << all.summary;
}

// A cache directory that cannot take the tables: the recording goes on, complete, and hpctl says so once.
void expect_said_once_and_recorded(const std::string& cache_home, const std::string& out_dir,
                                   const char* what) {
  const std::string out = out_dir + "/" + what + ".hpr";
  const RunResult r =
      run(hpctl(cache_home, {"record", "-o", out, "--no-report", "--", kCfiFixtures + "/recursion", "0.3"}));
  ASSERT_EQ(r.exit_code, 0) << what << ": " << r.err;
  EXPECT_TRUE(fs::exists(out)) << what;
  size_t warnings = 0;
  for (size_t at = r.err.find("hpctl: warning: the unwind-table cache"); at != std::string::npos;
       at = r.err.find("hpctl: warning: the unwind-table cache", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << what << ": " << r.err;
  EXPECT_NE(r.err.find("recording goes on without it"), std::string::npos) << what << ": " << r.err;
  // Compiled, and the summary does not claim they were all stored (a full one may take a small table).
  const long long compiled = summary_number(
      r.err, R"(cfi: \d+ tables loaded from the unwind-table cache \(\d+ ms\), (\d+) compiled)");
  const long long stored = summary_number(r.err, R"(cfi: .* compiled, (\d+) stored in it)");
  EXPECT_GE(compiled, 3) << r.err;
  EXPECT_GE(stored, 0) << r.err;
  EXPECT_LT(stored, compiled) << r.err;
  // The program's tables were compiled all the same: its stacks reach main.
  const MainShare share = main_share(out);
  EXPECT_GT(share.samples, 0u) << what;
  EXPECT_GE(share.percent(), 90.0) << what;
}

// Mounts a tmpfs at `dir` (with `options`); unmounted when the guard goes.
class TmpfsMount {
 public:
  TmpfsMount(const std::string& dir, const std::string& options) : dir_(dir) {
    fs::create_directories(dir);
    ok_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0;
  }
  ~TmpfsMount() {
    if (ok_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return ok_; }

 private:
  std::string dir_;
  bool ok_ = false;
};

TEST_F(UnwindCacheCli, FullCacheDirectoryIsSaidOnceAndRecordingGoesOn) {
  // A file system of one page: the directory fits, no table does (libc's alone takes ~350 KiB).
  TmpfsMount full(cache_home_, "size=4k,mode=0755");
  ASSERT_TRUE(full.ok()) << "cannot mount a tmpfs at " << cache_home_;
  expect_said_once_and_recorded(cache_home_, tmp_.path(), "full");
}

TEST_F(UnwindCacheCli, ReadOnlyCacheDirectoryIsSaidOnceAndRecordingGoesOn) {
  // Read-only for root too: a read-only mount.
  TmpfsMount read_only(cache_home_, "size=1m,mode=0755");
  ASSERT_TRUE(read_only.ok()) << "cannot mount a tmpfs at " << cache_home_;
  fs::create_directories(cache_home_ + "/hpd");
  ASSERT_EQ(::mount(nullptr, cache_home_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, "size=1m"), 0);
  expect_said_once_and_recorded(cache_home_, tmp_.path(), "read-only");
}

}  // namespace
}  // namespace hpd::test
