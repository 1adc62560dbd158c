// Process helpers for the tests (subprocess.h).
#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace hpd::test {
namespace {

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Reads `fd` until a line equal to `line` (newline excluded) arrives; false at end of file, on
// error, or after timeout_s.
bool read_line_until(int fd, const std::string& line, double timeout_s) {
  const double deadline = now_s() + timeout_s;
  std::string pending;
  char buf[256];
  for (;;) {
    for (size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1)) {
      if (pending.compare(0, eol, line) == 0 && eol == line.size()) return true;
    }
    const double left = deadline - now_s();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    const ssize_t got = read(fd, buf, sizeof buf);
    if (got <= 0) return false;
    pending.append(buf, static_cast<size_t>(got));
  }
}

std::vector<char*> to_argv(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

bool have_tool(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

RunResult run(const std::vector<std::string>& argv, double timeout_s, const std::vector<std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const auto& e : env) env_strings.push_back(e);
  auto envp = to_argv(env_strings);
  auto args = to_argv(argv);

  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  RunResult result;
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    result.err = std::string("spawn failed: ") + std::strerror(rc);
    return result;
  }
  const double deadline = now_s() + timeout_s;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool killed = false;
  char buf[65536];
  while (open_fds > 0) {
    const double left = deadline - now_s();
    if (left <= 0 && !killed) {
      kill(pid, SIGKILL);
      killed = true;
    }
    const int n = poll(fds, 2, killed ? 1000 : static_cast<int>(left * 1000) + 1);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(got));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = decode_status(status);
  if (killed) result.err += "\n[killed after timeout]";
  return result;
}

Background::Background(const std::vector<std::string>& argv, const BackgroundOptions& options) {
  auto args = to_argv(argv);
  int out[2] = {-1, -1}, in[2] = {-1, -1};
  const bool handshake = !options.ready_line.empty();
  if ((handshake && pipe2(out, O_CLOEXEC) != 0) || (options.stdin_pipe && pipe2(in, O_CLOEXEC) != 0)) {
    const int err = errno;
    for (int fd : {out[0], out[1]}) {
      if (fd >= 0) close(fd);
    }
    throw std::runtime_error(std::string("pipe failed: ") + std::strerror(err));
  }
  // send() to a child that has exited must fail, not kill the test with SIGPIPE.
  if (options.stdin_pipe) signal(SIGPIPE, SIG_IGN);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (handshake) {
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, options.stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  if (options.stdin_pipe) {
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  const int rc = posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  for (int fd : {out[1], in[0]}) {
    if (fd >= 0) close(fd);
  }
  stdout_fd_ = out[0];
  stdin_fd_ = in[1];
  if (rc != 0) {
    pid_ = -1;
    for (int fd : {stdout_fd_, stdin_fd_}) {
      if (fd >= 0) close(fd);
    }
    throw std::runtime_error(std::string("cannot start ") + argv[0] + ": " + std::strerror(rc));
  }
  ready_ = !handshake || read_line_until(stdout_fd_, options.ready_line, options.ready_timeout_s);
}

Background::~Background() {
  kill();
}

void Background::kill() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  for (int* fd : {&stdout_fd_, &stdin_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

bool Background::send(const std::string& bytes) const {
  return stdin_fd_ >= 0 && write(stdin_fd_, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
}

int Background::terminate(double timeout_s) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
  int status = 0;
  pid_t reaped = 0;
  while ((reaped = waitpid(pid_, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (reaped != pid_) {
    ::kill(pid_, SIGKILL);
    reaped = waitpid(pid_, &status, 0);
  }
  const bool ok = reaped == pid_;
  pid_ = -1;
  for (int* fd : {&stdout_fd_, &stdin_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  return ok ? decode_status(status) : -1;
}

int Background::wait(rusage* usage) {
  if (stdin_fd_ >= 0) {
    close(stdin_fd_);
    stdin_fd_ = -1;
  }
  int status = 0;
  const bool reaped = pid_ > 0 && wait4(pid_, &status, 0, usage) == pid_;
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
  }
  if (!reaped) return -1;
  pid_ = -1;
  return decode_status(status);
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace hpd::test
