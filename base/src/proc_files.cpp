// Readers for /proc and /sys files.
#include "hpd/base/proc_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <string_view>

#include "hpd/base/unique_fd.h"

namespace hpd {

std::optional<std::string> read_small_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

std::optional<std::string> read_first_line(const std::string& path) {
  auto text = read_small_file(path);
  if (!text) return std::nullopt;
  const size_t nl = text->find('\n');
  if (nl != std::string::npos) text->resize(nl);
  return text;
}

std::optional<int> read_int_file(const std::string& path) {
  const auto line = read_first_line(path);
  if (!line) return std::nullopt;
  int value = 0;
  const char* begin = line->data();
  const char* end = begin + line->size();
  while (begin < end && *begin == ' ') ++begin;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) return std::nullopt;
  return value;
}

namespace {
std::vector<int32_t> list_numeric_entries(const std::string& path) {
  std::vector<int32_t> ids;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ids;
  while (const dirent* entry = ::readdir(dir)) {
    int32_t id = 0;
    const char* name = entry->d_name;
    const char* end = name + std::char_traits<char>::length(name);
    const auto [ptr, ec] = std::from_chars(name, end, id);
    if (ec == std::errc() && ptr == end && id > 0) ids.push_back(id);
  }
  ::closedir(dir);
  std::sort(ids.begin(), ids.end());
  return ids;
}
}  // namespace

std::vector<int32_t> list_processes() {
  return list_numeric_entries("/proc");
}

namespace {

// The parent pid of field 4 of /proc/P/stat (after the last ')' of the comm field), or 0.
int32_t read_parent_pid(int32_t pid) {
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return 0;
  const size_t paren = text->rfind(')');
  if (paren == std::string::npos || paren + 4 >= text->size()) return 0;
  return static_cast<int32_t>(std::strtol(text->c_str() + paren + 4, nullptr, 10));  // ") S PPID"
}

}  // namespace

std::vector<int32_t> list_child_processes(int32_t pid) {
  std::vector<int32_t> children;
  bool listed = false;
  for (const int32_t tid : list_threads(pid)) {
    const auto text =
        read_small_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/children");
    if (!text) continue;
    listed = true;
    const char* at = text->data();
    const char* end = at + text->size();
    while (at < end) {
      int32_t child = 0;
      const auto [next, ec] = std::from_chars(at, end, child);
      if (ec == std::errc() && child > 0) children.push_back(child);
      at = next + 1;  // past the separating space (or a character from_chars refused)
    }
  }
  if (!listed && !list_threads(pid).empty()) {
    for (const int32_t p : list_processes())
      if (read_parent_pid(p) == pid) children.push_back(p);
  }
  std::sort(children.begin(), children.end());
  children.erase(std::unique(children.begin(), children.end()), children.end());
  return children;
}

std::optional<uint64_t> read_thread_runtime_ns(int32_t pid, int32_t tid) {
  const auto line =
      read_first_line("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat");
  if (!line) return std::nullopt;
  uint64_t value = 0;
  const char* begin = line->data();
  const auto [ptr, ec] = std::from_chars(begin, begin + line->size(), value);
  if (ec != std::errc() || ptr == begin) return std::nullopt;
  return value;
}

std::optional<uint64_t> read_host_steal_ns() {
  const auto line = read_first_line("/proc/stat");
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice", in USER_HZ ticks.
  if (!line || line->rfind("cpu ", 0) != 0) return std::nullopt;
  const char* p = line->data() + 3;
  const char* const end = line->data() + line->size();
  uint64_t value = 0;
  for (int field = 0; field < 8; ++field) {
    while (p < end && *p == ' ') ++p;
    const auto [next, ec] = std::from_chars(p, end, value);
    if (ec != std::errc() || next == p) return std::nullopt;
    p = next;
  }
  const long ticks_per_s = ::sysconf(_SC_CLK_TCK);
  if (ticks_per_s <= 0) return std::nullopt;
  return value * (1000000000ull / static_cast<uint64_t>(ticks_per_s));
}

std::optional<uint64_t> read_thread_context_switches(int32_t pid, int32_t tid) {
  const auto status =
      read_small_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/status");
  if (!status) return std::nullopt;
  uint64_t total = 0;
  int found = 0;
  for (const std::string_view key : {"\nvoluntary_ctxt_switches:", "\nnonvoluntary_ctxt_switches:"}) {
    const size_t at = status->find(key);
    if (at == std::string::npos) return std::nullopt;
    size_t pos = at + key.size();
    while (pos < status->size() && ((*status)[pos] == ' ' || (*status)[pos] == '\t')) ++pos;
    uint64_t value = 0;
    const char* begin = status->data() + pos;
    const auto [ptr, ec] = std::from_chars(begin, status->data() + status->size(), value);
    if (ec != std::errc() || ptr == begin) return std::nullopt;
    total += value;
    ++found;
  }
  return found == 2 ? std::optional<uint64_t>(total) : std::nullopt;
}

