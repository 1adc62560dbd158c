// hpd's short requests: hello, status, sessions (the list a peer may see), stop (by its owner or the group).
#include <string>

#include "connection.h"
#include "daemon.h"
#include "hpd/calls/preload_table.h"
#include "hpd/collect/recorder.h"

#ifndef HPD_VERSION
#define HPD_VERSION "unknown"
#endif

namespace hpd::service {

using nlohmann::json;

void Connection::handle_hello(const Request& request) {
  timing_mark("hpd-hello");
  json reply = reply_message("hello");
  reply["daemon"] = std::string("hpd ") + HPD_VERSION;
  reply["protocol"] = kProtocolVersion;
  reply["uid"] = peer_.uid;
  reply["privileged"] = privileged_;
  reply["group"] = group_;
  // The call runtime hpd probes for sampled stacks of timed calls: hpctl preloads this one into a
  // command it records through hpd with --calls (the client's table, RecordOptions::call_table_fd).
  if (const std::string runtime = calls::find_preload_runtime(); !runtime.empty())
    reply["calls_runtime"] = runtime;
  send(reply);
}

void Connection::handle_status() {
  send(daemon_.status_message(privileged_));
}

void Connection::handle_sessions() {
  json list = json::array();
  const uint64_t now = now_ns(CLOCK_MONOTONIC);
  for (const auto& s : daemon_.sessions().list()) {
    // Other users' targets and file names are theirs to know, unless one may stop any session.
    if (!privileged_ && s->uid != peer_.uid) continue;
    list.push_back({{"id", s->id},
                    {"uid", s->uid},
                    {"client_pid", s->client_pid},
                    {"target", s->target},
                    {"output", s->output},
                    {"started_unix_ms", s->started_unix_ns / 1000000},
                    {"elapsed_s", (now - s->started_mono_ns) / 1e9},
                    {"samples", s->samples.load()},
                    {"lost", s->lost.load()},
                    {"memory_bytes", s->memory_bytes.load()}});
  }
  json reply = reply_message("sessions");
  reply["sessions"] = list;
  send(reply);
}

void Connection::handle_stop(const Request& request) {
  if (request.session == 0) {
    send_error(ErrorCode::kBadRequest, "no session is recording on this connection; give \"session\": ID");
    return;
  }
  const auto session = daemon_.sessions().find(request.session);
  // Another user's session is answered as one that does not exist: the answer says nothing of it
  // (not its owner, not that it runs), as `sessions` does not list it. The log keeps who asked.
  const bool others = session && !privileged_ && session->uid != peer_.uid;
  if (others) {
    log_refusal("stopping session " + std::to_string(session->id),
                "it belongs to uid " + std::to_string(session->uid));
  }
  if (!session || others) {
    send_error(ErrorCode::kNotFound, "no session " + std::to_string(request.session) +
                                         " of yours (see hpctl sessions); root and the '" + group_ +
                                         "' group may stop any session");
    return;
  }
  session->stop.store(true);
  log_info("session " + std::to_string(session->id) + " stopped by uid " + std::to_string(peer_.uid));
  json reply = reply_message("stopped");
  reply["session"] = session->id;
  send(reply);
}

}  // namespace hpd::service
