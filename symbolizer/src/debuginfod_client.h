// DebuginfodClient: separate debug files by build-id from the servers in DEBUGINFOD_URLS (libdebuginfod).
#pragma once

#include <optional>
#include <string>

struct debuginfod_client;

namespace hpd {

// One libdebuginfod session, begun on first use. Downloads land in libdebuginfod's own cache
// ($DEBUGINFOD_CACHE_PATH, else $XDG_CACHE_HOME/debuginfod_client or ~/.cache/debuginfod_client),
// which also remembers misses, so a module without debug information is not asked for again
// and again. Timeouts are libdebuginfod's ($DEBUGINFOD_TIMEOUT, $DEBUGINFOD_MAXTIME).
class DebuginfodClient {
 public:
  DebuginfodClient() = default;
  ~DebuginfodClient();
  DebuginfodClient(const DebuginfodClient&) = delete;
  DebuginfodClient& operator=(const DebuginfodClient&) = delete;

  // Whether hpd was built with libdebuginfod and DEBUGINFOD_URLS names a server.
  static bool configured();

  // The cached path of the debug file with this build-id (lower-case hex), fetching it if needed;
  // nullopt with a reason in *error when no server has it or none answers.
  std::optional<std::string> find_debuginfo(const std::string& build_id, std::string* error);

 private:
  debuginfod_client* client_ = nullptr;
  bool failed_ = false;  // debuginfod_begin failed once; do not retry per module
};

}  // namespace hpd
