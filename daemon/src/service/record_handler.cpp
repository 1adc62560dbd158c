// hpd's record request: checks and limits, the session, the recording thread and the watch on the client.
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "connection.h"
#include "daemon.h"
#include "hpd/base/open_as.h"
#include "hpd/service/server.h"
#include "hpd/session/record_json.h"
#include "hpd/session/record_pipeline.h"

namespace hpd::service {
namespace {

using nlohmann::json;

std::string join_words(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

// A record request's held_at_exec claim checked against the kernel: its one pid must be a child of
// the client, stopped by the client's ptrace (right after its exec: hpctl launches it with
// HoldAt::kAfterExec, hpd/base/process.h). Empty when it holds; else why not. Only then is the process
// treated as a launched command.
std::string held_at_exec_problem(const session::RecordRequest& args, pid_t client_pid) {
  if (args.target.pids.size() != 1) return "\"held_at_exec\" needs exactly one pid";
  const std::string pid = std::to_string(args.target.pids.front());
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
  if (args.target.all_processes) return std::string(kAllProcessesTarget);
  if (!args.target.cgroup.empty()) return std::string(kCgroupTargetPrefix) + args.target.cgroup;
  std::string text = "pid";
  for (const int32_t pid : args.target.pids) text += " " + std::to_string(pid);
  return text;
}

// A duration of 0 (until the targets exit) or above max_duration_s becomes max_duration_s; a note says
// so when one was asked for.
void apply_duration_limit(session::RecordRequest& args, const Config& config,
                          std::vector<std::string>& notes) {
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
}

// The client's credentials for opening files: SO_PEERCRED's uid and gid and SO_PEERGROUPS's
// supplementary groups, as of its connect(). Without the groups (an old kernel) it gets none:
// fewer files, never more.
FsCredentials client_fs_credentials(int socket, const PeerCredentials& peer) {
  FsCredentials who{peer.uid, peer.gid, {}};
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    socklen_t size = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &size) == 0) {
      groups.resize(size / sizeof(gid_t));
      who.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE) break;
    groups.resize(size / sizeof(gid_t) + 1);
  }
  return who;
}

// Where an unprivileged client's names come from (only files it could open itself) and what its
// JIT symbols and symbol tables may take: the per-session bounds of hpd.conf, within what its
// user's other sessions leave of max_user_memory_mb (root and the group: the session bounds only).
session::SymbolSources symbol_sources(const Config& config, const FsCredentials* client,
                                      uint64_t user_memory_left) {
  session::SymbolSources sources;
  sources.max_jit_bytes = config.max_jit_symbols_mb << 20;
  sources.jit_bound_name = "max_jit_symbols_mb in hpd.conf";
  sources.symbol_cache_bytes = config.max_symbol_cache_mb << 20;
  if (sources.max_jit_bytes + sources.symbol_cache_bytes > user_memory_left) {
    sources.max_jit_bytes = std::min(sources.max_jit_bytes, user_memory_left / 4);
    sources.symbol_cache_bytes =
        std::min(sources.symbol_cache_bytes, user_memory_left - user_memory_left / 4);
    sources.jit_bound_name = "what your sessions leave of max_user_memory_mb in hpd.conf";
  }
  if (client != nullptr) {
    sources.open_file = [who = *client](const std::string& path, int flags) {
      return open_as(who, path.c_str(), flags);
    };
  }
  return sources;
}

}  // namespace

