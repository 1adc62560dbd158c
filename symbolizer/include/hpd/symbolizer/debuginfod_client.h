// DebuginfodClient: files by build-id from the servers in DEBUGINFOD_URLS, through elfutils'
// libdebuginfod, which is loaded (dlopen) on first use only.
//
// Linking libdebuginfod would load libcurl and its ~30 libraries (TLS, Kerberos, LDAP, ...) into
// every hpctl and hpd process at start-up: 520 page faults and about 20 ms of dynamic linking on
// the development VM, for a feature that works only when DEBUGINFOD_URLS is set.
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

  // Whether DEBUGINFOD_URLS names a server (and hpd was built with debuginfod support).
  static bool configured();

  // The cached path of the separate debug file with this build-id (lower-case hex), fetching it
  // if needed; nullopt with a reason in *error when no server has it, none answers, or
  // libdebuginfod.so.1 cannot be loaded.
  std::optional<std::string> find_debuginfo(const std::string& build_id, std::string* error);
  // The same for the executable or shared library itself (a module rebuilt or removed since it was
  // recorded).
  std::optional<std::string> find_executable(const std::string& build_id, std::string* error);

 private:
  enum class Kind { kDebuginfo, kExecutable };
  std::optional<std::string> find(Kind kind, const std::string& build_id, std::string* error);

  debuginfod_client* client_ = nullptr;
  bool failed_ = false;  // loading the library or debuginfod_begin failed once; do not retry per module
};

}  // namespace hpd
