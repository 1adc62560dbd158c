// sd_notify and socket activation, from the documented protocol (sd_notify(3), sd_listen_fds(3)).
#include "hpd/service/systemd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hpd::service {
namespace {

bool parse_number(const char* text, uint64_t& out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = n;
  return true;
}

}  // namespace

SystemdNotifier::SystemdNotifier() {
  if (const char* socket = std::getenv("NOTIFY_SOCKET")) {
    const std::string path(socket);
    if ((path.front() == '/' || path.front() == '@') && path.size() < sizeof(sockaddr_un::sun_path)) {
      address_ = path;
      fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    }
  }
  uint64_t usec = 0;
  uint64_t pid = 0;
  if (parse_number(std::getenv("WATCHDOG_USEC"), usec)) {
    // WATCHDOG_PID, when set, must name this process (the watchdog is meant for the main process).
    const char* watchdog_pid = std::getenv("WATCHDOG_PID");
    if (watchdog_pid == nullptr ||
        (parse_number(watchdog_pid, pid) && pid == static_cast<uint64_t>(getpid()))) {
      watchdog_usec_ = usec;
    }
  }
}

SystemdNotifier::~SystemdNotifier() = default;

bool SystemdNotifier::notify(std::string_view state) {
  if (!fd_) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address_.data(), address_.size());
  socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
  if (address_.front() == '@') {
    addr.sun_path[0] = '\0';  // abstract namespace: no terminating NUL counted
  } else {
    length += 1;
  }
  // Never blocks: a notify socket nobody reads (its queue full) must not stall the main loop.
  const ssize_t sent = ::sendto(fd_.get(), state.data(), state.size(), MSG_NOSIGNAL | MSG_DONTWAIT,
                                reinterpret_cast<sockaddr*>(&addr), length);
  return sent == static_cast<ssize_t>(state.size());
}

int take_activation_socket() {
  uint64_t pid = 0;
  uint64_t count = 0;
  const bool ours = parse_number(std::getenv("LISTEN_PID"), pid) && pid == static_cast<uint64_t>(getpid()) &&
                    parse_number(std::getenv("LISTEN_FDS"), count) && count >= 1;
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (!ours) return -1;
  constexpr int kFirst = 3;  // SD_LISTEN_FDS_START
  // hpd listens on one socket: the others passed are closed.
  for (uint64_t i = 1; i < count && i < 64; ++i) UniqueFd(kFirst + static_cast<int>(i)).reset();
  int type = 0;
  socklen_t size = sizeof type;
  if (::getsockopt(kFirst, SOL_SOCKET, SO_TYPE, &type, &size) != 0 || type != SOCK_STREAM) return -1;
  ::fcntl(kFirst, F_SETFD, FD_CLOEXEC);
  return kFirst;
}

}  // namespace hpd::service