// The steps, in order: the output descriptor, access and limits, the recorder's options, the session,
// then the recording in its own thread while this one watches the client.
void Connection::handle_record(const Request& request, Frame& frame) {
  timing_mark("hpd-request");
  // The request as hpd received it: its profile says how long the target ran unsampled after it.
  const uint64_t received_mono_ns = now_ns(CLOCK_MONOTONIC);
  UniqueFd output = take_record_output(request, frame);
  if (!output) return;
  // The client's call table: only ever read through this descriptor, as untrusted data.
  UniqueFd calls_table;
  if (request.record_has_calls_table) {
    calls_table = frame.take_fd();
    if (!calls_table) {
      send_error(ErrorCode::kBadRequest,
                 "\"calls_table\": true, but no second descriptor (the call table) came with the request");
      return;
    }
  }
  // The client's allocation log: likewise only read through this descriptor, as untrusted data.
  UniqueFd alloc_log;
  if (request.record_has_alloc_log) {
    alloc_log = frame.take_fd();
    if (!alloc_log) {
      send_error(ErrorCode::kBadRequest,
                 "\"alloc_log\": true, but no descriptor for the allocation log came with the request");
      return;
    }
  }
  const Config config = daemon_.config();
  session::RecordRequest args = request.record;
  std::vector<std::string> notes;
  // Pidfds of the checked targets: the recording follows those processes, not their pids.
  std::vector<UniqueFd> target_pidfds;
  if (!authorize_recording(args, config, notes, target_pidfds)) return;
  apply_duration_limit(args, config, notes);
  std::optional<RecordOptions> options = recorder_options(request, args);
  if (!options) return;
  for (const UniqueFd& pidfd : target_pidfds) options->pid_fds.push_back(pidfd.get());
  // Once it samples, the next session's programs are loaded like this one's.
  options->load_next_ahead = true;
  options->requested_mono_ns = received_mono_ns;
  if (options->count_calls && calls_table) options->call_table_fd = calls_table.get();
  // Read for the processes this session follows only (those its access checks admitted).
  if (alloc_log) options->alloc_log_fd = alloc_log.get();
  const std::shared_ptr<Session> session = open_session(request, args, config);
  if (!session) return;

  // The recording runs in its own thread; this one watches the client for a stop or a disconnect.
  std::atomic<bool> client_gone{false};
  std::atomic<bool> finished{false};
  std::atomic<bool> replied{false};  // the final reply (done or error) went out: EOF is no longer a loss
  const uint64_t memory_limit = config.max_session_memory_mb << 20;
  std::thread recorder([&, fd = output.release()]() mutable {
    record_in_thread(session, args, std::move(*options), fd, request.launched_command, std::move(notes),
                     memory_limit, client_gone, replied);
    finished.store(true);
  });
  watch_client_while_recording(*session, finished, client_gone, replied);
  recorder.join();
  end_session(*session, client_gone.load());
}

UniqueFd Connection::take_record_output(const Request& request, Frame& frame) {
  UniqueFd output = frame.take_fd();
  if (daemon_.stopping()) {
    send_error(ErrorCode::kShuttingDown, "hpd is stopping; try again when it is back");
    return {};
  }
  if (!request.record_has_fd || !output) {
    send_error(
        ErrorCode::kBadRequest,
        "no output descriptor came with the record request: open the output file and send its descriptor "
        "with the request (SCM_RIGHTS), with \"fd\": true");
    return {};
  }
  const int flags = ::fcntl(output.get(), F_GETFL);
  if (flags < 0 || ((flags & O_ACCMODE) != O_WRONLY && (flags & O_ACCMODE) != O_RDWR)) {
    send_error(ErrorCode::kBadRequest, "the output descriptor is not open for writing");
    return {};
  }
  // An output that is not a regular file (a pipe, a FIFO, a socket) may have a reader that stops
  // reading: written without blocking, a write waits for it only client_timeout (write_output_fully).
  if (struct stat st{}; ::fstat(output.get(), &st) == 0 && !S_ISREG(st.st_mode)) {
    ::fcntl(output.get(), F_SETFL, flags | O_NONBLOCK);
  }
  return output;
}

