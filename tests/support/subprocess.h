// Runs programs for the tests: to completion with output and exit status captured, or in the
// background with an optional ready-line handshake and stdin pipe.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace hpd::test {

struct RunResult {
  int exit_code = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Whether `name` is a command in PATH.
bool have_tool(const std::string& name);

// Runs argv to completion (killed after timeout_s) with optional extra environment entries.
RunResult run(const std::vector<std::string>& argv, double timeout_s = 120,
              const std::vector<std::string>& env = {});

struct BackgroundOptions {
  // Where the child's stdout goes, unless ready_line is set.
  std::string stdout_path = "/dev/null";
  // When set, stdout is a pipe and the constructor reads it until this line (without its newline)
  // comes, for at most ready_timeout_s; ready() says whether it came.
  std::string ready_line;
  double ready_timeout_s = 30;
  // When set, stdin is a pipe the test writes with send() (and the test process ignores SIGPIPE
  // from then on); otherwise /dev/null.
  bool stdin_pipe = false;
};

// A child process running in the background (argv[0] searched in PATH); killed (SIGKILL) and
// reaped on destruction if it still runs. Throws std::runtime_error when it cannot be started.
class Background {
 public:
  explicit Background(const std::vector<std::string>& argv, const BackgroundOptions& options = {});
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  pid_t pid() const { return pid_; }
  // Started, and printed the ready line when one was asked for.
  bool ready() const { return ready_; }
  // Writes to the child's stdin pipe (BackgroundOptions::stdin_pipe); false when that fails.
  bool send(const std::string& bytes) const;
  // Closes the stdin pipe, waits for the child to exit, closes the stdout pipe and returns the
  // child's status as in RunResult::exit_code; -1 when it was already reaped. `usage`, when given, receives
  // the child's resource usage (wait4).
  int wait(rusage* usage = nullptr);
  // Kills (SIGKILL) and reaps the child now, and closes the pipes; what the destructor does.
  void kill();
  // Asks the child to stop (SIGTERM) and reaps it, so that it can finish what it was writing; SIGKILL
  // when it has not exited after `timeout_s`. Its status as wait() gives it.
  int terminate(double timeout_s = 30);

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;  // the ready-line pipe, kept open so that later output does not kill the child
};

// The whole file as text ("" when it cannot be read).
std::string read_text_file(const std::string& path);

}  // namespace hpd::test
