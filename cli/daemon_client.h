// The client side of the hpd socket protocol (docs/protocol.md): connect, send, receive.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"

namespace hpd::cli {

// hpd cannot be reached (no socket, nobody listening, not hpd).
class DaemonUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// hpd answered with an error reply; what() is its message. reason(): a refused record request's
// reason by name ("all_and_cgroup"; "" when the reply names none), which hpctl words with its flags
// (record_problem_words.h).
class DaemonError : public std::runtime_error {
 public:
  DaemonError(std::string code, const std::string& message, std::string reason = "")
      : std::runtime_error(message), code_(std::move(code)), reason_(std::move(reason)) {}
  [[nodiscard]] const std::string& code() const { return code_; }
  [[nodiscard]] const std::string& reason() const { return reason_; }

 private:
  std::string code_;
  std::string reason_;
};

// The socket to use: `given` (--socket), else $HPD_SOCKET, else /run/hpd/hpd.sock.
std::string daemon_socket_path(const std::string& given);

class DaemonClient {
 public:
  // Connects. Throws DaemonUnavailable saying why.
  explicit DaemonClient(const std::string& socket_path);
  ~DaemonClient();
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;

  // Sends a request; "version" is filled in. `fd` (>= 0) travels with it. Throws DaemonUnavailable
  // when hpd is gone.
  void send(nlohmann::json request, int fd = -1);
  // The same with several descriptors, in order.
  void send(nlohmann::json request, const std::vector<int>& fds);
  // The next message within `timeout_ms` (-1 = no limit); nullopt on timeout. Error replies are
  // thrown as DaemonError; a closed connection as DaemonUnavailable.
  std::optional<nlohmann::json> receive(int timeout_ms);
  // send() then the reply.
  nlohmann::json request(nlohmann::json request, int timeout_ms = 30000);

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
};

}  // namespace hpd::cli
