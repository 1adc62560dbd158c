// The hpd daemon's lifecycle: configuration and SIGHUP reloads, the listening socket, the accept loop with
// its connection limits, signals and shutdown, systemd notifications, continuous mode, status.
#include "hpd/service/server.h"

#include <linux/perf_event.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "daemon.h"
#include "hpd/base/output_file.h"
#include "hpd/base/unique_fd.h"
#include "hpd/collect/recorder.h"
#include "hpd/collect/unwind_cache.h"
#include "hpd/session/record_pipeline.h"
#include "log.h"

#ifndef HPD_VERSION
#define HPD_VERSION "unknown"
#endif

namespace hpd::service {
namespace {

// The unwind-table cache of every recording of hpd (its sessions and continuous mode), in its state
// directory; a directory it cannot write is said once in the log. And the bound of the tables kept in
// memory across recordings: a smaller one drops tables at once.
void configure_unwind_cache_of(const Config& config) {
  UnwindCacheSettings settings;
  settings.directory = config.state_directory + "/" + kHpdUnwindCacheDirectoryName;
  settings.max_bytes = config.max_unwind_cache_mb << 20;
  settings.warn = [](const std::string& text) { log_warning(text); };
  configure_unwind_cache(settings);
  if (const uint64_t dropped = set_kept_cfi_tables_limit(config.max_kept_unwind_tables_mb << 20);
      dropped != 0)
    log_info("max_kept_unwind_tables_mb " + std::to_string(config.max_kept_unwind_tables_mb) + ": " +
             std::to_string(dropped) + " kept unwind tables dropped");
}

// hpd asks the debuginfod servers of hpd.conf and no others: libdebuginfod reads DEBUGINFOD_URLS from
// the environment at each query, so it is set (or removed) here, before any thread runs, with the
// cache in the state directory (a service's home is neither writable nor its own).
void configure_debuginfod(const Config& config) {
  if (config.debuginfod_urls.empty()) {
    ::unsetenv("DEBUGINFOD_URLS");
    return;
  }
  ::setenv("DEBUGINFOD_URLS", config.debuginfod_urls.c_str(), 1);
  ::setenv("DEBUGINFOD_CACHE_PATH", (config.state_directory + "/debuginfod").c_str(), 1);
  log_info("debuginfod: asking " + config.debuginfod_urls + " for missing debug files (cache " +
           config.state_directory + "/debuginfod)");
}

using nlohmann::json;

// More connections of users other than root than this are answered with an error and closed (each
// costs a thread); max_connections_per_user bounds each user's share.
constexpr size_t kMaxConnections = 256;

uint64_t read_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

bool perf_events_available(std::string* why) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.disabled = 1;
  attr.exclude_kernel = 1;
  const UniqueFd fd(static_cast<int>(::syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC)));
  if (!fd) {
    *why = std::string("perf_event_open: ") + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

json Daemon::status_message(bool privileged) {
  const Config cfg = config();
  const auto totals = sessions_.totals();
  json reply = reply_message("status");
  reply["daemon"] = std::string("hpd ") + HPD_VERSION;
  reply["protocol"] = kProtocolVersion;
  reply["pid"] = ::getpid();
  reply["uptime_s"] = (now_ns(CLOCK_MONOTONIC) - started_mono_ns_) / 1e9;
  reply["backends"] = {{"bpf", {{"available", bpf_available_}, {"reason", bpf_reason_}}},
                       {"perf", {{"available", perf_available_}, {"reason", perf_reason_}}}};
  reply["sessions"] = totals.active;
  reply["max_sessions"] = cfg.max_sessions;
  reply["sessions_finished"] = totals.finished;
  reply["samples"] = totals.samples;
  reply["lost"] = totals.lost;
  reply["rss_bytes"] = read_rss_bytes();
  // The eBPF CFI tables of the recordings running now (sessions and continuous mode).
  const CfiMapsStatus cfi = cfi_maps_status();
  reply["cfi"] = {{"recordings", cfi.recordings},           {"rows", cfi.rows},
                  {"row_capacity", cfi.row_capacity},       {"modules_loaded", cfi.modules_loaded},
                  {"modules_evicted", cfi.modules_evicted}, {"modules_refused", cfi.modules_refused},
                  {"rows_wanted", cfi.rows_wanted},         {"map_bytes", cfi.map_bytes}};
  // The compiled tables hpd keeps across recordings (max_kept_unwind_tables_mb).
  const KeptCfiTablesStatus kept = kept_cfi_tables_status();
  reply["cfi"]["kept"] = {{"tables", kept.tables},
                          {"bytes", kept.bytes},
                          {"limit_bytes", kept.limit_bytes},
                          {"evicted", kept.evicted}};
  // The kernel's symbols kept across recordings, and how often recordings read /proc/kallsyms.
  const KernelSymbolsStatus kernel = kernel_symbols_status();
  reply["kernel_symbols"] = {{"kept", kernel.kept},
                             {"symbols", kernel.symbols},
                             {"reads", kernel.reads},
                             {"completions", kernel.completions}};
  // The eBPF programs and maps loaded ahead for the next session (prepare_recording).
  const PreparedRecordingStatus prepared = prepared_recording_status();
  reply["prepared"] = {{"ready", prepared.ready},
                       {"ready_sets", prepared.ready_sets},
                       {"loading", prepared.loading},
                       {"loads", prepared.loads},
                       {"taken", prepared.taken},
                       {"reuses", prepared.reuses},
                       {"reset_failures", prepared.reset_failures},
                       {"error", prepared.error},
                       {"reset_error", prepared.reset_error}};
  reply["limits"] = {{"max_duration_s", cfg.max_duration_s},
                     {"max_frequency_hz", cfg.max_frequency_hz},
                     {"max_cfi_rows", cfg.max_cfi_rows},
                     {"max_session_memory_mb", cfg.max_session_memory_mb},
                     {"max_user_memory_mb", cfg.max_user_memory_mb},
                     {"max_jit_symbols_mb", cfg.max_jit_symbols_mb},
                     {"max_symbol_cache_mb", cfg.max_symbol_cache_mb},
                     {"max_kept_unwind_tables_mb", cfg.max_kept_unwind_tables_mb},
                     {"max_stack_memory_kb", cfg.max_stack_memory_kb}};
  // What the running sessions hold (their Session::memory_bytes): in all, and per user for those
  // who may see every session.
  const SessionRegistry::Memory memory = sessions_.memory();
  reply["memory"] = {{"sessions_bytes", memory.bytes}};
  // malloc's own count (mallinfo2, over every arena): what hpd's heap holds in use (mapped blocks
  // included), and what it holds free: its arenas' free chunks and tops, resident or given back page
  // by page (docs/performance.md "Memory of the push").
  const struct mallinfo2 heap = ::mallinfo2();
  reply["memory"]["heap_in_use_bytes"] = heap.uordblks + heap.hblkhd;
  reply["memory"]["heap_free_bytes"] = heap.fordblks;
  if (privileged) {
    json users = json::array();
    for (const auto& [uid, bytes] : memory.by_user) users.push_back({{"uid", uid}, {"bytes", bytes}});
    reply["memory"]["users"] = users;
  }
  json continuous = {{"enabled", cfg.continuous}, {"available", false}};
#ifdef HPD_HAVE_CONTINUOUS
  continuous["available"] = true;
  {
    std::lock_guard lock(continuous_mutex_);
    if (continuous_) {
      const continuous::Stats stats = continuous_->stats();
      continuous["running"] = stats.running;
      continuous["chunks_written"] = stats.chunks_written;  // since continuous mode was turned on
      continuous["chunks_on_disk"] = stats.chunks_on_disk;
      continuous["bytes_on_disk"] = stats.bytes_on_disk;
      continuous["chunks_removed"] = stats.chunks_removed;  // by retention, since hpd started
      continuous["samples"] = stats.samples;
      continuous["lost"] = stats.lost;
      continuous["collections"] = stats.collections;
      continuous["max_gap_ns"] = stats.max_gap_ns;
      continuous["last_error"] = stats.last_error;
      if (privileged) continuous["directory"] = continuous_->options().dir.string();
      // The endpoint's URL and errors (which name it) may hold credentials: for privileged clients.
      json push = json::array();
      for (const continuous::PushStats& p : stats.push) {
        // The lag: the age of the oldest data the endpoint has not received (0: it has every chunk).
        const uint64_t now = continuous::unix_now_ns();
        const uint64_t oldest = p.oldest_queued_start_unix_ns;
        json e = {{"chunks_sent", p.chunks_sent},
                  {"chunks_queued", p.chunks_queued},
                  {"bytes_queued", p.bytes_queued},
                  {"oldest_queued_start_unix_ns", oldest},
                  {"lag_ns", oldest != 0 && now > oldest ? now - oldest : 0},
                  {"chunks_dropped", p.chunks_dropped},
                  {"bytes_sent", p.bytes_sent},
                  {"bytes_uncompressed", p.bytes_uncompressed},
                  {"last_success_unix_ns", p.last_success_unix_ns},
                  {"last_error_unix_ns", p.last_error_unix_ns},
                  {"last_sent", p.last_sent}};
        if (privileged) {
          e["endpoint"] = p.endpoint;
          e["last_error"] = p.last_error;
        }
        push.push_back(std::move(e));
      }
      continuous["push"] = std::move(push);
    }
  }
#endif
  reply["continuous"] = continuous;
  return reply;
}

// Whether the eBPF backend can record, found by loading the programs and maps of the likeliest first
// request, `hpctl record --pid P` with the defaults by a client that may see everything: before READY=1
// and before any request is served, so that the first recording takes them loaded (a request that
// comes meanwhile waits in the listener's queue for that one load, not for a check and then the set);
// each session then gives its set back at its end, every map reset, for the next like it
// (RecordOptions::load_next_ahead, bpf_preloader.h).
void Daemon::check_bpf_with_first_recording() {
  session::RecordRequest request;
  request.target.pids = {static_cast<int32_t>(::getpid())};
  RecordOptions first;
  try {
    first = session::record_options_from_request(request);
  } catch (const std::exception& e) {
    log_warning(std::string("cannot load a recording's programs ahead: ") + e.what());
    bpf_available_ = bpf_backend_available(&bpf_reason_);
    return;
  }
  std::string error;
  bpf_available_ = bpf_backend_available_prepared(first, &bpf_reason_, &error);
  if (bpf_available_ && !error.empty())
    log_warning("cannot load the first recording's programs ahead: " + error);
}

bool Daemon::load(Config& into, std::string& why) {
  if (options_.config_path.empty()) {
    into = Config{};
  } else if (!options_.config_required && !std::filesystem::exists(options_.config_path)) {
    into = Config{};
    log_info(options_.config_path + " does not exist; using the defaults");
  } else {
    try {
      into = load_config(options_.config_path);
    } catch (const ConfigError& e) {
      why = e.what();
      return false;
    }
  }
  if (!options_.socket_path.empty()) into.socket = options_.socket_path;
  return true;
}

bool Daemon::open_listener() {
  const int activated = take_activation_socket();
  if (activated >= 0) {
    listener_.reset(activated);
    log_info("listening on the socket passed by systemd");
    return true;
  }
  const std::string& path = config_.socket;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    log_error("socket path too long: " + path);
    return false;
  }
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      log_error("cannot create " + dir.string() + ": " + ec.message());
      return false;
    }
    ::chmod(dir.c_str(), 0755);
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // A socket file left by a crashed hpd is replaced; one that answers belongs to a running hpd.
  if (std::filesystem::exists(path, ec)) {
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      log_error("another hpd already listens on " + path);
      return false;
    }
    ::unlink(path.c_str());
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    log_error("cannot bind " + path + ": " + std::strerror(errno));
    return false;
  }
  // Everyone may connect: access is decided per request from the peer's credentials.
  ::chmod(path.c_str(), 0666);
  if (::listen(fd.get(), 128) != 0) {
    log_error("cannot listen on " + path + ": " + std::strerror(errno));
    ::unlink(path.c_str());
    return false;
  }
  listener_ = std::move(fd);
  created_socket_ = path;
  log_info("listening on " + path);
  return true;
}

