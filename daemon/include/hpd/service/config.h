// hpd's configuration file (/etc/hpd/hpd.conf): `key = value` lines, # comments.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hpd/session/otlp_push.h"

namespace hpd::service {

inline constexpr const char* kDefaultConfigPath = "/etc/hpd/hpd.conf";

// A further endpoint of the push, set by keys with a `.NAME` suffix (`otlp_endpoint.central = URL`,
// `push_ca_file.central = FILE`, ...). Its transport settings are its own: TLS files and headers are
// not taken from the unsuffixed keys (a token for one store must not go to another); its timeout is
// push_timeout unless push_timeout.NAME is given, its compression push_compression unless
// push_compression.NAME is.
struct PushEndpoint {
  std::string name;                                     // "" for the endpoint of the unsuffixed keys
  std::string otlp_endpoint;                            // "" = this endpoint is off
  double timeout_s = 0;                                 // 0 = push_timeout
  std::optional<session::PushCompression> compression;  // none = push_compression
  std::string ca_file;
  std::string client_cert;
  std::string client_key;
  std::string headers_file;
  std::vector<std::string> headers;  // what headers_file holds

  bool operator==(const PushEndpoint&) const = default;
};

// At most this many endpoints (the unsuffixed one included) are pushed to.
inline constexpr size_t kMaxPushEndpoints = 8;

enum class LogLevel { kError = 3, kWarning = 4, kInfo = 6, kDebug = 7 };  // syslog priorities
const char* to_string(LogLevel level);

struct Config {
  std::string socket = "/run/hpd/hpd.sock";  // ignored under socket activation
  std::string group = "hpd";                 // its members may record anything, as root may
  LogLevel log_level = LogLevel::kInfo;

  // Limits of recording sessions.
  uint32_t max_sessions = 16;
  double max_duration_s = 3600;       // an open-ended request ends after this
  uint32_t max_frequency_hz = 10000;  // requests above are refused
  // Requests for a larger CFI row map (--cfi-rows, 8 bytes of kernel memory a row) are refused.
  uint32_t max_cfi_rows = 1u << 23;
  uint64_t max_session_memory_mb = 1024;  // a session whose profile grows past this ends with a note
  // The memory of one user's sessions together (their profiles, and at the end their JIT symbols
  // and symbol tables): a session that takes its user past it ends with a note, and the JIT
  // symbols and symbol tables of a session get at most what is left. Root is not bounded.
  uint64_t max_user_memory_mb = 1024;
  // Per session: the JIT symbols kept from /tmp/perf-PID.map and jitdumps (only those that cover
  // sampled code are kept; beyond this they are dropped and counted), and the symbolizer's cache
  // of module tables (symbol tables, DWARF indexes; least recently used evicted).
  uint64_t max_jit_symbols_mb = 16;
  uint64_t max_symbol_cache_mb = 256;
  // No user but root holds more connections or sessions than these at once (each connection costs a
  // thread), so that no user can lock others out.
  uint32_t max_connections_per_user = 32;
  uint32_t max_sessions_per_user = 4;
  // A connection that sends no request for this long is closed (a recording's connection is exempt).
  double idle_timeout_s = 60;
  // A client that takes none of what hpd writes to it (its socket, or its output) for this long is
  // gone: its session ends and its slot is freed.
  double client_timeout_s = 10;
  // SIGTERM ends hpd within this time, even when clients do not take their profiles.
  double stop_timeout_s = 30;

