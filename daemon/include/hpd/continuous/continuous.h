// Continuous profiling: a low-rate, system-wide recording kept on disk as rotating chunk files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/collect/recorder.h"
#include "hpd/model/raw_profile.h"
#include "hpd/session/otlp_push.h"

namespace hpd::continuous {

// Pushing every finished chunk to an OTLP endpoint, with the chunk store as the queue (docs/fleet.md).
struct PushSettings {
  // "" = no push; http://HOST:PORT or https://HOST:PORT (the OTLP/HTTP receiver; the profiles path
  // is added), or the full URL to POST to.
  std::string otlp_endpoint;
  // Resource attributes on every process, after hpd's own (host.name, process.pid, executable).
  std::vector<std::pair<std::string, std::string>> labels;
  double timeout_s = 30;    // one request
  double retry_max_s = 60;  // after a failure the wait doubles from 1 s up to this
  session::PushCompression compression = session::PushCompression::kGzip;  // of the request body
  std::string user_agent = "hpd";
  std::string scope_version;  // the OTLP instrumentation scope's version (hpd's)
  // TLS (https://, grpcs://): a CA bundle instead of the system's CAs, a client certificate and its key
  // (PEM files; "" = none); headers sent with every request ("Name: value", e.g. a bearer token).
  std::string ca_file;
  std::string client_cert;
  std::string client_key;
  std::vector<std::string> headers;

  bool operator==(const PushSettings&) const = default;
};

inline constexpr size_t kMaxPushEndpoints = 8;

enum class LogSeverity { kInfo, kWarning, kError };

struct ContinuousOptions {
  std::filesystem::path dir = "/var/lib/hpd";
  uint32_t frequency_hz = 19;
  uint32_t cfi_rows = 0;               // rows of the eBPF CFI row map (0 = the recorder's default)
  double chunk_seconds = 60;           // one capture file (.hpr) per chunk
  uint64_t max_age_s = 7 * 24 * 3600;  // chunks that ended longer ago are removed; 0 = no limit
  uint64_t max_bytes = 1ull << 30;     // the oldest chunks go until the rest fit; 0 = no limit
  bool kernel = true;                  // kernel frames, when permitted
  Backend backend = Backend::kAuto;    // system-wide recording needs the eBPF backend
  bool off_cpu = false;                // every context switch of the system: costly, off by default
  // How often the chunk in progress is appended to its .tmp file: what a crash of hpd can lose.
  double flush_seconds = 10;
  int zstd_level = 3;
  // After a chunk failed (e.g. the backend is unavailable), the next attempt waits this long.
  double retry_seconds = 10;
  PushSettings push;
  // Further endpoints, each pushed to on its own (its own cursor, thread, retries and stats): one
  // that is down holds back none of the others. At most kMaxPushEndpoints with `push`, no URL twice.
  std::vector<PushSettings> more_push;
  // What the service's log should say (push failures and recoveries, unsent chunks removed); may be
  // called from the profiler's threads.
  std::function<void(LogSeverity, const std::string&)> log;
};

// Throws std::invalid_argument naming the bad field.
void validate(const ContinuousOptions& options);

// One endpoint's push, since start() (the cursor, `last_sent`, is kept on disk across restarts).
struct PushStats {
  std::string endpoint;        // the URL posted to
  std::string last_sent;       // the file name of the last chunk the endpoint accepted ("" = none yet)
  uint64_t chunks_sent = 0;    // accepted by the endpoint
  uint64_t chunks_queued = 0;  // finished chunks after last_sent, waiting
  uint64_t bytes_queued = 0;   // their size on disk
  // The start of the oldest of them (0 = none queued): the lag is the age of the oldest data the
  // endpoint has not received.
  uint64_t oldest_queued_start_unix_ns = 0;
  uint64_t chunks_dropped = 0;      // removed by retention (or unreadable) before they were sent
  uint64_t bytes_sent = 0;          // request bodies accepted, as they went on the wire (compressed)
  uint64_t bytes_uncompressed = 0;  // the same requests before compression
  uint64_t last_success_unix_ns = 0;
  std::string last_error;  // the latest failure; stays after a success (see last_error_unix_ns)
  uint64_t last_error_unix_ns = 0;
};

struct Stats {
  bool running = false;
  uint64_t chunks_written = 0;   // by this profiler since start()
  uint64_t chunks_salvaged = 0;  // .tmp files of a crashed run turned into chunks
  uint64_t chunks_removed = 0;   // by retention
  uint64_t chunks_on_disk = 0;
  uint64_t bytes_on_disk = 0;  // finished chunks; the chunk in progress is not counted
  uint64_t samples = 0;        // recorded since start()
  uint64_t lost = 0;           // lost records and stack failures since start()
  // Collections (system-wide recordings, each cut into chunks without a pause) started since start():
  // one, plus one after each failure, each reload that changed what the recording uses, and each time
  // the collection's tables grew past their bound.
  uint64_t collections = 0;
  // Time not sampled between two chunks: 0 within a collection, the setup of the next collection
  // when one ended.
  uint64_t last_gap_ns = 0;
  uint64_t max_gap_ns = 0;
  std::string current_chunk;  // file name of the chunk in progress, "" between chunks
  std::string last_error;     // the last failure (a chunk that could not be recorded or written)
  uint64_t last_error_unix_ns = 0;
  std::vector<std::string> notes;  // the latest things worth knowing (garbage files, salvaged chunks)
  std::vector<PushStats> push;     // one per endpoint pushed to (none when push is off)
};

// Records system-wide in a background thread: one long-lived recording (a collection) whose samples
// are cut into one capture file per chunk without a pause in sampling, each file complete on its own
// (its processes' maps, modules and stacks), so that memory stays bounded however long it runs. Thread-safe:
// every method may be called from any thread (the daemon's signal handling thread, its socket server).
class ContinuousProfiler {
 public:
  // Validates the options (std::invalid_argument); touches nothing until start().
  explicit ContinuousProfiler(ContinuousOptions options);
  ~ContinuousProfiler();  // stops
  ContinuousProfiler(const ContinuousProfiler&) = delete;
  ContinuousProfiler& operator=(const ContinuousProfiler&) = delete;