bool Connection::authorize_recording(session::RecordRequest& args, const Config& config,
                                     std::vector<std::string>& notes, std::vector<UniqueFd>& pidfds) {
  const AccessDecision access = check_record_access(peer_, privileged_, config.group, args, &pidfds);
  if (!access.allowed) {
    log_refusal("a recording", access.reason);
    send_error(ErrorCode::kPermissionDenied, access.reason);
    return false;
  }
  if (args.frequency_hz > config.max_frequency_hz) {
    log_refusal("a recording", "-F " + std::to_string(args.frequency_hz) + " is above max_frequency_hz");
    send_error(ErrorCode::kLimit, "-F " + std::to_string(args.frequency_hz) +
                                      " is above this hpd's limit of " +
                                      std::to_string(config.max_frequency_hz) +
                                      " Hz (max_frequency_hz in hpd.conf); ask for less");
    return false;
  }
  if (args.cfi_rows > config.max_cfi_rows) {
    log_refusal("a recording", "--cfi-rows " + std::to_string(args.cfi_rows) + " is above max_cfi_rows");
    send_error(ErrorCode::kLimit, "--cfi-rows " + std::to_string(args.cfi_rows) +
                                      " is above this hpd's limit of " + std::to_string(config.max_cfi_rows) +
                                      " rows (max_cfi_rows in hpd.conf); ask for less");
    return false;
  }
  if (!privileged_) {
    const std::string no_kernel =
        kernel_frames_refusal(peer_, read_kernel_sysctl("kernel/perf_event_paranoid", 2),
                              read_kernel_sysctl("kernel/kptr_restrict", 2));
    if (!no_kernel.empty()) {
      if (args.kernel == Switch::kOn) {
        log_refusal("kernel frames (--kernel)", no_kernel);
        send_error(ErrorCode::kPermissionDenied, "kernel call stacks are not yours to have: " + no_kernel +
                                                     "; record without --kernel, or " +
                                                     "ask an administrator to add you to the '" +
                                                     config.group + "' group");
        return false;
      }
      if (args.kernel != Switch::kOff)
        notes.push_back("note: no kernel frames: " + no_kernel + " (as perf would)");
      args.kernel = Switch::kOff;
    }
  }
  return true;
}

std::optional<RecordOptions> Connection::recorder_options(const Request& request,
                                                          const session::RecordRequest& args) {
  RecordOptions options;
  try {
    options = session::record_options_from_request(args);
    if (!privileged_) {
      options.restrict_to_client = true;
      options.client_uid = peer_.uid;
      options.client_gid = peer_.gid;
    }
    validate_record_options(options);
  } catch (const std::exception& e) {
    // A request's refusal is a bad request, the recorder's a failed recording, anything else internal.
    send_error_for("record", e);
    return std::nullopt;
  }
  if (request.held_at_exec) {
    if (const std::string problem = held_at_exec_problem(args, peer_.pid); !problem.empty()) {
      send_error(ErrorCode::kBadRequest, problem);
      return std::nullopt;
    }
    options.pid_held_at_exec = true;
  }

  return options;
}

std::shared_ptr<Session> Connection::open_session(const Request& request, const session::RecordRequest& args,
                                                  const Config& config) {
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
    return nullptr;
  }
  log_info("session " + std::to_string(session->id) + " for uid " + std::to_string(peer_.uid) + ": " +
           session->target);
  json accepted = reply_message("accepted");
  accepted["session"] = session->id;
  send(accepted);
  return session;
}

