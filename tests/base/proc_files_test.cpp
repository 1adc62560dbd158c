// Tests for the small /proc readers.
#include "hpd/base/proc_files.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

namespace hpd {
namespace {

TEST(ProcFiles, CpuListsAndOwnProcess) {
  EXPECT_EQ(parse_cpu_list("0-3,6,8-9\n"), (std::vector<int>{0, 1, 2, 3, 6, 8, 9}));
  EXPECT_EQ(parse_cpu_list("0"), std::vector<int>{0});
  EXPECT_TRUE(parse_cpu_list("").empty());
  EXPECT_EQ(parse_cpu_list("3-1"), std::vector<int>{});
  EXPECT_FALSE(online_cpus().empty());

  const int32_t pid = ::getpid();
  EXPECT_EQ(read_process_state(pid), 'R');
  EXPECT_EQ(read_process_state(-1), 0);
  EXPECT_FALSE(read_comm(pid).empty());
  EXPECT_FALSE(read_cmdline(pid).empty());
  EXPECT_EQ(list_threads(pid).front(), pid);
  EXPECT_TRUE(list_threads(-1).empty());
  ASSERT_TRUE(read_process_uid(pid));
  EXPECT_EQ(*read_process_uid(pid), ::getuid());
  EXPECT_FALSE(read_int_file("/nonexistent"));
  // All four uids and gids of this process are its real ones (no set-user-ID here).
  EXPECT_TRUE(process_runs_as(pid, ::getuid(), ::getgid()));
  EXPECT_FALSE(process_runs_as(pid, ::getuid() + 1, ::getgid()));
  EXPECT_FALSE(process_runs_as(pid, ::getuid(), ::getgid() + 1));
  EXPECT_FALSE(process_runs_as(-1, ::getuid(), ::getgid()));
}

TEST(ProcFiles, ParsesProcStatusIds) {
  const StatusIds ids = parse_proc_status_ids(
      "Name:\tbash\nUid:\t1000\t1001\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t4 24 27 1002 \n");
  EXPECT_EQ(ids.uids, (std::vector<unsigned>{1000, 1001, 1000, 1000}));
  EXPECT_EQ(ids.gids, (std::vector<unsigned>{100, 100, 100, 100}));
  EXPECT_EQ(ids.groups, (std::vector<unsigned>{4, 24, 27, 1002}));
  EXPECT_TRUE(parse_proc_status_ids("Groups:\n").groups.empty());
  EXPECT_TRUE(parse_proc_status_ids("garbage").uids.empty());
  EXPECT_FALSE(read_proc_status_ids(-5).has_value());
}

// /proc/PID/cgroup as the kernel writes it on unified and hybrid systems, and the unit or container
// a fleet's store slices by, from the cgroup paths systemd, Docker, containerd (Kubernetes) and Podman make.
TEST(ProcFiles, CgroupPathsNameTheirSystemdUnitAndContainer) {
  EXPECT_EQ(cgroup_from_proc_text("0::/system.slice/nginx.service\n"), "/system.slice/nginx.service");
  // Hybrid: the v2 tree holds the process at its root; systemd's own tree says where it is.
  EXPECT_EQ(cgroup_from_proc_text("12:pids:/system.slice/cron.service\n1:name=systemd:/system.slice/"
                                  "cron.service\n0::/\n"),
            "/system.slice/cron.service");
  EXPECT_EQ(cgroup_from_proc_text("1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n0::/"
                                  "user.slice/user-1000.slice/session-3.scope\n"),
            "/user.slice/user-1000.slice/session-3.scope");
  EXPECT_EQ(cgroup_from_proc_text("0::/\n"), "/");
  EXPECT_EQ(cgroup_from_proc_text("4:memory:/a\n"), "");
  EXPECT_EQ(cgroup_from_proc_text(""), "");
  EXPECT_EQ(read_cgroup(-1), "");
  EXPECT_EQ(read_cgroup(::getpid()), cgroup_from_proc_text(*read_small_file("/proc/self/cgroup")));

  const auto owner = [](std::string_view path) {
    const CgroupOwner o = cgroup_owner(path);
    return o.systemd_unit + "|" + o.container_id;
  };
  EXPECT_EQ(owner("/system.slice/nginx.service"), "nginx.service|");
  EXPECT_EQ(owner("/system.slice/postgresql@15-main.service"), "postgresql@15-main.service|");
  // A service's own sub-cgroups (Delegate=yes) are still that service.
  EXPECT_EQ(owner("/system.slice/user@1000.service/app.slice/foo.service"), "foo.service|");
  EXPECT_EQ(owner("/system.slice/containerd.service/supervisor"), "containerd.service|");
  EXPECT_EQ(owner("/user.slice/user-1000.slice/session-3.scope"), "session-3.scope|");
  EXPECT_EQ(owner("/system.slice/run-u42.scope"), "run-u42.scope|");
  const std::string id = "4a5c3b8e1f2d4c6b8a9e0f1d2c3b4a5e6f7d8c9b0a1e2f3d4c5b6a7e8f9d0c1b";
  EXPECT_EQ(owner("/system.slice/docker-" + id + ".scope"), "docker-" + id + ".scope|" + id);
  EXPECT_EQ(owner("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_"
                  "b5c6d7e8f901.slice/cri-containerd-" +
                  id + ".scope"),
            "cri-containerd-" + id + ".scope|" + id);
  EXPECT_EQ(owner("/machine.slice/libpod-" + id + ".scope/container"), "libpod-" + id + ".scope|" + id);
  EXPECT_EQ(owner("/machine.slice/crio-" + id + ".scope"), "crio-" + id + ".scope|" + id);
  // Podman's conmon is no container; the cgroupfs driver's /docker/ID has no unit.
  EXPECT_EQ(owner("/machine.slice/libpod-conmon-" + id + ".scope"), "libpod-conmon-" + id + ".scope|");
  EXPECT_EQ(owner("/docker/" + id), "|" + id);
  EXPECT_EQ(owner("/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/" + id), "|" + id);
  // Slices, the root and garbage name nothing.
  EXPECT_EQ(owner("/user.slice"), "|");
  EXPECT_EQ(owner("/"), "|");
  EXPECT_EQ(owner(""), "|");
  EXPECT_EQ(owner("/system.slice/.service"), "|");
  EXPECT_EQ(owner("/system.slice/docker-xyz.scope"), "docker-xyz.scope|");
}

}  // namespace
}  // namespace hpd

