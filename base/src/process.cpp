// Fork, hold, exec, reap.
#include "hpd/base/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace hpd {

namespace {

// The child exits with this after writing why ptrace refused to trace it.
constexpr int kTraceRefused = 126;

void make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
}

// Reads the errno a failed exec wrote into the CLOEXEC pipe; false on EOF (the exec succeeded).
bool read_exec_error(int fd, int& err) {
  size_t got = 0;
  while (got < sizeof err) {
    const ssize_t n = ::read(fd, reinterpret_cast<char*>(&err) + got, sizeof err - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  return got == sizeof err;
}

// Whether a program may be stopped at its exec: not when it gains privileges there (set-user-ID,
// set-group-ID, file capabilities), which the kernel withholds from a traced exec.
bool may_hold_at_exec(const std::string& argv0) {
  const std::string path = resolve_command(argv0);
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return false;
  if ((st.st_mode & (S_ISUID | S_ISGID)) != 0) return false;
  // No file capabilities: no such attribute, or a file system without extended attributes.
  return ::getxattr(path.c_str(), "security.capability", nullptr, 0) < 0 &&
         (errno == ENODATA || errno == ENOTSUP);
}

}  // namespace

// Through syscall(): glibc 2.36's <sys/pidfd.h> declares these without C linkage for C++.
UniqueFd open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#else
  (void)pid;
  errno = ENOSYS;
  return UniqueFd();
#endif
}

bool pidfd_alive(int pidfd) {
#ifdef SYS_pidfd_send_signal
  return ::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0 || errno == EPERM;
#else
  (void)pidfd;
  return true;
#endif
}

bool no_such_process(pid_t pid) {
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

UniqueFd remove_when_this_process_ends(const std::string& path, int fd) {
  UniqueFd watch, held;
  try {
    make_pipe(watch, held);
  } catch (const std::runtime_error&) {
    return {};
  }
  // Prepared before fork: after it only async-signal-safe calls (this process may have threads).
  const char* const name = path.c_str();
  const int keep_low = std::min(fd, watch.get()), keep_high = std::max(fd, watch.get());
  const pid_t child = ::fork();
  if (child < 0) return {};
  if (child == 0) {
    // Its own session, then a grandchild that init (or the nearest subreaper) reaps: nobody waits for it.
    if (::setsid() < 0 || ::fork() != 0) ::_exit(0);
    if (keep_low > 0) ::close_range(0, static_cast<unsigned>(keep_low) - 1, 0);
    if (keep_high > keep_low + 1)
      ::close_range(static_cast<unsigned>(keep_low) + 1, static_cast<unsigned>(keep_high) - 1, 0);
    ::close_range(static_cast<unsigned>(keep_high) + 1, ~0U, 0);
    ::prctl(PR_SET_NAME, "hpd-shm-remover", 0, 0, 0);
    char byte;
    while (::read(watch.get(), &byte, 1) < 0 && errno == EINTR) {
    }
    struct stat ours {
    }, named{};
    if (::fstat(fd, &ours) == 0 && ::stat(name, &named) == 0 && ours.st_dev == named.st_dev &&
        ours.st_ino == named.st_ino)
      ::unlink(name);
    ::_exit(0);
  }
  watch.reset();
  while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  return held;
}

std::string current_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string resolve_command(const std::string& argv0) {
  if (argv0.empty() || argv0.find('/') != std::string::npos) return argv0;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = end > begin ? dirs.substr(begin, end - begin) : std::string(".");
    candidate += '/';
    candidate += argv0;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return argv0;
}

LaunchedCommand::LaunchedCommand(const std::vector<std::string>& argv,
                                 const std::vector<std::string>& environment, HoldAt hold) {
  if (argv.empty() || argv.front().empty()) throw std::runtime_error("no command given to run");
  name_ = argv.front();
  // The child's environment: ours, each entry of `environment` replacing one of the same name.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& add : environment) replaced = replaced || add.substr(0, add.find('=')) == name;
    if (!replaced) env_.push_back(entry);
  }
  env_.insert(env_.end(), environment.begin(), environment.end());
  if (hold == HoldAt::kAfterExec && may_hold_at_exec(name_) && fork_child(argv, true)) return;
  fork_child(argv, false);
}