// Until the recording thread ends: a stop from the client or from hpd's shutdown stops the session; a
// client gone (closed, or taking none of its replies) ends it and gets nothing. Other requests on this
// connection are served meanwhile, except another record.
void Connection::watch_client_while_recording(Session& session, const std::atomic<bool>& finished,
                                              std::atomic<bool>& client_gone,
                                              const std::atomic<bool>& replied) {
  bool reading = true;
  while (!finished.load()) {
    if (daemon_.stopping()) session.stop.store(true);
    // A client that leaves its replies unread for client_timeout is gone, long before its socket's
    // buffer would fill and a send would fail.
    if (!replied.load() && !lost_.load() && replies_unread_too_long()) {
      log_info("connection of uid " + std::to_string(peer_.uid) + " (pid " + std::to_string(peer_.pid) +
               "): its replies stayed unread for client_timeout; dropping it");
      std::lock_guard lock(send_mutex_);
      gone_ = true;
      lost_.store(true);
    }
    if (lost_.load() && !client_gone.load()) {
      // The client takes none of its replies: it is gone, and its session ends now.
      log_info("session " + std::to_string(session.id) + ": the client does not read its replies; ending it");
      client_gone.store(true);
      session.stop.store(true);
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
    // A request begun must arrive whole within 10 s; the end of the recording or hpd's stop ends the
    // wait for it, so that a client trickling bytes holds neither.
    FrameLimits limits;
    limits.deadline_mono_ns = now_ns(CLOCK_MONOTONIC) + 10000000000ull;
    limits.deadline_message = "a request did not arrive whole within 10 s (the connection is closed)";
    limits.stop = [&] { return finished.load() || daemon_.stopping(); };
    try {
      if (read_frame(socket_.get(), next, limits) == ReadResult::kClosed) {
        if (replied.load()) {
          reading = false;
          continue;
        }
        client_gone.store(true);
      } else {
        inner = parse_request(next.payload);
      }
    } catch (const ProtocolError& e) {
      if (e.code() == ErrorCode::kShuttingDown) {
        // The recording ended or hpd stops: the loop's top sees which; a part of a frame is dropped.
        reading = false;
        continue;
      }
      send_error(e.code(), e.what());
      if (e.code() == ErrorCode::kTruncated || e.code() == ErrorCode::kTooLarge ||
          e.code() == ErrorCode::kLimit)
        client_gone.store(true);
      else
        continue;
    } catch (const std::exception&) {
      client_gone.store(true);
    }
    if (client_gone.load()) {
      log_info("session " + std::to_string(session.id) + ": the client went away; ending it");
      session.stop.store(true);
      reading = false;
      continue;
    }
    if (inner.type == RequestType::kStop && (inner.session == 0 || inner.session == session.id)) {
      session.stop.store(true);
    } else if (inner.type == RequestType::kRecord) {
      send_error(ErrorCode::kBadRequest, "this connection is recording session " +
                                             std::to_string(session.id) +
                                             "; open another connection for another recording");
    } else {
      handle(inner, next);
    }
  }
}

void Connection::end_session(Session& session, bool client_gone) {
  daemon_.sessions().remove(session);
  if (client_gone) {
    std::lock_guard lock(send_mutex_);
    gone_ = true;
  }
  // Recording threads leave freed memory in their malloc arenas; give it back.
  ::malloc_trim(0);
  log_info("session " + std::to_string(session.id) + " ended: " + std::to_string(session.samples.load()) +
           " samples, " + std::to_string(session.lost.load()) + " lost");
}

// The recording thread: the recorder's callbacks (the "started" and "progress" replies, the memory
// limit, the privilege watch), record(), then the profile delivered or discarded.
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
    json started = reply_message("started");
    started["session"] = session->id;
    send(started);
  };
  // Before the first sample is read: the held command runs its first instruction under the events.
  options.on_attached = announce;
  bool memory_exceeded = false;
  bool user_memory_exceeded = false;
  const Config config = daemon_.config();
  const uint64_t user_limit = peer_.uid == 0 ? UINT64_MAX : config.max_user_memory_mb << 20;
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
      const uint64_t bytes = estimate_profile_bytes(raw, !output.is_capture());
      session->memory_bytes.store(bytes);
      if (bytes > memory_limit && !memory_exceeded) {
        memory_exceeded = true;
        session->stop.store(true);
      } else if (!memory_exceeded && !user_memory_exceeded &&
                 daemon_.sessions().user_memory(peer_.uid) > user_limit) {
        user_memory_exceeded = true;
        session->stop.store(true);
      }
      announce();
    };
    output.attach(options, false);  // a capture is symbolized by the client (deliver_recording)
    if (options.stack_memory_bound != 0) options.stack_memory_bound = config.max_stack_memory_kb << 10;
    // Checked before the output's own flush (a streamed .hpr): once a target gained privileges,
    // nothing more reaches the client's file.
    options.on_flush = [inner = std::move(options.on_flush), &check_privileges, &privilege_reason,
                        &unconfirmed](RawProfile& raw) {
      check_privileges(raw, false);
      if (privilege_reason.empty() && unconfirmed.live_pid == 0) inner(raw);
    };
    options.on_progress = [&](const RecordProgress& p) {
      announce();
      session->samples.store(p.samples);
      session->lost.store(p.lost);
      json progress = reply_message("progress");
      progress["elapsed_s"] = p.elapsed_s;
      progress["duration_s"] = p.duration_s;
      progress["samples"] = p.samples;
      progress["lost"] = p.lost;
      send(progress);
    };
    RecordResult result = record(options);
    announce();
    session->samples.store(result.profile.sample_count());
    session->lost.store(result.profile.lost.lost_records);
    if (client_gone.load()) {
      output.abandon();
      return;
    }
    check_privileges(result.profile, true);
    if (!privilege_reason.empty()) {
      output.abandon();
      discard_recording(*session, privilege_reason, replied);
      return;
    }
    std::string ended_early;
    if (memory_exceeded) {
      ended_early = "note: the session ended early: its profile outgrew max_session_memory_mb (" +
                    std::to_string(memory_limit >> 20) + " MiB) of hpd.conf";
    } else if (user_memory_exceeded) {
      ended_early = "note: the session ended early: your sessions together outgrew max_user_memory_mb (" +
                    std::to_string(user_limit >> 20) + " MiB) of hpd.conf";
    }
    // The JIT symbols and symbol tables come next: reserved in the session's memory, so that the
    // user's other sessions see them taken.
    const uint64_t user_used = daemon_.sessions().user_memory(peer_.uid);
    const FsCredentials client = client_fs_credentials(socket_.get(), peer_);
    session::SymbolSources sources = symbol_sources(config, privileged_ ? nullptr : &client,
                                                    user_used >= user_limit ? 0 : user_limit - user_used);
    session->memory_bytes.fetch_add(sources.max_jit_bytes + sources.symbol_cache_bytes);
    output.set_symbol_sources(std::move(sources));
    if (!privileged_) {
      // "/" opens for everyone: failing, hpd cannot take the client's credentials, and the client
      // gets no names from files (nothing is opened as hpd instead).
      UniqueFd root(open_as(client, "/", O_RDONLY | O_DIRECTORY));
      if (!root)
        notes.push_back(
            std::string("note: no names from files: hpd cannot open files with your permissions (") +
            std::strerror(errno) + "; it needs CAP_SETUID and CAP_SETGID)");
    }
    deliver_recording(*session, result, output, launched, std::move(notes), ended_early, replied);
  } catch (const std::exception& e) {
    // A recorder's refusal (RecordError) or a failed write (a full disk, an output nobody reads).
    fail_recording(*session, e.what(), replied);
  }
}

