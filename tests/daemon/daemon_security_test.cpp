// Privileged tests of what hpd gives a local user, with two real users the suite creates (useradd)
// and removes: kernel frames and addresses, the kernel's PTRACE_MODE_READ rules, set-user-ID children,
// and the call runtime's table a user's program can write while hpd reads it.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "alloc_truth.h"
#include "cpu_clock.h"
#include "debuginfod_server.h"
#include "firefox_lint.h"
#include "hpd/capture/capture.h"
#include "hpd/service/protocol.h"
#include "hpd_harness.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "test_user.h"

namespace hpd::test {
namespace {

using nlohmann::json;

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kCredsTarget = std::string(HPD_FIXTURE_DIR) + "/creds_target";

class RealUsers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Named per run: a run beside another (another checkout's) neither takes nor deletes its users.
    const std::string run_id = std::to_string(getpid());
    alice_ = make_test_user("hpdtest-alice-" + run_id);
    bob_ = make_test_user("hpdtest-bob-" + run_id);
  }
  static void TearDownTestSuite() {
    // A fixture a failed test did not end is ended with its user.
    for (const TestUser* user : {&alice_, &bob_}) remove_test_user(*user);
  }

  std::vector<std::string> hpctl(const Hpd& hpd, std::vector<std::string> args) const {
    std::vector<std::string> argv = {kHpctl, "--socket", hpd.socket(), "--daemon"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  static TestUser alice_;
  static TestUser bob_;
};

TestUser RealUsers::alice_;
TestUser RealUsers::bob_;

// Sets a sysctl for the scope of a test and puts the old value back.
class ScopedSysctl {
 public:
  ScopedSysctl(std::string path, const std::string& value) : path_(std::move(path)) {
    std::ifstream(path_) >> old_;
    std::ofstream(path_) << value;
  }
  ~ScopedSysctl() { std::ofstream(path_) << old_; }
  ScopedSysctl(const ScopedSysctl&) = delete;
  ScopedSysctl& operator=(const ScopedSysctl&) = delete;

 private:
  std::string path_;
  std::string old_;
};

constexpr uint64_t kKernelSpaceStart = 0xffff800000000000ull;

// Kernel frames of a capture file: frames counted as kernel, and any address in kernel space.
struct KernelContent {
  size_t kernel_frames = 0;
  size_t kernel_addresses = 0;
  size_t samples = 0;
};

KernelContent kernel_content(const std::string& hpr) {
  const CaptureContents capture = read_capture_file(hpr);
  KernelContent c;
  c.samples = capture.profile.samples.size();
  for (size_t i = 0; i < capture.profile.stacks.size(); ++i)
    c.kernel_frames += capture.profile.stacks[static_cast<uint32_t>(i)].kernel_depth;
  for (const uint64_t address : capture.profile.stacks.addresses())
    if (address >= kKernelSpaceStart) ++c.kernel_addresses;
  return c;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A process that spends most of its time in the kernel (one-byte reads and writes), as `user`.
std::vector<std::string> syscall_heavy(const std::vector<std::string>& prefix) {
  std::vector<std::string> argv = prefix;
  for (const char* a : {"dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=2000000000"}) argv.push_back(a);
  return argv;
}

TEST_F(RealUsers, UnprivilegedClientGetsNoKernelFramesOrAddresses) {
  ScopedSysctl paranoid("/proc/sys/kernel/perf_event_paranoid", "2");
  Hpd hpd;
  Background own(syscall_heavy(alice_.run_as({})));
  ASSERT_TRUE(runs_executable(own.pid(), "/bin/dd"));
  const std::string pid = std::to_string(own.pid());

  // As the user: a capture (raw addresses) and a Firefox profile.
  const std::string hpr = hpd.out_dir() + "/alice.hpr";
  const RunResult capture =
      run(alice_.run_as(hpctl(hpd, {"record", "--no-report", "--pid", pid, "-d", "2", "-o", hpr})));
  ASSERT_EQ(capture.exit_code, 0) << capture.err << hpd.log();
  EXPECT_NE(capture.err.find("no kernel frames: perf_event_paranoid is 2 and you lack CAP_PERFMON"),
            std::string::npos)
      << capture.err;
  const KernelContent mine = kernel_content(hpr);
  EXPECT_GT(mine.samples, 20u);
  EXPECT_EQ(mine.kernel_frames, 0u);
  EXPECT_EQ(mine.kernel_addresses, 0u) << "a raw kernel address in the user's .hpr";
  const std::string ff = hpd.out_dir() + "/alice.json";
  const RunResult firefox =
      run(alice_.run_as(hpctl(hpd, {"record", "--no-report", "--pid", pid, "-d", "1", "-o", ff})));
  ASSERT_EQ(firefox.exit_code, 0) << firefox.err;
  const std::string text = read_text(ff);
  EXPECT_EQ(text.find("kallsyms"), std::string::npos) << "a kernel library in the user's profile";

  // Asking for them explicitly is refused, and says why.
  const RunResult asked = run(alice_.run_as(
      hpctl(hpd, {"record", "--kernel", "--pid", pid, "-d", "1", "-o", hpd.out_dir() + "/k.hpr"})));
  EXPECT_NE(asked.exit_code, 0);
  EXPECT_NE(asked.err.find("kernel call stacks are not yours to have"), std::string::npos) << asked.err;
  EXPECT_TRUE(hpd.wait_log("refused kernel frames (--kernel) for uid " + std::to_string(alice_.uid), 5))
      << hpd.log();

  // Root keeps them: the same process recorded by root has kernel frames with kernel addresses.
  const std::string root_hpr = hpd.out_dir() + "/root.hpr";
  const RunResult root = run(hpctl(hpd, {"record", "--no-report", "--pid", pid, "-d", "2", "-o", root_hpr}));
  ASSERT_EQ(root.exit_code, 0) << root.err;
  const KernelContent roots = kernel_content(root_hpr);
  EXPECT_GT(roots.kernel_frames, 5u);
  EXPECT_GT(roots.kernel_addresses, 5u);
}

TEST_F(RealUsers, KernelFramesFollowParanoidForUnprivilegedClients) {
  // With perf_event_paranoid 1 and kptr_restrict 0 the kernel shows every user kernel samples and
  // kallsyms addresses: hpd gives them too.
  ScopedSysctl paranoid("/proc/sys/kernel/perf_event_paranoid", "1");
  ScopedSysctl kptr("/proc/sys/kernel/kptr_restrict", "0");
  Hpd hpd;
  Background own(syscall_heavy(alice_.run_as({})));
  ASSERT_TRUE(runs_executable(own.pid(), "/bin/dd"));
  const std::string hpr = hpd.out_dir() + "/alice1.hpr";
  const RunResult r = run(alice_.run_as(
      hpctl(hpd, {"record", "--no-report", "--pid", std::to_string(own.pid()), "-d", "2", "-o", hpr})));
  ASSERT_EQ(r.exit_code, 0) << r.err << hpd.log();
  EXPECT_GT(kernel_content(hpr).kernel_frames, 5u);
  // kptr_restrict 1 hides addresses from those without CAP_SYSLOG: no kernel frames then.
  std::ofstream("/proc/sys/kernel/kptr_restrict") << "1";
  const RunResult hidden = run(alice_.run_as(
      hpctl(hpd, {"record", "--no-report", "--pid", std::to_string(own.pid()), "-d", "1", "-o", hpr})));
  ASSERT_EQ(hidden.exit_code, 0) << hidden.err;
  EXPECT_EQ(kernel_content(hpr).kernel_addresses, 0u);
  EXPECT_NE(hidden.err.find("kptr_restrict is 1"), std::string::npos) << hidden.err;
}

TEST_F(RealUsers, AccessFollowsPtraceModeRead) {
  Hpd hpd;
  BackgroundOptions wait_ready;
  wait_ready.ready_line = "ready";
  // Started by root, then real, effective and filesystem ids the user's; the saved uid stays 0.
  Background saved_root(
      {kCredsTarget, "saved-root", std::to_string(alice_.uid), std::to_string(alice_.gid), "60"}, wait_ready);
  ASSERT_TRUE(saved_root.ready());
  Background nondumpable(alice_.run_as({kCredsTarget, "nondumpable", "60"}), wait_ready);
  ASSERT_TRUE(nondumpable.ready());
  Background plain(alice_.run_as({kCredsTarget, "plain", "60"}), wait_ready);
  ASSERT_TRUE(plain.ready());
  Background bobs(bob_.run_as({kCredsTarget, "plain", "60"}), wait_ready);
  ASSERT_TRUE(bobs.ready());

  auto record = [&](pid_t pid, const std::string& name) {
    return run(alice_.run_as(hpctl(hpd, {"record", "--no-report", "--pid", std::to_string(pid), "-d", "1",
                                         "-o", hpd.out_dir() + "/" + name})));
  };
  const RunResult saved = record(saved_root.pid(), "saved.json");
  EXPECT_NE(saved.exit_code, 0);
  EXPECT_NE(saved.err.find("runs with saved uid 0"), std::string::npos) << saved.err;
  EXPECT_FALSE(std::filesystem::exists(hpd.out_dir() + "/saved.json"));
  const RunResult dump = record(nondumpable.pid(), "nondumpable.json");
  EXPECT_NE(dump.exit_code, 0);
  EXPECT_NE(dump.err.find("is not dumpable"), std::string::npos) << dump.err;
  const RunResult other = record(bobs.pid(), "bob.json");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("runs with real uid " + std::to_string(bob_.uid)), std::string::npos) << other.err;
  // Each refusal is logged with the uid and pid of the client and the reason.
  EXPECT_TRUE(hpd.wait_log("refused a recording for uid " + std::to_string(alice_.uid) + " (pid ", 5));
  EXPECT_NE(hpd.log().find("is not dumpable"), std::string::npos) << hpd.log();
  // The user's own ordinary process is recorded.
  const RunResult own = record(plain.pid(), "plain.json");
  ASSERT_EQ(own.exit_code, 0) << own.err << hpd.log();
  EXPECT_GT(count_samples(testing::load_json_maybe_gzip(hpd.out_dir() + "/plain.json")), 20u);
  // A process of the user that becomes non-dumpable mid-recording ends the session, nothing handed over.
  const std::string late = hpd.out_dir() + "/late.json";
  const RunResult later =
      run(alice_.run_as(hpctl(hpd, {"record", "--no-report", "-o", late, "--", "sh", "-c",
                                    "\"$0\" plain 0.5; exec \"$0\" nondumpable 3", kCredsTarget})));
  EXPECT_NE(later.exit_code, 0);
  EXPECT_NE(later.err.find("the recording was stopped and discarded"), std::string::npos) << later.err;
  EXPECT_NE(later.err.find("is not dumpable"), std::string::npos) << later.err;
  EXPECT_FALSE(std::filesystem::exists(late));
  // Root may record all of them.
  const RunResult root = run(hpctl(hpd, {"record", "--no-report", "--pid", std::to_string(saved_root.pid()),
                                         "-d", "1", "-o", hpd.out_dir() + "/root.json"}));
  EXPECT_EQ(root.exit_code, 0) << root.err;
}

TEST_F(RealUsers, ShortLivedSetuidChildLeavesNoSample) {
  Hpd hpd;
  // A set-user-ID root copy of the fixture, where the user can run it; as root it spins in
  // spin_privileged, a name no other part of the command has.
  const std::string privileged = hpd.dir() + "/creds_target_suid";
  std::filesystem::copy_file(kCredsTarget, privileged);
  ASSERT_EQ(chown(privileged.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(privileged.c_str(), 04755), 0);
  const std::string script = "\"$0\" plain 1; \"$1\" privileged 0.3; \"$0\" plain 0.5";
  auto record = [&](bool as_alice, const std::string& out) {
    std::vector<std::string> argv =
        hpctl(hpd, {"record", "--no-report", "-o", out, "--", "sh", "-c", script, kCredsTarget, privileged});
    return run(as_alice ? alice_.run_as(argv) : argv);
  };
  for (const char* name : {"/suid.json.gz", "/suid.hpr"}) {
    const std::string out = hpd.out_dir() + name;
    const RunResult r = record(true, out);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err << hpd.log();
    EXPECT_NE(r.err.find("executed a program that runs with credentials other than yours"), std::string::npos)
        << r.err;
    std::string text;
    if (std::string(name).ends_with(".hpr")) {
      const RunResult converted = run({kHpctl, "convert", out, "-o", out + ".json"});
      ASSERT_EQ(converted.exit_code, 0) << converted.err;
      text = read_text(out + ".json");
      EXPECT_EQ(kernel_content(out).kernel_addresses, 0u);
    } else {
      const json profile = testing::load_json_maybe_gzip(out);
      EXPECT_GT(count_samples(profile), 50u) << "the user's own 1.5 s of spinning are there";
      text = profile.dump();
    }
    EXPECT_NE(text.find("spin_plain"), std::string::npos) << name;
    EXPECT_EQ(text.find("spin_privileged"), std::string::npos)
        << name << ": a sample of the set-user-ID child";
  }
  // Root keeps the child: the check above can see it.
  const std::string out = hpd.out_dir() + "/root.json.gz";
  const RunResult root = record(false, out);
  ASSERT_EQ(root.exit_code, 0) << root.err;
  EXPECT_NE(testing::load_json_maybe_gzip(out).dump().find("spin_privileged"), std::string::npos);
}

// The kernel gives root the /proc files of a thread that has exited, dumpable or not: a process whose
// main thread called pthread_exit is still the user's to record (its other thread holds its memory),
// and a zombie is an exited process, not a non-dumpable one.
TEST_F(RealUsers, ExitedMainThreadAndZombieAreNotTakenForNonDumpable) {
  Hpd hpd;
  auto wait_ready = BackgroundOptions{.ready_line = "ready"};
  Background leader_gone(alice_.run_as({kCredsTarget, "leader-exits", "60"}), wait_ready);
  ASSERT_TRUE(leader_gone.ready());
  const std::string out = hpd.out_dir() + "/leader.json";
  const RunResult r = run(alice_.run_as(hpctl(
      hpd, {"record", "--no-report", "--pid", std::to_string(leader_gone.pid()), "-d", "1", "-o", out})));
  ASSERT_EQ(r.exit_code, 0) << r.err << hpd.log();
  const json profile = testing::load_json_maybe_gzip(out);
  EXPECT_GT(count_samples(profile), 20u);
  EXPECT_NE(profile.dump().find("spin_plain"), std::string::npos);
  // A child that exited, never reaped: its parent exec'd a program that does not wait.
  Background zombie_parent(alice_.run_as({"sh", "-c", "sh -c 'sleep 0.3' & echo ready; exec sleep 60"}),
                           wait_ready);
  ASSERT_TRUE(zombie_parent.ready());
  pid_t zombie = 0;
  for (int attempt = 0; attempt < 200 && zombie == 0; ++attempt) {
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const size_t paren = line.rfind(')');
      if (paren == std::string::npos) continue;
      std::istringstream fields(line.substr(paren + 1));
      std::string state;
      pid_t ppid = 0;
      fields >> state >> ppid;
      if (state == "Z" && ppid == zombie_parent.pid()) zombie = std::stoi(name);
    }
    if (zombie == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(zombie, 0) << "no zombie child of " << zombie_parent.pid();
  const RunResult z = run(alice_.run_as(
      hpctl(hpd, {"record", "--no-report", "--pid", std::to_string(zombie), "-d", "1", "-o", out + ".z"})));
  EXPECT_NE(z.exit_code, 0);
  EXPECT_NE(z.err.find("(it exited)"), std::string::npos) << z.err;
  EXPECT_EQ(z.err.find("not dumpable"), std::string::npos) << z.err;
}

// Many short set-user-ID children: each is not dumpable (and then runs as root) a moment before the
// recorder reads the record that stops following it. A check that falls in that moment must not take
// the user's own process for one that gained privileges (CI once failed so).
TEST_F(RealUsers, SetuidExecsInQuickSuccessionAreUnfollowedNotRefused) {
  Hpd hpd;
  const std::string privileged = hpd.dir() + "/creds_target_suid";
  std::filesystem::copy_file(kCredsTarget, privileged);
  ASSERT_EQ(chown(privileged.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(privileged.c_str(), 04755), 0);
  const std::string script =
      "i=0; while [ $i -lt 300 ]; do \"$1\" privileged 0.002 >/dev/null; i=$((i+1)); done; \"$0\" plain 0.3";
  const std::string out = hpd.out_dir() + "/many.json.gz";
  const RunResult r = run(alice_.run_as(
      hpctl(hpd, {"record", "--no-report", "-o", out, "--", "sh", "-c", script, kCredsTarget, privileged})));
  ASSERT_EQ(r.exit_code, 0) << r.err << hpd.log();
  EXPECT_NE(r.err.find("executed a program that runs with credentials other than yours"), std::string::npos)
      << r.err;
  const std::string text = testing::load_json_maybe_gzip(out).dump();
  EXPECT_NE(text.find("spin_plain"), std::string::npos);
  EXPECT_EQ(text.find("spin_privileged"), std::string::npos) << "a sample of a set-user-ID child";
}

// A client in a user namespace of its own (`unshare -U -r`) looks like root there and holds every
// capability, but only in that namespace: the kernel (cap_ptrace_access_check, perfmon_capable) gives
// it nothing outside, not even its own processes there, and hpd gives it what the kernel would. For
// each target, the kernel's own answer (reading /proc/PID/environ needs PTRACE_MODE_READ) is asked
// from the same namespace and hpd's must be the same.
TEST_F(RealUsers, UserNamespaceClientGetsWhatTheKernelWouldGiveIt) {
  ScopedSysctl paranoid("/proc/sys/kernel/perf_event_paranoid", "2");
  ScopedSysctl kptr("/proc/sys/kernel/kptr_restrict", "0");
  Hpd hpd;
  auto wait_ready = BackgroundOptions{.ready_line = "ready"};
  Background roots({kCredsTarget, "plain", "60"}, wait_ready);
  ASSERT_TRUE(roots.ready());
  Background bobs(bob_.run_as({kCredsTarget, "plain", "60"}), wait_ready);
  ASSERT_TRUE(bobs.ready());
  Background alices(alice_.run_as({kCredsTarget, "plain", "60"}), wait_ready);
  ASSERT_TRUE(alices.ready());
  auto in_userns = [&](const std::vector<std::string>& argv) {
    std::vector<std::string> full = {"unshare", "--user", "--map-root-user"};
    full.insert(full.end(), argv.begin(), argv.end());
    return alice_.run_as(full);
  };
  // Inside, the client is uid 0 with every capability.
  const RunResult id = run(in_userns({"sh", "-c", "id -u; grep CapEff /proc/self/status"}));
  ASSERT_EQ(id.exit_code, 0) << id.err;
  ASSERT_EQ(id.out.rfind("0\n", 0), 0u) << id.out;
  ASSERT_NE(id.out.find("ffffffff"), std::string::npos) << id.out;

  const std::vector<std::pair<std::string, pid_t>> outside = {
      {"root's", roots.pid()}, {"bob's", bobs.pid()}, {"alice's own, outside her namespace", alices.pid()}};
  for (const auto& [whose, pid] : outside) {
    SCOPED_TRACE(whose);
    const std::string p = std::to_string(pid);
    const RunResult kernel = run(in_userns({"head", "-c", "1", "/proc/" + p + "/environ"}));
    EXPECT_NE(kernel.exit_code, 0) << "the kernel lets the namespace's root read " << whose << " process";
    const std::string out = hpd.out_dir() + "/userns-" + p + ".hpr";
    const RunResult r =
        run(in_userns(hpctl(hpd, {"record", "--no-report", "--pid", p, "-d", "1", "-o", out})));
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("may only record your own processes"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out) && std::filesystem::file_size(out) > 0) << out;
  }
  // Every process, or a cgroup: reserved to the initial namespace's root (and the group).
  const RunResult all = run(in_userns(
      hpctl(hpd, {"record", "--no-report", "--all", "-d", "1", "-o", hpd.out_dir() + "/userns-all.hpr"})));
  EXPECT_NE(all.exit_code, 0);
  EXPECT_NE(all.err.find("reserved to root"), std::string::npos) << all.err;
  // So is root's own: root in a namespace of its own is not root outside it.
  const RunResult root_all =
      run({"unshare", "--user", "--map-root-user", kHpctl, "--socket", hpd.socket(), "--daemon", "record",
           "--no-report", "--all", "-d", "1", "-o", hpd.out_dir() + "/root-userns-all.hpr"});
  EXPECT_NE(root_all.exit_code, 0);
  EXPECT_NE(root_all.err.find("reserved to root"), std::string::npos) << root_all.err;

  // A process inside its namespace is the client's (the kernel agrees), without kernel frames: the
  // namespace's CAP_PERFMON and CAP_SYSLOG do not count for the kernel's samples and addresses.
  const std::string script =
      "\"$0\" plain 30 >/dev/null & t=$!; head -c 1 /proc/$t/environ >/dev/null || exit 99; "
      "\"$@\" --pid $t; r=$?; kill $t; exit $r";
  auto record_inside = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"sh", "-c", script, kCredsTarget};
    const std::vector<std::string> command = hpctl(hpd, args);
    argv.insert(argv.end(), command.begin(), command.end());
    return run(in_userns(argv));
  };
  const std::string inside = hpd.out_dir() + "/userns-inside.hpr";
  const RunResult kernel_asked =
      record_inside({"record", "--no-report", "--kernel", "-d", "1", "-o", hpd.out_dir() + "/k.hpr"});
  EXPECT_NE(kernel_asked.exit_code, 0);
  EXPECT_NE(kernel_asked.err.find("kernel call stacks are not yours to have"), std::string::npos)
      << kernel_asked.err;
  const RunResult own = record_inside({"record", "--no-report", "-d", "2", "-o", inside});
  ASSERT_EQ(own.exit_code, 0) << own.err << hpd.log();
  const KernelContent content = kernel_content(inside);
  EXPECT_GT(content.samples, 20u);
  EXPECT_EQ(content.kernel_frames, 0u);
  EXPECT_EQ(content.kernel_addresses, 0u);
}

// A child of the test at pid `want` (made so through ns_last_pid) running as `user`, named `name`,
// that spins for `cpu_s` seconds of its own CPU time and exits. 0 when another process took the pid.
pid_t fork_at_pid(pid_t want, const TestUser& user, const char* name, double cpu_s) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::ofstream("/proc/sys/kernel/ns_last_pid") << want - 1;
    const pid_t child = fork();
    if (child == 0) {
      if (setgroups(0, nullptr) != 0 || setresgid(user.gid, user.gid, user.gid) != 0 ||
          setresuid(user.uid, user.uid, user.uid) != 0)
        _exit(1);
      prctl(PR_SET_NAME, name);
      timespec ts{};
      volatile uint64_t x = 1;
      do {
        for (int i = 0; i < 100000; ++i) x = x * 6364136223846793005ULL + 1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      } while (double(ts.tv_sec) + double(ts.tv_nsec) / 1e9 < cpu_s);
      _exit(0);
    }
    if (child == want) return child;
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // another process holds it for now
  }
  return 0;
}

// Pid reuse during a recording, with either backend: one of alice's two targets exits, and bob's
// process that then gets its pid (a fork at that very pid) is not recorded into her profile, neither
// its samples nor its name; her other target still is.
TEST_F(RealUsers, PidReusedDuringARecordingIsNotRecorded) {
  Hpd hpd;
  auto wait_ready = BackgroundOptions{.ready_line = "ready"};
  for (const char* backend : {"bpf", "perf"}) {
    SCOPED_TRACE(backend);
    Background staying(alice_.run_as({kCredsTarget, "plain", "60"}), wait_ready);
    ASSERT_TRUE(staying.ready());
    Background leaving(alice_.run_as({kCredsTarget, "plain", "60"}), wait_ready);
    ASSERT_TRUE(leaving.ready());
    const pid_t reused = leaving.pid();
    const std::string out = hpd.out_dir() + "/reuse-" + backend + ".json";
    const uint64_t samples_before = hpd.status().value("samples", uint64_t{0});  // of earlier sessions too
    RunResult client;
    std::thread recording([&] {
      client = run(alice_.run_as(
          hpctl(hpd, {"record", "--no-report", "--backend", backend, "--pid", std::to_string(staying.pid()),
                      "--pid", std::to_string(reused), "-d", "60", "-o", out})));
    });
    // Until this session samples.
    for (int i = 0; i < 600; ++i) {
      const json status = hpd.status();
      if (status.value("sessions", 0) > 0 && status.value("samples", uint64_t{0}) >= samples_before + 50)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    leaving.kill();
    const pid_t bobs = fork_at_pid(reused, bob_, "bobsecret", 1.0);
    int status = 0;
    if (bobs != 0) waitpid(bobs, &status, 0);
    staying.kill();  // the last target: the recording ends
    recording.join();
    ASSERT_EQ(bobs, reused) << "could not fork at pid " << reused;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(client.exit_code, 0) << client.err << hpd.log();
    const std::string text = testing::load_json_maybe_gzip(out).dump();
    EXPECT_NE(text.find("spin_plain"), std::string::npos);
    EXPECT_EQ(text.find("bobsecret"), std::string::npos) << "bob's process at the reused pid was recorded";
  }
}

// Pid reuse between hpd's check and its attach, with either backend: hpd is stopped (SIGSTOP) once it
// has accepted the request and before it attached anything, the target is replaced by bob's process
// at the same pid, and hpd is let go. The recording fails, saying the target exited, and holds
// nothing of bob's.
TEST_F(RealUsers, PidReusedBetweenCheckAndAttachIsNotRecorded) {
  Hpd hpd;
  auto wait_ready = BackgroundOptions{.ready_line = "ready"};
  int session = 0;
  for (const char* backend : {"bpf", "perf"}) {
    SCOPED_TRACE(backend);
    bool caught = false;
    // perf_event attaches within milliseconds of the check: more tries to stop hpd in between.
    const int attempts = std::string(backend) == "bpf" ? 5 : 40;
    for (int attempt = 1; attempt <= attempts && !caught; ++attempt) {
      Background target(alice_.run_as({kCredsTarget, "plain", "60"}), wait_ready);
      ASSERT_TRUE(target.ready());
      const pid_t reused = target.pid();
      const std::string out = hpd.out_dir() + "/between-" + std::to_string(++session) + ".json";
      RunResult client;
      std::thread recording([&] {
        client = run(alice_.run_as(hpctl(hpd, {"record", "--no-report", "--backend", backend, "--pid",
                                               std::to_string(reused), "-d", "3", "-o", out})));
      });
      const std::string accepted =
          "session " + std::to_string(session) + " for uid " + std::to_string(alice_.uid);
      bool seen = false;
      for (int i = 0; i < 60000 && !seen; ++i) {
        seen = hpd.log().find(accepted) != std::string::npos;
        if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(250));
      }
      if (seen) hpd.signal(SIGSTOP);
      // Nothing attached yet: no perf event (sampling, or the mapping watch) is open in hpd.
      const bool window = seen && hpd.fd_counts().perf_event == 0;
      target.kill();
      const pid_t bobs = fork_at_pid(reused, bob_, "bobsecret", 1.5);
      hpd.signal(SIGCONT);
      recording.join();
      if (bobs != 0) waitpid(bobs, nullptr, 0);
      ASSERT_TRUE(seen) << hpd.log();
      ASSERT_EQ(bobs, reused) << "could not fork at pid " << reused;
      if (!window) continue;  // hpd had attached before it was stopped: try again
      caught = true;
      EXPECT_NE(client.exit_code, 0) << client.err;
      // Refused as the bound process's end, or, when hpd checked the pid only after it was stopped, as
      // bob's process (another user's) or its zombie: bob's process outlived its 1.5 s of CPU before a
      // loaded machine let hpd on (seen in a CI run). Each refuses the reused pid.
      const bool refused = client.err.find("exited before the recording started") != std::string::npos ||
                           client.err.find("is a zombie") != std::string::npos ||
                           client.err.find("belongs to uid " + std::to_string(bob_.uid)) != std::string::npos;
      EXPECT_TRUE(refused) << client.err;
      EXPECT_EQ(client.err.find("bobsecret"), std::string::npos) << client.err;
      const std::string text = std::filesystem::exists(out) ? read_text(out) : "";
      EXPECT_EQ(text.find("bobsecret"), std::string::npos) << "bob's process at the reused pid was recorded";
    }
    EXPECT_TRUE(caught) << "hpd was never stopped between its check and its attach";
  }
}

// A process of `user` holding `count` connections to hpd that send nothing; killed on destruction.
class IdleConnections {
 public:
  IdleConnections(const TestUser& user, const std::string& socket, int count) {
    int ready[2];
    if (pipe(ready) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      if (setgroups(0, nullptr) != 0 || setresgid(user.gid, user.gid, user.gid) != 0 ||
          setresuid(user.uid, user.uid, user.uid) != 0)
        _exit(1);
      int opened = 0;
      for (int i = 0; i < count; ++i) opened += connect_unix(socket) >= 0 ? 1 : 0;
      [[maybe_unused]] const ssize_t n = write(ready[1], &opened, sizeof opened);
      for (;;) pause();
    }
    close(ready[1]);
    if (read(ready[0], &opened_, sizeof opened_) != sizeof opened_) opened_ = -1;
    close(ready[0]);
  }
  ~IdleConnections() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  IdleConnections(const IdleConnections&) = delete;
  IdleConnections& operator=(const IdleConnections&) = delete;
  [[nodiscard]] int opened() const { return opened_; }