bool LaunchedCommand::fork_child(const std::vector<std::string>& argv, bool at_exec) {
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls are allowed.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env_.size() + 1);
  for (std::string& e : env_) envp.push_back(e.data());
  envp.push_back(nullptr);

  UniqueFd go_read, go_write, error_read, error_write;
  if (!at_exec) make_pipe(go_read, go_write);
  make_pipe(error_read, error_write);

  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error(std::string("cannot fork to run '") + name_ + "': " + std::strerror(errno));
  if (pid_ == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (at_exec) {
      if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) {
        const int err = errno;
        [[maybe_unused]] ssize_t w = ::write(error_write.get(), &err, sizeof err);
        ::_exit(kTraceRefused);
      }
    } else {
      // Its copy of the write end closed: the launcher's is then the only one, and a launcher that
      // dies before releasing us (SIGKILL) lets us go (EOF) instead of leaving us waiting for ever
      // with every descriptor it had (its eBPF programs and perf events among them).
      ::close(go_write.get());
      char byte = 0;
      ssize_t n;
      do {
        n = ::read(go_read.get(), &byte, 1);
      } while (n < 0 && errno == EINTR);
      if (n != 1) ::_exit(127);  // the launcher gave up before releasing us
    }
    ::execvpe(args[0], args.data(), envp.data());
    const int err = errno;
    [[maybe_unused]] ssize_t w = ::write(error_write.get(), &err, sizeof err);
    ::_exit(127);
  }
  error_write.reset();
  if (!at_exec) {
    go_ = std::move(go_write);
    error_ = std::move(error_read);
    return true;
  }
  // The traced child stops with SIGTRAP after a successful exec; else it exits.
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  int err = 0;
  const bool failed = read_exec_error(error_read.get(), err);
  if (WIFSTOPPED(status)) {
    // A launcher that dies before releasing it takes it along, as one held before its exec exits at
    // the pipe's EOF (and as perf's workload does): else the kernel would detach it at the tracer's
    // exit and let it run, unprofiled and unwatched. Kernels before 3.8 lack the option.
    ::ptrace(PTRACE_SETOPTIONS, pid_, nullptr, PTRACE_O_EXITKILL);
    at_exec_ = true;
    return true;
  }
  record_status(status);
  if (failed && exit_status_ == kTraceRefused) {  // ptrace refused: not held at the exec
    pid_ = -1;
    reaped_ = false;
    exit_status_ = -1;
    return false;
  }
  throw std::runtime_error("cannot run '" + name_ + "': " + std::strerror(failed ? err : ECHILD));
}

LaunchedCommand::~LaunchedCommand() {
  if (pid_ > 0 && !reaped_) kill_and_reap();
}

void LaunchedCommand::start() {
  if (at_exec_) {
    // No signal: the exec's SIGTRAP is dropped.
    if (!released_) ::ptrace(PTRACE_DETACH, pid_, nullptr, nullptr);
    released_ = true;
    return;
  }
  if (released_) return;
  released_ = true;
  const char byte = 1;
  ssize_t n;
  do {
    n = ::write(go_.get(), &byte, 1);
  } while (n < 0 && errno == EINTR);
  go_.reset();
  int err = 0;
  const bool failed = read_exec_error(error_.get(), err);
  error_.reset();
  if (failed) {
    kill_and_reap();
    throw std::runtime_error("cannot run '" + name_ + "': " + std::strerror(err));
  }
}

void LaunchedCommand::record_status(int status) {
  reaped_ = true;
  if (WIFEXITED(status))
    exit_status_ = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    exit_status_ = 128 + WTERMSIG(status);
}

bool LaunchedCommand::try_reap() {
  if (reaped_ || pid_ <= 0) return reaped_;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_)
    record_status(status);
  else if (r < 0 && errno == ECHILD)
    reaped_ = true;  // reaped by someone else; status unknown
  return reaped_;
}

int LaunchedCommand::wait() {
  if (reaped_ || pid_ <= 0) return exit_status_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r == pid_)
    record_status(status);
  else
    reaped_ = true;  // reaped by someone else; status unknown
  return exit_status_;
}

void LaunchedCommand::terminate(std::chrono::milliseconds grace) {
  if (pid_ <= 0 || try_reap()) return;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (try_reap()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill_and_reap();
}

void LaunchedCommand::kill_and_reap() {
  if (pid_ <= 0 || reaped_) return;
  go_.reset();  // a child still waiting to be released exits on EOF
  ::kill(pid_, SIGKILL);
  wait();
}

}  // namespace hpd
