// LaunchedCommand, the one way a command is started for recording: where it waits (before or after its
// exec, read from the kernel: /proc/PID/exe and the process state), what it runs with, how it ends.
#include "hpd/base/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "temp_dir.h"

namespace hpd {
namespace {

std::string exe_of(pid_t pid) {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string();
}

// The state letter of /proc/PID/stat: 't' = stopped by a tracer.
char state_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ? '?' : line[paren + 2];
}

bool alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno != ESRCH;
}

std::string self_exe() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

TEST(LaunchedCommand, HeldBeforeExecRunsOnlyWhenStarted) {
  testing::TempDir dir;
  const std::string mark = dir.file("ran");
  LaunchedCommand command({"sh", "-c", "touch " + mark + "; exit 7"});
  EXPECT_FALSE(command.held_at_exec());
  // Still this program: forked, not exec'd.
  EXPECT_EQ(exe_of(command.pid()), self_exe());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(std::filesystem::exists(mark));
  command.start();
  EXPECT_EQ(command.wait(), 7);
  EXPECT_TRUE(command.reaped());
  EXPECT_TRUE(std::filesystem::exists(mark));
}

TEST(LaunchedCommand, HeldAfterExecIsStoppedInTheProgramsOwnImage) {
  testing::TempDir dir;
  const std::string mark = dir.file("ran");
  LaunchedCommand command({"sh", "-c", "touch " + mark + "; exit 3"}, {}, HoldAt::kAfterExec);
  ASSERT_TRUE(command.held_at_exec());
  EXPECT_EQ(exe_of(command.pid()), std::filesystem::canonical(resolve_command("sh")).string());
  EXPECT_EQ(state_of(command.pid()), 't');
  EXPECT_FALSE(std::filesystem::exists(mark));
  command.start();
  EXPECT_EQ(command.wait(), 3);
  EXPECT_TRUE(std::filesystem::exists(mark));
}

TEST(LaunchedCommand, AProgramThatGainsPrivilegesIsHeldBeforeItsExec) {
  // A traced exec would not get the set-user-ID bit: such a program waits before its exec instead.
  testing::TempDir dir;
  const std::string program = dir.file("setuid-true");
  std::filesystem::copy_file(resolve_command("true"), program);
  ASSERT_EQ(::chmod(program.c_str(), 04755), 0);
  LaunchedCommand command({program}, {}, HoldAt::kAfterExec);
  EXPECT_FALSE(command.held_at_exec());
  EXPECT_EQ(exe_of(command.pid()), self_exe());
  command.start();
  EXPECT_EQ(command.wait(), 0);
}

TEST(LaunchedCommand, TheEnvironmentIsTheLaunchersWithTheGivenEntriesOnTop) {
  ASSERT_EQ(::setenv("HPD_PROCESS_TEST_KEPT", "kept", 1), 0);
  ASSERT_EQ(::setenv("HPD_PROCESS_TEST_REPLACED", "old", 1), 0);
  for (const HoldAt hold : {HoldAt::kBeforeExec, HoldAt::kAfterExec}) {
    LaunchedCommand command(
        {"sh", "-c",
         "test \"$HPD_PROCESS_TEST_KEPT\" = kept && test \"$HPD_PROCESS_TEST_REPLACED\" = new "
         "&& test \"$HPD_PROCESS_TEST_ADDED\" = added"},
        {"HPD_PROCESS_TEST_REPLACED=new", "HPD_PROCESS_TEST_ADDED=added"}, hold);
    command.start();
    EXPECT_EQ(command.wait(), 0) << "hold " << static_cast<int>(hold);
  }
  ::unsetenv("HPD_PROCESS_TEST_KEPT");
  ::unsetenv("HPD_PROCESS_TEST_REPLACED");
}

TEST(LaunchedCommand, AFailedExecSaysWhichCommandAndWhy) {
  for (const HoldAt hold : {HoldAt::kBeforeExec, HoldAt::kAfterExec}) {
    try {
      LaunchedCommand command({"hpd-no-such-command-xyz", "arg"}, {}, hold);
      command.start();
      ADD_FAILURE() << "expected an error";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "cannot run 'hpd-no-such-command-xyz': No such file or directory");
    }
  }
  EXPECT_THROW(LaunchedCommand({}), std::runtime_error);
}

