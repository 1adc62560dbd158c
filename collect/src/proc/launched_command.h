// A command started for recording: forked, held before exec until the events are attached, then released.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"

namespace hpd {

class LaunchedCommand {
 public:
  // Forks a child that waits on a pipe before exec'ing `argv` (searched in PATH), with the
  // "NAME=VALUE" entries of `environment` set on top of the recorder's own environment.
  explicit LaunchedCommand(const std::vector<std::string>& argv,
                           const std::vector<std::string>& environment = {});
  LaunchedCommand(const LaunchedCommand&) = delete;
  LaunchedCommand& operator=(const LaunchedCommand&) = delete;
  // A child that is still running is killed and reaped, so an error path leaves no stray process.
  ~LaunchedCommand();

  [[nodiscard]] pid_t pid() const { return pid_; }

  // Lets the child exec. Throws RecordError ("cannot run 'cmd': No such file or directory") when the
  // exec fails; the failed child is reaped.
  void start();

  // Reaps the child if it has exited; true once it has.
  bool try_reap();
  // SIGTERM, then SIGKILL after `grace`; returns once the child is reaped.
  void terminate(std::chrono::milliseconds grace);

  [[nodiscard]] bool reaped() const { return reaped_; }
  // The exit code, or 128 + the signal number; -1 before the child is reaped.
  [[nodiscard]] int exit_status() const { return exit_status_; }

 private:
  void record_status(int status);
  void kill_and_reap();

  std::string name_;
  pid_t pid_ = -1;
  UniqueFd go_;     // write end: one byte releases the child
  UniqueFd error_;  // read end of the CLOEXEC pipe: EOF = exec succeeded, an int = its errno
  bool reaped_ = false;
  int exit_status_ = -1;
};

}  // namespace hpd
