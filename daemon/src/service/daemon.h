// The hpd daemon's state: configuration, listening socket, connections, sessions, continuous mode.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "connection.h"
#include "hpd/base/unique_fd.h"
#include "hpd/service/config.h"
#include "hpd/service/server.h"
#include "hpd/service/systemd.h"
#include "service_util.h"
#include "session_registry.h"

#ifdef HPD_HAVE_CONTINUOUS
#include "hpd/continuous/continuous.h"
#endif

namespace hpd::service {

class Daemon {
 public:
  explicit Daemon(const DaemonOptions& options) : options_(options) {}

  int run();

  Config config() {
    std::lock_guard lock(config_mutex_);
    return config_;
  }
  SessionRegistry& sessions() { return sessions_; }
  [[nodiscard]] bool stopping() const { return stopping_.load(); }
  nlohmann::json status_message(bool privileged);

 private:
  bool load(Config& into, std::string& why);
  void check_bpf_with_first_recording();
  bool open_listener();
  void begin_shutdown();
  void reload();
  void accept_one();
  void reap_connections(bool all);
  // "" when a connection of `uid` may be served; else why not (per-user and global limits).
  std::string connection_refusal(uid_t uid);
  void update_status_line();
  void configure_continuous(const Config& config);

  DaemonOptions options_;
  std::mutex config_mutex_;
  Config config_;
  SystemdNotifier notifier_;
  UniqueFd listener_;
  std::string created_socket_;  // unlinked at exit; empty under socket activation
  std::atomic<bool> stopping_{false};
  uint64_t stop_began_ns_ = 0;  // monotonic; the main thread's
  SessionRegistry sessions_;
  std::list<std::unique_ptr<Connection>> connections_;  // the main thread's alone
  uint64_t started_mono_ns_ = now_ns(CLOCK_MONOTONIC);
  // Probed once before READY=1 by loading the first recording's programs (check_bpf_with_first_recording).
  bool bpf_available_ = false;
  std::string bpf_reason_;
  bool perf_available_ = false;
  std::string perf_reason_;
#ifdef HPD_HAVE_CONTINUOUS
  std::mutex continuous_mutex_;
  std::unique_ptr<continuous::ContinuousProfiler> continuous_;
#endif
};

}  // namespace hpd::service
