// The unwind-table cache on disk (unwind_cache.h).
#include "unwind_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "hpd/base/elf.h"
#include "hpd/base/unique_fd.h"

namespace hpd {

namespace {

using fs_path = std::filesystem::path;

constexpr const char* kSuffix = ".cfi";
constexpr const char* kTempPrefix = ".tmp-";
// A table file larger than this is not read (the largest tables, of 100 MB programs, take ~12 MB).
constexpr uint64_t kMaxFileBytes = 1ull << 30;
// After a failure to write, storing is tried again after this long (a full disk may be cleaned up).
constexpr int64_t kRetryStoreNs = 300'000'000'000;
// Temporary files older than this were left by a recorder that died while writing.
constexpr int64_t kStaleTempNs = 600'000'000'000;
// Eviction removes files until the total is at most this fraction of the bound (not one per store).
constexpr double kEvictTo = 0.9;

int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t ns_of(const timespec& ts) {
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

bool plain_hex(const std::string& id) {
  if (id.empty() || id.size() > kCfiTableFileMaxBuildId) return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool read_all(int fd, std::vector<uint8_t>* out, size_t size) {
  out->resize(size);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out->data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  return true;
}

bool write_all(int fd, const std::vector<uint8_t>& bytes, int* error) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = n < 0 ? errno : ENOSPC;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

struct Entry {
  std::string name;
  int64_t mtime_ns;
  uint64_t bytes;
};

// The cache's files (and stale temporary files, which are removed) in the open directory.
std::vector<Entry> list_entries(int dir_fd, bool remove_stale_temps) {
  std::vector<Entry> out;
  UniqueFd fd(::dup(dir_fd));
  if (!fd) return out;
  DIR* dir = ::fdopendir(fd.get());
  if (dir == nullptr) return out;
  fd.release();  // the DIR owns it now
  ::rewinddir(dir);
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (name.rfind(kTempPrefix, 0) == 0) {
      if (remove_stale_temps && ns_of(now) - ns_of(st.st_mtim) > kStaleTempNs)
        ::unlinkat(dir_fd, name.c_str(), 0);
      continue;
    }
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, kSuffix) != 0) continue;
    out.push_back({name, ns_of(st.st_mtim), static_cast<uint64_t>(st.st_size)});
  }
  ::closedir(dir);
  return out;
}

std::mutex& current_mutex() {
  static std::mutex m;
  return m;
}
std::shared_ptr<UnwindCache>& current_slot() {
  static std::shared_ptr<UnwindCache> cache;
  return cache;
}

}  // namespace

UnwindCache::UnwindCache(UnwindCacheSettings settings) : settings_(std::move(settings)) {}

bool UnwindCache::source_of_file(const std::string& path, const std::string& build_id,
                                 const std::string& debug_root, CfiTableSource* source) {
  if (!plain_hex(build_id)) return false;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  CfiTableSource s;
  s.build_id = build_id;
  s.device = static_cast<uint64_t>(st.st_dev);
  s.inode = static_cast<uint64_t>(st.st_ino);
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ns = static_cast<uint64_t>(ns_of(st.st_mtim));
  // The separate debug file CfiModule looks for (its .debug_frame may add rows).
  if (!debug_root.empty() && build_id.size() >= 4) {
    const std::string debug = build_id_path(debug_root, build_id);
    struct stat ds {};
    if (::stat(debug.c_str(), &ds) == 0) {
      s.has_debug_file = true;
      s.debug_size = static_cast<uint64_t>(ds.st_size);
      s.debug_mtime_ns = static_cast<uint64_t>(ns_of(ds.st_mtim));
    }
  }
  *source = std::move(s);
  return true;
}

bool UnwindCache::source_of(const std::vector<std::string>& candidates, const std::string& build_id,
                            const std::string& debug_root, CfiTableSource* source, std::string* path) {
  for (const std::string& candidate : candidates) {
    if (source_of_file(candidate, build_id, debug_root, source)) {
      if (path != nullptr) *path = candidate;
      return true;
    }
  }
  return false;
}

int UnwindCache::open_directory(bool create) {
  const std::string& dir = settings_.directory;
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0 || !create || errno != ENOENT) return fd;
  // Its parents with the usual modes (~/.cache), itself private to its owner.
  for (size_t slash = dir.find('/', 1); slash != std::string::npos; slash = dir.find('/', slash + 1))
    ::mkdir(dir.substr(0, slash).c_str(), 0755);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return -1;
  return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

