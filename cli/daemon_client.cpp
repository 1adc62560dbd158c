// Connecting to hpd and exchanging framed JSON messages with it.
#include "daemon_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>

#include "hpd/service/protocol.h"

namespace hpd::cli {

std::string daemon_socket_path(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("HPD_SOCKET"); env != nullptr && *env != '\0') return env;
  return service::kDefaultSocketPath;
}

DaemonClient::DaemonClient(const std::string& socket_path) : path_(socket_path) {
  sockaddr_un addr{};
  if (path_.empty() || path_.size() >= sizeof addr.sun_path) {
    throw DaemonUnavailable("invalid hpd socket path '" + path_ + "'");
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd_) throw DaemonUnavailable(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    fd_.reset();
    throw DaemonUnavailable(
        "cannot reach hpd at " + path_ + ": " + std::strerror(err) +
        (err == ENOENT || err == ECONNREFUSED ? " (is hpd running? systemctl start hpd)" : ""));
  }
}

DaemonClient::~DaemonClient() = default;

void DaemonClient::send(nlohmann::json request, int fd) {
  send(std::move(request), fd >= 0 ? std::vector<int>{fd} : std::vector<int>{});
}

void DaemonClient::send(nlohmann::json request, const std::vector<int>& fds) {
  request["version"] = service::kProtocolVersion;
  try {
    service::send_frame(fd_.get(), request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                        fds);
  } catch (const std::system_error& e) {
    // hpd may have answered and closed before the request went out (a connection it refuses at
    // accept): its error waits in the socket and says why.
    if (receive(0)) throw DaemonUnavailable(std::string("hpd closed the connection: ") + e.what());
    throw DaemonUnavailable(std::string("hpd closed the connection: ") + e.what());
  }
}

std::optional<nlohmann::json> DaemonClient::receive(int timeout_ms) {
  pollfd p{fd_.get(), POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR && timeout_ms < 0);
  if (ready < 0 && errno == EINTR) return std::nullopt;
  if (ready < 0) throw DaemonUnavailable(std::string("poll: ") + std::strerror(errno));
  if (ready == 0) return std::nullopt;
  service::Frame frame;
  try {
    if (service::read_frame(fd_.get(), frame) == service::ReadResult::kClosed) {
      throw DaemonUnavailable("hpd closed the connection");
    }
  } catch (const service::ProtocolError& e) {
    throw DaemonUnavailable(std::string("bad message from hpd: ") + e.what());
  } catch (const std::system_error& e) {
    throw DaemonUnavailable(std::string("reading from hpd: ") + e.what());
  }
  nlohmann::json j = nlohmann::json::parse(frame.payload, nullptr, false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    throw DaemonUnavailable("bad message from hpd: not a protocol message");
  }
  if (j["type"] == "error") {
    auto text = [&j](const char* key, const std::string& fallback) {
      const auto it = j.find(key);
      return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
    };
    const std::string code = text("code", "internal");
    throw DaemonError(code, text("message", "hpd refused the request (" + code + ")"), text("reason", ""));
  }
  return j;
}

nlohmann::json DaemonClient::request(nlohmann::json request, int timeout_ms) {
  send(std::move(request));
  auto reply = receive(timeout_ms);
  if (!reply)
    throw DaemonUnavailable("hpd did not answer within " + std::to_string(timeout_ms / 1000) + " s");
  return *reply;
}

}  // namespace hpd::cli
