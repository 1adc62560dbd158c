// The hpd service: accept loop, one thread per connection, one recording thread per session, signals.
#include "hpd/service/server.h"

#include <fcntl.h>
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

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <thread>

#include "hpd/collect/recorder.h"
#include "hpd/model/output_write.h"
#include "hpd/service/access.h"
#include "hpd/service/config.h"
#include "hpd/service/protocol.h"
#include "hpd/service/systemd.h"
#include "hpd/session/record_json.h"
#include "hpd/session/record_pipeline.h"
#include "log.h"
#include "util/unique_fd.h"

#ifdef HPD_HAVE_CONTINUOUS
#include "hpd/continuous/continuous.h"
#include "hpd/export/firefox.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"
#endif

#ifndef HPD_VERSION
#define HPD_VERSION "unknown"
#endif

namespace hpd::service {
namespace {

using nlohmann::json;

// More connections of users other than root than this are answered with an error and closed (each
// costs a thread); max_connections_per_user bounds each user's share.
constexpr size_t kMaxConnections = 256;

uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json message(const char* type) {
  return json{{"version", kProtocolVersion}, {"type", type}};
}

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
  const long fd = ::syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    *why = std::string("perf_event_open: ") + std::strerror(errno);
    return false;
  }
  ::close(static_cast<int>(fd));
  return true;
}

