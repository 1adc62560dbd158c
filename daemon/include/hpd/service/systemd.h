// The two systemd interfaces hpd speaks, written here rather than linked from libsystemd: sd_notify
// datagrams and socket activation (LISTEN_FDS).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "hpd/base/unique_fd.h"

namespace hpd::service {

// Sends state lines ("READY=1", "STATUS=...", "WATCHDOG=1") to $NOTIFY_SOCKET, a path or an abstract
// name ('@' first). Without $NOTIFY_SOCKET every call does nothing.
class SystemdNotifier {
 public:
  // Reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID of the environment.
  SystemdNotifier();
  ~SystemdNotifier();
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  // False when there is no notify socket or the datagram could not be sent.
  bool notify(std::string_view state);
  [[nodiscard]] bool enabled() const { return !address_.empty(); }
  // The watchdog interval asked for (0 = none); ping at half of it.
  [[nodiscard]] uint64_t watchdog_usec() const { return watchdog_usec_; }

 private:
  std::string address_;
  UniqueFd fd_;
  uint64_t watchdog_usec_ = 0;
};

// The listening socket systemd passed (fd 3) when $LISTEN_PID is this process and $LISTEN_FDS >= 1;
// -1 otherwise. The variables are removed so that children do not see them. Extra descriptors are
// closed: hpd listens on one socket.
int take_activation_socket();

}  // namespace hpd::service