 private:
  pid_t pid_ = -1;
  int opened_ = 0;
};

TEST_F(RealUsers, RootServedBeside300IdleConnectionsOfAnotherUser) {
  HpdStart start;
  start.config = "idle_timeout = 4\n";
  Hpd hpd(start);
  // The programs hpd loads ahead for the first session are part of its level once loaded.
  ASSERT_TRUE(wait_until([&hpd] {
    const json status = hpd.status();
    const json& prepared = status["prepared"];
    return !status["backends"]["bpf"]["available"].get<bool>() ||
           (!prepared["loading"].get<bool>() &&
            (prepared["ready"].get<bool>() || !prepared["error"].get<std::string>().empty()));
  })) << hpd.log();
  const int before = hpd.fd_counts().total;
  IdleConnections idle(bob_, hpd.socket(), 300);
  ASSERT_EQ(idle.opened(), 300) << "connect() itself succeeds; hpd answers the extra ones with an error";
  const RunResult root = run({kHpctl, "--socket", hpd.socket(), "status"}, 20);
  EXPECT_EQ(root.exit_code, 0) << root.err << hpd.log();
  EXPECT_NE(root.out.find("backend"), std::string::npos) << root.out;
  // Another user is not locked out either; bob is, past his share.
  const RunResult alice = run(alice_.run_as({kHpctl, "--socket", hpd.socket(), "status"}), 20);
  EXPECT_EQ(alice.exit_code, 0) << alice.err;
  const RunResult bob = run(bob_.run_as({kHpctl, "--socket", hpd.socket(), "status"}), 20);
  EXPECT_NE(bob.exit_code, 0);
  EXPECT_NE(bob.err.find("max_connections_per_user"), std::string::npos) << bob.err;
  EXPECT_TRUE(hpd.wait_log("refused a connection of uid " + std::to_string(bob_.uid), 5));
  EXPECT_LE(hpd.fd_counts().total, before + 40) << "at most max_connections_per_user (32) held for bob";
  // Idle connections are closed after idle_timeout: hpd's descriptors come back down.
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    closed = hpd.fd_counts().total <= before + 1;
  }
  EXPECT_TRUE(closed) << hpd.fd_counts().total << " descriptors, " << before << " before";
  EXPECT_EQ(hpd.terminate(10), 0);
}

