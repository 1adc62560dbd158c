// hpctl's verbs through hpd: record (the daemon records, hpctl opens the file and starts the command),
// status, sessions, stop.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "commands.h"
#include "daemon_client.h"
#include "hpd/base/output_file.h"
#include "hpd/base/process.h"
#include "hpd/calls/alloc_log.h"
#include "hpd/calls/call_counter.h"
#include "hpd/calls/preload_table.h"
#include "hpd/collect/call_graph_choice.h"
#include "hpd/collect/recorder.h"
#include "hpd/continuous/continuous.h"
#include "hpd/export/report.h"
#include "hpd/session/record_json.h"
#include "hpd/session/record_pipeline.h"
#include "profile_input.h"
#include "progress.h"
#include "record_text.h"

namespace hpd::cli {
namespace {

using nlohmann::json;

std::atomic<bool> g_stop{false};
void on_stop_signal(int) {
  g_stop.store(true);
}

// Installs the stop handlers for the lifetime of the object.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// Whether `name` can be executed as execvp would find it.
bool command_runnable(const std::string& name, std::string& why) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return true;
    why = std::strerror(errno == 0 ? EACCES : errno);
    return false;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    if (executable((dir.empty() ? "." : dir) + "/" + name)) return true;
    start = end + 1;
  }
  why = "command not found in PATH";
  return false;
}

// The file the daemon writes into, opened here as the user by hpd::OutputFile's rules (links,
// FIFOs and devices others could have planted are refused; a FIFO nobody reads fails at once): a
// capture at its final path (streamed, as locally), a Firefox profile in a temporary file beside it
// that replaces the output only when complete.
class ClientOutput {
 public:
  explicit ClientOutput(const std::string& output)
      : output_(output),
        file_(output, session::is_capture_output(output) ? OutputWrite::kInPlace : OutputWrite::kReplace) {}

  [[nodiscard]] int fd() const { return file_.fd(); }
  // hpd went away mid-recording (`why`): a capture streamed so far is kept, incomplete (it has no end
  // block, which its readers report), and the error says so. Anything else is removed as before.
  [[noreturn]] void fail_keeping_partial_capture(const std::string& why) {
    struct stat st {};
    if (file_.in_place() && !file_.special() && session::is_capture_output(output_) && file_.fd() >= 0 &&
        ::fstat(file_.fd(), &st) == 0 && st.st_size > 0) {
      file_.keep();
      throw std::runtime_error(
          why + "; the capture '" + output_ +
          "' is kept as far as it was written, marked incomplete (hpctl convert reads it)");
    }
    throw std::runtime_error(why);
  }
  void commit() { file_.commit(); }

 private:
  std::string output_;
  OutputFile file_;
};

