// Test harness for hpd: starts the real daemon on a temporary socket with its own configuration and
// notify socket, runs hpctl against it (optionally as another uid), and talks raw protocol.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace hpd::test {

struct HpdStart {
  std::string config;                // the text of its configuration file
  bool activation = false;           // pass a listening socket as fd 3 (LISTEN_FDS / LISTEN_PID)
  std::vector<std::string> wrapper;  // run hpd under this command (e.g. setpriv --bounding-set ...)
};

class Hpd {
 public:
  explicit Hpd(const HpdStart& start = {});
  ~Hpd();  // SIGKILL if still running; removes the temporary directory
  Hpd(const Hpd&) = delete;
  Hpd& operator=(const Hpd&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& socket() const { return socket_; }
  [[nodiscard]] const std::string& dir() const { return dir_; }
  // A directory every uid may write (sticky), for outputs of clients of other uids.
  [[nodiscard]] const std::string& out_dir() const { return out_dir_; }
  [[nodiscard]] const std::string& config_path() const { return config_path_; }

  // The datagrams received on the notify socket so far (waits up to timeout_s for one containing `want`).
  bool wait_notify(const std::string& want, double timeout_s);
  [[nodiscard]] const std::vector<std::string>& notifications() const { return notifications_; }
  std::string log() const;
  bool wait_log(const std::string& want, double timeout_s) const;

  // SIGTERM and wait; the exit code (128 + signal when killed), -1 on timeout.
  int terminate(double timeout_s = 60);
  void signal(int sig) const;

  // Descriptors hpd holds: all, and those of BPF programs / maps / perf events.
  struct FdCounts {
    int total = 0;
    int bpf_prog = 0;
    int bpf_map = 0;
    int perf_event = 0;
    int bpf_link = 0;
  };
  FdCounts fd_counts() const;

  // One request on a fresh connection, the first reply.
  nlohmann::json request(const nlohmann::json& message) const;
  nlohmann::json status() const { return request({{"version", 1}, {"type", "status"}}); }

 private:
  pid_t pid_ = -1;
  testing::TempDir tmp_{"hpd-test"};
  std::string dir_ = tmp_.path();
  std::string out_dir_;
  std::string socket_;
  std::string config_path_;
  std::string log_path_;
  int notify_fd_ = -1;
  std::vector<std::string> notifications_;
};

// A connected client socket to `path`; -1 on failure.
int connect_unix(const std::string& path);
// Reads one frame and parses it; throws on failure.
nlohmann::json read_reply(int fd, int timeout_ms = 30000);

// A wrapper (HpdStart::wrapper) that runs hpd with only the capabilities a unit file gives it: the
// bounding set of its CapabilityBoundingSet= line (HPD_UNIT_FILE: packaging/systemd/hpd.service), none
// inheritable, through setpriv. Throws when the file or the line is missing.
std::vector<std::string> with_unit_capabilities(const std::string& unit_file);
// The value of a unit file's `key=` line (its first); throws when the file or the line is missing.
std::string unit_file_value(const std::string& unit_file, const std::string& key);
// The capabilities of its CapabilityBoundingSet= line, in setpriv's names (bpf, perfmon, ...).
std::vector<std::string> unit_capabilities(const std::string& unit_file);

// A wrapper that runs hpd in a mount namespace of its own (propagation private: what `script` mounts
// stays there): `sh -c script`, with `arg0` as its `$0`, `then` and hpd's own command line as "$@"; the
// script ends with `exec "$@"`.
std::vector<std::string> in_private_mounts(const std::string& script, const std::string& arg0,
                                           const std::vector<std::string>& then = {});

// argv prefixed so that it runs as uid/gid 65534 with no groups, or with `groups` (comma list).
std::vector<std::string> as_nobody(std::vector<std::string> argv, const std::string& groups = "");

// Sum of the samples of every thread of a Firefox profile.
size_t count_samples(const nlohmann::json& profile);

// Waits until `pid` runs `exe` (true), or `timeout_s` passed (false). A target started through setpriv
// is not dumpable between its setuid and its exec, so a request sent before the exec is refused, as the
// kernel would refuse a ptrace then.
bool runs_executable(pid_t pid, const std::string& exe, int timeout_s = 20);

}  // namespace hpd::test