void Daemon::configure_continuous(const Config& config) {
#ifdef HPD_HAVE_CONTINUOUS
  std::lock_guard lock(continuous_mutex_);
  if (!config.continuous) {
    if (!push_endpoints_of(config).empty())
      log_warning(
          "otlp_endpoint is set, but continuous = off: nothing is pushed (the push sends the chunks of "
          "continuous mode)");
    if (continuous_) {
      continuous_->stop();
      continuous_.reset();
      log_info("continuous profiling stopped");
    }
    return;
  }
  continuous::ContinuousOptions options;
  options.dir = config.state_directory;
  options.frequency_hz = config.continuous_frequency;
  options.cfi_rows = config.continuous_cfi_rows;
  options.chunk_seconds = config.continuous_chunk_seconds;
  options.kernel = config.continuous_kernel;
  options.off_cpu = config.continuous_off_cpu;
  options.max_age_s = config.continuous_max_age_s;
  options.max_bytes = config.continuous_max_bytes;
  // Every endpoint (the unsuffixed keys' first, then the named ones), each with its own transport.
  std::vector<continuous::PushSettings> endpoints;
  for (const PushEndpoint& e : push_endpoints_of(config)) {
    continuous::PushSettings push;
    push.otlp_endpoint = e.otlp_endpoint;
    push.labels = config.push_labels;
    push.timeout_s = e.timeout_s;
    push.compression = e.compression.value_or(config.push_compression);
    push.retry_max_s = config.push_retry_max_s;
    push.ca_file = e.ca_file;
    push.client_cert = e.client_cert;
    push.client_key = e.client_key;
    push.headers = e.headers;
    push.user_agent = "hpd/" HPD_VERSION;
    push.scope_version = HPD_VERSION;
    endpoints.push_back(std::move(push));
  }
  if (!endpoints.empty()) {
    options.push = endpoints.front();
    options.more_push.assign(endpoints.begin() + 1, endpoints.end());
  }
  options.log = [](continuous::LogSeverity severity, const std::string& text) {
    switch (severity) {
      case continuous::LogSeverity::kInfo: log_info("continuous push: " + text); break;
      case continuous::LogSeverity::kWarning: log_warning("continuous push: " + text); break;
      case continuous::LogSeverity::kError: log_error("continuous push: " + text); break;
    }
  };
  try {
    if (continuous_) {
      continuous_->reconfigure(options);
      log_info("continuous profiling reconfigured");
    } else {
      auto profiler = std::make_unique<continuous::ContinuousProfiler>(options);
      profiler->start();
      continuous_ = std::move(profiler);
      log_info("continuous profiling at " + std::to_string(options.frequency_hz) + " Hz into " +
               options.dir.string());
      for (const continuous::PushSettings& p : endpoints)
        log_info("continuous push: every finished chunk goes to " + p.otlp_endpoint);
    }
  } catch (const std::exception& e) {
    log_error(std::string("continuous profiling could not start: ") + e.what());
  }
#else
  if (config.continuous) log_warning("continuous = on, but this hpd was built without continuous mode");
  if (!config.otlp_endpoint.empty())
    log_warning("otlp_endpoint is set, but this hpd was built without continuous mode");
#endif
}