std::string join_words(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

// A record request's held_at_exec claim checked against the kernel: its one pid must be a child of
// the client, stopped by the client's ptrace (right after its exec, hpctl's HeldCommand). Empty when
// it holds; else why not. Only then is the process treated as a launched command.
std::string held_at_exec_problem(const session::RecordRequest& args, pid_t client_pid) {
  if (args.pids.size() != 1) return "\"held_at_exec\" needs exactly one pid";
  const std::string pid = std::to_string(args.pids.front());
  std::ifstream in("/proc/" + pid + "/status");
  std::string line;
  long parent = -1, tracer = -1;
  char state = 0;
  while (std::getline(in, line)) {
    if (line.rfind("State:", 0) == 0 && line.size() > 7) state = line[line.find_first_not_of(" \t", 6)];
    if (line.rfind("PPid:", 0) == 0) parent = std::strtol(line.c_str() + 5, nullptr, 10);
    if (line.rfind("TracerPid:", 0) == 0) tracer = std::strtol(line.c_str() + 10, nullptr, 10);
  }
  if (parent != client_pid || tracer != client_pid || state != 't')
    return "\"held_at_exec\": pid " + pid + " is not a child the client holds stopped at its exec";
  return "";
}

std::string describe_target(const session::RecordRequest& args, const std::vector<std::string>& launched) {
  if (!launched.empty()) return join_words(launched);
  if (args.all) return "all processes";
  if (!args.cgroup.empty()) return "cgroup " + args.cgroup;
  std::string text = "pid";
  for (const int32_t pid : args.pids) text += " " + std::to_string(pid);
  return text;
}

// One recording in progress; shared by its connection, its recording thread and the registry.
struct Session {
  uint64_t id = 0;
  uid_t uid = 0;
  pid_t client_pid = 0;
  std::string target;
  std::string output;
  uint64_t started_unix_ns = 0;
  uint64_t started_mono_ns = 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> lost{0};
  std::atomic<uint64_t> memory_bytes{0};
};

class SessionRegistry {
 public:
  // "" when added; otherwise which limit refused it: `max` sessions in all, or `max_per_user` of the
  // session's uid (root has no per-user limit).
  std::string add(const std::shared_ptr<Session>& session, uint32_t max, uint32_t max_per_user) {
    std::lock_guard lock(mutex_);
    if (sessions_.size() >= max) {
      return "hpd already runs its maximum of " + std::to_string(max) +
             " sessions (max_sessions in hpd.conf); try again later";
    }
    if (session->uid != 0) {
      uint32_t mine = 0;
      for (const auto& [id, s] : sessions_) mine += s->uid == session->uid ? 1 : 0;
      if (mine >= max_per_user) {
        return "you (uid " + std::to_string(session->uid) + ") already run " + std::to_string(mine) +
               " sessions, the most one user may (max_sessions_per_user in hpd.conf); try again later";
      }
    }
    session->id = next_id_++;
    sessions_[session->id] = session;
    return "";
  }
  // Counts the session as finished, once: a recording removes its session before it tells the
  // client it is done, and the connection removes it again when it ends.
  void remove(const Session& session) {
    std::lock_guard lock(mutex_);
    if (sessions_.erase(session.id) == 0) return;
    finished_samples_ += session.samples.load();
    finished_lost_ += session.lost.load();
    ++finished_;
  }
  std::shared_ptr<Session> find(uint64_t id) {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(id);
    return it == sessions_.end() ? nullptr : it->second;
  }
  std::vector<std::shared_ptr<Session>> list() {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<Session>> out;
    for (const auto& [id, s] : sessions_) out.push_back(s);
    return out;
  }
  void stop_all() {
    std::lock_guard lock(mutex_);
    for (const auto& [id, s] : sessions_) s->stop.store(true);
  }
  struct Totals {
    size_t active = 0;
    uint64_t finished = 0;
    uint64_t samples = 0;
    uint64_t lost = 0;
  };
  Totals totals() {
    std::lock_guard lock(mutex_);
    Totals t{sessions_.size(), finished_, finished_samples_, finished_lost_};
    for (const auto& [id, s] : sessions_) {
      t.samples += s->samples.load();
      t.lost += s->lost.load();
    }
    return t;
  }

 private:
  std::mutex mutex_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  uint64_t next_id_ = 1;
  uint64_t finished_ = 0;
  uint64_t finished_samples_ = 0;
  uint64_t finished_lost_ = 0;
};

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
  // A client whose socket takes nothing for client_timeout (SO_SNDTIMEO) is gone: lost_ ends its session.
  bool send(const json& j) { return send_text(dump(j)); }
  bool send_error(ErrorCode code, const std::string& text) { return send_text(error_message(code, text)); }
  bool send_text(const std::string& text) {
    std::lock_guard lock(send_mutex_);
    if (gone_) return false;
    try {
      send_frame(socket_.get(), text);
      return true;
    } catch (const std::exception& e) {
      gone_ = true;
      lost_.store(true);
      log_info("connection of uid " + std::to_string(peer_.uid) + " (pid " + std::to_string(peer_.pid) +
               "): the client takes no replies (" + e.what() + "); dropping it");
      return false;
    }
  }
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
  void handle_record(const Request& request, Frame& frame);
  void handle_export(const Request& request, Frame& frame);
  void record_in_thread(const std::shared_ptr<Session>& session, session::RecordRequest args, RecordOptions options,
                        int fd, std::vector<std::string> launched, std::vector<std::string> notes,
                        uint64_t memory_limit, std::atomic<bool>& client_gone, std::atomic<bool>& replied);

  Daemon& daemon_;
  UniqueFd socket_;
  PeerCredentials peer_;
  bool privileged_ = false;
  std::string group_;
  std::mutex send_mutex_;
  bool gone_ = false;              // guarded by send_mutex_
  std::atomic<bool> lost_{false};  // a send failed: the client does not read, or left
  std::thread thread_;
  std::atomic<bool> done_{false};
};

class Daemon {
 public:
  explicit Daemon(const DaemonOptions& options) : options_(options) {}

  int run();

  Config config() {
    std::lock_guard lock(config_mutex_);
    return config_;
  }
  SessionRegistry& sessions() { return sessions_; }
  [[nodiscard]] bool stopping() const { return stopping_.load(); }
  json status_message(bool privileged);
#ifdef HPD_HAVE_CONTINUOUS
  // The running continuous profiler's directory, or "" when continuous mode is off.
  std::string continuous_directory() {
    std::lock_guard lock(continuous_mutex_);
    return continuous_ ? continuous_->options().dir.string() : std::string();
  }
#endif

 private:
  bool load(Config& into, std::string& why);
  bool open_listener();
  void begin_shutdown();
  void reload();
  void accept_one();
  void reap_connections(bool all);
  // "" when a connection of `uid` may be served; else why not (per-user and global limits).
  std::string connection_refusal(uid_t uid);
  void update_status_line();
  void configure_continuous(const Config& config);

