// The hpd socket protocol: request parsing (the fuzzed part), error replies, frames with descriptors.
#include "hpd/service/protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "hpd/session/record_json.h"

namespace hpd::service {
namespace {

using nlohmann::json;

const json* find(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

RequestType parse_type(const std::string& type) {
  if (type == "hello") return RequestType::kHello;
  if (type == "status") return RequestType::kStatus;
  if (type == "record") return RequestType::kRecord;
  if (type == "stop") return RequestType::kStop;
  if (type == "sessions") return RequestType::kSessions;
  std::string shown = type.size() > 40 ? type.substr(0, 40) + "..." : type;
  throw ProtocolError(ErrorCode::kUnknownType,
                      "unknown request type '" + shown + "'; known: hello, status, record, stop, sessions");
}

void parse_record(const json& j, Request& request) {
  const json* args = find(j, "args");
  if (args == nullptr) throw ProtocolError(ErrorCode::kBadRequest, "a record request needs \"args\"");
  if (!args->is_object()) throw ProtocolError(ErrorCode::kBadRequest, "\"args\" must be a JSON object");
  try {
    request.record = session::record_request_from_json(*args);
  } catch (const std::invalid_argument& e) {
    throw ProtocolError(ErrorCode::kBadRequest, std::string("record args: ") + e.what());
  }
  if (const json* fd = find(j, "fd")) {
    if (!fd->is_boolean()) throw ProtocolError(ErrorCode::kBadRequest, "\"fd\" must be true or false");
    request.record_has_fd = fd->get<bool>();
  }
  if (const json* launched = find(j, "launched_command")) {
    if (!launched->is_array())
      throw ProtocolError(ErrorCode::kBadRequest, "\"launched_command\" must be an array");
    for (const json& word : *launched) {
      if (!word.is_string()) {
        throw ProtocolError(ErrorCode::kBadRequest, "\"launched_command\" must hold strings");
      }
      request.launched_command.push_back(word.get<std::string>());
    }
  }
  if (const json* held = find(j, "held_at_exec")) {
    if (!held->is_boolean())
      throw ProtocolError(ErrorCode::kBadRequest, "\"held_at_exec\" must be true or false");
    request.held_at_exec = held->get<bool>();
  }
  if (const json* table = find(j, "calls_table")) {
    if (!table->is_boolean())
      throw ProtocolError(ErrorCode::kBadRequest, "\"calls_table\" must be true or false");
    request.record_has_calls_table = table->get<bool>();
  }
  if (const json* log = find(j, "alloc_log")) {
    if (!log->is_boolean())
      throw ProtocolError(ErrorCode::kBadRequest, "\"alloc_log\" must be true or false");
    request.record_has_alloc_log = log->get<bool>();
  }
}

}  // namespace

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kMalformed: return "malformed";
    case ErrorCode::kTruncated: return "truncated";
    case ErrorCode::kTooLarge: return "too_large";
    case ErrorCode::kUnsupportedVersion: return "unsupported_version";
    case ErrorCode::kBadRequest: return "bad_request";
    case ErrorCode::kUnknownType: return "unknown_type";
    case ErrorCode::kPermissionDenied: return "permission_denied";
    case ErrorCode::kLimit: return "limit";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kRecordFailed: return "record_failed";
    case ErrorCode::kShuttingDown: return "shutting_down";
    case ErrorCode::kInternal: return "internal";
  }
  return "internal";
}

const char* to_string(RequestType type) {
  switch (type) {
    case RequestType::kHello: return "hello";
    case RequestType::kStatus: return "status";
    case RequestType::kRecord: return "record";
    case RequestType::kStop: return "stop";
    case RequestType::kSessions: return "sessions";
  }
  return "unknown";
}

Request parse_request(std::string_view payload) {
  json j = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    throw ProtocolError(ErrorCode::kMalformed,
                        "the message is not valid JSON (UTF-8 text of one JSON object)");
  }
  if (!j.is_object()) throw ProtocolError(ErrorCode::kMalformed, "the message must be a JSON object");
  const json* version = find(j, "version");
  if (version == nullptr) throw ProtocolError(ErrorCode::kBadRequest, "the message has no \"version\"");
  if (!version->is_number_integer())
    throw ProtocolError(ErrorCode::kBadRequest, "\"version\" must be an integer");
  if (version->get<int64_t>() != kProtocolVersion) {
    throw ProtocolError(ErrorCode::kUnsupportedVersion,
                        "protocol version " + std::to_string(version->get<int64_t>()) +
                            " is not supported; this hpd speaks version " + std::to_string(kProtocolVersion) +
                            " (update hpctl or hpd so that both match)");
  }
  const json* type = find(j, "type");
  if (type == nullptr) throw ProtocolError(ErrorCode::kBadRequest, "the message has no \"type\"");
  if (!type->is_string()) throw ProtocolError(ErrorCode::kBadRequest, "\"type\" must be a string");

  Request request;
  request.type = parse_type(type->get<std::string>());
  switch (request.type) {
    case RequestType::kHello:
      if (const json* client = find(j, "client")) {
        if (!client->is_string()) throw ProtocolError(ErrorCode::kBadRequest, "\"client\" must be a string");
        request.client = client->get<std::string>();
      }
      break;
    case RequestType::kStop:
      if (const json* session = find(j, "session")) {
        if (!session->is_number_unsigned()) {
          throw ProtocolError(ErrorCode::kBadRequest,
                              "\"session\" must be a session id (a positive integer)");
        }
        request.session = session->get<uint64_t>();
      }
      break;
    case RequestType::kRecord: parse_record(j, request); break;
    case RequestType::kStatus:
    case RequestType::kSessions: break;
  }
  return request;
}

