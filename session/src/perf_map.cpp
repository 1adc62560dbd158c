// Reading the files JIT runtimes write for profilers (/tmp/perf-PID.map, jit-PID.dump) into
// RawProfile::jit_symbols.
#include "hpd/session/perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace hpd::session {
namespace {

constexpr off_t kMaxMapBytes = off_t{256} << 20;
constexpr off_t kMaxJitdumpBytes = off_t{1} << 30;  // code bytes included

// jitdump (tools/perf/Documentation/jitdump-specification.txt): "JiTD" in the writer's byte order.
constexpr uint32_t kJitdumpMagic = 0x4A695444;
constexpr uint32_t kJitCodeLoad = 0;
constexpr uint32_t kJitCodeMove = 1;

template <typename T>
bool load(const std::string& bytes, size_t offset, T& out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, bytes.data() + offset, sizeof(T));
  return true;
}

// The whole file, or nothing when it is missing, not a regular file, a symlink or too large.
bool read_regular_file(const std::string& path, std::string& out, off_t max_bytes = kMaxMapBytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > max_bytes) {
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

bool parse_jitdump(const std::string& bytes, int32_t pid, std::vector<RawJitSymbol>& out) {
  uint32_t magic = 0, header_size = 0;
  if (!load(bytes, 0, magic) || magic != kJitdumpMagic || !load(bytes, 8, header_size) || header_size < 40 ||
      header_size > bytes.size()) {
    return false;
  }
  // Code moves refer to a blob by its code_index; the symbol it had keeps its name.
  std::unordered_map<uint64_t, size_t> by_index;
  size_t offset = header_size;
  while (true) {
    uint32_t id = 0, size = 0;
    if (!load(bytes, offset, id) || !load(bytes, offset + 4, size) || size < 16 ||
        size > bytes.size() - offset)
      break;
    const size_t body = offset + 16;  // after id, total_size, timestamp
    if (id == kJitCodeLoad) {
      // pid u32, tid u32, vma u64, code_addr u64, code_size u64, code_index u64, name\0, code
      uint64_t code_addr = 0, code_size = 0, code_index = 0;
      if (load(bytes, body + 16, code_addr) && load(bytes, body + 24, code_size) &&
          load(bytes, body + 32, code_index) && body + 40 < offset + size && code_size > 0) {
        const char* name = bytes.data() + body + 40;
        const size_t max_name = offset + size - (body + 40);
        const size_t length = strnlen(name, max_name);
        if (length > 0 && length < max_name) {
          by_index[code_index] = out.size();
          out.push_back(RawJitSymbol{pid, code_addr, code_size, std::string(name, length)});
        }
      }
    } else if (id == kJitCodeMove) {
      // pid u32, tid u32, vma u64, old_code_addr u64, new_code_addr u64, code_size u64, code_index u64
      uint64_t new_addr = 0, code_size = 0, code_index = 0;
      if (load(bytes, body + 24, new_addr) && load(bytes, body + 32, code_size) &&
          load(bytes, body + 40, code_index)) {
        auto it = by_index.find(code_index);
        if (it != by_index.end() && code_size > 0) {
          RawJitSymbol moved = out[it->second];
          moved.start = new_addr;
          moved.size = code_size;
          it->second = out.size();
          out.push_back(std::move(moved));
        }
      }
    }
    offset += size;
  }
  return true;
}

std::vector<std::string> read_jitdumps(RawProfile& profile) {
  std::vector<std::string> notes;
  std::string bytes;
  for (const RawProcess& process : profile.processes) {
    const std::string name = "jit-" + std::to_string(process.pid) + ".dump";
    std::vector<std::string> candidates;
    for (const RawMapping& m : process.mappings) {
      if (m.module >= profile.modules.size()) continue;
      const std::string& path = profile.modules[m.module].path;
      if (path.size() >= name.size() + 1 &&
          path.compare(path.size() - name.size() - 1, std::string::npos, "/" + name) == 0) {
        // Through the process's root while it lives: its mount namespace may differ from ours.
        if (process.end_ns == 0)
          candidates.push_back("/proc/" + std::to_string(process.pid) + "/root" + path);
        candidates.push_back(path);
        break;
      }
    }
    if (process.end_ns == 0) candidates.push_back("/proc/" + std::to_string(process.pid) + "/cwd/" + name);
    for (const std::string& path : candidates) {
      if (!read_regular_file(path, bytes, kMaxJitdumpBytes)) continue;
      std::vector<RawJitSymbol> symbols;
      if (!parse_jitdump(bytes, process.pid, symbols)) continue;
      notes.push_back("JIT symbols of pid " + std::to_string(process.pid) + ": " +
                      std::to_string(symbols.size()) + " from " + path);
      for (RawJitSymbol& s : symbols) profile.jit_symbols.push_back(std::move(s));
      break;
    }
  }
  return notes;
}

}  // namespace hpd::session
