// Processes: the one way hpd and hpctl start a command to record (forked, held until the recorder is
// attached, then released, reaped), find the program a command names, hold a process by pidfd, and
// read the boot's id.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"

namespace hpd {

// A pidfd of `pid` (pidfd_open): it names that process whatever later gets its pid, and becomes
// readable when the process exits. Invalid when there is no such process (errno ESRCH) or the
// kernel has no pidfd_open.
UniqueFd open_pidfd(pid_t pid);

// Whether the process a pidfd names is still there (not reaped): signal 0 through the pidfd. EPERM
// (hpd without CAP_KILL probing another user's process) means it is there; so does a kernel without
// pidfd_send_signal.
bool pidfd_alive(int pidfd);

// Whether no process has this pid any more (signal 0: ESRCH). A zombie, or a process of another user
// (EPERM), is there. One system call and no path: the cheap test before reading /proc/PID, whose
// lookups cost a path walk each even when they fail.
bool no_such_process(pid_t pid);

// Makes sure `path` is removed even if this process dies without removing it (SIGKILL, a crash):
// starts a small process, in a session of its own (a signal to this process's group or terminal does
// not reach it) and holding no descriptor of this one but `fd` and its end of a pipe, that waits for
// the pipe's other end to close, then unlinks `path` if it is still the file `fd` is. The other end is
// the returned descriptor (close-on-exec: no command launched from here holds it): it closes when this
// process ends, or when the caller drops it after removing the file itself. Invalid, and nothing
// started, when the pipe or fork failed (errno says why): the file is then removed only by its owner.
UniqueFd remove_when_this_process_ends(const std::string& path, int fd);

// This boot's id (/proc/sys/kernel/random/boot_id, one line); "" when it cannot be read.
std::string current_boot_id();

// The program a command runs: argv[0] itself when it has a '/', else its first match in $PATH.
std::string resolve_command(const std::string& argv0);

// Where a launched command waits until start().
enum class HoldAt {
  // Before its exec, reading a pipe: a recorder attached to its pid sees the exec happen.
  kBeforeExec,
  // Right after its exec, stopped before the program's first instruction (PTRACE_TRACEME; start()
  // detaches): a recorder attached then sees the program's own image, not the launcher's. Only when
  // the program gains no privileges at exec (set-user-ID, set-group-ID, file capabilities: the
  // kernel withholds them from a traced exec) and ptrace allows it; else before its exec.
  kAfterExec,
};

// A command started for recording: forked, held (HoldAt) until start(), then reaped. Errors are
// std::runtime_error saying which command and why ("cannot run 'cmd': No such file or directory").
class LaunchedCommand {
 public:
  // Forks a child that runs `argv` (searched in PATH) with the "NAME=VALUE" entries of `environment`
  // set on top of the launcher's own environment, and an empty signal mask. A failed exec throws
  // here when the child was held after it, else in start().
  explicit LaunchedCommand(const std::vector<std::string>& argv,
                           const std::vector<std::string>& environment = {},
                           HoldAt hold = HoldAt::kBeforeExec);
  LaunchedCommand(const LaunchedCommand&) = delete;
  LaunchedCommand& operator=(const LaunchedCommand&) = delete;
  // A child that is still running is killed and reaped, so an error path leaves no stray process.
  ~LaunchedCommand();

  [[nodiscard]] pid_t pid() const { return pid_; }
  // Stopped after its exec (HoldAt::kAfterExec granted), else waiting before it.
  [[nodiscard]] bool held_at_exec() const { return at_exec_; }

  // Lets the child run (or exec); throws when the exec fails, after reaping the failed child.
  void start();

  // Reaps the child if it has exited; true once it has.
  bool try_reap();
  // Waits for the child to exit and reaps it; its exit_status().
  int wait();
  // SIGTERM, then SIGKILL after `grace`; returns once the child is reaped.
  void terminate(std::chrono::milliseconds grace);

  [[nodiscard]] bool reaped() const { return reaped_; }
  // The exit code, or 128 + the signal number; -1 before the child is reaped or when its status is
  // unknown (reaped by someone else).
  [[nodiscard]] int exit_status() const { return exit_status_; }

 private:
  bool fork_child(const std::vector<std::string>& argv, bool at_exec);
  void record_status(int status);
  void kill_and_reap();

  std::string name_;
  std::vector<std::string> env_;
  pid_t pid_ = -1;
  UniqueFd go_;     // before exec: the write end; one byte releases the child, EOF makes it exit
  UniqueFd error_;  // read end of the CLOEXEC pipe: EOF = exec succeeded, an int = its errno
  bool at_exec_ = false;
  bool released_ = false;
  bool reaped_ = false;
  int exit_status_ = -1;
};

}  // namespace hpd
