// A connection's thread: frames read and parsed, each request dispatched to its handler; idle timeout;
// replies sent without blocking past client_timeout (or hpd's stop).
#include "connection.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "daemon.h"

namespace hpd::service {

namespace {

// How long hpd waits for a client that takes nothing once it stops (its replies, its output).
constexpr double kStoppingWaitS = 0.5;

}  // namespace

bool Connection::send_text(const std::string& text) {
  std::lock_guard lock(send_mutex_);
  if (gone_) return false;
  const uint64_t start = now_ns(CLOCK_MONOTONIC);
  // The socket is non-blocking: a client that takes nothing is waited for in slices, so that hpd's
  // stop shortens a wait already begun.
  auto wait_for_room = [&] {
    const double limit = daemon_.stopping() ? kStoppingWaitS : client_timeout_s_;
    if (static_cast<double>(now_ns(CLOCK_MONOTONIC) - start) / 1e9 >= limit) return false;
    pollfd p{socket_.get(), POLLOUT, 0};
    ::poll(&p, 1, 100);
    return true;
  };
  try {
    send_frame(socket_.get(), text, {}, wait_for_room);
    return true;
  } catch (const std::exception& e) {
    gone_ = true;
    lost_.store(true);
    log_info("connection of uid " + std::to_string(peer_.uid) + " (pid " + std::to_string(peer_.pid) +
             "): the client takes no replies (" + e.what() + "); dropping it");
    return false;
  }
}

bool Connection::replies_unread_too_long() {
  int queued = 0;
  if (::ioctl(socket_.get(), SIOCOUTQ, &queued) != 0) return false;
  const uint64_t now = now_ns(CLOCK_MONOTONIC);
  if (queued <= 0) {
    unread_since_ns_ = 0;
  } else if (queued < unread_bytes_ || unread_since_ns_ == 0) {
    unread_since_ns_ = now;  // the client took some (or the first reply is waiting)
  }
  unread_bytes_ = queued;
  return unread_since_ns_ != 0 && static_cast<double>(now - unread_since_ns_) / 1e9 >= client_timeout_s_;
}

void Connection::serve() {
  const Config config = daemon_.config();
  group_ = config.group;
  privileged_ = is_privileged_peer(peer_, group_);
  client_timeout_s_ = config.client_timeout_s;
  // Non-blocking: reads and sends wait with poll, in slices that see hpd's stop (send_text, read_frame).
  if (const int flags = ::fcntl(socket_.get(), F_GETFL); flags >= 0)
    ::fcntl(socket_.get(), F_SETFL, flags | O_NONBLOCK);
  log_debug("connection from pid " + std::to_string(peer_.pid) + " uid " + std::to_string(peer_.uid) +
            (privileged_ ? " (privileged)" : ""));
  const auto idle_ns = static_cast<uint64_t>(config.idle_timeout_s * 1e9);
  const std::string idle_message = "closed after " + std::to_string(static_cast<int>(config.idle_timeout_s)) +
                                   " s without a complete request (idle_timeout in hpd.conf)";
  uint64_t last_request_ns = now_ns(CLOCK_MONOTONIC);
  while (!daemon_.stopping()) {
    pollfd p{socket_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, 250);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) {
      // Idle connections cost a thread each: one that asks nothing for idle_timeout is closed.
      if (now_ns(CLOCK_MONOTONIC) - last_request_ns >= idle_ns) {
        log_debug("closing the idle connection of uid " + std::to_string(peer_.uid));
        send_error(ErrorCode::kLimit, idle_message);
        break;
      }
      continue;
    }
    // The idle limit counts whole requests, not bytes: a request begun must be complete by then (or
    // a second after its first byte, whichever is later), so a trickle of bytes does not keep the
    // connection. hpd's stop ends the wait too.
    FrameLimits limits;
    limits.deadline_mono_ns =
        std::max<uint64_t>(last_request_ns + idle_ns, now_ns(CLOCK_MONOTONIC) + 1000000000ull);
    limits.deadline_message = idle_message;
    limits.stop = [this] { return daemon_.stopping(); };
    Frame frame;
    try {
      if (read_frame(socket_.get(), frame, limits) == ReadResult::kClosed) break;
    } catch (const ProtocolError& e) {
      // The stream cannot be trusted past a bad frame: reply, then close (hpd's stop: just close).
      if (e.code() == ErrorCode::kLimit)
        log_info("closing the connection of uid " + std::to_string(peer_.uid) + ": " + e.what());
      if (e.code() != ErrorCode::kShuttingDown) send_error(e.code(), e.what());
      break;
    } catch (const std::exception&) {
      break;
    }
    last_request_ns = now_ns(CLOCK_MONOTONIC);
    Request request;
    try {
      request = parse_request(frame.payload);
    } catch (const ProtocolError& e) {
      if (!send_error(e.code(), e.what())) break;
      continue;
    }
    handle(request, frame);
    last_request_ns = now_ns(CLOCK_MONOTONIC);  // a recording's request ends when it does
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
    }
  } catch (const std::exception& e) {
    send_error_for(to_string(request.type), e);
  }
}

bool Connection::send_error_for(const std::string& request, const std::exception& error) {
  const ErrorReply reply = error_reply_for(error);
  if (reply.internal)
    log_error("request " + request + " of uid " + std::to_string(peer_.uid) + " (pid " +
              std::to_string(peer_.pid) + ") failed: " + error.what());
  return send_error(reply.code, reply.text, reply.reason);
}

}  // namespace hpd::service
