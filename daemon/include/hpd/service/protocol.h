// The hpd socket protocol (docs/protocol.md): length-prefixed JSON messages, requests, error codes.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/session/record_request.h"

#include "hpd/base/unique_fd.h"

namespace hpd::service {

// Bumped on an incompatible change; fields may be added without a bump (receivers ignore unknown ones).
inline constexpr uint32_t kProtocolVersion = 1;
// A frame's payload may not be larger: a record request is a few KiB, a sessions list a few dozen.
inline constexpr uint32_t kMaxMessageBytes = 1u << 20;
inline constexpr const char* kDefaultSocketPath = "/run/hpd/hpd.sock";

enum class ErrorCode {
  kMalformed,           // not a JSON object, or not UTF-8
  kTruncated,           // the connection ended inside a message
  kTooLarge,            // the length prefix exceeds kMaxMessageBytes (the connection is closed)
  kUnsupportedVersion,  // "version" is not one this daemon speaks
  kBadRequest,          // a field is missing or has the wrong type or value
  kUnknownType,         // "type" names no request
  kPermissionDenied,    // the peer may not do this (see the message for why and what to do)
  kLimit,               // a configured limit (sessions, frequency) refuses the request
  kNotFound,            // no such session
  kRecordFailed,        // the recorder could not record (no such process, ...)
  kShuttingDown,        // the daemon is stopping
  kInternal,            // anything else; the message says what
};
const char* to_string(ErrorCode code);

// A request or a frame that cannot be served; becomes an error reply.
class ProtocolError : public std::runtime_error {
 public:
  ProtocolError(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  [[nodiscard]] ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

enum class RequestType { kHello, kStatus, kRecord, kStop, kSessions };
const char* to_string(RequestType type);

struct Request {
  RequestType type = RequestType::kHello;
  std::string client;                         // hello: "hpctl 0.1.0"
  uint64_t session = 0;                       // stop: the session id; 0 = the session of this connection
  session::RecordRequest record;              // record
  bool record_has_fd = false;                 // record: the output descriptor is attached to this message
  std::vector<std::string> launched_command;  // record: the command the client started, for the title
  // record: the one pid is the client's child, stopped (traced) right after its exec, before its first
  // instruction; it runs once hpd sends "started".
  bool held_at_exec = false;
  // record: a second descriptor follows the output's: the table of hpd's call runtime, which the
  // client preloaded into the command it started (docs/call-counts.md); read as untrusted data.
  bool record_has_calls_table = false;
  // "alloc_log": true: the next descriptor is the allocation log of hpd's runtime that hpctl made and
  // preloaded into the command it started (`hpctl record --alloc -- CMD` through hpd).
  bool record_has_alloc_log = false;
};

// Parses one message payload. Throws ProtocolError (kMalformed, kUnsupportedVersion, kBadRequest,
// kUnknownType) and nothing else, whatever the bytes.
Request parse_request(std::string_view payload);

// Replies (and client requests) as JSON text, each with "version" and "type".
// `reason`, when not empty: why a record request was refused, by name ("all_and_cgroup", the
// recorder's TargetProblem and OptionProblem: to_string in hpd/collect/recorder.h), for a client that
// words it itself (hpctl, with its flags).
std::string error_message(ErrorCode code, const std::string& message, const std::string& reason = "");

// Frames on a SOCK_STREAM Unix socket: a 4-byte little-endian payload length, then the payload.

// Sends one frame; `fd` (when >= 0) travels with it as SCM_RIGHTS. Never raises SIGPIPE. Throws
// std::system_error (EPIPE when the peer is gone).
void send_frame(int socket, std::string_view payload, int fd = -1);
// The same with several descriptors (at most 8), in order, in one SCM_RIGHTS message.
void send_frame(int socket, std::string_view payload, const std::vector<int>& fds);
// The same on a non-blocking socket: when it takes nothing, `wait_for_room` is called; it waits (a
// slice, with poll) and returns false to give up, which throws std::system_error ETIMEDOUT.
void send_frame(int socket, std::string_view payload, const std::vector<int>& fds,
                const std::function<bool()>& wait_for_room);

// One received frame and the descriptors that came with it (closed with the Frame unless taken).
struct Frame {
  std::string payload;
  std::vector<UniqueFd> fds;

  // The first descriptor received, now owned by the caller; an empty one when none came.
  UniqueFd take_fd();
};

enum class ReadResult { kFrame, kClosed };

// Reads one whole frame. kClosed: the peer closed the connection between frames. Throws ProtocolError
// kTruncated (closed inside a frame, or no progress for `timeout_ms` inside one), kTooLarge (the
// stream cannot be resynchronized: close it after replying), std::system_error on socket errors.
ReadResult read_frame(int socket, Frame& frame, int timeout_ms = 10000);

// What ends the read of one frame besides its bytes, for hpd's side of a connection.
struct FrameLimits {
  int progress_timeout_ms = 10000;  // no byte for this long inside a frame: kTruncated
  // The whole frame must be complete by then (CLOCK_MONOTONIC, ns; 0: no such limit), else
  // ProtocolError kLimit with `deadline_message`: a peer that trickles bytes does not hold a thread.
  uint64_t deadline_mono_ns = 0;
  std::string deadline_message;
  // Asked every 100 ms at most; true ends the read with ProtocolError kShuttingDown.
  std::function<bool()> stop;
};
ReadResult read_frame(int socket, Frame& frame, const FrameLimits& limits);

}  // namespace hpd::service