void Daemon::update_status_line() {
  const auto totals = sessions_.totals();
  notifier_.notify("STATUS=" + std::to_string(totals.active) + " session(s), " +
                   std::to_string(totals.samples) + " samples recorded");
}

void Daemon::begin_shutdown() {
  if (stopping_.exchange(true)) return;
  stop_began_ns_ = now_ns(CLOCK_MONOTONIC);
  log_info("stopping: ending " + std::to_string(sessions_.totals().active) + " session(s)");
  notifier_.notify("STOPPING=1\nSTATUS=stopping, finishing the sessions' profiles");
  sessions_.stop_all();
  // Outputs whose readers take nothing are given up after half a second from now on (write_output_fully
  // reads the limit again while it waits), replies too (Connection::send_text): a stop is prompt
  // whatever the clients do. An honest client's profile is still delivered, within stop_timeout.
  set_output_stall_timeout_ms(500);
  listener_.reset();
  if (!created_socket_.empty()) ::unlink(created_socket_.c_str());
  configure_continuous(Config{});  // continuous off: the chunk in progress is kept
}

void Daemon::reload() {
  Config fresh;
  std::string why;
  if (!load(fresh, why)) {
    log_error("SIGHUP: keeping the old configuration, the new one has problems:\n" + why);
    return;
  }
  Config old = config();
  if (fresh.socket != old.socket)
    log_warning("SIGHUP: a new socket path takes effect at the next start of hpd");
  fresh.socket = old.socket;
  if (fresh.debuginfod_urls != old.debuginfod_urls)
    log_warning("SIGHUP: a new debuginfod_urls takes effect at the next start of hpd");
  fresh.debuginfod_urls = old.debuginfod_urls;
  {
    std::lock_guard lock(config_mutex_);
    config_ = fresh;
  }
  set_log_level(fresh.log_level);
  set_output_stall_timeout_ms(static_cast<int>(fresh.client_timeout_s * 1000));
  configure_unwind_cache_of(fresh);
  configure_continuous(fresh);
  log_info("configuration reloaded (max_sessions " + std::to_string(fresh.max_sessions) + ")");
}