// A "Vm...:  N kB" line of /proc/PID/status in bytes: VmRSS now, VmHWM the peak.
uint64_t status_bytes(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;
  return 0;
}

// Anonymous memory (RssAnon): the heap and the connections' threads. Not VmRSS: hpd maps the next
// session's CFI row map (32 MiB, its pages mapped at once) when it loads that session's programs ahead,
// in the background after its start; on a loaded machine that came inside the test's window (RSS 18 ->
// 46 MiB) while the connections cost nothing.
TEST_F(RealUsers, AnnouncedFramesCostNoMemoryBeforeTheirBytes) {
  Hpd hpd;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto rss_bytes = [](pid_t pid) { return status_bytes(pid, "RssAnon:"); };
  const uint64_t before = rss_bytes(hpd.pid());
  ASSERT_GT(before, 0u);
  // 30 connections (a user's share), each announcing a 1 MiB frame and sending 1 byte of it.
  std::vector<int> fds;
  for (int i = 0; i < 30; ++i) {
    const int fd = connect_unix(hpd.socket());
    ASSERT_GE(fd, 0);
    const char header[5] = {0, 0, 0x10, 0, '{'};
    ASSERT_EQ(send(fd, header, sizeof header, MSG_NOSIGNAL), 5);
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const uint64_t during = rss_bytes(hpd.pid());
  for (const int fd : fds) close(fd);
  // Before: 30 MiB allocated and zeroed at once. Now a 64 KiB piece per connection and its thread.
  EXPECT_LT(during, before + (12u << 20))
      << "RSS " << (before >> 20) << " MiB -> " << (during >> 20) << " MiB";
  EXPECT_EQ(hpd.status()["type"], "status");
}

// A record request on a fresh connection, its output a pipe of one page that nobody reads.
struct StalledClient {
  int socket = -1;
  int pipe_read = -1;
  ~StalledClient() {
    if (socket >= 0) close(socket);
    if (pipe_read >= 0) close(pipe_read);
  }
};

std::unique_ptr<StalledClient> start_unread_recording(const Hpd& hpd, pid_t target, double seconds) {
  auto client = std::make_unique<StalledClient>();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  fcntl(fds[1], F_SETPIPE_SZ, 4096);
  client->pipe_read = fds[0];
  client->socket = connect_unix(hpd.socket());
  const json request = {{"version", 1},
                        {"type", "record"},
                        {"fd", true},
                        {"args", {{"pids", {target}}, {"duration_s", seconds}, {"output", "out.json"}}}};
  service::send_frame(client->socket, request.dump(), fds[1]);
  close(fds[1]);
  return client;
}

TEST_F(RealUsers, ClientThatDoesNotReadLosesItsSessionAndSigtermStillEndsHpd) {
  HpdStart start;
  start.config = "client_timeout = 2\n";
  Hpd hpd(start);
  Background target({std::string(HPD_FIXTURE_DIR) + "/cpu_split", "60"});
  const auto client = start_unread_recording(hpd, target.pid(), 1);
  // The profile does not fit the pipe: its writer gives up after client_timeout and tells the client.
  json last;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    do last = read_reply(client->socket, 30000);
    while (last["type"] != "error" && last["type"] != "done");
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << hpd.log();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(last["type"], "error") << last.dump();
  EXPECT_NE(last.value("message", "").find("took no data for 2 s"), std::string::npos) << last.dump();
  EXPECT_LT(waited, 20);
  EXPECT_EQ(hpd.status()["sessions"], 0) << "the slot is free";

  // With a long client_timeout, SIGTERM still ends hpd at once while a client does not read: its
  // output is given half a second once hpd stops, so stop_timeout (long here) is not what ends it.
  HpdStart patient;
  patient.config = "client_timeout = 300\nstop_timeout = 30\n";
  Hpd hpd2(patient);
  const auto stuck = start_unread_recording(hpd2, target.pid(), 60);
  for (int i = 0; i < 100 && hpd2.status()["samples"].get<uint64_t>() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(hpd2.terminate(10), 0) << hpd2.log();
  const double stopped = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_LT(stopped, 5) << hpd2.log();
  EXPECT_EQ(hpd2.log().find("still busy after stop_timeout"), std::string::npos) << hpd2.log();
  EXPECT_TRUE(hpd2.log().find("the reader of the output took no data for 500 ms") != std::string::npos)
      << hpd2.log();
}

TEST_F(RealUsers, OutputsOntoDevicesAndPlantedLinks) {
  Hpd hpd;
  // A device node made by the test, like /dev/null (1:3), outside /dev.
  const std::string device = hpd.dir() + "/null";
  ASSERT_EQ(mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  const std::string cpu_split = std::string(HPD_FIXTURE_DIR) + "/cpu_split";
  for (const char* name : {"null", "null.hpr"}) {
    const std::string out = hpd.dir() + "/" + name;
    if (out != device) {
      ASSERT_EQ(mknod(out.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
    }
    const RunResult r = run(hpctl(hpd, {"record", "--no-report", "-o", out, "--", cpu_split, "0.3"}));
    EXPECT_EQ(r.exit_code, 0) << r.err << hpd.log();
    struct stat st {};
    ASSERT_EQ(lstat(out.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << out << " was replaced by a file of mode " << std::oct << st.st_mode;
    EXPECT_EQ(st.st_rdev, makedev(1, 3));
    // Recorded without hpd too.
    const RunResult local = run({kHpctl, "--socket", hpd.dir() + "/none.sock", "record", "--no-report", "-o",
                                 out, "--", cpu_split, "0.2"});
    EXPECT_EQ(local.exit_code, 0) << local.err;
    ASSERT_EQ(lstat(out.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << out << " (local) was replaced";
  }
  // In a directory others may write, a link another user planted is not followed. Not sticky: in a
  // sticky one (/tmp) the kernel's protected_symlinks already refuses such links.
  const std::string victim = hpd.dir() + "/victim";
  std::ofstream(victim) << "root's data\n";
  const std::string shared = hpd.dir() + "/shared";
  ASSERT_EQ(mkdir(shared.c_str(), 0777), 0);
  ASSERT_EQ(chmod(shared.c_str(), 0777), 0);
  const std::string planted = shared + "/profile.hpr";
  ASSERT_EQ(run(alice_.run_as({"ln", "-s", victim, planted})).exit_code, 0);
  const RunResult r = run(hpctl(hpd, {"record", "--no-report", "-o", planted, "--", cpu_split, "0.2"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("is a symbolic link in directory '" + shared + "', which others may write"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(read_text(victim) == "root's data\n") << "the planted link's target was written";
  const RunResult local = run({kHpctl, "--socket", hpd.dir() + "/none.sock", "record", "--no-report", "-o",
                               planted, "--", cpu_split, "0.2"});
  EXPECT_NE(local.exit_code, 0);
  EXPECT_TRUE(read_text(victim) == "root's data\n") << "the planted link's target was written";
}

// What a file holds, byte for byte (empty when it cannot be read).
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A loop block device over a file of known bytes, detached on destruction.
class LoopDevice {
 public:
  explicit LoopDevice(const std::string& backing) : backing_(backing) {
    std::string bytes(1 << 20, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + i % 26);
    std::ofstream(backing_, std::ios::binary) << bytes;
    const RunResult r = run({"losetup", "--find", "--show", backing_}, 30);
    if (r.exit_code == 0) device_ = r.out.substr(0, r.out.find('\n'));
  }
  ~LoopDevice() {
    if (!device_.empty()) run({"losetup", "--detach", device_}, 30);
  }
  LoopDevice(const LoopDevice&) = delete;
  LoopDevice& operator=(const LoopDevice&) = delete;
  [[nodiscard]] const std::string& device() const { return device_; }
  // The device's bytes as read through it (not the page cache of the backing file).
  [[nodiscard]] std::string bytes() const { return file_bytes(device_); }

 private:
  std::string backing_;
  std::string device_;
};

// Root records, through hpd and without it (hpctl record -o as root), and converts (hpctl convert -o)
// into a directory a user owns, where that user planted a link to a root-only file, a link to a block
// device, and a FIFO nobody reads: each output is refused before anything is recorded, with the path
// and the reason, and the target is untouched.
TEST_F(RealUsers, RootsOutputsRefuseWhatAUserPlantedInHerDirectory) {
  Hpd hpd;
  const std::string home = hpd.dir() + "/alice-home";
  ASSERT_EQ(mkdir(home.c_str(), 0755), 0);
  ASSERT_EQ(chown(home.c_str(), alice_.uid, alice_.gid), 0);
  const std::string victim = hpd.dir() + "/root-only";
  std::ofstream(victim) << "root's data\n";
  ASSERT_EQ(chmod(victim.c_str(), 0600), 0);
  LoopDevice loop(hpd.dir() + "/loop-backing");
  ASSERT_FALSE(loop.device().empty()) << "losetup could not attach a loop device";
  const std::string device_bytes = loop.bytes();
  ASSERT_EQ(device_bytes.size(), 1u << 20);

  struct Planted {
    std::string name;
    std::vector<std::string> plant;  // run as alice
    std::string reason;              // in the error
  };
  const std::vector<Planted> planted = {
      {"to-root.json.gz", {"ln", "-s", victim, home + "/to-root.json.gz"}, "is a symbolic link"},
      {"to-root.hpr", {"ln", "-s", victim, home + "/to-root.hpr"}, "is a symbolic link"},
      {"to-device.json.gz", {"ln", "-s", loop.device(), home + "/to-device.json.gz"}, "is a symbolic link"},
      {"to-device.hpr", {"ln", "-s", loop.device(), home + "/to-device.hpr"}, "is a symbolic link"},
      {"fifo.json", {"mkfifo", home + "/fifo.json"}, "is a FIFO"},
      {"fifo.hpr", {"mkfifo", home + "/fifo.hpr"}, "is a FIFO"},
  };
  const std::string marker = hpd.dir() + "/recorded";
  // The command leaves a mark when it runs: an output refused before recording leaves none.
  const std::vector<std::string> command = {"sh", "-c", "touch " + marker + "; exec \"$0\" 0.3",
                                            std::string(HPD_FIXTURE_DIR) + "/cpu_split"};
  for (const Planted& p : planted) {
    ASSERT_EQ(run(alice_.run_as(p.plant)).exit_code, 0) << p.name;
    const std::string out = home + "/" + p.name;
    for (const bool through_hpd : {true, false}) {
      std::vector<std::string> argv = {kHpctl, "--socket",
                                       through_hpd ? hpd.socket() : hpd.dir() + "/none.sock"};
      if (through_hpd) argv.push_back("--daemon");
      for (const char* a : {"record", "--no-report", "-o"}) argv.push_back(a);
      argv.push_back(out);
      argv.push_back("--");
      argv.insert(argv.end(), command.begin(), command.end());
      std::filesystem::remove(marker);
      const auto t0 = std::chrono::steady_clock::now();
      const RunResult r = run(argv, 60);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string what = p.name + (through_hpd ? " (through hpd)" : " (local)");
      EXPECT_NE(r.exit_code, 0) << what;
      EXPECT_NE(r.err.find("cannot write '" + out + "': it " + p.reason), std::string::npos)
          << what << ": " << r.err;
      EXPECT_NE(r.err.find("which belongs to another user"), std::string::npos) << what << ": " << r.err;
      EXPECT_FALSE(std::filesystem::exists(marker)) << what
                                                    << ": the command ran, the output was not "
                                                       "refused before recording";
      EXPECT_LT(took, 30) << what << ": a FIFO nobody reads must not hold hpctl";
      EXPECT_EQ(read_text(victim), "root's data\n") << what;
      EXPECT_TRUE(loop.bytes() == device_bytes) << what << ": the block device was written";
    }
    struct stat st {};
    ASSERT_EQ(lstat(out.c_str(), &st), 0) << p.name;
    EXPECT_EQ(st.st_uid, alice_.uid) << p.name << " was replaced";
  }
  // hpctl convert -o as root: the same rules.
  const std::string profile = hpd.dir() + "/p.json.gz";
  ASSERT_EQ(run({kHpctl, "--socket", hpd.dir() + "/none.sock", "record", "--no-report", "-o", profile, "--",
                 std::string(HPD_FIXTURE_DIR) + "/cpu_split", "0.2"})
                .exit_code,
            0);
  for (const char* name : {"to-root.json.gz", "to-device.json.gz", "fifo.json"}) {
    const std::string out = home + "/" + name;
    const RunResult r = run({kHpctl, "convert", profile, "-o", out}, 60);
    EXPECT_NE(r.exit_code, 0) << name;
    EXPECT_NE(r.err.find("cannot write '" + out + "'"), std::string::npos) << r.err;
    EXPECT_EQ(read_text(victim), "root's data\n") << name;
    EXPECT_TRUE(loop.bytes() == device_bytes) << name;
  }
  // Alice's own links in her own directory are hers to follow: she records through one.
  const std::string own_target = home + "/own-target.json";
  ASSERT_EQ(run(alice_.run_as({"ln", "-s", own_target, home + "/own.json"})).exit_code, 0);
  const RunResult own = run(alice_.run_as(hpctl(hpd, {"record", "--no-report", "-o", home + "/own.json", "--",
                                                      std::string(HPD_FIXTURE_DIR) + "/cpu_split", "0.2"})));
  EXPECT_EQ(own.exit_code, 0) << own.err;
}

// A FIFO of root's own in root's directory: with no reader, hpctl fails at once and says why (through
// hpd, locally, and convert); with a reader, the profile goes through it.
TEST_F(RealUsers, FifoWithoutReaderFailsAtOnceAndWithOneIsWritten) {
  Hpd hpd;
  const std::string fifo = hpd.dir() + "/profile.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string cpu_split = std::string(HPD_FIXTURE_DIR) + "/cpu_split";
  for (const bool through_hpd : {true, false}) {
    const auto t0 = std::chrono::steady_clock::now();
    const RunResult r =
        run(through_hpd ? hpctl(hpd, {"record", "--no-report", "-o", fifo, "--", cpu_split, "0.2"})
                        : std::vector<std::string>{kHpctl, "--socket", hpd.dir() + "/none.sock", "record",
                                                   "--no-report", "-o", fifo, "--", cpu_split, "0.2"},
            60);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("cannot write '" + fifo + "': it is a FIFO that no process reads"),
              std::string::npos)
        << r.err;
    EXPECT_LT(took, 20) << "hpctl waited for a reader";
  }
  const std::string profile = hpd.dir() + "/p.json.gz";
  ASSERT_EQ(run({kHpctl, "--socket", hpd.dir() + "/none.sock", "record", "--no-report", "-o", profile, "--",
                 cpu_split, "0.2"})
                .exit_code,
            0);
  const RunResult convert = run({kHpctl, "convert", profile, "-o", fifo}, 60);
  EXPECT_NE(convert.exit_code, 0);
  EXPECT_NE(convert.err.find("cannot write '" + fifo + "': it is a FIFO that no process reads"),
            std::string::npos)
      << convert.err;
  // With a reader (this test; O_RDWR opens at once and never sees an end of file): the profile goes
  // through the FIFO.
  const int reader = open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  std::atomic<bool> written{false};
  std::string got;
  std::thread drain([&] {
    char buffer[65536];
    for (;;) {
      const ssize_t n = read(reader, buffer, sizeof buffer);
      if (n > 0) {
        got.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (written.load()) break;
      pollfd p{reader, POLLIN, 0};
      poll(&p, 1, 100);
    }
  });
  const RunResult r = run({kHpctl, "--socket", hpd.dir() + "/none.sock", "record", "--no-report", "-o", fifo,
                           "--", cpu_split, "0.2"},
                          60);
  written.store(true);
  drain.join();
  close(reader);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(count_samples(json::parse(got, nullptr, false)), 0u) << got.substr(0, 200);
}

// A process of `user` running `body` (given a descriptor to report on); killed on destruction.
class UserProcess {
 public:
  UserProcess(const TestUser& user, const std::function<void(int)>& body) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      close(report[0]);
      if (setgroups(0, nullptr) != 0 || setresgid(user.gid, user.gid, user.gid) != 0 ||
          setresuid(user.uid, user.uid, user.uid) != 0)
        _exit(1);
      body(report[1]);
      for (;;) pause();
    }
    close(report[1]);
    report_ = report[0];
  }
  ~UserProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(report_);
  }
  UserProcess(const UserProcess&) = delete;
  UserProcess& operator=(const UserProcess&) = delete;

  // One line the body wrote, waited for up to timeout_s ("" when none came).
  std::string report_line(double timeout_s) const {
    std::string line;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{report_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      if (read(report_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

 private:
  pid_t pid_ = -1;
  int report_ = -1;
};

void say(int fd, const std::string& line) {
  const std::string text = line + "\n";
  [[maybe_unused]] const ssize_t n = write(fd, text.data(), text.size());
}

// Announces a 200-byte request and sends one byte of it every `interval_ms`; reports "closed MS TEXT"
// when hpd closes the connection (MS since the first byte, TEXT its last reply), or "open" after 100 bytes.
std::function<void(int)> trickle(const std::string& socket, int interval_ms) {
  return [socket, interval_ms](int report) {
    const int fd = connect_unix(socket);
    const char header[4] = {static_cast<char>(200), 0, 0, 0};
    if (fd < 0 || send(fd, header, 4, MSG_NOSIGNAL) != 4) {
      say(report, "cannot connect");
      return;
    }
    say(report, "connected");
    const auto t0 = std::chrono::steady_clock::now();
    std::string received;
    for (int i = 0; i < 100; ++i) {
      if (send(fd, "{", 1, MSG_NOSIGNAL) != 1) break;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, interval_ms) <= 0) continue;
      char buffer[4096];
      ssize_t n;
      while ((n = recv(fd, buffer, sizeof buffer, 0)) > 0) received.append(buffer, static_cast<size_t>(n));
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
      say(report,
          "closed " + std::to_string(ms.count()) + " " + (received.size() > 4 ? received.substr(4) : ""));
      return;
    }
    say(report, "open");
  };
}

TEST_F(RealUsers, TricklingConnectionIsClosedAtTheIdleLimit) {
  HpdStart start;
  start.config = "idle_timeout = 3\n";
  Hpd hpd(start);
  const UserProcess bob(bob_, trickle(hpd.socket(), 500));
  ASSERT_EQ(bob.report_line(20), "connected");
  // One byte every half second: whole requests count, so the connection is closed at the idle limit.
  const std::string line = bob.report_line(30);
  ASSERT_EQ(line.rfind("closed ", 0), 0u) << line << hpd.log();
  const double ms = std::stod(line.substr(7));
  EXPECT_GE(ms, 2500) << line;
  EXPECT_LT(ms, 10000) << line;
  EXPECT_NE(line.find("without a complete request (idle_timeout in hpd.conf)"), std::string::npos) << line;
  EXPECT_NE(line.find("\"code\":\"limit\""), std::string::npos) << line;
}

// As `user`: a record request of `pid` for `seconds` into `output`, a file of its own (or, when empty, a
// pipe of one page nobody reads), then nothing is ever read from the socket. Reports "sent".
std::function<void(int)> record_without_reading(const std::string& socket, const std::string& output,
                                                pid_t pid, double seconds) {
  return [=](int report) {
    int out = -1;
    if (!output.empty()) {
      out = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    } else if (int fds[2]; pipe2(fds, O_CLOEXEC) == 0) {
      fcntl(fds[1], F_SETPIPE_SZ, 4096);
      out = fds[1];  // the read end stays open, unread
    }
    const json request = {{"version", 1},
                          {"type", "record"},
                          {"fd", true},
                          {"args", {{"pids", {pid}}, {"duration_s", seconds}, {"output", "out.json"}}}};
    try {
      service::send_frame(connect_unix(socket), request.dump(), out);
      say(report, "sent");
    } catch (const std::exception&) {
      say(report, "cannot send");
    }
  };
}

TEST_F(RealUsers, ClientThatNeverReadsItsRepliesLosesItsSession) {
  HpdStart start;
  start.config = "client_timeout = 2\n";
  Hpd hpd(start);
  Background target(alice_.run_as({std::string(HPD_FIXTURE_DIR) + "/cpu_split", "120"}));
  ASSERT_TRUE(runs_executable(target.pid(), std::string(HPD_FIXTURE_DIR) + "/cpu_split"));
  const UserProcess alice(
      alice_, record_without_reading(hpd.socket(), hpd.out_dir() + "/unread.json", target.pid(), 120));
  ASSERT_EQ(alice.report_line(20), "sent");
  bool recording = false;
  for (int i = 0; i < 300 && !recording; ++i) {
    recording = hpd.status()["sessions"] == 1;
    if (!recording) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(recording) << hpd.log();
  const auto t0 = std::chrono::steady_clock::now();
  bool ended = false;
  while (!ended && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ended = hpd.status()["sessions"] == 0;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(ended) << "the session of a client that reads nothing still runs after 60 s" << hpd.log();
  EXPECT_LT(took, 20) << hpd.log();
  EXPECT_TRUE(hpd.wait_log("its replies stayed unread for client_timeout", 5)) << hpd.log();
}

// SIGTERM with hostile connections open: one trickling a byte every 2 s, one recording whose client
// reads neither its replies nor its output (a pipe of one page nobody reads). hpd stops within 2 s;
// the bound asserted leaves room for a loaded machine, and the figure is printed.
TEST_F(RealUsers, SigtermIsPromptBesideHostileConnections) {
  HpdStart start;
  start.config = "client_timeout = 300\n";  // idle_timeout and stop_timeout: the defaults, 60 s and 30 s
  Hpd hpd(start);
  Background target(alice_.run_as({std::string(HPD_FIXTURE_DIR) + "/cpu_split", "120"}));
  ASSERT_TRUE(runs_executable(target.pid(), std::string(HPD_FIXTURE_DIR) + "/cpu_split"));
  const UserProcess bob(bob_, trickle(hpd.socket(), 2000));
  ASSERT_EQ(bob.report_line(20), "connected");
  const UserProcess alice(alice_, record_without_reading(hpd.socket(), "", target.pid(), 120));
  ASSERT_EQ(alice.report_line(20), "sent");
  for (int i = 0; i < 300 && hpd.status()["samples"].get<uint64_t>() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GT(hpd.status()["samples"].get<uint64_t>(), 0u) << hpd.log();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a few more bytes trickled
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(hpd.terminate(60), 0) << hpd.log();
  const double stopped = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("hpd stopped %.2f s after SIGTERM beside a trickling and a non-reading client\n", stopped);
  EXPECT_LT(stopped, 5) << hpd.log();
  EXPECT_EQ(hpd.log().find("still busy after stop_timeout"), std::string::npos) << hpd.log();
}

// Bob asks to stop alice's session: the answer is the one for a session that does not exist, and names
// neither alice nor her uid; his sessions and status answers do not either.
TEST_F(RealUsers, StopOfAnotherUsersSessionSaysNothingOfHer) {
  Hpd hpd;
  Background target(alice_.run_as({std::string(HPD_FIXTURE_DIR) + "/cpu_split", "60"}));
  ASSERT_TRUE(runs_executable(target.pid(), std::string(HPD_FIXTURE_DIR) + "/cpu_split"));
  const std::string out = hpd.out_dir() + "/alice.json.gz";
  Background client(
      alice_.run_as(hpctl(hpd, {"record", "--no-report", "--pid", std::to_string(target.pid()), "-o", out})));
  json sessions;
  for (int i = 0; i < 300; ++i) {
    sessions = hpd.request({{"version", 1}, {"type", "sessions"}})["sessions"];
    if (sessions.size() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(sessions.size(), 1u) << hpd.log();
  const uint64_t id = sessions[0]["id"].get<uint64_t>();
  const std::string alice_uid = std::to_string(alice_.uid);
  auto says_nothing_of_alice = [&](const std::string& text) {
    return text.find(alice_uid) == std::string::npos && text.find(alice_.name) == std::string::npos &&
           text.find(std::to_string(target.pid())) == std::string::npos &&
           text.find(out) == std::string::npos;
  };
  const RunResult stop = run(bob_.run_as({kHpctl, "--socket", hpd.socket(), "stop", std::to_string(id)}));
  EXPECT_NE(stop.exit_code, 0);
  EXPECT_TRUE(says_nothing_of_alice(stop.out + stop.err)) << stop.out << stop.err;
  const RunResult missing = run(bob_.run_as({kHpctl, "--socket", hpd.socket(), "stop", "999"}));
  std::string expected = missing.err;
  for (size_t at; (at = expected.find("999")) != std::string::npos;)
    expected.replace(at, 3, std::to_string(id));
  EXPECT_EQ(stop.err, expected) << "the answer differs from that for a session that does not exist";
  // The raw answer too: not_found, the same words.
  const UserProcess raw(bob_, [&](int report) {
    const int fd = connect_unix(hpd.socket());
    service::send_frame(fd, json({{"version", 1}, {"type", "stop"}, {"session", id}}).dump());
    say(report, read_reply(fd, 10000).dump());
    service::send_frame(fd, json({{"version", 1}, {"type", "sessions"}}).dump());
    say(report, read_reply(fd, 10000).dump());
    service::send_frame(fd, json({{"version", 1}, {"type", "status"}}).dump());
    say(report, read_reply(fd, 10000).dump());
  });
  const std::string stop_reply = raw.report_line(20);
  EXPECT_NE(stop_reply.find("\"code\":\"not_found\""), std::string::npos) << stop_reply;
  EXPECT_TRUE(says_nothing_of_alice(stop_reply)) << stop_reply;
  const std::string sessions_reply = raw.report_line(20);
  EXPECT_NE(sessions_reply.find("\"sessions\":[]"), std::string::npos) << sessions_reply;
  const std::string status_reply = raw.report_line(20);
  EXPECT_NE(status_reply.find("\"type\":\"status\""), std::string::npos) << status_reply;
  EXPECT_TRUE(says_nothing_of_alice(status_reply)) << status_reply;
  EXPECT_EQ(hpd.status()["sessions"], 1) << "bob's stop stopped alice's session";
  EXPECT_TRUE(hpd.wait_log(
      "refused stopping session " + std::to_string(id) + " for uid " + std::to_string(bob_.uid), 5))
      << hpd.log();
  const RunResult own = run(alice_.run_as({kHpctl, "--socket", hpd.socket(), "stop", std::to_string(id)}));
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(client.wait(), 0);
}

TEST_F(RealUsers, CaptureOfAKilledHpdIsKeptIncompleteAndReadable) {
  Hpd hpd;
  const std::string out = hpd.out_dir() + "/partial.hpr";
  const std::string err = hpd.out_dir() + "/partial.err";
  Background client({"sh", "-c", "exec \"$@\" 2>" + err, "sh", "setpriv", "--reuid=" + alice_.name,
                     "--regid=" + alice_.name, "--init-groups", kHpctl, "--socket", hpd.socket(), "--daemon",
                     "record", "--no-report", "-o", out, "--", std::string(HPD_FIXTURE_DIR) + "/cpu_split",
                     "30"});
  // Until a few flushes are in the file.
  for (int i = 0; i < 300; ++i) {
    std::error_code ec;
    if (std::filesystem::file_size(out, ec) > 4096 && !ec) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  hpd.signal(SIGKILL);
  EXPECT_NE(client.wait(), 0);
  const std::string message = read_text(err);
  EXPECT_NE(message.find("is kept as far as it was written, marked incomplete"), std::string::npos)
      << message;
  ASSERT_TRUE(std::filesystem::exists(out)) << message;
  const CaptureContents capture = read_capture_file(out);
  EXPECT_FALSE(capture.info.complete);
  EXPECT_GT(capture.profile.samples.size(), 10u);
  const RunResult converted =
      run(alice_.run_as({kHpctl, "convert", out, "-o", hpd.out_dir() + "/partial.json"}));
  EXPECT_EQ(converted.exit_code, 0) << converted.err;
  EXPECT_NE(converted.err.find("the recording did not finish"), std::string::npos) << converted.err;
  EXPECT_GT(count_samples(testing::load_json_maybe_gzip(hpd.out_dir() + "/partial.json")), 10u);
}

TEST_F(RealUsers, FailedWritesAndBadInputsAreSaidAndLogged) {
  Hpd hpd;
  // A full disk: an 8 KiB file system for a profile that needs more. hpd logs it, the client hears it.
  const std::string small = hpd.dir() + "/small";
  ASSERT_EQ(mkdir(small.c_str(), 0755), 0);
  ASSERT_EQ(run({"mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", small}).exit_code, 0);
  const RunResult full = run(hpctl(hpd, {"record", "--no-report", "-o", small + "/big.json", "--",
                                         std::string(HPD_FIXTURE_DIR) + "/cpu_split", "3"}));
  run({"umount", small});
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
  EXPECT_TRUE(hpd.wait_log("No space left on device", 5)) << hpd.log();
  EXPECT_NE(hpd.log().find("session 1 of uid 0 failed"), std::string::npos) << hpd.log();

  // A configuration path that is a directory is an error, for --check-config and at start.
  const RunResult check = run({HPD_HPD_PATH, "--check-config", "--config", hpd.dir()});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_NE(check.err.find(hpd.dir() + ": is a directory"), std::string::npos) << check.err;
  const RunResult start =
      run({HPD_HPD_PATH, "--config", hpd.dir(), "--socket", hpd.dir() + "/other.sock"}, 20);
  EXPECT_EQ(start.exit_code, 1);
  EXPECT_NE(start.err.find("is a directory"), std::string::npos) << start.err;

  // A negative duration says what is expected.
  const RunResult negative = run({kHpctl, "record", "-d", "-1", "-o", hpd.dir() + "/x.json", "--", "true"});
  EXPECT_NE(negative.exit_code, 0) << negative.err;
  EXPECT_NE(negative.err.find("expected seconds, 0 or more"), std::string::npos) << negative.err;
  EXPECT_LT(negative.err.size(), 300u) << negative.err;

  // A corrupt profile names its file, also for a number no double holds.
  for (const char* text : {"{\"meta\": 1e999}", "{\"meta\": {\"interval\": \"x\"}"}) {
    const std::string path = hpd.dir() + "/corrupt.json";
    std::ofstream(path) << text;
    ASSERT_EQ(run({"gzip", "-f", path}).exit_code, 0);
    const RunResult r = run({kHpctl, "convert", path + ".gz", "-o", hpd.dir() + "/c.collapsed"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(path + ".gz"), std::string::npos) << text << ": " << r.err;
  }
}

// The calls table of a profile, from `hpctl report --json`: function -> (calls, its callers' calls).
struct CallsRow {
  uint64_t calls = 0;
  std::map<std::string, uint64_t> callers;
  json latency;
  bool operator==(const CallsRow& o) const { return calls == o.calls && callers == o.callers; }
};

std::map<std::string, CallsRow> calls_rows(const std::string& profile, std::string& counter) {
  const RunResult r = run({kHpctl, "report", "--json", "--limit", "0", profile});
  if (r.exit_code != 0) throw std::runtime_error("hpctl report " + profile + ": " + r.err);
  const json doc = json::parse(r.out);
  counter = doc["calls"].value("counter", "");
  std::map<std::string, CallsRow> rows;
  for (const json& row : doc["calls"]["rows"]) {
    CallsRow& out = rows[row["name"].get<std::string>()];
    out.calls = row["calls"].get<uint64_t>();
    for (const json& c : row["callers"])
      out.callers[c["name"].get<std::string>()] = c["calls"].get<uint64_t>();
    if (row.contains("latency")) out.latency = row["latency"];
  }
  return rows;
}

std::string describe(const std::map<std::string, CallsRow>& rows) {
  std::string text;
  for (const auto& [name, row] : rows) {
    text += name + " " + std::to_string(row.calls) + " <-";
    for (const auto& [caller, n] : row.callers) text += " " + caller + ":" + std::to_string(n);
    text += "\n";
  }
  return text;
}

// A user's `hpctl record --calls -- CMD` through hpd: hpctl preloads hpd's runtime into the command it
// starts and hands hpd the table, so the calls are counted in-process, exactly as root's local
// recording counts them, and timed: the latency matches what the program measured itself, with the
// tolerances of CallsRuntime.LatencyMatchesWhatTheProgramMeasured (avg 5%, p95 10%).
TEST_F(RealUsers, UsersCallsThroughHpdAreCountedAndTimedInProcess) {
  const time_t started = ::time(nullptr);
  Hpd hpd;
  for (const char* fixture : {"gcc_fentry", "gcc_pg", "clang_pg"}) {
    SCOPED_TRACE(fixture);
    const std::string program = std::string(HPD_CALLS_FIXTURES) + "/" + fixture;
    const std::string mine = hpd.out_dir() + "/" + fixture + "-alice.json.gz";
    const std::string local = hpd.out_dir() + "/" + fixture + "-local.json.gz";
    const RunResult a = run(alice_.run_as(
        hpctl(hpd, {"record", "--calls", "--no-report", "-o", mine, "--", program, "1000", "250"})));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_NE(a.err.find("recorded by hpd"), std::string::npos) << a.err;
    EXPECT_NE(a.err.find("call counts (hpd's runtime, in-process): 1253 calls"), std::string::npos) << a.err;
    const RunResult l = run(
        {kHpctl, "--local", "record", "--calls", "--no-report", "-o", local, "--", program, "1000", "250"});
    ASSERT_EQ(l.exit_code, 0) << l.err;
    std::string counter_mine, counter_local;
    const std::map<std::string, CallsRow> rows_mine = calls_rows(mine, counter_mine);
    const std::map<std::string, CallsRow> rows_local = calls_rows(local, counter_local);
    EXPECT_EQ(counter_mine, "runtime");
    EXPECT_EQ(counter_local, "runtime");
    EXPECT_EQ(rows_mine, rows_local) << "through hpd:\n"
                                     << describe(rows_mine) << "local:\n"
                                     << describe(rows_local) << "hpd's client said:\n"
                                     << a.err << "the local recording said:\n"
                                     << l.err;
    ASSERT_EQ(rows_mine.count("callee"), 1u) << describe(rows_mine);
    EXPECT_EQ(rows_mine.at("callee").callers.at("caller_a"), 1000u);
    EXPECT_EQ(rows_mine.at("callee").callers.at("caller_b"), 250u);
    EXPECT_EQ(rows_mine.at("callee").latency.value("timed_calls", 0u), 1250u);
  }
  // The tables hpctl made (as alice) are gone with the recordings. (Not those of an earlier run's hpctl
  // killed with SIGKILL, whose user had the uid alice was given again.)
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) == 0 && st.st_uid == alice_.uid && st.st_ctim.tv_sec >= started) {
      EXPECT_EQ(entry.path().filename().string().rfind("hpd-calls-", 0), std::string::npos) << entry.path();
    }
  }

  const std::string truth = hpd.out_dir() + "/truth.txt";
  const std::string timed = hpd.out_dir() + "/latency.json.gz";
  const RunResult t =
      run(alice_.run_as(hpctl(hpd, {"record", "--calls", "--no-report", "-o", timed, "--",
                                    std::string(HPD_CALLS_FIXTURES) + "/latency_fentry", truth})));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  std::string counter;
  const std::map<std::string, CallsRow> rows = calls_rows(timed, counter);
  EXPECT_EQ(counter, "runtime");
  std::ifstream in(truth);
  std::string name;
  uint64_t calls = 0, avg_ns = 0, p95_ns = 0, total_ns = 0;
  int checked = 0;
  while (in >> name >> calls >> avg_ns >> p95_ns >> total_ns) {
    if (name != "spin_for" && name != "sleep_for") continue;
    SCOPED_TRACE(name);
    ++checked;
    ASSERT_EQ(rows.count(name), 1u) << describe(rows);
    const json& latency = rows.at(name).latency;
    ASSERT_TRUE(latency.is_object()) << describe(rows);
    EXPECT_EQ(rows.at(name).calls, calls);
    EXPECT_EQ(latency["timed_calls"].get<uint64_t>(), calls);
    EXPECT_NEAR(latency["avg_ns"].get<double>(), double(avg_ns), 0.05 * double(avg_ns)) << latency.dump();
    EXPECT_NEAR(latency["p95_ns"].get<double>(), double(p95_ns), 0.10 * double(p95_ns)) << latency.dump();
  }
  EXPECT_EQ(checked, 2);
}

// A user's `hpctl record --alloc -- CMD` through hpd: hpctl (as the user) makes the runtime's
// allocation log, preloads the runtime hpd names into the command it starts and hands hpd the log's
// descriptor; hpd reads it as untrusted data. Each function's allocated bytes, and the leaking
// function's live bytes, are the fixture's own truth within five standard deviations of the sampling
// (as AllocRecord.EstimatesMatchTheTruth* check a local recording), the freeing functions have nothing
// live, and the user's log is gone afterwards.
TEST_F(RealUsers, UsersAllocationsThroughHpdMatchTheProgramsTruth) {
  Hpd hpd;
  const std::string truth_file = hpd.out_dir() + "/alloc-truth.txt";
  const std::string out = hpd.out_dir() + "/alloc-alice.hpr";
  const RunResult a = run(
      alice_.run_as(hpctl(hpd, {"record", "--alloc", "--alloc-mean", "4096", "--no-report", "-o", out, "--",
                                std::string(HPD_CALLS_FIXTURES) + "/alloc_nofp", "truth", truth_file})));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("recorded by hpd"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("allocations (hpd's runtime, in-process): "), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("1 process start(s)"), std::string::npos) << a.err;
  const RunResult rep = run({kHpctl, "report", "--json", "--limit", "0", out});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json doc = json::parse(rep.out);
  ASSERT_EQ(doc["allocations"]["mean_bytes"], 4096) << rep.out;
  std::ifstream in(truth_file);
  std::string name;
  double blocks = 0, size = 0, leaked = 0;
  int checked = 0;
  while (in >> name >> blocks >> size >> leaked) {
    SCOPED_TRACE(name);
    ++checked;
    // A block of `size` bytes is sampled with p = 1 - exp(-size/mean) and weighs size/p: over n blocks
    // the estimate's standard deviation is size * sqrt(n (1 - p) / p). Five of them, plus a byte.
    const auto allowed = [&](double n) {
      const double p = -std::expm1(-size / 4096.0);
      return 5.0 * size * std::sqrt(n * (1.0 - p) / p) + 1.0;
    };
    const json* row = nullptr;
    for (const json& r : doc["allocations"]["rows"])
      if (r["name"] == name) row = &r;
    ASSERT_NE(row, nullptr) << rep.out;
    EXPECT_NEAR((*row)["total_bytes"].get<double>(), blocks * size, allowed(blocks));
    EXPECT_NEAR((*row)["live_total_bytes"].get<double>(), leaked * size, leaked == 0 ? 0.0 : allowed(leaked));
  }
  EXPECT_EQ(checked, 3);
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) == 0 && st.st_uid == alice_.uid) {
      EXPECT_EQ(entry.path().filename().string().rfind("hpd-alloc-", 0), std::string::npos) << entry.path();
    }
  }
}

// A user's `hpctl record --alloc --pid PID` of her own running process through hpd: the probes hpd
// places in it (as root) give the byte shares and live bytes of the program's truth, as for root
// (AllocRecord.PidThroughHpdAttachesAndMatchesTheTruth: the same checks).
TEST_F(RealUsers, UsersAllocPidThroughHpdMatchesTheProgramsTruth) {
  Hpd hpd;
  const int links_before = hpd.fd_counts().bpf_link;
  check_alloc_pid_attach({kHpctl, std::string(HPD_CALLS_FIXTURES) + "/alloc_pid_nofp", hpd.socket(),
                          alice_.run_as({}), alice_.uid, alice_.gid});
  EXPECT_EQ(hpd.fd_counts().bpf_link, links_before) << "the probes are gone with the recording";
}

// Her `--alloc --pid` of a process she may not trace (another user's, root's, one of hers that is
// not dumpable, one that keeps a saved uid of root) is refused with the reason, nothing is written,
// and no probe ever enters it: the target (alloc_pid_fixture.c's watch mode) looks at the first bytes
// of its allocator's functions every millisecond while the request is made and says whether they ever
// changed. Her own process under the same watch sees the probes come (the watch can see them).
TEST_F(RealUsers, AllocPidOfProcessesTheUserMayNotTraceIsRefusedAndPlacesNoProbe) {
  Hpd hpd;
  const int links_before = hpd.fd_counts().bpf_link;
  const std::string fixture = std::string(HPD_CALLS_FIXTURES) + "/alloc_pid_nofp";
  struct Watched {
    std::unique_ptr<testing::TempDir> dir;
    std::unique_ptr<Background> process;
  };
  const auto start = [&](const TestUser* user, const std::string& mode) {
    Watched w;
    w.dir = std::make_unique<testing::TempDir>("hpd-alloc-watch");
    std::vector<std::string> argv = {fixture, w.dir->path(), mode};
    if (user != nullptr) {
      EXPECT_EQ(::chown(w.dir->path().c_str(), user->uid, user->gid), 0);
      argv = user->run_as(argv);
    }
    w.process = std::make_unique<Background>(argv);
    EXPECT_TRUE(wait_for_file(w.dir->file("ready"), 60, w.process->pid())) << mode;
    return w;
  };
  // What the watcher saw: 0 its allocator untouched, 8 a probe in it.
  const auto verdict = [](Watched& w) {
    std::ofstream(w.dir->file("stop")).close();
    return w.process->wait();
  };
  const auto record = [&](pid_t pid, const std::string& name) {
    return run(alice_.run_as(hpctl(hpd, {"record", "--alloc", "--no-report", "--pid", std::to_string(pid),
                                         "-d", "1", "-o", hpd.out_dir() + "/" + name})));
  };
  Watched bobs = start(&bob_, "watch");
  Watched roots = start(nullptr, "watch");
  Watched nondumpable = start(&alice_, "watch-nondumpable");
  BackgroundOptions wait_ready;
  wait_ready.ready_line = "ready";
  Background saved_root(
      {kCredsTarget, "saved-root", std::to_string(alice_.uid), std::to_string(alice_.gid), "60"}, wait_ready);
  ASSERT_TRUE(saved_root.ready());

  const RunResult other = record(bobs.process->pid(), "bob.hpr");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("may only record your own processes"), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("runs with real uid " + std::to_string(bob_.uid)), std::string::npos) << other.err;
  const RunResult root = record(roots.process->pid(), "root.hpr");
  EXPECT_NE(root.exit_code, 0);
  EXPECT_NE(root.err.find("runs with real uid 0"), std::string::npos) << root.err;
  const RunResult dump = record(nondumpable.process->pid(), "nondumpable.hpr");
  EXPECT_NE(dump.exit_code, 0);
  EXPECT_NE(dump.err.find("is not dumpable"), std::string::npos) << dump.err;
  const RunResult saved = record(saved_root.pid(), "saved.hpr");
  EXPECT_NE(saved.exit_code, 0);
  EXPECT_NE(saved.err.find("runs with saved uid 0"), std::string::npos) << saved.err;
  for (const char* name : {"bob.hpr", "root.hpr", "nondumpable.hpr", "saved.hpr"})
    EXPECT_FALSE(std::filesystem::exists(hpd.out_dir() + "/" + name)) << name;
  EXPECT_EQ(verdict(bobs), 0) << "a probe entered bob's process";
  EXPECT_EQ(verdict(roots), 0) << "a probe entered root's process";
  EXPECT_EQ(verdict(nondumpable), 0) << "a probe entered the non-dumpable process";
  EXPECT_EQ(hpd.fd_counts().bpf_link, links_before);

  // Her own process: recorded, and the watcher saw the probes.
  Watched own = start(&alice_, "watch");
  const RunResult mine = record(own.process->pid(), "own.hpr");
  EXPECT_EQ(mine.exit_code, 0) << mine.err << hpd.log();
  EXPECT_NE(mine.err.find("allocations (uprobes on pid " + std::to_string(own.process->pid())),
            std::string::npos)
      << mine.err;
  EXPECT_EQ(verdict(own), 8) << "the watch did not see the probes of a recording it was under";
}

// The uprobe_multi links among `pid`'s descriptors (hpd's allocation probes are one per allocator
// module), by their fdinfo.
int uprobe_multi_links(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fdinfo", ec)) {
    const std::string info = read_text_file(fd.path().string());
    if (info.find("link_type:\tuprobe_multi") != std::string::npos) ++n;
  }
  return n;
}

// Her `--alloc --pid` of her own shell, which then executes a set-user-ID root program that allocates
// (alloc_pid_fixture.c's privileged mode): nothing of that program's allocations reaches her (the
// probes follow the pid into the new program; what they see there is not hers), as no CPU sample of
// it does; and the probes are taken out of the program at its exec, not at the end of her recording.
TEST_F(RealUsers, AllocPidOfAProcessThatExecutesASetuidProgramGivesNothingOfIt) {
  Hpd hpd;
  const int links_before = hpd.fd_counts().bpf_link;
  const std::string privileged = hpd.dir() + "/alloc_pid_suid";
  std::filesystem::copy_file(std::string(HPD_CALLS_FIXTURES) + "/alloc_pid_nofp", privileged);
  ASSERT_EQ(chown(privileged.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(privileged.c_str(), 04755), 0);
  const testing::TempDir dir("hpd-alloc-exec");
  ASSERT_EQ(::chown(dir.path().c_str(), alice_.uid, alice_.gid), 0);
  Background shell(alice_.run_as({"/bin/sh", "-c",
                                  "echo ready > \"$0/ready\"; until [ -e \"$0/go\" ]; do sleep 0.05; done; "
                                  "exec \"$1\" \"$0\" privileged",
                                  dir.path(), privileged}));
  ASSERT_TRUE(wait_for_file(dir.file("ready"), 60, shell.pid()));
  const std::string out = hpd.out_dir() + "/exec.hpr";
  const std::string err = dir.file("hpctl.err");
  Background recorder(
      alice_.run_as({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>'" + err + "'", kHpctl, "--socket", hpd.socket(),
                     "--daemon", "record", "--alloc", "--alloc-mean", "4096", "--no-report", "-o", out,
                     "--pid", std::to_string(shell.pid()), "-d", "600"}));
  // The probes are in once hpd holds their links.
  bool attached = false;
  for (int i = 0; i < 3000 && !attached && process_running(recorder.pid()); ++i) {
    attached = hpd.fd_counts().bpf_link > links_before;
    if (!attached) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(attached) << read_text_file(err) << hpd.log();
  bool probed = false;
  for (int i = 0; i < 3000 && !probed && process_running(recorder.pid()); ++i) {
    probed = uprobe_multi_links(hpd.pid()) > 0;
    if (!probed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(probed) << "hpd holds no uprobe_multi link: " << read_text_file(err) << hpd.log();
  const pid_t shell_pid = shell.pid();
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t go_ns = uint64_t(now.tv_sec) * 1000000000u + uint64_t(now.tv_nsec);
  std::ofstream(dir.file("go")).close();
  ASSERT_TRUE(wait_for_file(dir.file("done"), 120, shell.pid()));
  // The program has done its allocating and waits for "stop": the recording goes on, the probes are
  // out of it (hpd's reader looks every 100 ms; the bound only ends a failing test).
  bool removed = false;
  for (int i = 0; i < 1500 && !removed && process_running(recorder.pid()); ++i) {
    removed = uprobe_multi_links(hpd.pid()) == 0;
    if (!removed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(process_running(recorder.pid())) << read_text_file(err);
  EXPECT_TRUE(removed) << "the allocation probes stayed in the set-user-ID program after its exec";
  recorder.terminate(120);
  const std::string summary = read_text_file(err);
  std::ofstream(dir.file("stop")).close();
  EXPECT_EQ(shell.wait(), 0);
  if (std::filesystem::exists(out)) {
    const CaptureContents capture = read_capture_file(out);
    // The capture keeps no exec time: what was allocated after the test let the shell go on is
    // its last loop's (a few KiB), not the 275 MiB of the set-user-ID program.
    double bytes_after_go = 0;
    size_t samples_after_go = 0;
    for (const RawAllocation& a : capture.profile.allocations) {
      if (a.pid != shell_pid || a.time_ns < go_ns) continue;
      bytes_after_go += double(a.size);
      ++samples_after_go;
    }
    EXPECT_LT(bytes_after_go, 1 << 20) << samples_after_go << " samples; " << summary;
    EXPECT_NE(
        summary.find("its allocations from then on were not recorded (the probes were taken out of it at "
                     "that exec)"),
        std::string::npos)
        << summary;
  } else {
    EXPECT_NE(summary.find("the recording was stopped and discarded"), std::string::npos) << summary;
  }
  EXPECT_EQ(hpd.fd_counts().bpf_link, links_before);
}

// Her `--calls --pid` of her own shell, which executes a set-user-ID root copy of calls_pid_latency (an
// instrumented program that waits for probes to come, then says so in DIR/probed), while a child of the
// shell, once that exec is done, executes her own copy: hpd probes her copy (in a rescan of the targets
// that comes after the set-user-ID exec) and never the set-user-ID one, counts her copy's calls
// exactly, and says why the other was not counted. (Or, when hpd's check of the target finds the pid
// running as root before the exec's record is read, it discards her whole recording: also safe, and
// said; the set-user-ID program is not probed either way, and her copy may have been by then.)
TEST_F(RealUsers, CallsPidOfAProcessThatExecutesASetuidProgramNeitherProbesNorCountsIt) {
  Hpd hpd;
  const testing::TempDir dir("hpd-calls-exec");
  const std::string privileged = hpd.dir() + "/calls_suid";
  const std::string own = dir.file("calls_own");
  std::filesystem::copy_file(std::string(HPD_CALLS_FIXTURES) + "/pid_latency_nop", privileged);
  std::filesystem::copy_file(std::string(HPD_CALLS_FIXTURES) + "/pid_latency_nop", own);
  ASSERT_EQ(chown(privileged.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(privileged.c_str(), 04755), 0);
  for (const std::string& path : {dir.path(), own, dir.file("a"), dir.file("b")}) {
    if (path != own && path != dir.path()) std::filesystem::create_directory(path);
    ASSERT_EQ(::chown(path.c_str(), alice_.uid, alice_.gid), 0) << path;
  }
  Background shell(
      alice_.run_as({"/bin/sh", "-c",
                     "echo ready > \"$0/ready\"; until [ -e \"$0/go\" ]; do sleep 0.05; done; "
                     "( until [ \"$(cat /proc/$$/comm 2>/dev/null)\" = calls_suid ]; do sleep 0.01; done; "
                     "exec \"$1\" \"$0/a\" ) & exec \"$2\" \"$0/b\"",
                     dir.path(), own, privileged}));
  // Both fixtures wait up to 300 s for probes to come or go, holding the test's output: ended with it.
  struct KillTheFixtures {
    std::string dir;
    ~KillTheFixtures() { run({"pkill", "-KILL", "-f", dir}); }
  } kill_the_fixtures{dir.path()};
  ASSERT_TRUE(wait_for_file(dir.file("ready"), 60, shell.pid()));
  const std::string out = hpd.out_dir() + "/calls_exec.json.gz";
  const std::string err = dir.file("hpctl.err");
  Background recorder(alice_.run_as({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>'" + err + "'", kHpctl,
                                     "--socket", hpd.socket(), "--daemon", "record", "--calls", "--no-report",
                                     "-o", out, "--pid", std::to_string(shell.pid()), "-d", "600"}));
  // The call counter holds its fork hook (a tracepoint link) once it follows the shell.
  bool following = false;
  for (int i = 0; i < 3000 && !following && process_running(recorder.pid()); ++i) {
    following = hpd.fd_counts().bpf_link > 0 && std::filesystem::exists(dir.file("ready"));
    if (!following) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(following) << read_text_file(err) << hpd.log();
  std::ofstream(dir.file("go")).close();
  // Her copy is probed and has made its calls: the rescan that probed it came after the other exec.
  const bool done = wait_for_file(dir.file("a/done"), 120, recorder.pid());
  EXPECT_FALSE(std::filesystem::exists(dir.file("b/probed")))
      << "hpd probed the set-user-ID program her target executed";
  if (!done && !process_running(recorder.pid())) {
    recorder.wait();
    EXPECT_NE(read_text_file(err).find("the recording was stopped and discarded"), std::string::npos)
        << read_text_file(err) << hpd.log();
    EXPECT_FALSE(std::filesystem::exists(out));
    return;
  }
  ASSERT_TRUE(done) << read_text_file(err) << hpd.log();
  recorder.terminate(120);
  const std::string summary = read_text_file(err);
  const pid_t shell_pid = shell.pid();
  shell.kill();  // the set-user-ID program waits for probes that do not come
  shell.wait();
  if (summary.find("the recording was stopped and discarded") != std::string::npos) {
    // The same safe outcome as above, come after her copy's calls: a flush's check found the shell
    // running as root before the exec's record was read (seen once in about 60 runs, with cold caches).
    EXPECT_FALSE(std::filesystem::exists(out)) << summary;
    return;
  }
  EXPECT_NE(summary.find("pid " + std::to_string(shell_pid) +
                         " executed a program that runs with credentials other than yours; its calls from "
                         "then on were not counted"),
            std::string::npos)
      << summary;
  ASSERT_TRUE(std::filesystem::exists(out)) << summary;
  std::string counter;
  const std::map<std::string, CallsRow> rows = calls_rows(out, counter);
  EXPECT_EQ(counter, "uprobes");
  std::map<std::string, uint64_t> truth;
  {
    std::istringstream lines(read_text_file(dir.file("a/truth")));
    std::string name;
    uint64_t n = 0;
    while (lines >> name >> n) {
      truth[name] = n;
      lines.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
  }
  ASSERT_EQ(truth.size(), 3u) << read_text_file(dir.file("a/truth"));
  for (const auto& [name, n] : truth) {
    const auto it = rows.find(name);
    EXPECT_EQ(it == rows.end() ? 0 : it->second.calls, n) << name << ": her copy's calls, counted once";
  }
}

// The runtime's table lives in memory the user's program writes: a program that overwrites it while
// hpd records (its header, values no runtime writes, every slot and entry filled, the file truncated)
// gets a recording with a message saying so, never a crash, a hang or unbounded memory of hpd; another
// user's session running meanwhile counts and times its calls exactly.
TEST_F(RealUsers, HostileCallTableIsReadSafely) {
  Hpd hpd;
  const std::string bobs_truth = hpd.out_dir() + "/bob-truth.txt";
  const std::string bobs = hpd.out_dir() + "/bob.json.gz";
  RunResult bob;
  std::thread bob_thread([&] {
    bob = run(bob_.run_as(hpctl(hpd, {"record", "--calls", "--no-report", "-o", bobs, "--",
                                      std::string(HPD_CALLS_FIXTURES) + "/latency_fentry", bobs_truth})));
  });
  // A failed assertion below returns early: bob's thread is joined then too (a joinable thread's
  // destructor would abort the test program and leave its users behind).
  struct JoinOnExit {
    std::thread& thread;
    ~JoinOnExit() {
      if (thread.joinable()) thread.join();
    }
  } join_bob{bob_thread};
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"header", {"the runtime's table was overwritten (its header no longer holds hpd's layout"}},
      {"truncate", {"the runtime's table was truncated while recording"}},
      {"values",
       {"thread slot(s) of the runtime's table name processes this recording does not follow (pid 1)",
        "the runtime's table held values no runtime writes",
        "the runtime's table holds more than hpd keeps"}},
      {"edges", {"65536 caller->callee edges", "the runtime's table holds more than hpd keeps"}}};
  for (const auto& [mode, messages] : cases) {
    SCOPED_TRACE(mode);
    const std::string out = hpd.out_dir() + "/scribble-" + mode + ".json.gz";
    const auto started = std::chrono::steady_clock::now();
    const RunResult r =
        run(alice_.run_as(hpctl(hpd, {"record", "--calls", "--no-report", "-o", out, "--",
                                      std::string(HPD_CALLS_FIXTURES) + "/scribble_fentry", mode, "300"})),
            120);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("scribbled " + mode), std::string::npos) << r.out;
    for (const std::string& m : messages) EXPECT_NE(r.err.find(m), std::string::npos) << m << "\n" << r.err;
    EXPECT_LT(seconds, 30.0) << r.err;  // 2 s here for the biggest table hpd keeps
    // The sampled profile is delivered and readable.
    EXPECT_EQ(run({kHpctl, "report", "--limit", "1", out}).exit_code, 0);
    ASSERT_EQ(::kill(hpd.pid(), 0), 0);
    EXPECT_EQ(hpd.status()["type"], "status");
  }
  bob_thread.join();
  // What a table can make hpd hold is bounded (kClientLimits: 65536 edges and functions): about
  // 130 MiB at its peak here; keeping 1 Mi edges of the 'edges' table instead took 870 MiB.
  std::ifstream status("/proc/" + std::to_string(hpd.pid()) + "/status");
  std::string line;
  uint64_t peak_kib = 0;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) peak_kib = std::stoull(line.substr(6));
  EXPECT_GT(peak_kib, 0u);
#ifndef __SANITIZE_ADDRESS__
  // Not in the ASan pass (packaging/asan-tests.sh), whose shadow memory and quarantine of freed blocks
  // inflate hpd's resident memory (482 MiB there); the tables are still read there, under ASan.
  EXPECT_LT(peak_kib, 400u * 1024) << "hpd's peak resident memory";
#endif

  ASSERT_EQ(bob.exit_code, 0) << bob.err;
  EXPECT_EQ(bob.err.find("wrote into"), std::string::npos) << bob.err;
  std::string counter;
  const std::map<std::string, CallsRow> rows = calls_rows(bobs, counter);
  EXPECT_EQ(counter, "runtime");
  ASSERT_EQ(rows.count("spin_for"), 1u) << describe(rows);
  ASSERT_EQ(rows.count("sleep_for"), 1u) << describe(rows);
  EXPECT_EQ(rows.at("spin_for").calls, 200u);
  EXPECT_EQ(rows.at("spin_for").latency.value("timed_calls", 0u), 200u);
  EXPECT_EQ(rows.at("sleep_for").calls, 100u);
  EXPECT_EQ(rows.at("sleep_for").callers.at("main"), 100u);
  EXPECT_EQ(hpd.log().find("terminate"), std::string::npos) << hpd.log();
}

// Issue #29: a client's recording is symbolized only from files the client could read itself.
// An execute-only binary (0711) with a debug file only root may read, and a readable stripped
// binary whose debug file only root may read: alice's profile through hpd names neither function
// (as her own local recording would not), the summary says which files she cannot read; root's
// recording of the same processes has the names.
TEST_F(RealUsers, ClientGetsNoNamesFromFilesItCannotRead) {
  const testing::TempDir tmp("hpd-unreadable");
  const std::string dir = tmp.path();
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  std::ofstream(dir + "/app.c") << R"(
__attribute__((noinline)) void TOPSECRET_root_only_function(volatile unsigned long* x) {
  for (;;) *x += 1;
}
int main(void) {
  volatile unsigned long x = 0;
  TOPSECRET_root_only_function(&x);
  return 0;
}
)";
  // app: execute-only; app2: readable. Both stripped, their names only in a debug file
  // (.gnu_debuglink) that only root may read.
  for (const std::string name : {"app", "app2"}) {
    const std::string bin = dir + "/" + name;
    ASSERT_EQ(run({"gcc", "-O2", "-g", "-o", bin, dir + "/app.c"}).exit_code, 0);
    ASSERT_EQ(run({"objcopy", "--only-keep-debug", bin, bin + ".debug"}).exit_code, 0);
    ASSERT_EQ(run({"objcopy", "--strip-all", "--add-gnu-debuglink=" + bin + ".debug", bin}).exit_code, 0);
    ASSERT_EQ(chmod((bin + ".debug").c_str(), 0600), 0);
    ASSERT_EQ(chmod(bin.c_str(), name == "app" ? 0711 : 0755), 0);
    ASSERT_EQ(run({"sh", "-c", "! nm " + bin + " 2>/dev/null | grep -q TOPSECRET"}).exit_code, 0)
        << bin << " still names the function";
  }
  ASSERT_NE(run(alice_.run_as({"cat", dir + "/app"})).exit_code, 0) << "alice can read the 0711 binary";
  ASSERT_NE(run(alice_.run_as({"cat", dir + "/app2.debug"})).exit_code, 0);

  // As root with every capability (held files reached through /proc/PID/map_files), and with
  // only the bounding set of packaging/systemd/hpd.service (through /proc/PID/root).
  HpdStart unit_caps;
  unit_caps.wrapper = with_unit_capabilities(HPD_UNIT_FILE);
  for (const std::string name : {"app", "app2"})
    for (const HpdStart& start : {HpdStart{}, unit_caps}) {
      SCOPED_TRACE(name + (start.wrapper.empty() ? " (all capabilities)" : " (the unit's capabilities)"));
      Hpd hpd(start);
      Background spinning(alice_.run_as({dir + "/" + name}));
      const std::string pid = std::to_string(spinning.pid());
      // Until setpriv has executed the program.
      for (int i = 0; i < 200; ++i) {
        std::error_code ec;
        if (std::filesystem::read_symlink("/proc/" + pid + "/exe", ec) == dir + "/" + name) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      const std::string mine = hpd.out_dir() + "/alice-" + name + ".json";
      const RunResult r =
          run(alice_.run_as(hpctl(hpd, {"record", "--no-report", "--pid", pid, "-d", "1", "-o", mine})));
      ASSERT_EQ(r.exit_code, 0) << r.err << hpd.log();
      const std::string text = read_text(mine);
      EXPECT_EQ(text.find("TOPSECRET"), std::string::npos) << "a name from a file alice cannot read";
      EXPECT_NE(text.find("\"" + name + "+0x"), std::string::npos) << "no " << name << "+0x... frame";
      const std::string unreadable = dir + "/" + (name == "app" ? "app" : "app2.debug");
      EXPECT_NE(r.err.find("not symbolized: you cannot read " + unreadable), std::string::npos) << r.err;

      const std::string roots = hpd.out_dir() + "/root-" + name + ".json";
      const RunResult root = run(hpctl(hpd, {"record", "--no-report", "--pid", pid, "-d", "1", "-o", roots}));
      ASSERT_EQ(root.exit_code, 0) << root.err;
      EXPECT_NE(read_text(roots).find("TOPSECRET_root_only_function"), std::string::npos)
          << "root's recording lacks the name";
      EXPECT_EQ(root.err.find("you cannot read"), std::string::npos) << root.err;
    }
}

// Issue #35: debuginfod through hpd with its own setting. alice's program is stripped; its debug file
// is only on a debuginfod server (the real one, on loopback in a private network namespace). With
// debuginfod_urls in hpd.conf (and no DEBUGINFOD_URLS in hpd's environment) her recording through
// hpd names the function, the download in hpd's state directory (opened with hpd's rights: hpd's
// cache is not hers); without the key, hpd asks no server, even one its environment names.
TEST_F(RealUsers, DebuginfodUrlsOfHpdConfNameAUsersStrippedProgram) {
  if (const std::string tool = testing::debuginfod_session_missing_tool(); !tool.empty())
    FAIL() << tool << " is not installed (packaging/install-deps.sh)";
  const testing::TempDir tmp("hpd-debuginfod");
  const std::string dir = tmp.path();
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  for (const char* sub : {"/served", "/out", "/state-with", "/state-without"})
    std::filesystem::create_directories(dir + sub);
  ASSERT_EQ(chmod((dir + "/out").c_str(), 0777), 0);
  std::ofstream(dir + "/app.c") << R"(
#include <time.h>
static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}
__attribute__((noinline)) void hpdtest_served_function(volatile unsigned long* x) {
  const double end = cpu_s() + 0.5;
  while (cpu_s() < end) *x += 1;
}
int main(void) {
  volatile unsigned long x = 0;
  hpdtest_served_function(&x);
  return 0;
}
)";
  // served/app: the unstripped build, on the server only; app: the same file stripped (same build-id).
  ASSERT_EQ(run({"gcc", "-O2", "-g", "-o", dir + "/served/app", dir + "/app.c"}).exit_code, 0);
  ASSERT_EQ(run({"objcopy", "--strip-all", dir + "/served/app", dir + "/app"}).exit_code, 0);
  ASSERT_EQ(chmod((dir + "/app").c_str(), 0755), 0);
  ASSERT_EQ(run({"sh", "-c", "! nm " + dir + "/app 2>/dev/null | grep -q hpdtest_served_function"}).exit_code,
            0);
  std::ofstream(dir + "/without.conf") << "state_directory = " << dir << "/state-without\n";

  // Inside the server's namespace: hpd with the key (its environment without DEBUGINFOD_URLS), then
  // hpd without it (its environment naming the server); each time alice records her program.
  const std::string command =
      "printf 'state_directory = " + dir + "/state-with\\ndebuginfod_urls = %s\\n' \"$DEBUGINFOD_URLS\" > " +
      dir + "/with.conf\n" +
      "one() {\n"
      "  rm -f " +
      dir +
      "/sock\n"
      "  env -u DEBUGINFOD_CACHE_PATH $2 '" +
      std::string(HPD_HPD_PATH) + "' --config " + dir + "/$1.conf --socket " + dir + "/sock > " + dir +
      "/hpd-$1.log 2>&1 & hpd=$!\n"
      "  while [ ! -S " +
      dir +
      "/sock ] && kill -0 $hpd 2>/dev/null; do sleep 0.1; done\n"
      "  setpriv --reuid=" +
      alice_.name + " --regid=" + alice_.name + " --init-groups '" + kHpctl + "' --socket " + dir +
      "/sock --daemon record --no-report -o " + dir + "/out/$1.json -- " + dir + "/app > " + dir +
      "/hpctl-$1.log 2>&1; rc=$?\n"
      "  kill $hpd; wait $hpd; return $rc\n"
      "}\n"
      "one with '-u DEBUGINFOD_URLS' && one without ''";
  const RunResult r =
      run({"sh", "-c",
           testing::debuginfod_session(dir, dir + "/served", dir + "/served/app", "debuginfo", command, 300)},
          330);
  const std::string logs = read_text(dir + "/hpd-with.log") + read_text(dir + "/hpctl-with.log") +
                           read_text(dir + "/hpd-without.log") + read_text(dir + "/hpctl-without.log");
  ASSERT_EQ(r.exit_code, 0) << r.err << logs << read_text(dir + "/server.log");

  EXPECT_NE(read_text(dir + "/out/with.json").find("hpdtest_served_function"), std::string::npos)
      << "no name from the debuginfod server\n"
      << logs;
  EXPECT_NE(read_text(dir + "/hpd-with.log").find("debuginfod: asking http://127.0.0.1:"), std::string::npos)
      << logs;
  EXPECT_TRUE(std::filesystem::exists(dir + "/state-with/debuginfod"))
      << "the download is not in hpd's cache";
  const std::string without = read_text(dir + "/out/without.json");
  EXPECT_EQ(without.find("hpdtest_served_function"), std::string::npos)
      << "hpd asked the server of its environment";
  EXPECT_NE(without.find("\"app+0x"), std::string::npos) << "no app+0x... frame\n" << logs;
}

uint64_t peak_rss_bytes(pid_t pid) {
  return status_bytes(pid, "VmHWM:");
}

// Issue #29: a 250 MiB /tmp/perf-PID.map of a user's process made hpd grow by hundreds of MiB. It
// is read streaming now, keeping per session at most max_jit_symbols_mb (16 MiB by default) of
// symbols, each the one that names a sampled address: hpd's peak resident memory grows by less than
// 64 MiB over the same recording without the map, and the summary counts what was left out (here all
// but one symbol, the one starting closest below the spinning instruction).
TEST_F(RealUsers, HugeJitMapKeepsHpdWithinItsMemoryBound) {
  Hpd hpd;
  const std::string dir = hpd.out_dir() + "/jit";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  // A tiny JIT: one page of anonymous executable memory at a fixed address holding `jmp .`.
  std::ofstream(dir + "/jit_spin.c") << R"(
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
int main(void) {
  unsigned char* code = mmap((void*)0x200000000000ul, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (code == MAP_FAILED) return 1;
  code[0] = 0xeb; code[1] = 0xfe;
  printf("ready\n");
  fflush(stdout);
  ((void (*)(void))code)();
  return 0;
}
)";
  ASSERT_EQ(run({"gcc", "-O2", "-o", dir + "/jit_spin", dir + "/jit_spin.c"}).exit_code, 0);
  BackgroundOptions ready;
  ready.ready_line = "ready";
  Background jit(alice_.run_as({dir + "/jit_spin"}), ready);
  ASSERT_TRUE(jit.ready());
  const std::string pid = std::to_string(jit.pid());
  const std::string out = hpd.out_dir() + "/jit.json";
  auto record = [&] {
    return run(alice_.run_as(hpctl(hpd, {"record", "--no-report", "--pid", pid, "-d", "2", "-o", out})));
  };
  // The same recording without a map first: its peak is the baseline.
  const RunResult plain = record();
  ASSERT_EQ(plain.exit_code, 0) << plain.err << hpd.log();
  const uint64_t baseline = peak_rss_bytes(hpd.pid());

  // 4.1 million symbols of distinct starts, every one covering the sampled instruction (all of them
  // were kept, up to the bound, before only the closest was).
  const std::string map = "/tmp/perf-" + pid + ".map";
  struct RemoveMap {
    std::string path;
    ~RemoveMap() { std::filesystem::remove(path); }
  } remove_map{map};
  {
    std::ofstream text(map);
    char line[128];
    const uint64_t base = 0x200000000000ull;
    for (uint64_t i = 0; i < 4100000; ++i) {
      const int n =
          std::snprintf(line, sizeof line, "%llx %llx jit_function_%08llu_of_a_generated_module\n",
                        static_cast<unsigned long long>(base - 16 * i),
                        static_cast<unsigned long long>(16 * i + 64), static_cast<unsigned long long>(i));
      text.write(line, n);
    }
  }
  ASSERT_EQ(chown(map.c_str(), alice_.uid, alice_.gid), 0);
  const uint64_t map_bytes = std::filesystem::file_size(map);
  ASSERT_GT(map_bytes, 250ull << 20);
  ASSERT_LT(map_bytes, 256ull << 20);

  // While it records, status shows the memory hpd holds for the session and for alice.
  Background client(alice_.run_as(hpctl(hpd, {"record", "--no-report", "--pid", pid, "-d", "3", "-o", out})));
  bool shown = false;
  for (int i = 0; i < 100 && !shown; ++i) {
    const json status = hpd.status();
    if (status.contains("memory") && status["memory"].value("sessions_bytes", 0ull) > 0) shown = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(shown) << hpd.status().dump();
  EXPECT_EQ(client.wait(), 0);
  const RunResult r = record();
  ASSERT_EQ(r.exit_code, 0) << r.err << hpd.log();
  const uint64_t peak = peak_rss_bytes(hpd.pid());
  std::printf("hpd peak RSS: %.1f MiB without the map, %.1f MiB with its %.1f MiB map\n",
              baseline / 1048576.0, peak / 1048576.0, map_bytes / 1048576.0);
  EXPECT_LT(peak, baseline + (64ull << 20))
      << "hpd's peak RSS grew by " << ((peak - baseline) >> 20) << " MiB";
  // Named from the map all the same, by the symbol starting closest below the spinning instruction
  // (the map's first), and the summary says what was left out.
  EXPECT_NE(read_text(out).find("jit_function_00000000_of_a_generated_module"), std::string::npos)
      << "not the JIT name the map gives the instruction";
  EXPECT_NE(r.err.find("JIT symbols of pid " + pid + ": 1 of 4100000"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4099999 name no sampled address"), std::string::npos) << r.err;
  const json status = hpd.status();
  EXPECT_TRUE(status["limits"].contains("max_jit_symbols_mb")) << status.dump();
  EXPECT_TRUE(status["limits"].contains("max_user_memory_mb")) << status.dump();
}

// hpd run as hpd.service runs it: in a /tmp of its own (PrivateTmp=yes), here a tmpfs mounted over
// /tmp in a mount namespace of its own, with the harness's directory (its socket, configuration and
// log) bound back in, and hpd's own directory: a build under /tmp (a clone there) was hidden by the
// tmpfs, and hpd could not be started. `"$1"` is hpd, `"$3"` the configuration file it is started with,
// in the harness's directory; a directory outside /tmp is bound back onto itself, which changes nothing.
HpdStart private_tmp_start() {
  HpdStart start;
  start.wrapper = in_private_mounts(
      "set -e; a=$(dirname \"$1\"); b=$(dirname \"$3\"); k=$(mktemp -d /run/hpd-test-keep.XXXXXX); "
      "mkdir \"$k/a\" \"$k/b\"; mount --bind \"$a\" \"$k/a\"; mount --bind \"$b\" \"$k/b\"; "
      "mount -t tmpfs hpd-private-tmp /tmp; mkdir -p \"$a\" \"$b\"; "
      "mount --move \"$k/a\" \"$a\"; mount --move \"$k/b\" \"$b\"; rmdir \"$k/a\" \"$k/b\" \"$k\"; "
      "exec \"$@\"",
      "sh");
  return start;
}

// The perf maps a user's processes left in the real /tmp (the test's users are its own).
struct RemovePerfMapsOf {
  uid_t uid;
  ~RemovePerfMapsOf() {
    for (const auto& entry : std::filesystem::directory_iterator("/tmp")) {
      const std::string name = entry.path().filename().string();
      struct stat st {};
      if (name.starts_with("perf-") && name.ends_with(".map") && lstat(entry.path().c_str(), &st) == 0 &&
          st.st_uid == uid)
        std::filesystem::remove(entry.path());
    }
  }
};

// Issue #35: through hpd.service (PrivateTmp=yes) JIT frames stayed unnamed: a launched command had
// exited when hpd read its /tmp/perf-PID.map, and hpd's own /tmp is not the one the command wrote
// to. hpd now holds the /tmp of each recorded process's mount namespace open while it lives, and
// reads the map there (with the client's permissions). A C fixture writing its own map, then node
// --perf-basic-prof, both run by alice in the real /tmp and recorded through hpd in a private /tmp.
TEST_F(RealUsers, JitNamesAreFoundInTheTargetsTmpWhenHpdHasAPrivateTmp) {
  Hpd hpd(private_tmp_start());
  // hpd's /tmp is not ours: a file made here is not seen through its root.
  const std::string marker = "/tmp/hpd-private-tmp-marker-" + std::to_string(getpid());
  std::ofstream(marker) << "x";
  struct RemoveMarker {
    std::string path;
    ~RemoveMarker() { std::filesystem::remove(path); }
  } remove_marker{marker};
  ASSERT_TRUE(std::filesystem::exists(marker));
  ASSERT_FALSE(std::filesystem::exists("/proc/" + std::to_string(hpd.pid()) + "/root" + marker))
      << "hpd does not run in a private /tmp";

  RemovePerfMapsOf maps{alice_.uid};
  const std::string out = hpd.out_dir() + "/jit.json";
  const RunResult fixture = run(alice_.run_as(hpctl(
      hpd, {"record", "--no-report", "-o", out, "--", std::string(HPD_FIXTURE_DIR) + "/jit_perf_map", "1"})));
  ASSERT_EQ(fixture.exit_code, 0) << fixture.err << hpd.log();
  EXPECT_NE(read_text(out).find("jit_hot_loop"), std::string::npos) << "the fixture's JIT code is not named\n"
                                                                    << fixture.err;
  EXPECT_NE(fixture.err.find("JIT symbols of pid"), std::string::npos) << fixture.err;

  // node, writing its map as it compiles: the hot JavaScript function is named.
  const std::string script = hpd.out_dir() + "/hot.js";
  std::ofstream(script)
      << "function hotFibonacci(n) { return n < 2 ? n : hotFibonacci(n - 1) + hotFibonacci(n - 2); }\n"
         "const end = Date.now() + 1500;\n"
         "let total = 0;\n"
         "while (Date.now() < end) total += hotFibonacci(25);\n"
         "console.log(total);\n";
  ASSERT_EQ(chmod(script.c_str(), 0644), 0);
  const std::string node_out = hpd.out_dir() + "/node.json";
  const RunResult node = run(alice_.run_as(hpctl(
      hpd, {"record", "--no-report", "-o", node_out, "--", "/usr/bin/node", "--perf-basic-prof", script})));
  ASSERT_EQ(node.exit_code, 0) << node.err << hpd.log();
  EXPECT_NE(read_text(node_out).find("hotFibonacci"), std::string::npos)
      << "node's JavaScript function is not named\n"
      << node.err;
}

// Issue #29: a user's sessions together are bounded by max_user_memory_mb (root is not). Two
// sessions of alice at once, each far below max_session_memory_mb: they end early, saying why,
// and alice still gets what was recorded.
TEST_F(RealUsers, UsersSessionsTogetherStayWithinMaxUserMemory) {
  HpdStart start;
  start.config = "max_user_memory_mb = 2\n";
  Hpd hpd(start);
  Background target(alice_.run_as({std::string(HPD_FIXTURE_DIR) + "/cpu_split", "60"}));
  ASSERT_TRUE(runs_executable(target.pid(), std::string(HPD_FIXTURE_DIR) + "/cpu_split"));
  const std::string pid = std::to_string(target.pid());
  auto args = [&](const std::string& out) {
    return hpctl(hpd, {"record", "--no-report", "--pid", pid, "-F", "10000", "--call-graph", "dwarf", "-d",
                       "60", "-o", hpd.out_dir() + "/" + out});
  };
  const std::string first_err = hpd.out_dir() + "/first.err";
  std::vector<std::string> first = {"sh", "-c", "exec \"$@\" 2>" + first_err, "sh"};
  for (const std::string& a : alice_.run_as(args("first.json"))) first.push_back(a);
  Background one(first);
  const RunResult two = run(alice_.run_as(args("second.json")), 120);
  EXPECT_EQ(one.wait(), 0);
  ASSERT_EQ(two.exit_code, 0) << two.err << hpd.log();
  const std::string said = "outgrew max_user_memory_mb (2 MiB)";
  EXPECT_NE(two.err.find(said), std::string::npos) << two.err;
  EXPECT_NE(read_text(first_err).find(said), std::string::npos) << read_text(first_err);
  EXPECT_GT(count_samples(testing::load_json_maybe_gzip(hpd.out_dir() + "/second.json")), 0u);
  const json status = hpd.status();
  EXPECT_EQ(status["limits"]["max_user_memory_mb"], 2) << status.dump();
}

// `hpctl push FILE` without --endpoint takes hpd's push settings from hpd.conf only when the caller
// can read them: a user who cannot read the conf, or the key and token it names (root's, 0600), gets
// an error that says to give --endpoint, and nothing is sent to a default endpoint.
TEST_F(RealUsers, PushWithoutEndpointSaysToGiveOneWhenHpdsPushSettingsAreNotHers) {
  const testing::TempDir dir("hpd-push-conf");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::string hpr = dir.file("true.hpr");
  const RunResult recorded =
      run({kHpctl, "--local", "record", "--no-report", "-q", "-o", hpr, "--", "true"}, 120);
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  ASSERT_EQ(::chmod(hpr.c_str(), 0644), 0);
  const std::string key = dir.file("client.key");
  const std::string cert = dir.file("client.pem");
  const std::string headers = dir.file("headers");
  std::ofstream(key) << "-----BEGIN PRIVATE KEY-----\nroots-key\n-----END PRIVATE KEY-----\n";
  std::ofstream(cert) << "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n";
  std::ofstream(headers) << "Authorization: Bearer roots-token\n";
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(headers.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(cert.c_str(), 0644), 0);
  const std::string conf = dir.file("hpd.conf");
  std::ofstream(conf) << "continuous = on\notlp_endpoint = https://127.0.0.1:4318\npush_client_cert = "
                      << cert << "\npush_client_key = " << key << "\npush_headers_file = " << headers << "\n";
  const auto expect_give_endpoint = [&](const RunResult& r, const std::string& why) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(
        r.err.rfind("hpctl: error: no --endpoint, and hpd's push settings cannot be read (they are root's): ",
                    0),
        0u)
        << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << "want '" << why << "' in: " << r.err;
    EXPECT_NE(r.err.find(": give --endpoint URL"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    EXPECT_EQ(r.err.find("roots-"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("pushed"), std::string::npos) << r.err;
  };

  // The conf is hers to read, the key and the token are not.
  ASSERT_EQ(::chmod(conf.c_str(), 0644), 0);
  RunResult r = run(alice_.run_as({kHpctl, "push", hpr, "--config", conf}), 60);
  expect_give_endpoint(r, conf + ":4: bad value '" + key + "' for push_client_key: " + key +
                              ": cannot open: Permission denied");
  EXPECT_NE(r.err.find(conf + ":5: bad value '" + headers + "' for push_headers_file: " + headers +
                       ": cannot open: Permission denied"),
            std::string::npos)
      << r.err;
  // The conf itself is root's only.
  ASSERT_EQ(::chmod(conf.c_str(), 0600), 0);
  r = run(alice_.run_as({kHpctl, "push", hpr, "--config", conf}), 60);
  expect_give_endpoint(r, conf + ": cannot read: Permission denied");
  // No hpd.conf at all, or one without an endpoint: the same advice (root too), never a default.
  r = run({kHpctl, "push", hpr, "--config", dir.file("missing.conf")}, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "hpctl: error: no --endpoint, and there is no " + dir.file("missing.conf") +
                " to take hpd's push endpoint from: give --endpoint URL (and --ca-file, --client-cert, "
                "--client-key, --headers-file as the endpoint needs)\n");
  std::ofstream(conf) << "continuous = on\n";
  r = run({kHpctl, "push", hpr, "--config", conf}, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.err.find("hpctl: error: no --endpoint, and " + conf + " sets no otlp_endpoint: give --endpoint URL"),
      std::string::npos)
      << r.err;

  // Her own key, mode 0600, with --endpoint: accepted (the push then finds nothing listening); root's
  // key given by her cannot be opened, and a key of hers others can read is refused.
  const std::string her_key = dir.file("alice.key");
  std::ofstream(her_key) << "-----BEGIN PRIVATE KEY-----\nhers\n-----END PRIVATE KEY-----\n";
  ASSERT_EQ(::chown(her_key.c_str(), alice_.uid, alice_.gid), 0);
  ASSERT_EQ(::chmod(her_key.c_str(), 0644), 0);
  const auto push_with_key = [&](const std::string& k) {
    return run(alice_.run_as({kHpctl, "push", hpr, "-q", "--timeout", "5", "--endpoint", "http://127.0.0.1:9",
                              "--client-cert", cert, "--client-key", k}),
               60);
  };
  r = push_with_key(her_key);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--client-key " + her_key + ": mode 0644 lets its group or others in"),
            std::string::npos)
      << r.err;
  ASSERT_EQ(::chmod(her_key.c_str(), 0600), 0);
  r = push_with_key(her_key);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("--client-key"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:9"), std::string::npos) << r.err;
  r = push_with_key(key);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--client-key " + key + ": cannot read it"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hpd::test
