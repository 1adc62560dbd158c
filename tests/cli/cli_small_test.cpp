// Privileged integration tests of hpctl's command-line details: suggestions for typos, --local after
// the verb, a clean --help, the previous profile kept as .old, the launched command's exit status
// (also after Ctrl-C), and --cgroup in the form /proc/PID/cgroup shows.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class CliTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Kept when the test fails: its recordings and logs are what to look at.
  hpd::testing::TempDir tmp_{"hpd-cli", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
};

TEST_F(CliTest, TyposGetTheNearestVerbOrFlag) {
  RunResult verb = run({kHpctl, "recrod"});
  EXPECT_NE(verb.exit_code, 0);
  EXPECT_NE(verb.err.find("unknown command 'recrod'; did you mean 'record'?"), std::string::npos) << verb.err;
  RunResult flag = run({kHpctl, "record", "--pdi", "3"});
  EXPECT_NE(flag.exit_code, 0);
  EXPECT_NE(flag.err.find("unknown flag '--pdi' for 'record'; did you mean '--pid'?"), std::string::npos)
      << flag.err;
  RunResult global = run({kHpctl, "--lcoal", "status"});
  EXPECT_NE(global.err.find("did you mean '--local'?"), std::string::npos) << global.err;
  // Nothing close: no suggestion, CLI11's message alone.
  RunResult far = run({kHpctl, "frobnicate"});
  EXPECT_NE(far.exit_code, 0);
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
}

TEST_F(CliTest, LocalAndDaemonWorkAfterTheVerbAndHelpShowsThemPlainly) {
  RunResult help = run({kHpctl, "--help"});
  ASSERT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.find("{daemon}"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("Excludes"), std::string::npos) << help.out;
  const std::string out = path("local.json");
  RunResult after = run({kHpctl, "record", "--local", "-o", out, "--no-report", "--", "true"});
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_NE(after.err.find("recorded locally"), std::string::npos) << after.err;
  RunResult both = run({kHpctl, "--local", "record", "--daemon", "-o", out, "--", "true"});
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("--daemon and --local exclude each other"), std::string::npos) << both.err;
}

TEST_F(CliTest, ThePreviousProfileIsKeptAsOld) {
  const std::string out = path("profile.json");
  ASSERT_EQ(run({kHpctl, "--local", "record", "-o", out, "--no-report", "-q", "--", "true"}).exit_code, 0);
  const std::string first = read_text(out);
  ASSERT_FALSE(first.empty());
  RunResult second = run({kHpctl, "--local", "record", "-o", out, "--no-report", "--", "true"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(read_text(out + ".old"), first);
  EXPECT_NE(second.err.find("the previous " + out + " is now " + out + ".old"), std::string::npos)
      << second.err;
  // A recording that cannot start leaves both files alone.
  RunResult bad = run({kHpctl, "--local", "record", "-o", out, "--pid", "1", "--", "true"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(read_text(out + ".old"), first);
}

TEST_F(CliTest, RecordExitsWithTheCommandsStatus) {
  RunResult r = run(
      {kHpctl, "--local", "record", "-o", path("s.json"), "--no-report", "-q", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  RunResult ok = run({kHpctl, "--local", "record", "-o", path("t.json"), "--no-report", "-q", "--", "true"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST_F(CliTest, CtrlCOnARecordedCommandExitsWithItsStatus) {
  const std::string err = path("ctrl-c.err");
  BackgroundOptions options;
  Background recorder(
      {"/bin/sh", "-c",
       "exec " + kHpctl + " --local record -o " + path("c.json") + " --no-report -- sleep 30 2>" + err},
      options);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kill(recorder.pid(), SIGINT);
  const int status = recorder.wait();
  // The recording ends, the command is stopped, and hpctl reports the command's status as its own.
  EXPECT_NE(status, 0);
  EXPECT_NE(read_text(err).find("the command exited with status " + std::to_string(status)),
            std::string::npos)
      << "exit " << status << ": " << read_text(err);
  EXPECT_TRUE(fs::exists(path("c.json")));
}

// The cgroup v2 mount point (a hybrid system mounts it at /sys/fs/cgroup/unified).
std::string cgroup2_mount() {
  std::ifstream mounts("/proc/self/mounts");
  std::string device, dir, type, rest;
  while (mounts >> device >> dir >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2") return dir;
  }
  return {};
}

TEST_F(CliTest, CgroupTakesTheFormProcPidCgroupShows) {
  const std::string mount = cgroup2_mount();
  ASSERT_FALSE(mount.empty()) << "no cgroup v2 mount";
  const std::string name = "hpd-cli-test-" + std::to_string(getpid());
  ASSERT_TRUE(fs::create_directory(mount + "/" + name));
  for (const std::string& form : {"0::/" + name, "/" + name}) {
    RunResult r = run({kHpctl, "--local", "record", "--cgroup", form, "-d", "0.2", "--no-report", "-q", "-o",
                       path("cg.json")});
    EXPECT_EQ(r.exit_code, 0) << form << ": " << r.err;
  }
  fs::remove(mount + "/" + name);
}

}  // namespace
}  // namespace hpd::test
