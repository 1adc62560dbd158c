// Clocks, liveness checks, the recording description and the frameless-leaf fix shared by the backends.
#include "recording_common.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "hpd/base/proc_files.h"
#include "hpd/base/process.h"
#include "raw_profile_builder.h"

namespace hpd {

uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  ::clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

void take_clock_pair(uint64_t& mono, uint64_t& unix_ns) {
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < 3; ++i) {
    const uint64_t a = mono_now();
    const uint64_t real = clock_ns(CLOCK_REALTIME);
    const uint64_t b = mono_now();
    if (b - a < best_width) {
      best_width = b - a;
      mono = a + (b - a) / 2;
      unix_ns = real;
    }
  }
}

namespace {

// Whether some thread of `pid` has not begun to exit (PF_EXITING, or a zombie): the kernel's
// sched_process_exit of its last thread, which takes the pid out of the eBPF targets, is yet to come.
bool has_running_thread(int32_t pid) {
  for (const int32_t tid : list_threads(pid)) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
    std::string stat;
    std::getline(in, stat);
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 1));
    std::string state;
    std::string skip;
    fields >> state;
    for (int i = 0; i < 5; ++i) fields >> skip;
    unsigned long flags = 0;
    if (!(fields >> flags)) continue;
    constexpr unsigned long kPfExiting = 0x4;
    if ((flags & kPfExiting) == 0 && state != "Z" && state != "X") return true;
  }
  return false;
}

}  // namespace

std::vector<UniqueFd> bind_targets(const RecordOptions& options) {
  std::vector<UniqueFd> bound;
  for (size_t i = 0; i < options.target.pids.size(); ++i) {
    const int lent = i < options.pid_fds.size() ? options.pid_fds[i] : -1;
    bound.push_back(lent >= 0 ? UniqueFd(::fcntl(lent, F_DUPFD_CLOEXEC, 0))
                              : open_pidfd(options.target.pids[i]));
  }
  return bound;
}

void check_targets_running(const std::vector<int32_t>& pids, const std::vector<UniqueFd>& pidfds) {
  for (size_t i = 0; i < pids.size(); ++i) {
    // /proc read first, the pidfd after: alive then, the pid was the bound process's during the read.
    const bool running = has_running_thread(pids[i]);
    const bool same = i >= pidfds.size() || !pidfds[i] || pidfd_alive(pidfds[i].get());
    if (!running || !same) {
      throw RecordError("pid " + std::to_string(pids[i]) +
                        " exited before the recording started; nothing was recorded (another process may "
                        "have its pid now)");
    }
  }
}

std::unique_ptr<LaunchedCommand> launch_command(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& environment) {
  try {
    return std::make_unique<LaunchedCommand>(argv, environment, HoldAt::kBeforeExec);
  } catch (const std::runtime_error& e) {
    throw RecordError(e.what());
  }
}

uint64_t release_command(LaunchedCommand* command, const RecordOptions& options, RawProfileBuilder& builder) {
  int32_t pid = 0;
  if (command != nullptr)
    pid = command->pid();
  else if (options.pid_held_at_exec && !options.target.pids.empty())
    pid = options.target.pids[0];
  if (pid == 0) return 0;
  const uint64_t released_ns = mono_now();
  if (command != nullptr) {
    try {
      command->start();
    } catch (const std::runtime_error& e) {
      throw RecordError(e.what());
    }
  }
  builder.drop_samples_before(pid, released_ns);
  return released_ns;
}

void finish_command(LaunchedCommand* command, const RecordOptions& options, uint64_t released_ns,
                    bool stopped_early, RecordResult& result) {
  if (released_ns == 0) return;
  int32_t pid = options.target.pids.empty() ? 0 : options.target.pids[0];
  if (command != nullptr) {
    pid = command->pid();
    if (stopped_early)
      command->terminate(std::chrono::milliseconds(2000));
    else
      command->try_reap();
    if (!command->reaped()) command->terminate(std::chrono::milliseconds(2000));
    result.command_exit_status = command->exit_status();
  }
  // No sample of it is older (drop_samples_before): its start is the release.
  RawProfile& profile = result.profile;
  if (const RawProcess* process = profile.find_process(pid);
      process != nullptr && process->start_ns < released_ns)
    profile.process(pid).start_ns = released_ns;
  for (RawThread& thread : profile.threads)
    if (thread.pid == pid && thread.start_ns < released_ns) thread.start_ns = released_ns;
}