// A target gained privileges: nothing recorded reaches the client, and the log says whose session it was.
void Connection::discard_recording(const Session& session, const std::string& reason,
                                   std::atomic<bool>& replied) {
  log_warning("session " + std::to_string(session.id) + " of uid " + std::to_string(peer_.uid) + " (pid " +
              std::to_string(peer_.pid) + ") discarded: " + reason);
  replied.store(true);
  send_error(ErrorCode::kPermissionDenied,
             "the recording was stopped and discarded: " + reason + "; you (uid " +
                 std::to_string(peer_.uid) +
                 ") may record only processes that run as you; ask an administrator to add you to the '" +
                 group_ + "' group");
}

// The profile symbolized and written into the client's descriptor ("writing"), then "done" with the
// summary; hpd's own notes (limits, processes not followed, `ended_early`) come first in it.
void Connection::deliver_recording(Session& session, RecordResult& result, session::RecordingOutput& output,
                                   const std::vector<std::string>& launched, std::vector<std::string> notes,
                                   const std::string& ended_early, std::atomic<bool>& replied) {
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
  send(reply_message("writing"));
  // A capture is not symbolized here: the client symbolizes what it reads back for its report.
  const std::optional<Profile> profile = output.finish(result);
  session::RecordSummary summary = session::summarize_recording(result, profile, output);
  summary.mode = "daemon";
  if (!launched.empty()) summary.command_exit_status = 0;  // the client reaps its command and knows
  if (!ended_early.empty()) notes.push_back(ended_early);
  summary.notes.insert(summary.notes.begin(), notes.begin(), notes.end());
  json done = reply_message("done");
  done["session"] = session.id;
  done["summary"] = session::record_summary_to_json(summary);
  replied.store(true);
  // Finished before the client hears it: a status it asks for next must not show it running.
  daemon_.sessions().remove(session);
  send(done);
}

void Connection::fail_recording(Session& session, const std::string& why, std::atomic<bool>& replied) {
  log_warning("session " + std::to_string(session.id) + " of uid " + std::to_string(peer_.uid) +
              " failed: " + why);
  replied.store(true);
  daemon_.sessions().remove(session);  // its slot is free before the client hears of it
  send_error(ErrorCode::kRecordFailed, why);
}

}  // namespace hpd::service