std::string json_text(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

uint64_t json_uint(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

double json_double(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// The one connection a recording through hpd uses: the hello, when one is needed, and the record
// request go on it in turn (docs/protocol.md: requests on a connection are served in order; every hpd
// did so), so hpd accepts one connection and starts one thread for it, not one per request.
class DaemonConnection {
 public:
  explicit DaemonConnection(std::string path) : path_(std::move(path)) {}
  [[nodiscard]] const std::string& path() const { return path_; }
  // Connects on first use. Throws DaemonUnavailable saying why.
  DaemonClient& client() {
    if (!client_) {
      client_ = std::make_unique<DaemonClient>(path_);
      timing_mark("hpctl-connected");
    }
    return *client_;
  }
  // hpd's answer to a hello on this connection, asked once. Throws as DaemonClient::request.
  const json& hello() {
    if (!hello_)
      hello_ = client().request({{"type", "hello"}, {"client", std::string("hpctl ") + HPD_VERSION}}, 5000);
    return *hello_;
  }

 private:
  std::string path_;
  std::unique_ptr<DaemonClient> client_;
  std::optional<json> hello_;
};

// Whether hpd answers a hello on `connection` within a short time.
bool daemon_answers(DaemonConnection& connection) {
  std::error_code ec;
  if (!std::filesystem::exists(connection.path(), ec)) return false;
  try {
    return connection.hello()["type"] == "hello";
  } catch (const std::exception&) {
    return false;
  }
}

// The runtime hpd names in its hello (the one it probes), for a command hpctl starts with it preloaded
// and hpd records, checked to be readable and usable by the command (`for_alloc`: a program with its
// own mcount still takes the allocation hooks; only a static one cannot). Empty when it cannot be
// used; then `why` says so.
std::string daemon_runtime_for(const session::RecordRequest& request, DaemonConnection& connection,
                               bool for_alloc, std::string& why) {
  std::string runtime;
  try {
    runtime = json_text(connection.hello(), "calls_runtime");
  } catch (const std::exception& e) {
    why = std::string("cannot ask hpd for its call runtime: ") + e.what();
    return "";
  }
  if (runtime.empty()) {
    why = "hpd names no call runtime (libhpdcalls.so is not installed beside it, or hpd is older)";
    return "";
  }
  if (::access(runtime.c_str(), R_OK) != 0) {
    why = "cannot read hpd's call runtime " + runtime + ": " + std::strerror(errno);
    return "";
  }
  why = calls::preload_unusable_reason(resolve_command(request.target.command.front()));
  if (for_alloc && why.find("defines mcount") != std::string::npos) why.clear();
  return why.empty() ? runtime : "";
}

// The table of hpd's call runtime for a command hpctl starts and hpd records (--calls): hpctl makes it,
// as the user, preloads into the command the runtime hpd names (the one hpd probes), and hands hpd the
// table's descriptor with the record request. Null when the runtime cannot be used; then `why` says
// so, and hpd counts with uprobes (or, with --calls-counter runtime, not at all).
std::unique_ptr<calls::PreloadTable> calls_table_for_daemon(const session::RecordRequest& request,
                                                            DaemonConnection& connection,
                                                            std::string& runtime, std::string& why) {
  runtime = daemon_runtime_for(request, connection, false, why);
  if (runtime.empty()) return nullptr;
  try {
    return std::make_unique<calls::PreloadTable>();
  } catch (const calls::CallCountError& e) {
    why = e.what();
    return nullptr;
  }
}

// The allocation log of hpd's runtime for a command hpctl starts and hpd records (--alloc): made and
// handed over as the call table is. Null when the runtime cannot be used; then `why` says so and the
// recording goes on without allocations.
std::unique_ptr<calls::AllocLog> alloc_log_for_daemon(const session::RecordRequest& request,
                                                      DaemonConnection& connection, std::string& runtime,
                                                      std::string& why) {
  runtime = daemon_runtime_for(request, connection, true, why);
  if (runtime.empty()) return nullptr;
  try {
    return std::make_unique<calls::AllocLog>(request.alloc_mean);
  } catch (const calls::CallCountError& e) {
    why = e.what();
    return nullptr;
  }
}

int record_through_daemon(const RecordArgs& args, DaemonConnection& connection) {
  const session::RecordRequest request = to_record_request(args);
  // The one validator, as locally: a request it refuses is not sent, and its reason is worded with
  // hpctl's flags (main()'s error_words).
  session::record_options_from_request(request);
  session::check_output_writable(request.output);
  std::string why;
  if (!request.target.command.empty() && !command_runnable(request.target.command.front(), why)) {
    throw std::runtime_error("cannot run '" + request.target.command.front() + "': " + why);
  }

  std::unique_ptr<calls::PreloadTable> calls_table;  // outlives the command and the recording
  std::unique_ptr<calls::AllocLog> alloc_log;        // likewise
  std::unique_ptr<LaunchedCommand> command;
  session::RecordRequest remote = request;
  std::string call_graph_reason;
  if (!request.target.command.empty()) {
    // hpd attaches to the held child before it execs: its /proc/PID/exe is still hpctl, so the
    // program's frame pointers are judged here, where the command is resolved as the user's shell would.
    // With the eBPF backend auto means cfi, which needs no look at the program (hpd decides).
    if (request.call_graph == CallGraph::kAuto && request.backend == Backend::kPerf &&
        !request.target.is_system_wide()) {
      const CallGraphChoice choice = choose_call_graph({resolve_command(request.target.command.front())});
      remote.call_graph = choice.mode;  // fp or dwarf
      call_graph_reason = choice.reason;
    }
    std::vector<std::string> environment;
    if (request.calls && request.calls_counter != CallCounterKind::kUprobes) {
      std::string runtime, why;
      calls_table = calls_table_for_daemon(request, connection, runtime, why);
      if (calls_table) {
        environment = calls_table->environment(runtime);
      } else if (request.calls_counter == CallCounterKind::kRuntime) {
        std::fprintf(stderr, "hpctl: call counts unavailable: %s\n", why.c_str());
        remote.calls = false;
      } else {
        std::fprintf(stderr, "hpctl: call counts: %s; counting with uprobes instead\n", why.c_str());
      }
    }
    if (request.alloc) {
      std::string runtime, why;
      alloc_log = alloc_log_for_daemon(request, connection, runtime, why);
      if (alloc_log) {
        // One LD_PRELOAD: the runtime once, whether it counts calls, samples allocations, or both.
        const bool preloaded = std::any_of(environment.begin(), environment.end(), [](const std::string& e) {
          return e.rfind("LD_PRELOAD=", 0) == 0;
        });
        for (std::string& e : alloc_log->environment(runtime))
          if (!preloaded || e.rfind("LD_PRELOAD=", 0) != 0) environment.push_back(std::move(e));
      } else {
        std::fprintf(stderr, "hpctl: allocations not sampled: %s\n", why.c_str());
      }
      // hpd samples from the log hpctl hands it, for the one pid it is sent (not a command of its own).
      remote.alloc = false;
      remote.alloc_mean = 0;
    }
    // Held, when it can be, right after its exec (HoldAt::kAfterExec): hpd then sees the program's own
    // image and probes it before it runs, as a local recording does. It runs as the user, with their
    // environment and working directory, because hpctl starts it, not hpd.
    command = std::make_unique<LaunchedCommand>(request.target.command, environment, HoldAt::kAfterExec);
    remote.target.command.clear();
    remote.target.pids = {command->pid()};
  }
  ClientOutput output(args.output);
  DaemonClient& client = connection.client();
  json record_message = {{"type", "record"}, {"args", session::record_request_to_json(remote)}, {"fd", true}};
  if (command) record_message["launched_command"] = request.target.command;
  // An older hpd ignores the field, attaches as to any pid and says "started" all the same.
  if (command && command->held_at_exec()) record_message["held_at_exec"] = true;
  std::vector<int> descriptors = {output.fd()};
  if (calls_table) {
    record_message["calls_table"] = true;
    descriptors.push_back(calls_table->fd());
  }
  if (alloc_log) {
    record_message["alloc_log"] = true;
    descriptors.push_back(alloc_log->fd());
  }
  StopSignals signals;
  timing_mark("hpctl-request");
  client.send(record_message, descriptors);

  ProgressLine progress(!args.quiet);
  const bool open_ended = args.duration_s <= 0;
  bool stop_sent = false;
  std::optional<json> done;
  try {
    while (!done) {
      if (g_stop.load() && !stop_sent) {
        client.send({{"type", "stop"}});
        stop_sent = true;
        progress.update("stopping...");
      }
      auto message = client.receive(100);
      if (!message) continue;
      const std::string type = json_text(*message, "type");
      if (type == "started") {
        if (command) command->start();
      } else if (type == "progress") {
        RecordProgress p;
        p.elapsed_s = json_double(*message, "elapsed_s");
        p.duration_s = json_double(*message, "duration_s");
        p.samples = json_uint(*message, "samples");
        p.lost = json_uint(*message, "lost");
        progress.update(session::format_record_progress(p, open_ended));
      } else if (type == "writing") {
        progress.update("hpd is symbolizing and writing " + args.output + "...");
      } else if (type == "done") {
        done = std::move(message);
      }
      // "accepted" and messages of newer daemons need nothing here.
    }
  } catch (const DaemonUnavailable& e) {
    progress.clear();
    output.fail_keeping_partial_capture(e.what());
  } catch (...) {
    progress.clear();
    throw;
  }
  progress.clear();
  output.commit();

  session::RecordSummary summary =
      session::record_summary_from_json(done->contains("summary") ? (*done)["summary"] : json::object());
  if (command) summary.command_exit_status = std::max(0, command->wait());  // unknown: 0, as locally
  if (!call_graph_reason.empty()) summary.call_graph_reason = call_graph_reason;
  if (args.print_report) {
    LoadedProfile loaded = load_profile(args.output, ModuleSearch{});
    ReportOptions report_options;
    report_options.limit = args.report_limit;
    report_options.width = report_width_for_stdout();
    print_report(compute_report(loaded.profile, report_options), std::cout, report_options);
    std::cout.flush();
  }
  if (!args.quiet) print_record_summary(request, summary);
  // Like the command itself (and perf record): scripts see its failure, also after a Ctrl-C.
  return args.target.command.empty() ? 0 : summary.command_exit_status;
}

std::string format_bytes(uint64_t n) {
  return session::human_bytes(n);
}

}  // namespace

int run_record_auto(const RecordArgs& args, const DaemonArgs& daemon) {
  if (daemon.mode == "local") return run_record(args);
  DaemonConnection connection(daemon_socket_path(daemon.socket));
  if (daemon.mode == "daemon") return record_through_daemon(args, connection);
  if (!daemon_answers(connection)) return run_record(args);
  timing_mark("hpctl-hello");
  return record_through_daemon(args, connection);
}

int run_status(const DaemonArgs& daemon, const StatusArgs& args) {
  DaemonClient client(daemon_socket_path(daemon.socket));
  const json status = client.request({{"type", "status"}});
  if (args.json) {
    std::cout << status.dump(2) << "\n";
    return 0;
  }
  std::printf("daemon:     %s (protocol %llu, pid %llu, up %.0f s)\n", json_text(status, "daemon").c_str(),
              static_cast<unsigned long long>(json_uint(status, "protocol")),
              static_cast<unsigned long long>(json_uint(status, "pid")), json_double(status, "uptime_s"));
  std::printf("socket:     %s\n", client.path().c_str());
  if (status.contains("backends") && status["backends"].is_object()) {
    for (const auto& [name, backend] : status["backends"].items()) {
      const bool available = backend.is_object() && backend.value("available", false);
      const std::string reason = backend.is_object() ? json_text(backend, "reason") : "";
      std::printf("backend:    %-5s %s%s%s\n", name.c_str(), available ? "available" : "unavailable",
                  reason.empty() ? "" : ": ", reason.c_str());
    }
  }
  std::printf("sessions:   %llu running (max %llu), %llu finished\n",
              static_cast<unsigned long long>(json_uint(status, "sessions")),
              static_cast<unsigned long long>(json_uint(status, "max_sessions")),
              static_cast<unsigned long long>(json_uint(status, "sessions_finished")));
  std::printf("samples:    %llu taken, %llu lost\n",
              static_cast<unsigned long long>(json_uint(status, "samples")),
              static_cast<unsigned long long>(json_uint(status, "lost")));
  std::printf("memory:     %s resident", format_bytes(json_uint(status, "rss_bytes")).c_str());
  if (status.contains("memory") && status["memory"].is_object()) {
    const json& m = status["memory"];
    const json limits = status.value("limits", json::object());
    if (m.contains("heap_in_use_bytes"))
      std::printf(" (heap: %s in use, %s free)", format_bytes(json_uint(m, "heap_in_use_bytes")).c_str(),
                  format_bytes(json_uint(m, "heap_free_bytes")).c_str());
    std::printf(", %s held by sessions (at most %llu MiB a session, %llu MiB a user)",
                format_bytes(json_uint(m, "sessions_bytes")).c_str(),
                static_cast<unsigned long long>(json_uint(limits, "max_session_memory_mb")),
                static_cast<unsigned long long>(json_uint(limits, "max_user_memory_mb")));
    if (m.contains("users") && m["users"].is_array())
      for (const json& u : m["users"])
        if (u.is_object())
          std::printf("\n            uid %llu: %s", static_cast<unsigned long long>(json_uint(u, "uid")),
                      format_bytes(json_uint(u, "bytes")).c_str());
  }
  std::printf("\n");
  if (status.contains("cfi") && status["cfi"].is_object()) {
    const json& c = status["cfi"];
    if (json_uint(c, "recordings") == 0) {
      std::printf("cfi tables: no recording unwinding with CFI now\n");
    } else {
      std::printf(
          "cfi tables: %llu recordings: %llu of %llu rows used (%s), %llu modules loaded, %llu "
          "evicted, %llu refused for lack of room\n",
          static_cast<unsigned long long>(json_uint(c, "recordings")),
          static_cast<unsigned long long>(json_uint(c, "rows")),
          static_cast<unsigned long long>(json_uint(c, "row_capacity")),
          format_bytes(json_uint(c, "map_bytes")).c_str(),
          static_cast<unsigned long long>(json_uint(c, "modules_loaded")),
          static_cast<unsigned long long>(json_uint(c, "modules_evicted")),
          static_cast<unsigned long long>(json_uint(c, "modules_refused")));
      if (json_uint(c, "modules_refused") != 0 && json_uint(c, "rows_wanted") > json_uint(c, "row_capacity"))
        std::printf(
            "            a row map of %llu rows would have held them (continuous mode: continuous_cfi_rows "
            "in hpd.conf; a recording: --cfi-rows)\n",
            static_cast<unsigned long long>(json_uint(c, "rows_wanted")));
    }
    // The compiled tables hpd keeps for its next recordings, within max_kept_unwind_tables_mb.
    if (c.contains("kept") && c["kept"].is_object()) {
      const json& k = c["kept"];
      std::printf("cfi kept:   %llu unwind tables, %s of at most %s, %llu evicted since hpd started\n",
                  static_cast<unsigned long long>(json_uint(k, "tables")),
                  format_bytes(json_uint(k, "bytes")).c_str(),
                  format_bytes(json_uint(k, "limit_bytes")).c_str(),
                  static_cast<unsigned long long>(json_uint(k, "evicted")));
    }
  }
  if (status.contains("kernel_symbols") && status["kernel_symbols"].is_object()) {
    const json& k = status["kernel_symbols"];
    std::printf(
        "kallsyms:   %llu symbols kept, read %llu times by recordings, completed %llu times with hpd's "
        "programs loaded since\n",
        static_cast<unsigned long long>(json_uint(k, "symbols")),
        static_cast<unsigned long long>(json_uint(k, "reads")),
        static_cast<unsigned long long>(json_uint(k, "completions")));
  }
  if (status.contains("continuous") && status["continuous"].is_object()) {
    const json& c = status["continuous"];
    if (!c.value("enabled", false)) {
      std::printf("continuous: off\n");
    } else {
      std::printf("continuous: %s, %llu chunks (%s) on disk, %llu samples\n",
                  c.value("running", false) ? "running" : "not running",
                  static_cast<unsigned long long>(json_uint(c, "chunks_on_disk")),
                  format_bytes(json_uint(c, "bytes_on_disk")).c_str(),
                  static_cast<unsigned long long>(json_uint(c, "samples")));
      // One collection samples without a pause; each new one (after a reload of the rate, a failure)
      // left its setup unsampled.
      if (json_uint(c, "collections") > 1)
        std::printf(
            "            %llu recordings since hpd started; longest unsampled between chunks: %.0f ms\n",
            static_cast<unsigned long long>(json_uint(c, "collections")),
            static_cast<double>(json_uint(c, "max_gap_ns")) / 1e6);
      if (!json_text(c, "last_error").empty())
        std::printf("            last error: %s\n", json_text(c, "last_error").c_str());
      const json push = c.contains("push") && c["push"].is_array() ? c["push"] : json::array();
      for (const json& p : push) {
        if (!p.is_object()) continue;
        const std::string endpoint = json_text(p, "endpoint");
        const uint64_t success = json_uint(p, "last_success_unix_ns");
        // The lag: the age of the oldest data this endpoint has not received yet.
        char lag[48] = "";
        if (json_uint(p, "chunks_queued") > 0)
          std::snprintf(lag, sizeof lag, ", lag %.0f s", static_cast<double>(json_uint(p, "lag_ns")) / 1e9);
        // On the wire, and before compression when the requests were compressed.
        std::string sent = format_bytes(json_uint(p, "bytes_sent"));
        if (json_uint(p, "bytes_uncompressed") > json_uint(p, "bytes_sent"))
          sent += ", " + format_bytes(json_uint(p, "bytes_uncompressed")) + " uncompressed";
        std::printf(
            "push to %s: %llu chunks sent (%s), %llu queued (%s%s), %llu dropped unsent; last success: %s\n",
            endpoint.empty() ? "an OTLP endpoint" : endpoint.c_str(),
            static_cast<unsigned long long>(json_uint(p, "chunks_sent")), sent.c_str(),
            static_cast<unsigned long long>(json_uint(p, "chunks_queued")),
            format_bytes(json_uint(p, "bytes_queued")).c_str(), lag,
            static_cast<unsigned long long>(json_uint(p, "chunks_dropped")),
            success == 0 ? "never (since hpd started)" : continuous::format_unix_time(success).c_str());
        const uint64_t error_time = json_uint(p, "last_error_unix_ns");
        if (error_time != 0 && error_time > success) {
          std::printf("            failing since %s: %s\n", continuous::format_unix_time(error_time).c_str(),
                      json_text(p, "last_error").empty() ? "(the error is shown to root and the hpd group)"
                                                         : json_text(p, "last_error").c_str());
        } else if (error_time != 0 && !json_text(p, "last_error").empty()) {
          std::printf("            last error (%s): %s\n", continuous::format_unix_time(error_time).c_str(),
                      json_text(p, "last_error").c_str());
        }
      }
    }
  }
  return 0;
}

int run_sessions(const DaemonArgs& daemon, const StatusArgs& args) {
  DaemonClient client(daemon_socket_path(daemon.socket));
  const json reply = client.request({{"type", "sessions"}});
  if (args.json) {
    std::cout << reply.dump(2) << "\n";
    return 0;
  }
  const json sessions =
      reply.contains("sessions") && reply["sessions"].is_array() ? reply["sessions"] : json::array();
  if (sessions.empty()) {
    std::printf("no sessions\n");
    return 0;
  }
  std::printf("%6s %8s %9s %10s %8s  %-30s %s\n", "ID", "UID", "ELAPSED", "SAMPLES", "LOST", "TARGET",
              "OUTPUT");
  for (const json& s : sessions) {
    if (!s.is_object()) continue;
    std::printf("%6llu %8llu %8.1fs %10llu %8llu  %-30s %s\n",
                static_cast<unsigned long long>(json_uint(s, "id")),
                static_cast<unsigned long long>(json_uint(s, "uid")), json_double(s, "elapsed_s"),
                static_cast<unsigned long long>(json_uint(s, "samples")),
                static_cast<unsigned long long>(json_uint(s, "lost")), json_text(s, "target").c_str(),
                json_text(s, "output").c_str());
  }
  return 0;
}

int run_stop(const DaemonArgs& daemon, uint64_t session) {
  DaemonClient client(daemon_socket_path(daemon.socket));
  client.request({{"type", "stop"}, {"session", session}});
  std::printf("session %llu is stopping; its client gets the profile\n",
              static_cast<unsigned long long>(session));
  return 0;
}

}  // namespace hpd::cli
