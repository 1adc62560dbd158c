// Reading the perf-map files JIT runtimes write (/tmp/perf-PID.map) into RawProfile::jit_symbols.
#include "perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace hpd::cli {
namespace {

constexpr off_t kMaxMapBytes = off_t{256} << 20;

// The whole file, or nothing when it is missing, not a regular file, a symlink or too large.
bool read_regular_file(const std::string& path, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxMapBytes) {
    ::close(fd);
    return false;
  }
  out.clear();
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return n == 0;
}

}  // namespace

std::vector<RawJitSymbol> parse_perf_map(const std::string& text, int32_t pid, size_t* bad_lines) {
  std::vector<RawJitSymbol> out;
  size_t bad = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    const char* p = line.c_str();
    char* after = nullptr;
    errno = 0;
    const unsigned long long start = std::strtoull(p, &after, 16);
    if (errno != 0 || after == p || *after != ' ') {
      ++bad;
      continue;
    }
    p = after + 1;
    const unsigned long long size = std::strtoull(p, &after, 16);
    if (errno != 0 || after == p || *after != ' ' || size == 0) {
      ++bad;
      continue;
    }
    std::string name(after + 1);
    if (!name.empty() && name.back() == '\r') name.pop_back();
    if (name.empty()) {
      ++bad;
      continue;
    }
    out.push_back(RawJitSymbol{pid, start, size, std::move(name)});
  }
  if (bad_lines != nullptr) *bad_lines = bad;
  return out;
}

std::vector<std::string> read_perf_maps(RawProfile& profile) {
  std::vector<std::string> notes;
  std::string text;
  for (const RawProcess& process : profile.processes) {
    const std::string name = "perf-" + std::to_string(process.pid) + ".map";
    const std::string own_tmp = "/proc/" + std::to_string(process.pid) + "/root/tmp/" + name;
    const bool read =
        (process.end_ns == 0 && read_regular_file(own_tmp, text)) || read_regular_file("/tmp/" + name, text);
    if (!read) continue;
    size_t bad = 0;
    std::vector<RawJitSymbol> symbols = parse_perf_map(text, process.pid, &bad);
    notes.push_back("JIT symbols of pid " + std::to_string(process.pid) + ": " +
                    std::to_string(symbols.size()) + " from /tmp/" + name +
                    (bad != 0 ? " (" + std::to_string(bad) + " lines not understood)" : ""));
    for (RawJitSymbol& s : symbols) profile.jit_symbols.push_back(std::move(s));
  }
  return notes;
}

}  // namespace hpd::cli