TEST(LaunchedCommand, AnUnreleasedCommandIsKilledAndReapedWithItsObject) {
  for (const HoldAt hold : {HoldAt::kBeforeExec, HoldAt::kAfterExec}) {
    pid_t pid = -1;
    {
      LaunchedCommand command({"sleep", "100"}, {}, hold);
      pid = command.pid();
      ASSERT_GT(pid, 0);
      EXPECT_TRUE(alive(pid));
    }
    // Reaped, not a zombie: the pid is gone.
    EXPECT_FALSE(alive(pid)) << "hold " << static_cast<int>(hold);
  }
}

// Waits (poll on its pidfd) until a process that is not this one's child has ended; false after
// `seconds`, which only ends a failing test.
bool ends_within(pid_t pid, int seconds) {
  const UniqueFd pidfd = open_pidfd(pid);
  if (!pidfd) return errno == ESRCH;
  pollfd p{pidfd.get(), POLLIN, 0};
  return ::poll(&p, 1, seconds * 1000) == 1;
}

// Runs `launcher` in a forked process that then dies by SIGKILL, as hpctl killed while it starts a
// recording; returns what the launcher wrote to the pipe it is given (a pid).
pid_t run_then_kill(const std::function<pid_t()>& launcher) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t child = ::fork();
  if (child == 0) {
    const pid_t told = launcher();
    [[maybe_unused]] ssize_t w = ::write(fds[1], &told, sizeof told);
    ::raise(SIGKILL);
  }
  const UniqueFd read_end(fds[0]);
  UniqueFd(fds[1]).reset();
  pid_t told = -1;
  if (::read(read_end.get(), &told, sizeof told) != static_cast<ssize_t>(sizeof told)) told = -1;
  int status = 0;
  ::waitpid(child, &status, 0);
  return told;
}

// Whether some process has a descriptor whose link reads `target`.
bool open_anywhere(const std::string& target) {
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      if (std::filesystem::read_symlink(fd.path(), link_ec).string() == target) return true;
    }
  }
  return false;
}

// A launcher killed before it released its command leaves no process behind: the command, held before
// its exec with copies of every descriptor the launcher had (an hpctl's eBPF programs, perf events,
// shared files), used to wait for ever on the release pipe it held a write end of itself.
TEST(LaunchedCommand, OneHeldBeforeExecEndsWhenItsLauncherDies) {
  const pid_t held = run_then_kill([] {
    auto* command = new LaunchedCommand({"sleep", "100"});  // never destroyed: the launcher dies
    return command->pid();
  });
  ASSERT_GT(held, 0);
  EXPECT_TRUE(ends_within(held, 60)) << "the held command " << held << " still waits";
  ::kill(held, SIGKILL);
}

// Held after its exec (traced, stopped at the exec's trap), it does not run when its launcher dies
// before releasing it: the kernel would otherwise detach it and let it go on, with nobody recording.
TEST(LaunchedCommand, OneHeldAfterExecIsKilledWithItsLauncher) {
  testing::TempDir dir;
  const std::string mark = dir.file("ran");
  const pid_t held = run_then_kill([&] {
    // Never destroyed: the launcher dies.
    auto* command =
        new LaunchedCommand({"sh", "-c", "touch " + mark + "; exec sleep 100"}, {}, HoldAt::kAfterExec);
    return command->held_at_exec() ? command->pid() : -1;
  });
  ASSERT_GT(held, 0) << "not held at its exec";
  EXPECT_TRUE(ends_within(held, 60)) << "the held command " << held << " was let go";
  EXPECT_FALSE(std::filesystem::exists(mark)) << "the held command ran after its launcher died";
  ::kill(held, SIGKILL);
}