  DaemonOptions options_;
  std::mutex config_mutex_;
  Config config_;
  SystemdNotifier notifier_;
  UniqueFd listener_;
  std::string created_socket_;  // unlinked at exit; empty under socket activation
  std::atomic<bool> stopping_{false};
  uint64_t stop_began_ns_ = 0;  // monotonic; the main thread's
  SessionRegistry sessions_;
  std::list<std::unique_ptr<Connection>> connections_;  // the main thread's alone
  uint64_t started_mono_ns_ = now_ns(CLOCK_MONOTONIC);
  // Probed once before READY=1: loading the BPF programs to check them takes a while on a busy machine.
  bool bpf_available_ = false;
  std::string bpf_reason_;
  bool perf_available_ = false;
  std::string perf_reason_;
#ifdef HPD_HAVE_CONTINUOUS
  std::mutex continuous_mutex_;
  std::unique_ptr<continuous::ContinuousProfiler> continuous_;
#endif
};

// Connection -------------------------------------------------------------------------------------

void Connection::serve() {
  const Config config = daemon_.config();
  group_ = config.group;
  privileged_ = is_privileged_peer(peer_, group_);
  timeval timeout{static_cast<time_t>(config.client_timeout_s),
                  static_cast<suseconds_t>(
                      (config.client_timeout_s - static_cast<time_t>(config.client_timeout_s)) * 1e6)};
  ::setsockopt(socket_.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  log_debug("connection from pid " + std::to_string(peer_.pid) + " uid " + std::to_string(peer_.uid) +
            (privileged_ ? " (privileged)" : ""));
  uint64_t last_request_ns = now_ns(CLOCK_MONOTONIC);
  while (!daemon_.stopping()) {
    pollfd p{socket_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, 250);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) {
      // Idle connections cost a thread each: one that asks nothing for idle_timeout is closed.
      if (static_cast<double>(now_ns(CLOCK_MONOTONIC) - last_request_ns) / 1e9 >= config.idle_timeout_s) {
        log_debug("closing the idle connection of uid " + std::to_string(peer_.uid));
        send_error(ErrorCode::kLimit, "closed after " +
                                          std::to_string(static_cast<int>(config.idle_timeout_s)) +
                                          " s without a request (idle_timeout in hpd.conf)");
        break;
      }
      continue;
    }
    last_request_ns = now_ns(CLOCK_MONOTONIC);
    Frame frame;
    try {
      if (read_frame(socket_.get(), frame) == ReadResult::kClosed) break;
    } catch (const ProtocolError& e) {
      // The stream cannot be trusted past a bad frame: reply, then close.
      send_error(e.code(), e.what());
      break;
    } catch (const std::exception&) {
      break;
    }
    Request request;
    try {
      request = parse_request(frame.payload);
    } catch (const ProtocolError& e) {
      if (!send_error(e.code(), e.what())) break;
      continue;
    }
    handle(request, frame);
    std::lock_guard lock(send_mutex_);
    if (gone_) break;
  }
}

void Connection::handle(const Request& request, Frame& frame) {
  try {
    switch (request.type) {
      case RequestType::kHello: handle_hello(request); break;
      case RequestType::kStatus: handle_status(); break;
      case RequestType::kSessions: handle_sessions(); break;
      case RequestType::kStop: handle_stop(request); break;
      case RequestType::kRecord: handle_record(request, frame); break;
      case RequestType::kExport: handle_export(request, frame); break;
    }
  } catch (const std::exception& e) {
    log_error(std::string("request ") + to_string(request.type) + " failed: " + e.what());
    send_error(ErrorCode::kInternal, e.what());
  }
}

void Connection::handle_hello(const Request& request) {
  json reply = message("hello");
  reply["daemon"] = std::string("hpd ") + HPD_VERSION;
  reply["protocol"] = kProtocolVersion;
  reply["uid"] = peer_.uid;
  reply["privileged"] = privileged_;
  reply["group"] = group_;
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
  json reply = message("sessions");
  reply["sessions"] = list;
  send(reply);
}

