// Runs programs for the integration tests: capture output and exit status, or start in the background.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hpd::test {

struct RunResult {
  int exit_code = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs argv to completion (killed after timeout_s) with optional extra environment entries.
RunResult run(const std::vector<std::string>& argv, double timeout_s = 120,
              const std::vector<std::string>& env = {});

// A child process running in the background; killed and reaped on destruction.
class Background {
 public:
  explicit Background(const std::vector<std::string>& argv);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  pid_t pid() const { return pid_; }
  // Waits for the child to exit; returns its status as in RunResult::exit_code.
  int wait();

 private:
  pid_t pid_ = -1;
};

}  // namespace hpd::test