std::shared_ptr<const CfiTable> UnwindCache::load(const CfiTableSource& source, std::string* refused) {
  if (settings_.directory.empty() || settings_.max_bytes == 0 || !plain_hex(source.build_id)) return nullptr;
  const std::string name = source.build_id + kSuffix;
  UniqueFd dir(open_directory(false));
  std::vector<uint8_t> bytes;
  bool found = false;
  if (dir) {
    UniqueFd fd(::openat(dir.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    struct stat st {};
    if (fd && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode)) {
      found = true;
      if (static_cast<uint64_t>(st.st_size) <= kMaxFileBytes)
        read_all(fd.get(), &bytes, static_cast<size_t>(st.st_size));
    }
  }
  CfiTableFileRead read;
  if (found) read = read_cfi_table_file(bytes, source);
  std::lock_guard lock(mutex_);
  if (!found) {
    ++stats_.misses;
    return nullptr;
  }
  if (!read.table) {
    ++stats_.misses;
    ++stats_.refused;
    stats_.last_refusal = settings_.directory + "/" + name + ": " + read.refused;
    if (refused != nullptr) *refused = stats_.last_refusal;
    // Not trusted: gone, so that the table compiled instead takes its place.
    ::unlinkat(dir.get(), name.c_str(), 0);
    return nullptr;
  }
  ++stats_.hits;
  // Used now: the last to be evicted.
  const timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ::utimensat(dir.get(), name.c_str(), times, AT_SYMLINK_NOFOLLOW);
  return read.table;
}

void UnwindCache::fail_store(const std::string& what, int error) {
  ++stats_.store_failures;
  no_store_until_ns_ = mono_ns() + kRetryStoreNs;
  const std::string text = "the unwind-table cache " + settings_.directory + " " + what + " (" +
                           std::strerror(error) +
                           "): recording goes on without it; tables are compiled each time";
  if (stats_.problem.empty()) stats_.problem = text;
  if (!warned_) {
    warned_ = true;
    if (settings_.warn) settings_.warn(text);
  }
}

bool UnwindCache::store(const CfiTable& table, const CfiTableSource& source) {
  if (settings_.directory.empty() || settings_.max_bytes == 0 || !plain_hex(source.build_id)) return false;
  const std::vector<uint8_t> bytes = serialize_cfi_table(table, source);
  if (bytes.size() > settings_.max_bytes) return false;
  std::lock_guard lock(mutex_);
  if (no_store_until_ns_ != 0 && mono_ns() < no_store_until_ns_) return false;
  UniqueFd dir(open_directory(true));
  if (!dir) {
    fail_store("cannot be opened or created", errno);
    return false;
  }
  const std::string name = source.build_id + kSuffix;
  const std::string temp = std::string(kTempPrefix) + source.build_id + "." + std::to_string(::getpid()) +
                           "." + std::to_string(++temp_counter_);
  UniqueFd fd(::openat(dir.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) {
    fail_store("cannot be written", errno);
    return false;
  }
  int error = 0;
  // close() may be the first to report a failed write (NFS, a full disk): checked, as the write is.
  if (!write_all(fd.get(), bytes, &error) || (error = fd.close()) != 0) {
    ::unlinkat(dir.get(), temp.c_str(), 0);
    fail_store("cannot be written", error);
    return false;
  }
  if (::renameat(dir.get(), temp.c_str(), dir.get(), name.c_str()) != 0) {
    error = errno;
    ::unlinkat(dir.get(), temp.c_str(), 0);
    fail_store("cannot be written", error);
    return false;
  }
  ++stats_.stored;
  if (total_bytes_ < 0) {
    total_bytes_ = 0;
    for (const Entry& e : list_entries(dir.get(), true)) total_bytes_ += static_cast<int64_t>(e.bytes);
  } else {
    total_bytes_ += static_cast<int64_t>(bytes.size());
  }
  if (static_cast<uint64_t>(total_bytes_) > settings_.max_bytes) evict_locked(dir.get());
  return true;
}

void UnwindCache::evict_locked(int dir_fd) {
  // Other recorders share the directory: count again before removing anything.
  std::vector<Entry> entries = list_entries(dir_fd, true);
  uint64_t total = 0;
  for (const Entry& e : entries) total += e.bytes;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.mtime_ns < b.mtime_ns; });
  const auto target = static_cast<uint64_t>(static_cast<double>(settings_.max_bytes) * kEvictTo);
  for (const Entry& e : entries) {
    if (total <= target) break;
    if (::unlinkat(dir_fd, e.name.c_str(), 0) == 0) {
      total -= e.bytes;
      ++stats_.evicted;
    }
  }
  total_bytes_ = static_cast<int64_t>(total);
}

uint64_t UnwindCache::disk_bytes() const {
  UniqueFd dir(::open(settings_.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  uint64_t total = 0;
  if (dir) {
    for (const Entry& e : list_entries(dir.get(), false)) total += e.bytes;
  }
  return total;
}

UnwindCache::Stats UnwindCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::shared_ptr<UnwindCache> current_unwind_cache() {
  std::lock_guard lock(current_mutex());
  return current_slot();
}

void configure_unwind_cache(const UnwindCacheSettings& settings) {
  std::shared_ptr<UnwindCache> cache;
  if (!settings.directory.empty() && settings.max_bytes != 0) cache = std::make_shared<UnwindCache>(settings);
  std::lock_guard lock(current_mutex());
  current_slot() = std::move(cache);
}

std::string user_unwind_cache_directory() {
  const uid_t uid = ::geteuid();
  // Whether the path, or the nearest of its parents that exists (where it would be created), is ours.
  auto owned = [uid](const char* path) {
    for (fs_path p = path; !p.empty(); p = p.parent_path()) {
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0) return st.st_uid == uid;
      if (p == p.parent_path()) break;
    }
    return false;
  };
  // Under sudo the environment may still name the user's directories: root takes its own.
  if (const char* xdg = std::getenv("XDG_CACHE_HOME");
      xdg != nullptr && xdg[0] == '/' && (uid != 0 || owned(xdg)))
    return std::string(xdg) + "/hpd";
  std::string home;
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/' && (uid != 0 || owned(h))) home = h;
  if (home.empty()) {
    if (const passwd* pw = ::getpwuid(uid); pw != nullptr && pw->pw_dir != nullptr && pw->pw_dir[0] == '/')
      home = pw->pw_dir;
  }
  if (home.empty()) return "";
  return home + "/.cache/hpd";
}

}  // namespace hpd
