// Starting hpd for tests, reading its notify socket and log, raw protocol helpers.
#include "hpd_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "hpd/service/protocol.h"

namespace hpd::test {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

Hpd::Hpd(const HpdStart& start) {
  chmod(dir_.c_str(), 0755);
  out_dir_ = dir_ + "/out";
  mkdir(out_dir_.c_str(), 0777);
  chmod(out_dir_.c_str(), 01777);
  socket_ = dir_ + "/run/hpd.sock";
  config_path_ = dir_ + "/hpd.conf";
  log_path_ = dir_ + "/hpd.log";
  std::ofstream(config_path_) << start.config;

  const std::string notify_path = dir_ + "/notify";
  notify_fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un notify_addr = unix_address(notify_path);
  if (bind(notify_fd_, reinterpret_cast<sockaddr*>(&notify_addr), sizeof notify_addr) != 0) {
    throw std::runtime_error("cannot bind the notify socket");
  }

  int listener = -1;
  if (start.activation) {
    mkdir((dir_ + "/run").c_str(), 0755);
    listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr = unix_address(socket_);
    if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 16) != 0) {
      throw std::runtime_error("cannot create the activation socket");
    }
    chmod(socket_.c_str(), 0666);
  }

  std::vector<std::string> argv = start.wrapper;
  argv.push_back(HPD_HPD_PATH);
  argv.push_back("--config");
  argv.push_back(config_path_);
  if (!start.activation) {
    argv.push_back("--socket");
    argv.push_back(socket_);
  }
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(log_fd, 2);
    dup2(log_fd, 1);
    setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
    setenv("WATCHDOG_USEC", "2000000", 1);
    unsetenv("JOURNAL_STREAM");
    if (listener >= 0) {
      dup2(listener, 3);  // dup2 clears close-on-exec on the copy
      setenv("LISTEN_FDS", "1", 1);
      setenv("LISTEN_PID", std::to_string(getpid()).c_str(), 1);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  ::close(log_fd);
  if (listener >= 0) ::close(listener);
  if (!wait_notify("READY=1", 30)) {
    throw std::runtime_error("hpd did not report READY=1; its log:\n" + log());
  }
}

Hpd::~Hpd() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (notify_fd_ >= 0) close(notify_fd_);
  // tmp_ removes the directory.
}

bool Hpd::wait_notify(const std::string& want, double timeout_s) {
  const double end = now_s() + timeout_s;
  for (const std::string& n : notifications_) {
    if (n.find(want) != std::string::npos) return true;
  }
  while (now_s() < end) {
    pollfd p{notify_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buffer[4096];
    const ssize_t n = recv(notify_fd_, buffer, sizeof buffer, 0);
    if (n <= 0) continue;
    notifications_.emplace_back(buffer, static_cast<size_t>(n));
    if (notifications_.back().find(want) != std::string::npos) return true;
  }
  return false;
}

std::string Hpd::log() const {
  std::ifstream in(log_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Hpd::wait_log(const std::string& want, double timeout_s) const {
  const double end = now_s() + timeout_s;
  do {
    if (log().find(want) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (now_s() < end);
  return false;
}

void Hpd::signal(int sig) const {
  kill(pid_, sig);
}

int Hpd::terminate(double timeout_s) {
  kill(pid_, SIGTERM);
  const double end = now_s() + timeout_s;
  while (now_s() < end) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

Hpd::FdCounts Hpd::fd_counts() const {
  FdCounts counts;
  const std::string dir = "/proc/" + std::to_string(pid_) + "/fd";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    ++counts.total;
    char target[256] = {};
    const ssize_t n = readlink(entry.path().c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<size_t>(n));
    if (link == "anon_inode:bpf-prog")
      ++counts.bpf_prog;
    else if (link == "anon_inode:bpf-map")
      ++counts.bpf_map;
    else if (link == "anon_inode:bpf_link")
      ++counts.bpf_link;
    else if (link == "anon_inode:[perf_event]")
      ++counts.perf_event;
  }
  return counts;
}

int connect_unix(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = unix_address(path);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

nlohmann::json read_reply(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) throw std::runtime_error("no reply within the timeout");
  service::Frame frame;
  if (service::read_frame(fd, frame, timeout_ms) != service::ReadResult::kFrame) {
    throw std::runtime_error("the connection was closed without a reply");
  }
  return nlohmann::json::parse(frame.payload);
}

nlohmann::json Hpd::request(const nlohmann::json& message) const {
  const int fd = connect_unix(socket_);
  if (fd < 0) throw std::runtime_error("cannot connect to " + socket_);
  service::send_frame(fd, message.dump());
  nlohmann::json reply = read_reply(fd);
  close(fd);
  return reply;
}

std::string unit_file_value(const std::string& unit_file, const std::string& key) {
  std::ifstream unit(unit_file);
  if (!unit) throw std::runtime_error("cannot read the unit file " + unit_file);
  for (std::string line; std::getline(unit, line);)
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  throw std::runtime_error("no " + key + "= line in " + unit_file);
}

std::vector<std::string> unit_capabilities(const std::string& unit_file) {
  // CAP_BPF CAP_PERFMON ... -> bpf, perfmon, ... (setpriv's names: lower case, no CAP_).
  std::vector<std::string> caps;
  std::istringstream names(unit_file_value(unit_file, "CapabilityBoundingSet"));
  for (std::string name; names >> name;) {
    if (name.rfind("CAP_", 0) == 0) name = name.substr(4);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    caps.push_back(name);
  }
  return caps;
}

std::vector<std::string> with_unit_capabilities(const std::string& unit_file) {
  std::string set = "-all";
  for (const std::string& name : unit_capabilities(unit_file)) set += ",+" + name;
  return {"setpriv", "--inh-caps=-all", "--bounding-set=" + set};
}

std::vector<std::string> in_private_mounts(const std::string& script, const std::string& arg0,
                                           const std::vector<std::string>& then) {
  std::vector<std::string> wrapper = {"unshare", "-m", "--propagation", "private", "sh", "-c", script, arg0};
  wrapper.insert(wrapper.end(), then.begin(), then.end());
  return wrapper;
}

std::vector<std::string> as_nobody(std::vector<std::string> argv, const std::string& groups) {
  std::vector<std::string> full = {"setpriv", "--reuid=65534", "--regid=65534"};
  full.push_back(groups.empty() ? "--clear-groups" : "--groups=" + groups);
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

size_t count_samples(const nlohmann::json& profile) {
  size_t n = 0;
  for (const auto& thread : profile.at("threads")) n += thread.at("samples").at("length").get<size_t>();
  return n;
}

bool runs_executable(pid_t pid, const std::string& exe, int timeout_s) {
  const std::string want = std::filesystem::canonical(exe).string();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code error;
    const auto now = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", error);
    if (!error && now.string() == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace hpd::test