  // Creates the directory if needed (0750), takes its lock (std::runtime_error when another
  // profiler holds it), salvages .tmp files of a crashed run, applies retention, then starts the
  // recording thread. Recording errors later do not throw: they show in stats().last_error.
  void start();
  // Ends the chunk in progress and keeps it (finished, renamed), then joins the thread.
  void stop();
  // New options (SIGHUP), from the next chunk boundary on: the chunk length, flush interval,
  // compression and push at once; a change of what the recording uses (rate, backend, kernel frames,
  // off-CPU, CFI rows, directory) ends the collection there and starts a new one (one gap of its
  // setup); the retention limits at the next retention pass. Throws std::invalid_argument for bad options.
  void reconfigure(ContinuousOptions options);
  Stats stats() const;
  ContinuousOptions options() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// ---- The chunk store: naming, scanning, recovery and retention of a chunk directory ----

// "chunk-20250314T092653.589Z.hpr": UTC start time with milliseconds, so names sort by time.
std::string chunk_file_name(uint64_t start_unix_ns);
// The start time of a chunk file name (final or ".tmp"), nullopt when the name is not a chunk's.
std::optional<uint64_t> parse_chunk_file_name(std::string_view name);

struct ChunkFile {
  std::filesystem::path path;
  uint64_t start_unix_ns = 0;  // from the name
  uint64_t end_unix_ns = 0;    // the file's modification time: when it was finished
  uint64_t bytes = 0;
};

struct StoreScan {
  std::vector<ChunkFile> chunks;                   // finished chunks, oldest first
  std::vector<std::filesystem::path> temporaries;  // ".tmp" files: a chunk in progress or a crashed run's
  std::vector<std::string> notes;                  // files that are not ours, ignored
};

// Lists `dir`. Throws std::runtime_error when it cannot be read, saying which permission is missing.
StoreScan scan_store(const std::filesystem::path& dir);

struct RetentionLimits {
  uint64_t max_age_s = 0;  // 0 = no limit
  uint64_t max_bytes = 0;  // 0 = no limit
};

// Removes chunks that ended more than max_age_s before now_unix_ns, then the oldest ones until the
// rest take at most max_bytes. Only finished chunk files are touched. Returns the removed paths.
std::vector<std::filesystem::path> apply_retention(const std::filesystem::path& dir,
                                                   const RetentionLimits& limits, uint64_t now_unix_ns,
                                                   std::vector<std::string>* notes);

// Turns the .tmp files a crashed run left in `dir` into finished chunks (everything up to their last
// complete block); removes those without a single sample or that cannot be read at all. Must not
// run while a profiler writes into `dir`. Returns how many chunks were salvaged.
size_t recover_temporaries(const std::filesystem::path& dir, std::vector<std::string>* notes);

// ---- Reading the chunks back ----

struct ExportFilter {
  uint64_t since_unix_ns = 0;
  uint64_t until_unix_ns = 0;  // 0 = now
  std::vector<int32_t> pids;   // empty = every process
  // Process names (comm) or executable file names; empty = every process.
  std::vector<std::string> comms;
};

struct LoadedChunks {
  RawProfile profile;
  // The boot all chunks were recorded in (their kernel addresses fit that boot's symbols); "" when
  // they come from several boots or do not say.
  std::string boot_id;
  size_t chunks_read = 0;
  size_t chunks_skipped = 0;   // corrupt or unreadable
  uint64_t since_unix_ns = 0;  // the window actually used
  uint64_t until_unix_ns = 0;
};

// Reads the chunks of `dir` overlapping the window and merges them into one RawProfile holding only
// the matching processes' samples inside the window. Modules are interned by path and build-id,
// stacks re-interned, times put on one monotonic timeline (the oldest chunk's boot). A pid seen
// again in a later chunk is the same process when, in the same boot, it was alive at the end of the
// earlier chunk and existed before the later one started (another executable then means it exec'd:
// the old mappings end at the later chunk's start); otherwise the pid was reused and the later
// process gets pid + k * 4194304 (above any Linux pid) with a note. Corrupt chunks are skipped with
// a note. Throws std::runtime_error when `dir` cannot be read.
LoadedChunks load_chunk_window(const std::filesystem::path& dir, const ExportFilter& filter,
                               std::vector<std::string>* notes);
RawProfile load_chunks(const std::filesystem::path& dir, const ExportFilter& filter,
                       std::vector<std::string>* notes);

// Parses a point in time for --since / --until: a duration before now ("30s", "10m", "2h", "1d",
// "1h30m"), "now", "@UNIX_SECONDS", or an ISO 8601 UTC time ("2025-03-14T09:26:53Z", the "Z" and
// the seconds optional, "T" or a space). Throws std::invalid_argument with the accepted forms.
uint64_t parse_time_spec(std::string_view text, uint64_t now_unix_ns);
// "2025-03-14 09:26:53 UTC", for messages.
std::string format_unix_time(uint64_t unix_ns);

uint64_t unix_now_ns();

}  // namespace hpd::continuous