void Daemon::accept_one() {
  UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!client) return;
  timing_mark("hpd-accepted");
  const auto peer = peer_credentials(client.get());
  if (!peer) return;
  const std::string refusal = connection_refusal(peer->uid);
  if (!refusal.empty()) {
    log_info("refused a connection of uid " + std::to_string(peer->uid) + " (pid " +
             std::to_string(peer->pid) + "): " + refusal);
    // Best effort: a client that does not read gets nothing, but costs no wait either.
    const std::string text = error_message(ErrorCode::kLimit, refusal + "; try again later");
    std::string frame(4, '\0');
    for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    frame += text;
    [[maybe_unused]] const ssize_t sent =
        ::send(client.get(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    return;
  }
  connections_.push_back(std::make_unique<Connection>(*this, std::move(client), *peer));
  connections_.back()->start();
}

std::string Daemon::connection_refusal(uid_t uid) {
  // Root is always served: no user can lock the administrator out.
  if (uid == 0) return "";
  reap_connections(false);
  size_t others = 0;
  size_t mine = 0;
  for (const auto& c : connections_) {
    if (c->uid() == 0) continue;
    ++others;
    mine += c->uid() == uid ? 1 : 0;
  }
  const Config cfg = config();
  if (mine >= cfg.max_connections_per_user) {
    return "you (uid " + std::to_string(uid) + ") already hold " + std::to_string(mine) +
           " connections, the most one user may (max_connections_per_user in hpd.conf)";
  }
  if (others >= kMaxConnections) return "hpd has too many connections";
  return "";
}

void Daemon::reap_connections(bool all) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (all || (*it)->done()) {
      it = connections_.erase(it);  // joins
    } else {
      ++it;
    }
  }
}

