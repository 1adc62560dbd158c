// Fork, hold, exec, reap.
#include "proc/launched_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "hpd/collect/recorder.h"

namespace hpd {

namespace {
void make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw RecordError(std::string("cannot create a pipe: ") + std::strerror(errno));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
}
}  // namespace

LaunchedCommand::LaunchedCommand(const std::vector<std::string>& argv,
                                 const std::vector<std::string>& environment) {
  if (argv.empty() || argv.front().empty()) throw RecordError("no command given to run");
  name_ = argv.front();
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls are allowed.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The child's environment: ours, each entry of `environment` replacing one of the same name.
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& add : environment) replaced = replaced || add.substr(0, add.find('=')) == name;
    if (!replaced) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), environment.begin(), environment.end());
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  UniqueFd go_read, error_write;
  make_pipe(go_read, go_);
  make_pipe(error_, error_write);

  pid_ = ::fork();
  if (pid_ < 0) throw RecordError(std::string("cannot fork to run '") + name_ + "': " + std::strerror(errno));
  if (pid_ == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    char byte = 0;
    ssize_t n;
    do {
      n = ::read(go_read.get(), &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) _exit(127);  // the recorder gave up before releasing us
    ::execvpe(args[0], args.data(), envp.data());
    const int err = errno;
    [[maybe_unused]] ssize_t w = ::write(error_write.get(), &err, sizeof err);
    _exit(127);
  }
}

LaunchedCommand::~LaunchedCommand() {
  if (pid_ > 0 && !reaped_) kill_and_reap();
}

void LaunchedCommand::start() {
  const char byte = 1;
  ssize_t n;
  do {
    n = ::write(go_.get(), &byte, 1);
  } while (n < 0 && errno == EINTR);
  go_.reset();
  int err = 0;
  size_t got = 0;
  while (got < sizeof err) {
    n = ::read(error_.get(), reinterpret_cast<char*>(&err) + got, sizeof err - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  error_.reset();
  if (got == sizeof err) {
    kill_and_reap();
    throw RecordError("cannot run '" + name_ + "': " + std::strerror(err));
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
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r == pid_)
    record_status(status);
  else
    reaped_ = true;
}

}  // namespace hpd