void Connection::handle_stop(const Request& request) {
  if (request.session == 0) {
    send_error(ErrorCode::kBadRequest, "no session is recording on this connection; give \"session\": ID");
    return;
  }
  const auto session = daemon_.sessions().find(request.session);
  if (!session) {
    send_error(ErrorCode::kNotFound,
               "no session " + std::to_string(request.session) + " (see hpctl sessions)");
    return;
  }
  if (!privileged_ && session->uid != peer_.uid) {
    log_refusal("stopping session " + std::to_string(session->id),
                "it belongs to uid " + std::to_string(session->uid));
    send_error(ErrorCode::kPermissionDenied,
               "session " + std::to_string(session->id) + " belongs to uid " + std::to_string(session->uid) +
                   "; only its owner, root and the '" + group_ + "' group may stop it");
    return;
  }
  session->stop.store(true);
  log_info("session " + std::to_string(session->id) + " stopped by uid " + std::to_string(peer_.uid));
  json reply = message("stopped");
  reply["session"] = session->id;
  send(reply);
}

void Connection::handle_record(const Request& request, Frame& frame) {
  UniqueFd output(frame.take_fd());
  if (daemon_.stopping()) {
    send_error(ErrorCode::kShuttingDown, "hpd is stopping; try again when it is back");
    return;
  }
  if (!request.record_has_fd || !output) {
    send_error(
        ErrorCode::kBadRequest,
        "no output descriptor came with the record request: open the output file and send its descriptor "
        "with the request (SCM_RIGHTS), with \"fd\": true");
    return;
  }
  const int flags = ::fcntl(output.get(), F_GETFL);
  if (flags < 0 || ((flags & O_ACCMODE) != O_WRONLY && (flags & O_ACCMODE) != O_RDWR)) {
    send_error(ErrorCode::kBadRequest, "the output descriptor is not open for writing");
    return;
  }
  // An output that is not a regular file (a pipe, a FIFO, a socket) may have a reader that stops
  // reading: written without blocking, a write waits for it only client_timeout (write_output_fully).
  if (struct stat st{}; ::fstat(output.get(), &st) == 0 && !S_ISREG(st.st_mode)) {
    ::fcntl(output.get(), F_SETFL, flags | O_NONBLOCK);
  }
  const Config config = daemon_.config();
  session::RecordRequest args = request.record;
  const AccessDecision access = check_record_access(peer_, privileged_, config.group, args);
  if (!access.allowed) {
    log_refusal("a recording", access.reason);
    send_error(ErrorCode::kPermissionDenied, access.reason);
    return;
  }
  if (args.frequency_hz > config.max_frequency_hz) {
    log_refusal("a recording", "-F " + std::to_string(args.frequency_hz) + " is above max_frequency_hz");
    send_error(ErrorCode::kLimit, "-F " + std::to_string(args.frequency_hz) +
                                      " is above this hpd's limit of " +
                                      std::to_string(config.max_frequency_hz) +
                                      " Hz (max_frequency_hz in hpd.conf); ask for less");
    return;
  }
  std::vector<std::string> notes;
  if (!privileged_) {
    const std::string no_kernel =
        kernel_frames_refusal(peer_, read_kernel_sysctl("kernel/perf_event_paranoid", 2),
                              read_kernel_sysctl("kernel/kptr_restrict", 2));
    if (!no_kernel.empty()) {
      if (args.kernel == session::Switch::kOn) {
        log_refusal("kernel frames (--kernel)", no_kernel);
        send_error(ErrorCode::kPermissionDenied, "kernel call stacks are not yours to have: " + no_kernel +
                                                     "; record without --kernel, or " +
                                                     "ask an administrator to add you to the '" +
                                                     config.group + "' group");
        return;
      }
      if (args.kernel != session::Switch::kOff) notes.push_back("note: no kernel frames: " + no_kernel + " (as perf would)");
      args.kernel = session::Switch::kOff;
    }
  }
  if (args.duration_s <= 0 || args.duration_s > config.max_duration_s) {
    if (args.duration_s > 0) {
      char text[160];
      std::snprintf(text, sizeof text,
                    "note: hpd records at most %.0f s (max_duration_s in hpd.conf); asked for %.0f s",
                    config.max_duration_s, args.duration_s);
      notes.push_back(text);
    }
    args.duration_s = config.max_duration_s;
  }
  RecordOptions options;
  try {
    options = session::record_options_from_request(args);
    if (!privileged_) {
      options.restrict_to_client = true;
      options.client_uid = peer_.uid;
      options.client_gid = peer_.gid;
    }
    validate_record_options(options);
  } catch (const RecordError& e) {
    send_error(ErrorCode::kRecordFailed, e.what());
    return;
  } catch (const std::exception& e) {
    send_error(ErrorCode::kBadRequest, e.what());
    return;
  }
  if (request.held_at_exec) {
    if (const std::string problem = held_at_exec_problem(args, peer_.pid); !problem.empty()) {
      send_error(ErrorCode::kBadRequest, problem);
      return;
    }
    options.pid_held_at_exec = true;
  }

  auto session = std::make_shared<Session>();
  session->uid = peer_.uid;
  session->client_pid = peer_.pid;
  session->target = describe_target(args, request.launched_command);
  session->output = args.output;
  session->started_unix_ns = now_ns(CLOCK_REALTIME);
  session->started_mono_ns = now_ns(CLOCK_MONOTONIC);
  if (const std::string full =
          daemon_.sessions().add(session, config.max_sessions, config.max_sessions_per_user);
      !full.empty()) {
    log_refusal("a recording", full);
    send_error(ErrorCode::kLimit, full);
    return;
  }
  log_info("session " + std::to_string(session->id) + " for uid " + std::to_string(peer_.uid) + ": " +
           session->target);
  json accepted = message("accepted");
  accepted["session"] = session->id;
  send(accepted);

  // The recording runs in its own thread; this one watches the client for a stop or a disconnect.
  std::atomic<bool> client_gone{false};
  std::atomic<bool> finished{false};
  std::atomic<bool> replied{false};  // the final reply (done or error) went out: EOF is no longer a loss
  const uint64_t memory_limit = config.max_session_memory_mb << 20;
  std::thread recorder([&, fd = output.release()]() mutable {
    record_in_thread(session, args, std::move(options), fd, request.launched_command, std::move(notes),
                     memory_limit, client_gone, replied);
    finished.store(true);
  });
  bool reading = true;
  while (!finished.load()) {
    if (daemon_.stopping()) session->stop.store(true);
    if (lost_.load() && !client_gone.load()) {
      // The client takes none of its replies: it is gone, and its session ends now.
      log_info("session " + std::to_string(session->id) +
               ": the client does not read its replies; ending it");
      client_gone.store(true);
      session->stop.store(true);
      reading = false;
    }
    if (!reading) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    pollfd p{socket_.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    Frame next;
    Request inner;
    try {
      if (read_frame(socket_.get(), next) == ReadResult::kClosed) {
        if (replied.load()) {
          reading = false;
          continue;
        }
        client_gone.store(true);
      } else {
        inner = parse_request(next.payload);
      }
    } catch (const ProtocolError& e) {
      send_error(e.code(), e.what());
      if (e.code() == ErrorCode::kTruncated || e.code() == ErrorCode::kTooLarge)
        client_gone.store(true);
      else
        continue;
    } catch (const std::exception&) {
      client_gone.store(true);
    }
    if (client_gone.load()) {
      log_info("session " + std::to_string(session->id) + ": the client went away; ending it");
      session->stop.store(true);
      reading = false;
      continue;
    }
    if (inner.type == RequestType::kStop && (inner.session == 0 || inner.session == session->id)) {
      session->stop.store(true);
    } else if (inner.type == RequestType::kRecord) {
      send_error(ErrorCode::kBadRequest, "this connection is recording session " +
                                             std::to_string(session->id) +
                                             "; open another connection for another recording");
    } else {
      handle(inner, next);
    }
  }
  recorder.join();
  daemon_.sessions().remove(*session);
  if (client_gone.load()) {
    std::lock_guard lock(send_mutex_);
    gone_ = true;
  }
  // Recording threads leave freed memory in their malloc arenas; give it back.
  ::malloc_trim(0);
  log_info("session " + std::to_string(session->id) + " ended: " + std::to_string(session->samples.load()) +
           " samples, " + std::to_string(session->lost.load()) + " lost");
}

void Connection::record_in_thread(const std::shared_ptr<Session>& session, session::RecordRequest args,
                                  RecordOptions options, int fd, std::vector<std::string> launched,
                                  std::vector<std::string> notes, uint64_t memory_limit,
                                  std::atomic<bool>& client_gone, std::atomic<bool>& replied) {
  bool announced = false;
  // The client releases a command it holds once the events are attached: the recorder's first
  // callback comes from its sampling loop.
  auto announce = [&] {
    if (announced) return;
    announced = true;
    json started = message("started");
    started["session"] = session->id;
    send(started);
  };
  // Before the first sample is read: the held command runs its first instruction under the events.
  options.on_attached = announce;
  bool memory_exceeded = false;
  // An unprivileged peer may record only what runs as itself: a target that gains privileges (a
  // set-user-ID exec) ends the session, and nothing recorded is handed over.
  std::string privilege_reason;
  // A live process found unreadable in one snapshot is judged on the next (250 ms on, or the final
  // one): refused unless by then the recorder has read its exec record and stopped following it,
  // whether or not it still lives. Until then nothing more reaches the client's file.
  PrivilegeFinding unconfirmed;
  auto check_privileges = [&](const RawProfile& raw, bool final) {
    if (privileged_ || !privilege_reason.empty()) return;
    if (unconfirmed.live_pid != 0) {
      const RawProcess* process = raw.find_process(unconfirmed.live_pid);
      if (process == nullptr || process->unfollowed_ns == 0) {
        privilege_reason = std::move(unconfirmed.reason);
        session->stop.store(true);
        return;
      }
      unconfirmed = {};
    }
    PrivilegeFinding finding = privilege_gained(peer_, raw);
    if (finding.reason.empty()) return;
    if (finding.live_pid != 0 && !final) {
      unconfirmed = std::move(finding);
      return;
    }
    privilege_reason = std::move(finding.reason);
    session->stop.store(true);
  };
  try {
    session::RecordingOutput output(args, fd);
    options.stop = &session->stop;
    options.on_flush = [&](const RawProfile& raw) {
      const uint64_t bytes = estimate_profile_bytes(raw);
      session->memory_bytes.store(bytes);
      if (bytes > memory_limit && !memory_exceeded) {
        memory_exceeded = true;
        session->stop.store(true);
      }
      announce();
    };
    output.attach(options);
    // Checked before the output's own flush (a streamed .hpr): once a target gained privileges,
    // nothing more reaches the client's file.
    options.on_flush = [inner = std::move(options.on_flush), &check_privileges, &privilege_reason,
                        &unconfirmed](const RawProfile& raw) {
      check_privileges(raw, false);
      if (privilege_reason.empty() && unconfirmed.live_pid == 0) inner(raw);
    };
    options.on_progress = [&](const RecordProgress& p) {
      announce();
      session->samples.store(p.samples);
      session->lost.store(p.lost);
      json progress = message("progress");
      progress["elapsed_s"] = p.elapsed_s;
      progress["duration_s"] = p.duration_s;
      progress["samples"] = p.samples;
      progress["lost"] = p.lost;
      send(progress);
    };
    RecordResult result = record(options);
    announce();
    session->samples.store(result.profile.samples.size());
    session->lost.store(result.profile.lost.lost_records);
    if (client_gone.load()) {
      output.abandon();
      return;
    }
    check_privileges(result.profile, true);
    if (!privilege_reason.empty()) {
      output.abandon();
      log_warning("session " + std::to_string(session->id) + " of uid " + std::to_string(peer_.uid) +
                  " (pid " + std::to_string(peer_.pid) + ") discarded: " + privilege_reason);
      replied.store(true);
      send_error(ErrorCode::kPermissionDenied,
                 "the recording was stopped and discarded: " + privilege_reason + "; you (uid " +
                     std::to_string(peer_.uid) +
                     ") may record only processes that run as you; ask an administrator to add you to the '" +
                     group_ + "' group");
      return;
    }
    for (const RawProcess& process : result.profile.processes) {
      if (process.unfollowed_ns == 0) continue;
      notes.push_back("note: process " + std::to_string(process.pid) + " (" + process.name +
                      ") executed a program that runs with credentials other than yours; it was not recorded "
                      "from then on (the kernel does the same for perf)");
    }
    if (!launched.empty()) {
      result.profile.info.target = join_words(launched);
      result.profile.info.arguments = launched;
    }
    send(message("writing"));
    const Profile profile = output.finish(result);
    session::RecordSummary summary = session::summarize_recording(result, profile, output);
    summary.mode = "daemon";
    if (!launched.empty()) summary.command_exit_status = 0;  // the client reaps its command and knows
    if (memory_exceeded) {
      notes.push_back("note: the session ended early: its profile outgrew max_session_memory_mb (" +
                      std::to_string(memory_limit >> 20) + " MiB) of hpd.conf");
    }
    summary.notes.insert(summary.notes.begin(), notes.begin(), notes.end());
    json done = message("done");
    done["session"] = session->id;
    done["summary"] = session::record_summary_to_json(summary);
    replied.store(true);
    // Finished before the client hears it: a status it asks for next must not show it running.
    daemon_.sessions().remove(*session);
    send(done);
  } catch (const RecordError& e) {
    log_warning("session " + std::to_string(session->id) + " of uid " + std::to_string(peer_.uid) +
                " failed: " + e.what());
    replied.store(true);
    daemon_.sessions().remove(*session);  // its slot is free before the client hears of it
    send_error(ErrorCode::kRecordFailed, e.what());
  } catch (const std::exception& e) {
    // A failed write (a full disk, an output nobody reads) is logged too.
    log_warning("session " + std::to_string(session->id) + " of uid " + std::to_string(peer_.uid) +
                " failed: " + e.what());
    replied.store(true);
    daemon_.sessions().remove(*session);
    send_error(ErrorCode::kRecordFailed, e.what());
  }
}

void Connection::handle_export(const Request& request, Frame& frame) {
  UniqueFd output(frame.take_fd());
#ifdef HPD_HAVE_CONTINUOUS
  const std::string dir = daemon_.continuous_directory();
  if (dir.empty()) {
    send_error(ErrorCode::kUnavailable,
               "continuous mode is off in this hpd (set continuous = on in hpd.conf and reload with SIGHUP)");
    return;
  }
  if (!privileged_) {
    log_refusal("an export", "exporting the continuous profile is reserved to root and the group");
    send_error(ErrorCode::kPermissionDenied,
               "the continuous profile holds every process of the system; exporting "
               "it is reserved to root and the '" +
                   group_ +
                   "' group; ask an "
                   "administrator to add you to the '" +
                   group_ + "' group");
    return;
  }
  if (!output) {
    send_error(ErrorCode::kBadRequest, "no output descriptor came with the export request (SCM_RIGHTS)");
    return;
  }
  const json j = json::parse(request.text, nullptr, false);
  continuous::ExportFilter filter;
  std::string name = "export.json.gz";
  try {
    const uint64_t now = continuous::unix_now_ns();
    if (j.contains("since") && j["since"].is_string()) {
      filter.since_unix_ns = continuous::parse_time_spec(j["since"].get<std::string>(), now);
    }
    if (j.contains("until") && j["until"].is_string()) {
      filter.until_unix_ns = continuous::parse_time_spec(j["until"].get<std::string>(), now);
    }
    if (j.contains("pids") && j["pids"].is_array()) {
      for (const json& pid : j["pids"]) {
        if (!pid.is_number_integer()) throw std::invalid_argument("\"pids\" must hold integers");
        filter.pids.push_back(pid.get<int32_t>());
      }
    }
    if (j.contains("comms") && j["comms"].is_array()) {
      for (const json& comm : j["comms"]) {
        if (!comm.is_string()) throw std::invalid_argument("\"comms\" must hold strings");
        filter.comms.push_back(comm.get<std::string>());
      }
    }
    if (j.contains("output") && j["output"].is_string()) name = j["output"].get<std::string>();
  } catch (const std::exception& e) {
    send_error(ErrorCode::kBadRequest, e.what());
    return;
  }
  std::vector<std::string> notes;
  try {
    continuous::LoadedChunks loaded = continuous::load_chunk_window(dir, filter, &notes);
    Symbolizer symbolizer;
    ConvertOptions convert_options;
    convert_options.kernel_frames = loaded.profile.info.kernel_frames;
    const Profile profile = symbolize_profile(loaded.profile, symbolizer, convert_options);
    write_firefox_fd(profile, output.get(), session::is_gzip_output(name));
    json done = message("done");
    done["samples"] = loaded.profile.samples.size();
    done["chunks_read"] = loaded.chunks_read;
    done["chunks_skipped"] = loaded.chunks_skipped;
    done["notes"] = notes;
    send(done);
  } catch (const std::exception& e) {
    send_error(ErrorCode::kRecordFailed, std::string("export failed: ") + e.what());
  }
#else
  (void)request;
  send_error(ErrorCode::kUnavailable, "this hpd was built without continuous mode; export is not available");
#endif
}

// Daemon -----------------------------------------------------------------------------------------

json Daemon::status_message(bool privileged) {
  const Config cfg = config();
  const auto totals = sessions_.totals();
  json reply = message("status");
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
  reply["limits"] = {{"max_duration_s", cfg.max_duration_s},
                     {"max_frequency_hz", cfg.max_frequency_hz},
                     {"max_session_memory_mb", cfg.max_session_memory_mb}};
  json continuous = {{"enabled", cfg.continuous}, {"available", false}};
#ifdef HPD_HAVE_CONTINUOUS
  continuous["available"] = true;
  {
    std::lock_guard lock(continuous_mutex_);
    if (continuous_) {
      const continuous::Stats stats = continuous_->stats();
      continuous["running"] = stats.running;
      continuous["chunks_on_disk"] = stats.chunks_on_disk;
      continuous["bytes_on_disk"] = stats.bytes_on_disk;
      continuous["samples"] = stats.samples;
      continuous["lost"] = stats.lost;
      continuous["last_error"] = stats.last_error;
      if (privileged) continuous["directory"] = continuous_->options().dir.string();
    }
  }
#endif
  reply["continuous"] = continuous;
  return reply;
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
  options.chunk_seconds = config.continuous_chunk_seconds;
  options.max_age_s = config.continuous_max_age_s;
  options.max_bytes = config.continuous_max_bytes;
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
    }
  } catch (const std::exception& e) {
    log_error(std::string("continuous profiling could not start: ") + e.what());
  }