int Daemon::run() {
  std::string why;
  if (!load(config_, why)) {
    log_error("cannot start, the configuration has problems:\n" + why);
    return 1;
  }
  set_log_level(config_.log_level);
  set_output_stall_timeout_ms(static_cast<int>(config_.client_timeout_s * 1000));
  configure_debuginfod(config_);  // before any thread: it sets the environment

  // Signals arrive through a signalfd; every thread inherits the mask, so none is interrupted.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  UniqueFd signals(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals) {
    log_error(std::string("signalfd: ") + std::strerror(errno));
    return 1;
  }
  if (!open_listener()) return 1;
  timing_mark("hpd-listening");
  check_bpf_with_first_recording();
  timing_mark("hpd-programs-loaded");
  perf_available_ = perf_events_available(&perf_reason_);
  configure_unwind_cache_of(config_);
  // /proc/kallsyms is read once for every recording, not once each (docs/performance.md).
  keep_kernel_symbols(true);
  if (!bpf_available_)
    log_warning("the eBPF backend is unavailable (" + bpf_reason_ + "); recording with perf_event");
  configure_continuous(config_);

  timing_mark("hpd-ready");
  notifier_.notify("READY=1\nSTATUS=ready, no sessions");
  log_info(std::string("hpd ") + HPD_VERSION + " ready");
  const uint64_t watchdog_ns = notifier_.watchdog_usec() * 1000 / 2;
  uint64_t last_ping = now_ns(CLOCK_MONOTONIC);
  uint64_t last_status = 0;
  while (true) {
    pollfd fds[2] = {{signals.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    const nfds_t count = listener_ ? 2 : 1;
    const int ready = ::poll(fds, count, 200);
    if (ready < 0 && errno != EINTR) {
      // EFAULT and EINVAL are hpd's own mistake. Anything else passes: ENOMEM, or 516
      // (ERESTART_RESTARTBLOCK), which poll gives after a debugger called a function in hpd while
      // poll was waiting (gdb's `call malloc_info(...)`); the daemon goes on, after a pause.
      const int error = errno;
      if (error == EFAULT || error == EINVAL) {
        log_error(std::string("poll: ") + std::strerror(error));
        break;
      }
      log_warning(std::string("poll: ") + std::strerror(error) + "; waiting again");
      ::usleep(50'000);
      continue;
    }
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      while (::read(signals.get(), &info, sizeof info) == sizeof info) {
        if (info.ssi_signo == SIGHUP) {
          reload();
        } else {
          begin_shutdown();
        }
      }
    }
    if (ready > 0 && count == 2 && (fds[1].revents & POLLIN) != 0) accept_one();
    reap_connections(false);
    const uint64_t now = now_ns(CLOCK_MONOTONIC);
    if (watchdog_ns != 0 && now - last_ping >= watchdog_ns) {
      notifier_.notify("WATCHDOG=1");
      last_ping = now;
    }
    if (now - last_status >= 5000000000ull) {
      if (!stopping_) update_status_line();
      last_status = now;
    }
    if (stopping_ && connections_.empty()) break;
    if (stopping_ && static_cast<double>(now - stop_began_ns_) / 1e9 >= config().stop_timeout_s) {
      // Clients that did not take their profiles in time do not hold the service: their threads
      // cannot be joined, so the process ends here (the continuous chunk was finished already).
      log_warning("stopped with " + std::to_string(connections_.size()) +
                  " connection(s) still busy after stop_timeout (" +
                  std::to_string(static_cast<int>(config().stop_timeout_s)) + " s)");
      std::fflush(nullptr);
      ::_exit(0);
    }
  }
  reap_connections(true);
  release_prepared_recording();
  log_info("stopped");
  return 0;
}

int run_daemon(const DaemonOptions& options) {
  Daemon daemon(options);
  return daemon.run();
}

}  // namespace hpd::service