  // Continuous mode (served by the continuous library when it is built in).
  bool continuous = false;
  uint32_t continuous_frequency = 19;
  uint32_t continuous_cfi_rows = 1u << 22;  // the CFI row map of each chunk's recording
  uint32_t continuous_chunk_seconds = 60;
  bool continuous_kernel = true;    // kernel frames in the chunks, when permitted
  bool continuous_off_cpu = false;  // off-CPU samples of every thread: every context switch
  uint64_t continuous_max_age_s = 7 * 24 * 3600;
  uint64_t continuous_max_bytes = 1ull << 30;
  std::string state_directory = "/var/lib/hpd";
  // Every finished chunk pushed to this OTLP endpoint ("" = no push; docs/fleet.md), with these
  // resource attributes besides hpd's own, each request given push_timeout_s, a failed one retried
  // with a wait doubling from 1 s up to push_retry_max_s.
  std::string otlp_endpoint;
  std::vector<std::pair<std::string, std::string>> push_labels;
  double push_timeout_s = 30;
  double push_retry_max_s = 60;
  // The request body compressed with gzip (as OpenTelemetry's exporters send it), or not.
  session::PushCompression push_compression = session::PushCompression::kGzip;
  // TLS of the push (https://, grpcs://): a CA bundle instead of the system's CAs, a client
  // certificate and its key (PEM; absolute paths, "" = none), and a file of headers (a bearer token)
  // that must be root's and readable by root only; push_headers is what it holds, read when the
  // configuration is parsed (at start and at each SIGHUP).
  std::string push_ca_file;
  std::string push_client_cert;
  std::string push_client_key;
  std::string push_headers_file;
  std::vector<std::string> push_headers;
  // Further endpoints (KEY.NAME keys), in the order of their first key in the file.
  std::vector<PushEndpoint> push_endpoints;
  // The unwind-table cache on disk (hpd/collect/unwind_cache.h), in state_directory/unwind-cache: the
  // compiled CFI tables of the binaries recorded, one file per build-id, least recently used removed
  // past this bound. 0: no cache on disk (tables are compiled once per run of hpd).
  uint64_t max_unwind_cache_mb = 256;
  // The compiled CFI tables hpd keeps in memory across recordings, for the next ones of the same
  // binaries (least recently used dropped past this bound; a smaller bound on SIGHUP drops them at
  // once). The default is hpd/collect/recorder.h's kDefaultKeptCfiTablesBytes.
  uint64_t max_kept_unwind_tables_mb = 128;
  // What a recording keeps in memory of the stacks it has already written to its client's capture, in
  // KiB: past it, they are let go and a new stack generation begins (RecordOptions::stack_memory_bound),
  // so that a long --all recording's memory stays flat. 0: kept to the end. The default is
  // session::kStackMemoryBound.
  uint64_t max_stack_memory_kb = 8192;
  // debuginfod servers hpd asks for the debug files of modules that have none on the host, when it
  // names a session's functions (space-separated http(s) URLs, as DEBUGINFOD_URLS; "" = none). hpd's
  // own setting: its environment's DEBUGINFOD_URLS is ignored. Downloads are cached in
  // state_directory/debuginfod. Read at start only (libdebuginfod takes it from the environment).
  std::string debuginfod_urls;

  bool operator==(const Config&) const = default;
};

// Every problem of a file, one "FILE:LINE: what" line each.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::vector<std::string>& problems);
  [[nodiscard]] const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// Parses a configuration text; `name` names it in messages. Unknown keys and bad values are errors
// (a typo must not silently keep a default). Throws ConfigError listing all of them.
Config parse_config(std::string_view text, const std::string& name);

// Every key with its value, one `key = value` line each in key order: a file parse_config reads back
// to the same Config (durations in seconds, sizes in bytes).
std::string format_config(const Config& config);

// Every endpoint to push to, in order: the unsuffixed keys' first (name ""; when otlp_endpoint is
// set), then the named ones whose otlp_endpoint.NAME is not empty; each timeout resolved.
std::vector<PushEndpoint> push_endpoints_of(const Config& config);

// Reads and parses `path`. Throws ConfigError (also for an unreadable file).
Config load_config(const std::string& path);

// "90", "90s", "10m", "2h", "7d" as seconds; "512", "64K", "100M", "1G" (also KiB/MiB/GiB) as bytes.
// False when the text is not one.
bool parse_duration_s(std::string_view text, double& seconds);
bool parse_size_bytes(std::string_view text, uint64_t& bytes);

}  // namespace hpd::service