bool update_targets_exited(std::vector<WatchedTarget>& targets, const std::vector<pollfd>& pfds,
                           size_t first_target, LaunchedCommand* command) {
  if (targets.empty()) return false;
  bool all = true;
  for (size_t i = 0; i < targets.size(); ++i) {
    WatchedTarget& t = targets[i];
    if (!t.exited) {
      if (t.pidfd) {
        t.exited = (pfds[first_target + i].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
      } else {
        t.exited = command != nullptr ? command->try_reap() : process_ended(t.pid);
      }
      if (t.exited && command != nullptr) command->try_reap();
    }
    all = all && t.exited;
  }
  return all;
}

namespace {
constexpr uint64_t kTickIntervalNs = 250'000'000;
}  // namespace

RecordingTicker::RecordingTicker(const RecordOptions& options, uint64_t start_ns)
    : options_(options),
      start_ns_(start_ns),
      duration_ns_(options.duration_s > 0 ? static_cast<uint64_t>(std::llround(options.duration_s * 1e9))
                                          : 0),
      last_progress_(start_ns),
      last_flush_(start_ns) {}

bool released_stacks_due(const RecordOptions& options, const RawProfile& profile) {
  return options.stack_memory_bound != 0 && profile.samples.empty() &&
         profile.stack_memory_bytes() > options.stack_memory_bound;
}

RecordingTicker::Outcome RecordingTicker::tick(bool all_exited, uint64_t samples, RawProfile& profile) {
  const uint64_t now = mono_now();
  if (all_exited) return Outcome::kTargetsExited;
  if ((options_.stop != nullptr && options_.stop->load()) ||
      (duration_ns_ != 0 && now - start_ns_ >= duration_ns_)) {
    return Outcome::kStopped;
  }
  if (options_.on_progress && now - last_progress_ >= kTickIntervalNs) {
    last_progress_ = now;
    options_.on_progress(RecordProgress{static_cast<double>(now - start_ns_) / 1e9, options_.duration_s,
                                        samples, profile.lost.lost_records});
  }
  if (options_.on_flush && now - last_flush_ >= kTickIntervalNs) {
    last_flush_ = now;
    options_.on_flush(profile);
    if (options_.forget_before && forget_) {
      if (const uint64_t before = options_.forget_before(); before != 0) forget_(before);
    }
    if (forget_stacks_ && released_stacks_due(options_, profile)) forget_stacks_();
  }
  return Outcome::kContinue;
}

bool process_ended(int32_t pid) {
  if (no_such_process(pid)) return true;
  const char state = read_process_state(pid);
  if (state == 0 || state == 'X') return true;
  if (state != 'Z') return false;
  for (const int32_t tid : list_threads(pid)) {
    const char s = read_thread_state(pid, tid);
    if (s != 0 && s != 'Z' && s != 'X') return false;
  }
  return true;
}

void raise_fd_limit() {
  rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

bool may_follow_child(const RecordOptions& options, int32_t pid) {
  return !options.restrict_to_client || process_runs_as(pid, options.client_uid, options.client_gid);
}

DescriptorBudget::DescriptorBudget() {
  rlimit limit{};
  limited_ = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY;
  if (!limited_) return;
  limit_ = limit.rlim_cur;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++in_use_;
}

bool DescriptorBudget::take(size_t n) {
  if (limited_ && in_use_ + n + kReserved > limit_) return false;
  in_use_ += n;
  return true;
}

std::string DescriptorBudget::refusal(const std::string& each) const {
  return "their events would take the descriptors the recording needs (one per CPU for each " + each +
         "; the limit is " + std::to_string(limit_) + "): raise it with ulimit -n";
}

void describe_recording(const RecordOptions& options, RecordingInfo& info) {
  utsname uts;
  if (::uname(&uts) == 0) {
    info.hostname = uts.nodename;
    info.kernel_release = uts.release;
  }
  info.target.clear();
  if (options.target.all_processes) {
    info.target = kAllProcessesTarget;
  } else if (!options.target.cgroup.empty()) {
    info.target = std::string(kCgroupTargetPrefix) + options.target.cgroup;
  } else if (options.target.command.empty()) {
    info.target = options.target.pids.size() == 1 ? "pid " : "pids ";
    for (size_t i = 0; i < options.target.pids.size(); ++i) {
      if (i > 0) info.target += ',';
      info.target += std::to_string(options.target.pids[i]);
    }
  }
  if (!options.target.command.empty()) {
    std::string command;
    for (const std::string& arg : options.target.command) {
      if (!command.empty()) command += ' ';
      command += arg;
    }
    info.target = info.target.empty() ? command : info.target + " while running " + command;
  }
}

bool insert_frameless_leaf_caller(Unwinder& unwinder, const UnwindContext& context, const UserRegs& regs,
                                  const StackCopy& stack, std::vector<uint64_t>& user) {
  if (user.empty() || user[0] != regs.ip()) return false;
  const auto ret = unwinder.frameless_leaf_return(context, regs, stack);
  if (!ret || (user.size() >= 2 && user[1] == *ret)) return false;
  user.insert(user.begin() + 1, *ret);
  return true;
}

void describe_process_from_proc(RawProcess& process) {
  // Most processes a system-wide recording meets have exited when their records are read: four
  // failed lookups under /proc, each a path walk, per description.
  if (no_such_process(process.pid)) return;
  const std::string exe = read_exe(process.pid);
  if (!exe.empty()) process.exe = exe;
  auto cmdline = read_cmdline(process.pid);
  if (!cmdline.empty()) process.cmdline = std::move(cmdline);
  std::string cgroup = read_cgroup(process.pid);
  if (!cgroup.empty()) process.cgroup = std::move(cgroup);
  if (process.name.empty()) process.name = read_comm(process.pid);
}

}  // namespace hpd
