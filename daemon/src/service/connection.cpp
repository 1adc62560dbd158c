// A connection's thread: frames read and parsed, each request dispatched to its handler; idle timeout.
#include "connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>

#include "daemon.h"

namespace hpd::service {

void Connection::serve() {
  const Config config = daemon_.config();
  group_ = config.group;
  privileged_ = is_privileged_peer(peer_, group_);
  timeval timeout{static_cast<time_t>(config.client_timeout_s),
                  static_cast<suseconds_t>(
                      (config.client_timeout_s - static_cast<time_t>(config.client_timeout_s)) * 1e6)};
  ::setsockopt(socket_.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  log_debug("connection from pid " + std::to_string(peer_.pid) + " uid " + std::to_string(peer_.uid) +
            (privileged_ ? " (privileged)" : ""));
  uint64_t last_request_ns = now_ns(CLOCK_MONOTONIC);
  while (!daemon_.stopping()) {
    pollfd p{socket_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, 250);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) {
      // Idle connections cost a thread each: one that asks nothing for idle_timeout is closed.
      if (static_cast<double>(now_ns(CLOCK_MONOTONIC) - last_request_ns) / 1e9 >= config.idle_timeout_s) {
        log_debug("closing the idle connection of uid " + std::to_string(peer_.uid));
        send_error(ErrorCode::kLimit, "closed after " +
                                          std::to_string(static_cast<int>(config.idle_timeout_s)) +
                                          " s without a request (idle_timeout in hpd.conf)");
        break;
      }
      continue;
    }
    last_request_ns = now_ns(CLOCK_MONOTONIC);
    Frame frame;
    try {
      if (read_frame(socket_.get(), frame) == ReadResult::kClosed) break;
    } catch (const ProtocolError& e) {
      // The stream cannot be trusted past a bad frame: reply, then close.
      send_error(e.code(), e.what());
      break;
    } catch (const std::exception&) {
      break;
    }
    Request request;
    try {
      request = parse_request(frame.payload);
    } catch (const ProtocolError& e) {
      if (!send_error(e.code(), e.what())) break;
      continue;
    }
    handle(request, frame);
    std::lock_guard lock(send_mutex_);
    if (gone_) break;
  }
}

void Connection::handle(const Request& request, Frame& frame) {
  try {
    switch (request.type) {
      case RequestType::kHello: handle_hello(request); break;
      case RequestType::kStatus: handle_status(); break;
      case RequestType::kSessions: handle_sessions(); break;
      case RequestType::kStop: handle_stop(request); break;
      case RequestType::kRecord: handle_record(request, frame); break;
      case RequestType::kExport: handle_export(request, frame); break;
    }
  } catch (const std::exception& e) {
    log_error(std::string("request ") + to_string(request.type) + " failed: " + e.what());
    send_error(ErrorCode::kInternal, e.what());
  }
}

}  // namespace hpd::service
