// The live MIP reader: finds every mapped module with __llvm_mipraw in a process and reads the section out of
// the process's memory with process_vm_readv (one syscall per module per snapshot).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <set>
#include <tuple>

#include "hpd/base/demangle.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/unique_fd.h"
#include "mip_internal.h"

namespace hpd::mip {
namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// File-backed mappings of /proc/PID/maps ("[heap]" and anonymous memory are skipped); nullopt when
// the maps file cannot be read.
std::optional<std::vector<MapsEntry>> read_file_maps(int32_t pid) {
  const std::optional<std::string> text = read_small_file("/proc/" + std::to_string(pid) + "/maps");
  if (!text) return std::nullopt;
  std::vector<MapsEntry> out = parse_maps(*text);
  std::erase_if(out, [](const MapsEntry& m) { return m.inode == 0 || m.path.empty() || m.path[0] != '/'; });
  return out;
}

std::string file_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A module with a raw section, ready to be read: everything but the bytes is worked out once.
struct LiveModule {
  std::string path;
  std::string build_id;
  Map map;
  std::vector<std::string> demangled;  // per map entry, computed once
  uint64_t raw_address = 0;            // link-time
  uint64_t raw_size = 0;
  uint64_t bias = 0;
  std::vector<uint8_t> buffer;  // reused between snapshots
};

[[noreturn]] void throw_gone(int32_t pid, const std::string& detail) {
  throw MipError(ErrorCode::kProcessGone, "process " + std::to_string(pid) + " has exited" +
                                              (detail.empty() ? "" : " (" + detail + ")"));
}

}  // namespace

struct LiveReader::State {
  int32_t pid = 0;
  LiveOptions options;
  bool discovered = false;
  std::vector<LiveModule> modules;
  std::set<std::tuple<uint32_t, uint32_t, uint64_t, std::string>> seen;  // (dev, inode, path) examined
  std::vector<ModuleError> errors;  // from discovery, repeated in snapshots
};

LiveReader::LiveReader(int32_t pid, LiveOptions options) : state_(std::make_unique<State>()) {
  state_->pid = pid;
  state_->options = std::move(options);
}
LiveReader::~LiveReader() = default;
LiveReader::LiveReader(LiveReader&&) noexcept = default;
LiveReader& LiveReader::operator=(LiveReader&&) noexcept = default;

int32_t LiveReader::pid() const {
  return state_->pid;
}
size_t LiveReader::module_count() const {
  return state_->modules.size();
}