#else
  if (config.continuous) log_warning("continuous = on, but this hpd was built without continuous mode");
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
  {
    std::lock_guard lock(config_mutex_);
    config_ = fresh;
  }
  set_log_level(fresh.log_level);
  set_output_stall_timeout_ms(static_cast<int>(fresh.client_timeout_s * 1000));
  configure_continuous(fresh);
  log_info("configuration reloaded (max_sessions " + std::to_string(fresh.max_sessions) + ")");
}

void Daemon::accept_one() {
  UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!client) return;
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
  bpf_available_ = bpf_backend_available(&bpf_reason_);
  perf_available_ = perf_events_available(&perf_reason_);
  if (!bpf_available_)
    log_warning("the eBPF backend is unavailable (" + bpf_reason_ + "); recording with perf_event");
  configure_continuous(config_);

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
      log_error(std::string("poll: ") + std::strerror(errno));
      break;
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
  log_info("stopped");
  return 0;
}

}  // namespace

uint64_t estimate_profile_bytes(const RawProfile& p) {
  uint64_t bytes = p.samples.capacity() * sizeof(RawSample);
  bytes += p.stacks.addresses().capacity() * sizeof(uint64_t);
  // Each stack: its entry and about three words of the interning hash map.
  bytes += p.stacks.size() * (sizeof(RawStack) + 48);
  for (const RawProcess& process : p.processes) {
    bytes += sizeof(RawProcess) + process.mappings.capacity() * sizeof(RawMapping) + process.exe.size();
    for (const std::string& arg : process.cmdline) bytes += arg.size() + sizeof arg;
  }
  bytes += p.threads.capacity() * (sizeof(RawThread) + 32);
  for (const RawModule& module : p.modules)
    bytes += sizeof module + module.path.size() + module.build_id.size();
  bytes += p.call_edges.capacity() * sizeof(RawCallEdge);
  for (const RawMipSnapshot& snapshot : p.mip_snapshots) {
    bytes += sizeof snapshot + snapshot.functions.capacity() * (sizeof(RawMipFunction) + 32);
  }
  return bytes;
}

int run_daemon(const DaemonOptions& options) {
  Daemon daemon(options);
  return daemon.run();
}

}  // namespace hpd::service