std::vector<int32_t> list_threads(int32_t pid) {
  return list_numeric_entries("/proc/" + std::to_string(pid) + "/task");
}

std::string cgroup2_mount() {
  const auto mounts = read_small_file("/proc/self/mounts");
  if (!mounts) return "";
  std::string found;
  size_t pos = 0;
  while (pos < mounts->size()) {
    size_t end = mounts->find('\n', pos);
    if (end == std::string::npos) end = mounts->size();
    // "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0"; mount points with spaces are octal-escaped.
    const std::string line = mounts->substr(pos, end - pos);
    pos = end + 1;
    const size_t a = line.find(' ');
    const size_t b = a == std::string::npos ? a : line.find(' ', a + 1);
    const size_t c = b == std::string::npos ? b : line.find(' ', b + 1);
    if (c == std::string::npos || line.compare(b + 1, c - b - 1, "cgroup2") != 0) continue;
    const std::string dir = line.substr(a + 1, b - a - 1);
    if (dir == "/sys/fs/cgroup") return dir;
    if (found.empty()) found = dir;
  }
  return found;
}

std::string read_comm(int32_t pid) {
  return read_first_line("/proc/" + std::to_string(pid) + "/comm").value_or("");
}

std::string read_thread_comm(int32_t pid, int32_t tid) {
  return read_first_line("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm")
      .value_or("");
}

std::string read_exe(int32_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/exe";
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> read_cmdline(int32_t pid) {
  std::vector<std::string> args;
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/cmdline");
  if (!text) return args;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nul = text->find('\0', pos);
    if (nul == std::string::npos) nul = text->size();
    args.emplace_back(text->substr(pos, nul - pos));
    pos = nul + 1;
  }
  return args;
}

namespace {
char state_from_stat(const std::string& path) {
  const auto text = read_small_file(path);
  if (!text) return 0;
  // The comm field is parenthesized and may itself contain ')' and spaces: the state follows the last ')'.
  const size_t close = text->rfind(')');
  if (close == std::string::npos || close + 2 >= text->size()) return 0;
  return (*text)[close + 2];
}
}  // namespace

char read_process_state(int32_t pid) {
  return state_from_stat("/proc/" + std::to_string(pid) + "/stat");
}

char read_thread_state(int32_t pid, int32_t tid) {
  return state_from_stat("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
}

std::optional<uint64_t> read_process_start_monotonic_ns(int32_t pid) {
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  // Field 22 (starttime); fields from 3 on follow the last ')' of the comm field.
  size_t pos = text->rfind(')');
  if (pos == std::string::npos) return std::nullopt;
  for (int field = 2; field < 22; ++field) {
    pos = text->find(' ', pos + 1);
    if (pos == std::string::npos) return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long ticks = std::strtoull(text->c_str() + pos + 1, &end, 10);
  if (end == text->c_str() + pos + 1 || errno != 0) return std::nullopt;
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0) return std::nullopt;
  timespec boot{}, mono{};
  ::clock_gettime(CLOCK_BOOTTIME, &boot);
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  const int64_t offset = (int64_t{boot.tv_sec} - mono.tv_sec) * 1000000000 + (boot.tv_nsec - mono.tv_nsec);
  const uint64_t start_boot = static_cast<uint64_t>(ticks) * (1000000000ull / static_cast<uint64_t>(hz));
  // The clocks are read one after the other: without a suspend they differ by that moment, either way.
  const uint64_t ahead = offset > 0 ? static_cast<uint64_t>(offset) : 0;
  return start_boot > ahead ? start_boot - ahead : 0;
}

std::optional<uint32_t> read_process_uid(int32_t pid) {
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/status");
  if (!text) return std::nullopt;
  const size_t pos = text->find("\nUid:");
  if (pos == std::string::npos) return std::nullopt;
  const char* p = text->data() + pos + 5;
  const char* end = text->data() + text->size();
  while (p < end && (*p == ' ' || *p == '\t')) ++p;
  uint32_t uid = 0;
  const auto [ptr, ec] = std::from_chars(p, end, uid);
  if (ec != std::errc() || ptr == p) return std::nullopt;
  return uid;
}

namespace {

std::vector<unsigned> numbers_after(std::string_view line) {
  std::vector<unsigned> out;
  const char* p = line.data();
  const char* end = p + line.size();
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    unsigned long n = 0;
    const auto [next, ec] = std::from_chars(p, end, n);
    if (ec != std::errc() || next == p || n > 0xffffffffUL) break;
    out.push_back(static_cast<unsigned>(n));
    p = next;
  }
  return out;
}

}  // namespace

