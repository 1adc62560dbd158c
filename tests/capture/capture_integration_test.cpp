// Privileged tests of the capture file through the real hpctl and kernel: record -o .hpr, then
// report and convert it; a recording killed with SIGKILL; damaged files; modules moved elsewhere.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cpu_clock.h"
#include "debuginfod_server.h"
#include "pprof_text.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtures = HPD_FIXTURE_DIR;

class CaptureCliTest : public ::testing::TestWithParam<std::string> {
 protected:
  static std::string test_name() {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) c = c == '/' ? '-' : c;
    return name;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> record(std::vector<std::string> args) const {
    std::vector<std::string> argv{kHpctl, "record", "--backend", GetParam()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  json report_json(const std::string& file) {
    RunResult r = run({kHpctl, "report", "--json", "--limit", "0", file});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? json::parse(r.out) : json();
  }
  // Records a copy of cpu_split at bin/cpu_split into `hpr`, then moves the binary to
  // `to`/cpu_split: the capture's module is no longer where it was recorded.
  void record_then_move(const std::string& hpr, const std::string& to) {
    fs::create_directories(dir_ / "bin");
    fs::create_directories(dir_ / to);
    fs::copy_file(kFixtures + "/cpu_split", path("bin/cpu_split"));
    ASSERT_EQ(run(record({"-o", hpr, "--no-report", "-q", "--", path("bin/cpu_split"), "1"})).exit_code, 0);
    fs::rename(path("bin/cpu_split"), path(to + "/cpu_split"));
  }
  static uint64_t collapsed_sum(const std::string& file) {
    std::ifstream in(file);
    uint64_t sum = 0;
    std::string line;
    while (std::getline(in, line)) sum += std::stoull(line.substr(line.rfind(' ') + 1));
    return sum;
  }
  // Kept when the test fails: its recordings and logs are what to look at.
  hpd::testing::TempDir tmp_{"hpd-capture-it-" + test_name(), hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
};

// The report `hpctl record -o run.hpr` prints is computed from the sums of the samples the recording
// released once written (it keeps no samples); `hpctl report run.hpr` computes it from every sample
// of the capture read back. Both symbolize with the same binaries on the same machine, so identical
// text means the capture lost nothing the report uses, and the sums gave the numbers of the samples.
// Converting the capture to Firefox JSON and reporting that must then agree as well (the same
// numbers through the exporter and its reader), and so must `convert --format report`.
TEST_P(CaptureCliTest, CaptureGivesTheSameReportAsTheRecording) {
  const std::string hpr = path("run.hpr");
  RunResult rec = run(record({"-o", hpr, "--limit", "0", "--", kFixtures + "/cpu_split", "--cpu", "1.5"}));
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_NE(rec.err.find("hpctl convert"), std::string::npos) << rec.err;
  const size_t at = rec.out.find("hpd report:");
  ASSERT_NE(at, std::string::npos) << rec.out;
  const std::string printed = rec.out.substr(at);  // the fixture's own output line comes first

  RunResult rep = run({kHpctl, "report", "--limit", "0", hpr});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_EQ(rep.out, printed);
  EXPECT_EQ(rep.err.find("did not finish"), std::string::npos) << rep.err;

  RunResult conv = run({kHpctl, "convert", hpr, "-o", path("run.json.gz")});
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const json from_capture = report_json(hpr);
  const json from_firefox = report_json(path("run.json.gz"));
  EXPECT_EQ(from_capture, from_firefox);
  EXPECT_GT(from_capture.at("totals").at("samples").get<uint64_t>(), 500u);

  ASSERT_EQ(
      run({kHpctl, "convert", hpr, "-o", path("rep.json"), "--format", "report", "--limit", "0"}).exit_code,
      0);
  std::ifstream in(path("rep.json"));
  EXPECT_EQ(json::parse(in), from_capture);
}

// The kernel's names travel with the capture: hpctl report names the kernel frames of a capture
// the same whether /proc/kallsyms can be read or not (here it is hidden by a bind mount of /dev/null
// in a mount namespace of the report's own), as it would be in another boot, or after the BPF
// programs and modules the samples hit were unloaded (hpd's own programs are, when hpctl exits).
TEST_P(CaptureCliTest, KernelNamesTravelWithTheCapture) {
  const std::string hpr = path("kernel.hpr");
  // dd copying between /dev/zero and /dev/null spends its time in read() and write(): kernel frames.
  RunResult rec = run(record({"-o", hpr, "--no-report", "-q", "--", "/bin/dd", "if=/dev/zero", "of=/dev/null",
                              "bs=64k", "count=150000"}));
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const json seen = report_json(hpr);
  RunResult hidden =
      run({"unshare", "-m", "sh", "-c",
           "mount --bind /dev/null /proc/kallsyms && head -c 1 /proc/kallsyms | wc -c && exec \"$0\" "
           "report --json --limit 0 \"$1\"",
           kHpctl, hpr});
  ASSERT_EQ(hidden.exit_code, 0) << hidden.err;
  // The mount took: kallsyms reads as empty for that report.
  ASSERT_EQ(hidden.out.substr(0, 2), "0\n") << hidden.out;
  EXPECT_EQ(json::parse(hidden.out.substr(2)), seen);
  // And it names kernel functions (of the kernel image: dd's read() and write() paths).
  const std::string text = seen.dump();
  EXPECT_NE(text.find("[kernel.kallsyms]"), std::string::npos);
  EXPECT_TRUE(text.find("vfs_read") != std::string::npos || text.find("ksys_read") != std::string::npos ||
              text.find("vfs_write") != std::string::npos || text.find("ksys_write") != std::string::npos)
      << text.substr(0, 2000);
}

TEST_P(CaptureCliTest, PprofAndCollapsedHoldTheReportTotals) {
  const std::string hpr = path("run.hpr");
  ASSERT_EQ(
      run(record({"-o", hpr, "--no-report", "-q", "--", kFixtures + "/cpu_split", "--cpu", "1"})).exit_code,
      0);
  const json rep = report_json(hpr);
  const uint64_t samples = rep.at("totals").at("samples").get<uint64_t>();
  const uint64_t cpu_ns = rep.at("totals").at("cpu_ns").get<uint64_t>();
  ASSERT_GT(samples, 500u);

  ASSERT_EQ(run({kHpctl, "convert", hpr, "-o", path("run.pb.gz")}).exit_code, 0);
  testing::TextNode root;
  std::string error;
  ASSERT_TRUE(testing::decode_pprof(testing::gunzip_file(path("run.pb.gz")), &root, &error)) << error;
  int64_t pprof_samples = 0, pprof_cpu = 0;
  for (const testing::TextNode* s : root.all("sample")) {
    const auto values = s->all("value");
    ASSERT_GE(values.size(), 2u);
    pprof_samples += std::stoll(values[0]->value);
    pprof_cpu += std::stoll(values[1]->value);
  }
  EXPECT_EQ(static_cast<uint64_t>(pprof_samples), samples);
  EXPECT_EQ(static_cast<uint64_t>(pprof_cpu), cpu_ns);
  bool leaf_c = false;
  for (const testing::TextNode* s : root.all("string_table")) leaf_c |= s->value == "leaf_c";
  EXPECT_TRUE(leaf_c);

  ASSERT_EQ(run({kHpctl, "convert", hpr, "-o", path("run.collapsed")}).exit_code, 0);
  EXPECT_EQ(collapsed_sum(path("run.collapsed")), samples);
  ASSERT_EQ(run({kHpctl, "convert", hpr, "-o", path("cpu.folded"), "--weight", "cpu"}).exit_code, 0);
  EXPECT_EQ(collapsed_sum(path("cpu.folded")), cpu_ns);
  // The Firefox export converts again, to the same collapsed stacks.
  ASSERT_EQ(run({kHpctl, "convert", hpr, "-o", path("run.json.gz")}).exit_code, 0);
  ASSERT_EQ(run({kHpctl, "convert", path("run.json.gz"), "-o", path("again.collapsed")}).exit_code, 0);
  std::ifstream a(path("run.collapsed")), b(path("again.collapsed"));
  std::stringstream sa, sb;
  sa << a.rdbuf();
  sb << b.rdbuf();
  EXPECT_EQ(sa.str(), sb.str());
}

TEST_P(CaptureCliTest, SigkillMidRecordingLeavesAReadableCapture) {
  Background target({kFixtures + "/cpu_split", "600"});  // killed at the end
  const std::string hpr = path("killed.hpr");
  Background recorder(record({"--pid", std::to_string(target.pid()), "-o", hpr, "-q", "--no-report"}));
  // The capture being written is readable: wait until it holds more than 300 samples (about 0.3 s of
  // the target's CPU at 999 Hz), however long a loaded machine takes, then kill the recorder.
  uint64_t before_kill = 0;
  const bool flushed = wait_until(
      [&] {
        const RunResult partial = run({kHpctl, "report", "--json", "--limit", "0", hpr});
        const json so_far = json::parse(partial.out, nullptr, false);
        if (partial.exit_code != 0 || so_far.is_discarded()) return false;  // not written yet
        before_kill = so_far.at("totals").at("samples").get<uint64_t>();
        return before_kill > 300;
      },
      120, 0.25);
  kill(recorder.pid(), SIGKILL);
  EXPECT_EQ(recorder.wait(), 128 + SIGKILL);
  ASSERT_TRUE(flushed) << "the capture never held more than 300 samples; last " << before_kill;
  RunResult r = run({kHpctl, "report", "--json", "--limit", "0", hpr});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("did not finish"), std::string::npos) << r.err;
  const json rep = json::parse(r.out);
  // Everything flushed before the kill is still there.
  EXPECT_GE(rep.at("totals").at("samples").get<uint64_t>(), before_kill);
  bool leaf_c = false;
  for (const auto& f : rep.at("functions")) leaf_c |= f.at("name") == "leaf_c";
  EXPECT_TRUE(leaf_c);
  EXPECT_EQ(run({kHpctl, "convert", hpr, "-o", path("killed.json.gz"), "-q"}).exit_code, 0);
}

TEST_P(CaptureCliTest, BinaryMovedAwayIsFoundWithDebugDir) {
  const std::string hpr = path("moved.hpr");
  ASSERT_NO_FATAL_FAILURE(record_then_move(hpr, "elsewhere"));

  RunResult lost = run({kHpctl, "convert", hpr, "-o", "-", "--format", "collapsed", "--no-debuginfod"});
  ASSERT_EQ(lost.exit_code, 0) << lost.err;
  EXPECT_NE(lost.err.find("modules not found"), std::string::npos) << lost.err;
  EXPECT_NE(lost.err.find(path("bin/cpu_split")), std::string::npos) << lost.err;
  EXPECT_EQ(lost.out.find("leaf_c"), std::string::npos);
  EXPECT_NE(lost.out.find("cpu_split+0x"), std::string::npos) << "module+offset frames expected";

  RunResult found =
      run({kHpctl, "convert", hpr, "-o", "-", "--format", "collapsed", "--debug-dir", path("elsewhere")});
  ASSERT_EQ(found.exit_code, 0) << found.err;
  EXPECT_NE(found.out.find("leaf_c"), std::string::npos) << found.out.substr(0, 2000);
  EXPECT_NE(found.err.find("using " + path("elsewhere/cpu_split")), std::string::npos) << found.err;
}

// The same module fetched by its build-id from a debuginfod server (the real debuginfod on
// loopback, in a private network namespace): libdebuginfod is loaded only then (dlopen).
TEST_P(CaptureCliTest, BinaryMovedAwayIsFetchedFromDebuginfod) {
  if (const std::string tool = testing::debuginfod_session_missing_tool(); !tool.empty())
    FAIL() << tool << " is not installed (packaging/install-deps.sh)";
  const std::string hpr = path("moved.hpr");
  ASSERT_NO_FATAL_FAILURE(record_then_move(hpr, "served"));

  const std::string command = "'" + kHpctl + "' convert '" + hpr + "' -o - --format collapsed";
  RunResult r = run({"sh", "-c",
                     testing::debuginfod_session(dir_.string(), path("served"), path("served/cpu_split"),
                                                 "executable", command)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("leaf_c"), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_NE(r.err.find("using " + path("cache")), std::string::npos) << r.err;
  // Other modules may be missing ([vdso] has no file), but not this one.
  EXPECT_EQ(r.err.find(") not found: debuginfod"), std::string::npos) << r.err;
  const size_t missing = r.err.find("modules not found");
  if (missing != std::string::npos) {
    EXPECT_EQ(r.err.substr(missing, r.err.find('\n', missing) - missing).find("cpu_split"), std::string::npos)
        << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CaptureCliTest, ::testing::Values("perf", "bpf"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Damaged captures through hpctl: a clear one-line error and exit status 1, never a crash.
class CaptureCliErrors : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(run({HPD_CAPTURE_SEEDS, dir_.string()}).exit_code, 0); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<char> bytes(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write(const std::string& name, const std::vector<char>& data) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  hpd::testing::TempDir tmp_{"hpd-capture-err"};
  const fs::path dir_{tmp_.path()};
};

TEST_F(CaptureCliErrors, FutureCorruptAndTruncatedFiles) {
  std::vector<char> good = bytes("medium.hpr");
  ASSERT_GT(good.size(), 200u);
  std::vector<char> future = good;
  future[8] = 7;
  write("future.hpr", future);
  RunResult r = run({kHpctl, "report", path("future.hpr")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("written by a newer hpd (capture format 7); this hpctl reads up to format 1"),
            std::string::npos)
      << r.err;

  std::vector<char> corrupt = good;
  corrupt[good.size() / 2] ^= 0x10;
  write("corrupt.hpr", corrupt);
  r = run({kHpctl, "convert", path("corrupt.hpr"), "-o", path("out.json.gz")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("corrupt"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("out.json.gz")));

  write("cut.hpr",
        std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() * 2 / 3)));
  r = run({kHpctl, "convert", path("cut.hpr"), "-o", path("cut.collapsed")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("did not finish"), std::string::npos) << r.err;

  write("garbage.hpr", std::vector<char>(1000, 'x'));
  r = run({kHpctl, "report", path("garbage.hpr")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("hpctl: error:"), std::string::npos) << r.err;

  // Modules of the synthetic capture do not exist here: they are listed, their frames kept.
  r = run({kHpctl, "convert", path("medium.hpr"), "-o", path("synthetic.collapsed"), "--no-debuginfod"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("/usr/bin/app"), std::string::npos) << r.err;
  std::ifstream collapsed(path("synthetic.collapsed"));
  std::stringstream text;
  text << collapsed.rdbuf();
  EXPECT_NE(text.str().find("app+0x"), std::string::npos) << text.str().substr(0, 1000);
}

}  // namespace
}  // namespace hpd::test