// remove_when_this_process_ends: the file goes when its maker dies by SIGKILL (no destructor ran).
TEST(RemoveWhenThisProcessEnds, TheFileGoesWhenItsMakerIsKilled) {
  testing::TempDir dir;
  const std::string path = dir.file("shared");
  const pid_t maker = run_then_kill([&] {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    new UniqueFd(remove_when_this_process_ends(path, fd));  // kept open until the SIGKILL
    return fd >= 0 ? ::getpid() : -1;
  });
  ASSERT_GT(maker, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::filesystem::exists(path) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// While its maker lives, the file stays; a file at the same path that is not the one it was given
// (removed by its maker, made again by someone else) is never removed.
TEST(RemoveWhenThisProcessEnds, OnlyTheFileItWasGivenAndOnlyAfterItsMaker) {
  testing::TempDir dir;
  const std::string path = dir.file("shared");
  const pid_t maker = run_then_kill([&] {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    new UniqueFd(remove_when_this_process_ends(path, fd));
    // Removed and made again at the same path before the maker dies.
    ::unlink(path.c_str());
    const int other = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    return fd >= 0 && other >= 0 ? ::getpid() : -1;
  });
  ASSERT_GT(maker, 0);
  // The remover holds the file it was given (removed: "PATH (deleted)") until it ends, after it
  // decided; the maker's descriptors closed with the maker.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (open_anywhere(path + " (deleted)") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_FALSE(open_anywhere(path + " (deleted)")) << "the remover did not end";
  EXPECT_TRUE(std::filesystem::exists(path)) << "the file made again at the path was removed";
}

TEST(LaunchedCommand, TerminateEndsARunningCommandAndReportsTheSignal) {
  LaunchedCommand command({"sleep", "100"});
  command.start();
  EXPECT_FALSE(command.try_reap());
  command.terminate(std::chrono::milliseconds(5000));
  EXPECT_TRUE(command.reaped());
  EXPECT_EQ(command.exit_status(), 128 + SIGTERM);
}

TEST(Pidfd, NamesTheProcessUntilItIsReapedAndNoOtherAfter) {
  LaunchedCommand command({"sleep", "100"});
  const UniqueFd pidfd = open_pidfd(command.pid());
  ASSERT_TRUE(pidfd.valid()) << std::strerror(errno);
  EXPECT_TRUE(pidfd_alive(pidfd.get()));
  const pid_t pid = command.pid();
  command.terminate(std::chrono::milliseconds(5000));
  EXPECT_FALSE(pidfd_alive(pidfd.get()));
  // The pid is free now: no pidfd for it, and the reason is that the process is gone.
  errno = 0;
  EXPECT_FALSE(open_pidfd(pid).valid());
  EXPECT_EQ(errno, ESRCH);
}

// A process is there while it runs and as a zombie (its /proc files still answer); once reaped, no
// process has its pid (until another gets it). Not a pid that never was, nor 0 or the caller's group.
TEST(NoSuchProcess, OnlyOnceTheProcessIsReaped) {
  EXPECT_FALSE(no_such_process(::getpid()));
  EXPECT_FALSE(no_such_process(0));
  EXPECT_FALSE(no_such_process(-1));
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  // A zombie until waited for: wait for the exit without reaping it.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_FALSE(no_such_process(child));
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(no_such_process(child));
}

TEST(BootId, IsTheKernelsUuidOfThisBoot) {
  const std::string id = current_boot_id();
  ASSERT_EQ(id.size(), 36u) << id;
  for (size_t i = 0; i < id.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23)
      EXPECT_EQ(id[i], '-') << id;
    else
      EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(id[i]))) << id;
  }
  EXPECT_EQ(current_boot_id(), id);  // the same for the whole boot
}

TEST(ResolveCommand, FindsTheProgramInPathAndKeepsAPath) {
  EXPECT_EQ(resolve_command("sh").front(), '/');
  EXPECT_EQ(resolve_command("./x/y"), "./x/y");
  EXPECT_EQ(resolve_command("hpd-no-such-command-xyz"), "hpd-no-such-command-xyz");
}

}  // namespace
}  // namespace hpd