StatusIds parse_proc_status_ids(std::string_view status) {
  StatusIds ids;
  while (!status.empty()) {
    const size_t eol = status.find('\n');
    const std::string_view line = status.substr(0, eol);
    status = eol == std::string_view::npos ? std::string_view() : status.substr(eol + 1);
    if (line.starts_with("Uid:"))
      ids.uids = numbers_after(line.substr(4));
    else if (line.starts_with("Gid:"))
      ids.gids = numbers_after(line.substr(4));
    else if (line.starts_with("Groups:"))
      ids.groups = numbers_after(line.substr(7));
  }
  return ids;
}

std::optional<StatusIds> read_proc_status_ids(int32_t pid) {
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/status");
  if (!text) return std::nullopt;
  StatusIds ids = parse_proc_status_ids(*text);
  if (ids.uids.size() < 2) return std::nullopt;
  return ids;
}

bool process_runs_as(int32_t pid, uint32_t uid, uint32_t gid) {
  const auto ids = read_proc_status_ids(pid);
  if (!ids || ids->uids.size() < 4 || ids->gids.size() < 4) return false;
  return std::all_of(ids->uids.begin(), ids->uids.begin() + 4, [&](unsigned id) { return id == uid; }) &&
         std::all_of(ids->gids.begin(), ids->gids.begin() + 4, [&](unsigned id) { return id == gid; });
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    int first = 0;
    auto [q, ec] = std::from_chars(p, end, first);
    if (ec != std::errc() || q == p) break;
    int last = first;
    p = q;
    if (p < end && *p == '-') {
      auto [r, ec2] = std::from_chars(p + 1, end, last);
      if (ec2 != std::errc() || r == p + 1 || last < first) break;
      p = r;
    }
    for (int c = first; c <= last && cpus.size() < 65536; ++c) cpus.push_back(c);
    while (p < end && (*p == ',' || *p == '\n' || *p == ' ')) ++p;
  }
  return cpus;
}

std::vector<int> online_cpus() {
  if (const auto line = read_first_line("/sys/devices/system/cpu/online")) {
    auto cpus = parse_cpu_list(*line);
    if (!cpus.empty()) return cpus;
  }
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<int> cpus;
  for (long c = 0; c < std::max(1L, n); ++c) cpus.push_back(static_cast<int>(c));
  return cpus;
}

}  // namespace hpd

namespace hpd {

namespace {

// Lines "ID:CONTROLLERS:PATH" of /proc/PID/cgroup; the path may itself hold ':'.
struct CgroupLine {
  std::string_view id, controllers, path;
};

std::optional<CgroupLine> parse_cgroup_line(std::string_view line) {
  const size_t a = line.find(':');
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = line.find(':', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  return CgroupLine{line.substr(0, a), line.substr(a + 1, b - a - 1), line.substr(b + 1)};
}

bool is_container_id(std::string_view s) {
  if (s.size() < 12) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The container id a cgroup path component names, or "".
std::string_view container_of(std::string_view component) {
  if (is_container_id(component)) return component;  // the cgroupfs driver: /docker/ID
  if (!ends_with(component, ".scope")) return {};
  const std::string_view name = component.substr(0, component.size() - 6);
  for (const std::string_view prefix : {"docker-", "cri-containerd-", "crio-", "libpod-"}) {
    if (name.substr(0, prefix.size()) == prefix && is_container_id(name.substr(prefix.size())))
      return name.substr(prefix.size());
  }
  return {};
}

}  // namespace

std::string cgroup_from_proc_text(std::string_view text) {
  std::optional<std::string_view> unified, systemd;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const auto parsed = parse_cgroup_line(line);
    if (!parsed) continue;
    if (parsed->id == "0" && parsed->controllers.empty())
      unified = parsed->path;
    else if (parsed->controllers == "name=systemd")
      systemd = parsed->path;
  }
  if (unified && *unified != "/") return std::string(*unified);
  if (systemd && *systemd != "/") return std::string(*systemd);
  return unified ? std::string(*unified) : std::string();
}

std::string read_cgroup(int32_t pid) {
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/cgroup");
  return text ? cgroup_from_proc_text(*text) : std::string();
}

CgroupOwner cgroup_owner(std::string_view path) {
  CgroupOwner owner;
  // From the innermost component out: the first unit and the first container found are the owners.
  while (!path.empty() && (owner.systemd_unit.empty() || owner.container_id.empty())) {
    const size_t slash = path.rfind('/');
    const std::string_view component = slash == std::string_view::npos ? path : path.substr(slash + 1);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
    if (component.empty()) continue;
    if (owner.systemd_unit.empty() && (ends_with(component, ".service") || ends_with(component, ".scope")))
      owner.systemd_unit = component;
    if (owner.container_id.empty()) owner.container_id = container_of(component);
  }
  return owner;
}

}  // namespace hpd
