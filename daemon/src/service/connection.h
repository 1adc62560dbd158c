// One client connection of hpd, served by its own thread: its requests and, while it records, its session.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "hpd/collect/recorder.h"
#include "hpd/service/access.h"
#include "hpd/service/config.h"
#include "hpd/service/error_reply.h"
#include "hpd/service/protocol.h"
#include "hpd/session/record_pipeline.h"
#include "hpd/session/record_request.h"
#include "log.h"
#include "service_util.h"
#include "session_registry.h"

namespace hpd::service {

class Daemon;

// One client connection, served by its own thread.
class Connection {
 public:
  Connection(Daemon& daemon, UniqueFd socket, PeerCredentials peer)
      : daemon_(daemon), socket_(std::move(socket)), peer_(peer) {}
  ~Connection() {
    if (thread_.joinable()) thread_.join();
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start() {
    thread_ = std::thread([this] {
      serve();
      done_.store(true);
    });
  }
  [[nodiscard]] bool done() const { return done_.load(); }
  [[nodiscard]] uid_t uid() const { return peer_.uid; }

 private:
  void serve();
  // Sends one message; false when the client is gone (or does not read).
  // A client whose socket takes nothing for client_timeout (half a second once hpd stops) is gone:
  // lost_ ends its session.
  bool send(const nlohmann::json& j) { return send_text(json_text(j)); }
  bool send_error(ErrorCode code, const std::string& text, const std::string& reason = "") {
    return send_text(error_message(code, text, reason));
  }
  // The reply to a request that failed with `error`, by its type (error_reply_for); an internal one
  // is logged with its what() and `request` (the request's type).
  bool send_error_for(const std::string& request, const std::exception& error);
  bool send_text(const std::string& text);
  // Whether the client leaves its replies unread: bytes stay queued on its socket, none taken, for
  // client_timeout. Called every 100 ms or so while a session records.
  bool replies_unread_too_long();
  // Every refusal is logged with who asked (uid, pid) and why.
  void log_refusal(const std::string& what, const std::string& reason) const {
    log_info("refused " + what + " for uid " + std::to_string(peer_.uid) + " (pid " +
             std::to_string(peer_.pid) + "): " + reason);
  }
  void handle(const Request& request, Frame& frame);
  void handle_hello(const Request& request);
  void handle_status();
  void handle_sessions();
  void handle_stop(const Request& request);

  // A record request, in steps (record_handler.cpp). Each step that refuses sends the error reply and
  // returns an empty result.
  void handle_record(const Request& request, Frame& frame);
  // The client's output descriptor, checked (writable; not a regular file: made non-blocking).
  UniqueFd take_record_output(const Request& request, Frame& frame);
  // Access (access.h), max_frequency_hz, and kernel frames for an unprivileged peer (off, with a note,
  // when the kernel would not show them to it). `pidfds`: the checked targets' (check_record_access).
  bool authorize_recording(session::RecordRequest& args, const Config& config,
                           std::vector<std::string>& notes, std::vector<UniqueFd>& pidfds);
  // The recorder's options: the request's, held to the peer's own processes unless privileged, and
  // the held_at_exec claim checked.
  std::optional<RecordOptions> recorder_options(const Request& request, const session::RecordRequest& args);
  // The session registered (limits max_sessions, max_sessions_per_user) and "accepted" sent.
  std::shared_ptr<Session> open_session(const Request& request, const session::RecordRequest& args,
                                        const Config& config);
  void watch_client_while_recording(Session& session, const std::atomic<bool>& finished,
                                    std::atomic<bool>& client_gone, const std::atomic<bool>& replied);
  void end_session(Session& session, bool client_gone);
  void record_in_thread(const std::shared_ptr<Session>& session, session::RecordRequest args,
                        RecordOptions options, int fd, std::vector<std::string> launched,
                        std::vector<std::string> notes, uint64_t memory_limit, std::atomic<bool>& client_gone,
                        std::atomic<bool>& replied);
  void discard_recording(const Session& session, const std::string& reason, std::atomic<bool>& replied);
  void deliver_recording(Session& session, RecordResult& result, session::RecordingOutput& output,
                         const std::vector<std::string>& launched, std::vector<std::string> notes,
                         const std::string& ended_early, std::atomic<bool>& replied);
  void fail_recording(Session& session, const std::string& why, std::atomic<bool>& replied);

  Daemon& daemon_;
  UniqueFd socket_;
  PeerCredentials peer_;
  bool privileged_ = false;
  std::string group_;
  std::mutex send_mutex_;
  bool gone_ = false;              // guarded by send_mutex_
  std::atomic<bool> lost_{false};  // a send failed: the client does not read, or left
  double client_timeout_s_ = 10;
  int unread_bytes_ = 0;          // replies queued on the socket at the last look
  uint64_t unread_since_ns_ = 0;  // since when they were not taken (0: all taken)
  std::thread thread_;
  std::atomic<bool> done_{false};
};

}  // namespace hpd::service
