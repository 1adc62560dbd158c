// Build-ids of files mapped into live processes (the parsing itself: hpd/base/elf.h).
#include "proc/build_id.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "hpd/base/elf.h"
#include "hpd/base/proc_maps.h"
#include "hpd/base/process.h"
#include "hpd/base/unique_fd.h"

namespace hpd {

std::string kernel_build_id() {
  UniqueFd fd(::open("/sys/kernel/notes", O_RDONLY | O_CLOEXEC));
  if (!fd) return "";
  uint8_t buf[4096];
  size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf + got, sizeof buf - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
    if (got == sizeof buf) break;
  }
  return build_id_from_raw_notes({buf, got});
}

std::vector<uint8_t> read_process_memory(int32_t pid, uint64_t start, uint64_t end, std::string* error) {
  // The vDSO is two to four pages; a range far larger is not one.
  constexpr uint64_t kMaxBytes = 1u << 20;
  std::vector<uint8_t> bytes;
  const std::string path = "/proc/" + std::to_string(pid) + "/mem";
  if (end <= start || end - start > kMaxBytes) {
    if (error != nullptr) *error = path + ": range of " + std::to_string(end - start) + " bytes not read";
    return bytes;
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (error != nullptr) *error = path + ": " + std::strerror(errno);
    return bytes;
  }
  bytes.resize(end - start);
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n =
        ::pread(fd.get(), bytes.data() + got, bytes.size() - got, static_cast<off_t>(start + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (error != nullptr)
        *error = path + ": " + (n < 0 ? std::string(std::strerror(errno)) : "the process exited") +
                 " (read " + std::to_string(got) + " of " + std::to_string(bytes.size()) + " bytes)";
      bytes.clear();
      return bytes;
    }
    got += static_cast<size_t>(n);
  }
  return bytes;
}

namespace {
FileIdentity identity_of(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
          static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}
}  // namespace

MappedModule BuildIdReader::answer(const std::pair<const FileIdentity, Known>& known, bool hold) {
  MappedModule out;
  out.build_id = known.second.build_id;
  out.identity = known.first;
  if (hold) out.file = known.second.file.lock();
  return out;
}

MappedModule BuildIdReader::read_cached(UniqueFd fd, bool hold) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  const FileIdentity identity = identity_of(st);
  auto it = by_inode_.find(identity);
  if (it == by_inode_.end()) {
    if (by_inode_.size() >= kMaxKnown)
      std::erase_if(by_inode_, [](const auto& k) { return k.second.file.expired(); });
    it = by_inode_.emplace(identity, Known{read_elf_build_id(fd.get()), {}}).first;
  }
  MappedModule out = answer(*it, hold);
  if (!hold || out.file) return out;
  // Descriptors are numbered lowest first, so this one's number is about how many are open: a held
  // file must never take one the recording itself needs (perf events, rings). Near the limit the
  // file is not held, and is looked up by path at the end as before.
  rlimit limit{};
  const bool room = ::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ||
                    static_cast<rlim_t>(fd.get()) + kSpareDescriptors < limit.rlim_cur;
  if (room) {
    out.file = std::make_shared<const HeldFile>(fd.release());
    it->second.file = out.file;
  }
  return out;
}

const std::vector<uint8_t>& own_vdso() {
  static const std::vector<uint8_t> image = [] {
    std::vector<uint8_t> bytes;
    for (const MapsEntry& e : read_proc_maps(::getpid())) {
      if (e.path == "[vdso]" && e.end > e.start && e.end - e.start <= (1u << 20)) {
        bytes.assign(reinterpret_cast<const uint8_t*>(e.start), reinterpret_cast<const uint8_t*>(e.end));
        break;
      }
    }
    return bytes;
  }();
  return image;
}

MappedModule BuildIdReader::for_mapping(int32_t pid, uint64_t start, uint64_t end, const std::string& path) {
  MappedModule out;
  // Most mapping records of a system-wide recording are read after their process exited: then no
  // path under /proc/PID is tried (each a path walk that fails).
  const bool gone = no_such_process(pid);
  if (path == "[vdso]") {
    if (gone)
      out.error = "process " + std::to_string(pid) + " exited before its [vdso] could be read";
    else
      out.image = read_process_memory(pid, start, end, &out.error);
    if (out.image.empty() && !own_vdso().empty() && own_vdso().size() == end - start) {
      // The process is gone (or exec'ing) before its vDSO could be read. The kernel maps one image
      // per ABI into every process, and a mapping of the size of hpd's own (x86-64) is that one.
      out.image = own_vdso();
      out.error.clear();
    }
    if (out.image.empty()) return out;
    if (out.image.size() < SELFMAG || std::memcmp(out.image.data(), ELFMAG, SELFMAG) != 0) {
      out.error = "the [vdso] of process " + std::to_string(pid) + " is not an ELF image";
      out.image.clear();
      return out;
    }
    // Nearly every process maps hpd's own image: its build-id is parsed once.
    static const std::string own_id = build_id_of_image(own_vdso());
    out.build_id = out.image == own_vdso() ? own_id : build_id_of_image(out.image);
    return out;
  }
  char name[96];
  std::snprintf(name, sizeof name, "/proc/%d/map_files/%llx-%llx", pid,
                static_cast<unsigned long long>(start), static_cast<unsigned long long>(end));
  if (!gone)
    if (std::optional<MappedModule> found = reach(name, true)) return std::move(*found);
  if (path.empty() || path.front() != '/') return out;
  if (!gone)
    if (std::optional<MappedModule> found = reach("/proc/" + std::to_string(pid) + "/root" + path, true))
      return std::move(*found);
  // The process is gone (or its root cannot be reached): this process's view, not held.
  if (std::optional<MappedModule> found = reach(path, false)) return std::move(*found);
  return out;
}

std::optional<MappedModule> BuildIdReader::reach(const std::string& name, bool hold) {
  // A file known already (its identity cached, and held if it is to be) needs no descriptor: one
  // stat, where an open, its fstat and its close were three system calls.
  struct stat st;
  if (::stat(name.c_str(), &st) != 0) return std::nullopt;
  if (S_ISREG(st.st_mode)) {
    const auto it = by_inode_.find(identity_of(st));
    if (it != by_inode_.end()) {
      MappedModule out = answer(*it, hold);
      if (!hold || out.file) return out;
    }
  }
  UniqueFd fd(::open(name.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  return read_cached(std::move(fd), hold);
}

}  // namespace hpd