std::string error_message(ErrorCode code, const std::string& message, const std::string& reason) {
  json j = {
      {"version", kProtocolVersion}, {"type", "error"}, {"code", to_string(code)}, {"message", message}};
  if (!reason.empty()) j["reason"] = reason;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Frames -------------------------------------------------------------------------------------------

void send_frame(int socket, std::string_view payload, int fd) {
  send_frame(socket, payload, fd >= 0 ? std::vector<int>{fd} : std::vector<int>{});
}

void send_frame(int socket, std::string_view payload, const std::vector<int>& fds) {
  send_frame(socket, payload, fds, nullptr);
}

void send_frame(int socket, std::string_view payload, const std::vector<int>& fds,
                const std::function<bool()>& wait_for_room) {
  constexpr size_t kMaxFds = 8;  // what read_frame takes per message
  if (fds.size() > kMaxFds) throw std::system_error(EINVAL, std::generic_category(), "too many descriptors");
  if (payload.size() > kMaxMessageBytes) {
    throw std::system_error(EMSGSIZE, std::generic_category(), "message larger than the protocol allows");
  }
  std::string frame(4 + payload.size(), '\0');
  const auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::memcpy(frame.data() + 4, payload.data(), payload.size());

  size_t sent = 0;
  bool fd_pending = !fds.empty();
  while (sent < frame.size()) {
    iovec iov{frame.data() + sent, frame.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    if (fd_pending) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t w = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (wait_for_room && wait_for_room()) continue;
        throw std::system_error(ETIMEDOUT, std::generic_category(), "the peer does not read its socket");
      }
      throw std::system_error(errno, std::generic_category(), "sending a message");
    }
    fd_pending = false;
    sent += static_cast<size_t>(w);
  }
}

UniqueFd Frame::take_fd() {
  if (fds.empty()) return UniqueFd();
  UniqueFd fd = std::move(fds.front());
  fds.erase(fds.begin());
  return fd;
}

namespace {

uint64_t now_mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Reads exactly `size` bytes into `out`, keeping descriptors that arrive. Returns false on EOF before
// the first byte when `eof_ok`.
bool read_exact(int socket, char* out, size_t size, Frame& frame, const FrameLimits& limits, bool eof_ok,
                size_t frame_bytes) {
  size_t got = 0;
  uint64_t last_progress = now_mono_ns();
  while (got < size) {
    if (limits.stop && limits.stop()) throw ProtocolError(ErrorCode::kShuttingDown, "hpd is stopping");
    const uint64_t now = now_mono_ns();
    if (limits.deadline_mono_ns != 0 && now >= limits.deadline_mono_ns)
      throw ProtocolError(ErrorCode::kLimit, limits.deadline_message);
    const uint64_t quiet_ms = (now - last_progress) / 1000000;
    if (quiet_ms >= static_cast<uint64_t>(limits.progress_timeout_ms)) {
      throw ProtocolError(ErrorCode::kTruncated, "incomplete message: the rest did not arrive within " +
                                                     std::to_string(limits.progress_timeout_ms / 1000) +
                                                     " s");
    }
    // Waits in slices, so that the stop and the deadline are seen while a peer sends nothing.
    int slice = limits.progress_timeout_ms - static_cast<int>(quiet_ms);
    if (limits.stop) slice = std::min(slice, 100);
    if (limits.deadline_mono_ns != 0)
      slice = static_cast<int>(
          std::min<uint64_t>(static_cast<uint64_t>(slice), (limits.deadline_mono_ns - now) / 1000000 + 1));
    pollfd p{socket, POLLIN, 0};
    const int ready = ::poll(&p, 1, std::max(slice, 1));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "waiting for a message");
    }
    if (ready == 0) continue;
    iovec iov{out + got, size - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t r = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw std::system_error(errno, std::generic_category(), "reading a message");
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        frame.fds.emplace_back(fd);
      }
    }
    if (r == 0) {
      if (eof_ok && got == 0) return false;
      throw ProtocolError(ErrorCode::kTruncated, "incomplete message: the connection ended after " +
                                                     std::to_string(frame_bytes + got) + " bytes of it");
    }
    got += static_cast<size_t>(r);
    last_progress = now_mono_ns();
  }
  return true;
}

}  // namespace

ReadResult read_frame(int socket, Frame& frame, int timeout_ms) {
  FrameLimits limits;
  limits.progress_timeout_ms = timeout_ms;
  return read_frame(socket, frame, limits);
}

ReadResult read_frame(int socket, Frame& frame, const FrameLimits& limits) {
  frame = Frame();
  unsigned char header[4];
  if (!read_exact(socket, reinterpret_cast<char*>(header), 4, frame, limits, true, 0))
    return ReadResult::kClosed;
  const uint32_t size = header[0] | header[1] << 8 | header[2] << 16 | static_cast<uint32_t>(header[3]) << 24;
  if (size > kMaxMessageBytes) {
    throw ProtocolError(ErrorCode::kTooLarge,
                        "message of " + std::to_string(size) + " bytes announced; at most " +
                            std::to_string(kMaxMessageBytes) + " are accepted (the connection is closed)");
  }
  // Memory follows the bytes that arrive, not the announced size: a peer that announces 1 MiB and
  // sends nothing costs one piece, not 1 MiB.
  constexpr size_t kPiece = 64 * 1024;
  while (frame.payload.size() < size) {
    const size_t at = frame.payload.size();
    const size_t piece = std::min<size_t>(kPiece, size - at);
    frame.payload.resize(at + piece);
    read_exact(socket, frame.payload.data() + at, piece, frame, limits, false, 4 + at);
  }
  return ReadResult::kFrame;
}

}  // namespace hpd::service