namespace hpd {
namespace {

// The thread's context switches from /proc are the kernel's nvcsw + nivcsw, which getrusage gives too.
TEST(ProcFiles, ThreadContextSwitchesAreTheKernelsCounts) {
  const int32_t tid = static_cast<int32_t>(::gettid());
  for (int round = 0; round < 3; ++round) {
    ::usleep(1000);  // one voluntary switch at least
    rusage before{}, after{};
    ::getrusage(RUSAGE_THREAD, &before);
    const auto read = read_thread_context_switches(::getpid(), tid);
    ::getrusage(RUSAGE_THREAD, &after);
    ASSERT_TRUE(read.has_value());
    const auto count = [](const rusage& u) { return static_cast<uint64_t>(u.ru_nvcsw + u.ru_nivcsw); };
    EXPECT_GE(*read, count(before));
    EXPECT_LE(*read, count(after));
    EXPECT_GT(*read, 0u);
  }
  EXPECT_FALSE(read_thread_context_switches(::getpid(), -1).has_value());
}

uint64_t monotonic_now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000 + uint64_t(t.tv_nsec);
}

// The start of a process, on CLOCK_MONOTONIC: ours is before now; a child forked after a moment is
// not before that moment by more than a tick (the start is rounded down to one); a gone one has none.
TEST(ProcFiles, ProcessStartOnTheMonotonicClock) {
  const auto self = read_process_start_monotonic_ns(::getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_LE(*self, monotonic_now_ns());
  const long hz = ::sysconf(_SC_CLK_TCK);
  ASSERT_GT(hz, 0);
  const uint64_t tick = 1000000000ull / uint64_t(hz);
  const uint64_t before = monotonic_now_ns();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[1]);
    char c;
    (void)!::read(fds[0], &c, 1);
    _exit(0);
  }
  ::close(fds[0]);
  const auto started = read_process_start_monotonic_ns(child);
  const uint64_t after = monotonic_now_ns();
  ::close(fds[1]);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(started.has_value());
  EXPECT_GE(*started + tick, before);
  EXPECT_LE(*started, after);
  EXPECT_GE(*started, *self);
  EXPECT_FALSE(read_process_start_monotonic_ns(child).has_value());
}

// The child processes of a process: both children that wait on a pipe, not the grandchild one of
// them forked, nothing once they are reaped, nothing for a process that is gone.
TEST(ProcFiles, ChildProcessesOfAProcess) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  int grand[2];
  ASSERT_EQ(::pipe(grand), 0);
  const auto wait_on_pipe = [&] {
    ::close(fds[1]);
    char c;
    (void)!::read(fds[0], &c, 1);
  };
  const pid_t first = ::fork();
  if (first == 0) {
    wait_on_pipe();
    _exit(0);
  }
  const pid_t second = ::fork();
  if (second == 0) {
    ::close(grand[0]);
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      wait_on_pipe();
      _exit(0);
    }
    (void)!::write(grand[1], &grandchild, sizeof grandchild);
    wait_on_pipe();
    ::waitpid(grandchild, nullptr, 0);
    _exit(0);
  }
  ::close(fds[0]);
  ::close(grand[1]);
  pid_t grandchild = 0;
  ASSERT_EQ(::read(grand[0], &grandchild, sizeof grandchild), static_cast<ssize_t>(sizeof grandchild));
  ::close(grand[0]);
  const std::vector<int32_t> children = list_child_processes(::getpid());
  const std::vector<int32_t> of_second = list_child_processes(second);
  ::close(fds[1]);
  ::waitpid(first, nullptr, 0);
  ::waitpid(second, nullptr, 0);
  EXPECT_NE(std::find(children.begin(), children.end(), first), children.end());
  EXPECT_NE(std::find(children.begin(), children.end(), second), children.end());
  EXPECT_EQ(std::find(children.begin(), children.end(), grandchild), children.end());
  EXPECT_EQ(of_second, std::vector<int32_t>{grandchild});
  const std::vector<int32_t> after = list_child_processes(::getpid());
  EXPECT_EQ(std::find(after.begin(), after.end(), first), after.end());
  EXPECT_TRUE(list_child_processes(second).empty());
}

}  // namespace
}  // namespace hpd