size_t LiveReader::discover() {
  State& s = *state_;
  const std::optional<std::vector<MapsEntry>> maps = read_file_maps(s.pid);
  if (!maps) throw_gone(s.pid, "no /proc/" + std::to_string(s.pid) + "/maps");
  if (maps->empty()) throw_gone(s.pid, "it has no file mappings left");
  s.discovered = true;
  for (const MapsEntry& m : *maps) {
    auto key = std::make_tuple(m.dev_major, m.dev_minor, m.inode, m.path);
    if (s.seen.count(key)) continue;
    s.seen.insert(key);
    // map_files works for deleted files and other mount namespaces; the path is the fallback.
    char range[64];
    std::snprintf(range, sizeof range, "%" PRIx64 "-%" PRIx64, m.start, m.end);
    const std::string proc = "/proc/" + std::to_string(s.pid);
    UniqueFd fd(::open((proc + "/map_files/" + range).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) fd.reset(::open((proc + "/root" + m.path).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) fd.reset(::open(m.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) continue;  // unreadable files cannot be decoded; a missing map would be reported below
    const auto& overrides = s.options.mipmap_files;
    auto override_it = overrides.find(m.path);
    if (override_it == overrides.end()) override_it = overrides.find(file_name(m.path));
    const bool own_map = override_it == overrides.end();
    ElfInfo info;
    try {
      info = read_elf_info(fd.get(), m.path, own_map);
    } catch (const MipError&) {
      continue;  // not ELF (fonts, locale archives, ...)
    }
    fd.reset();
    if (!info.has_raw) continue;
    try {
      LiveModule lm;
      lm.path = m.path;
      lm.build_id = info.build_id;
      lm.raw_address = info.raw_address;
      lm.raw_size = info.raw_size;
      if (!own_map) {
        lm.map = load_map(override_it->second);
      } else if (info.has_map) {
        lm.map = parse_map(info.map_bytes);
        lm.map.source = m.path;
      } else {
        throw MipError(ErrorCode::kNoSection, m.path + " has " + kRawSectionName + " but no " +
                                                  kMapSectionName + " section; give its .mipmap file");
      }
      lm.map.raw_section_address_known = true;
      lm.map.raw_section_address = info.raw_address;
      lm.map.raw_section_size = info.raw_size;
      bool found = false;
      for (const MapsEntry& other : *maps) {
        if (other.dev_major == m.dev_major && other.dev_minor == m.dev_minor && other.inode == m.inode &&
            other.path == m.path && load_bias_for(info.loads, other.start, other.offset, &lm.bias)) {
          found = true;
          break;
        }
      }
      if (!found) {
        throw MipError(ErrorCode::kBadHeader,
                       m.path + ": no mapping matches a PT_LOAD segment; load bias unknown");
      }
      if (s.options.demangle) {
        lm.demangled.reserve(lm.map.entries.size());
        for (const MapEntry& e : lm.map.entries) lm.demangled.push_back(hpd::demangle(e.name));
      }
      s.modules.push_back(std::move(lm));
    } catch (const MipError& e) {
      s.errors.push_back({m.path, e.what(), e.code()});
    }
  }
  return s.modules.size();
}

Snapshot LiveReader::snapshot() {
  State& s = *state_;
  if (!s.discovered) discover();
  Snapshot snap;
  snap.pid = s.pid;
  snap.time_ns = monotonic_ns();
  snap.errors = s.errors;
  snap.modules.reserve(s.modules.size());
  for (LiveModule& lm : s.modules) {
    lm.buffer.resize(lm.raw_size);
    const uint64_t runtime = lm.bias + lm.raw_address;
    iovec local{lm.buffer.data(), lm.buffer.size()};
    iovec remote{reinterpret_cast<void*>(runtime), lm.buffer.size()};
    const ssize_t n = process_vm_readv(s.pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      const int err = errno;
      if (err == ESRCH) throw_gone(s.pid, "while reading " + lm.path);
      if (err == EPERM) {
        throw MipError(ErrorCode::kPermission,
                       "cannot read the memory of process " + std::to_string(s.pid) +
                           ": permission denied; run as root or grant CAP_SYS_PTRACE");
      }
      // EFAULT: the module was unmapped (dlclose) since discovery; the others may still be readable.
      snap.errors.push_back(
          {lm.path,
           "cannot read " + std::string(kRawSectionName) + " of " + lm.path + ": " + std::strerror(err),
           ErrorCode::kIo});
      continue;
    }
    try {
      Module m = decode_records(std::span<const uint8_t>(lm.buffer.data(), static_cast<size_t>(n)), lm.map);
      m.path = lm.path;
      m.build_id = lm.build_id;
      m.load_bias = lm.bias;
      for (size_t i = 0; i < m.functions.size(); i++) {
        Function& f = m.functions[i];
        f.runtime_address = runtime + static_cast<uint64_t>(f.section_offset);
        if (i < lm.demangled.size()) f.demangled = lm.demangled[i];
      }
      snap.modules.push_back(std::move(m));
    } catch (const MipError& e) {
      snap.errors.push_back({lm.path, lm.path + ": " + e.what(), e.code()});
    }
  }
  snap.read_ns = monotonic_ns() - snap.time_ns;
  return snap;
}

Snapshot snapshot_process(int32_t pid, const LiveOptions& options) {
  LiveReader reader(pid, options);
  reader.discover();
  return reader.snapshot();
}

bool process_has_mip(int32_t pid) {
  try {
    LiveReader reader(pid, {});
    return reader.discover() > 0;
  } catch (const MipError&) {
    return false;
  }
}

}  // namespace hpd::mip
