// The chunk directory: file names, scanning, crash recovery of .tmp files, retention by age and size.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "hpd/capture/capture.h"
#include "hpd/collect/unwind_cache.h"
#include "hpd/continuous/continuous.h"
#include "store_files.h"

namespace hpd::continuous {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "chunk-";
constexpr std::string_view kSuffix = ".hpr";
// "chunk-" "20250314T092653.589Z" ".hpr"
constexpr size_t kStampLength = 20;

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int to_int(std::string_view s) {
  int v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

enum class NameKind { kNotOurs, kChunk, kTmp, kSalvageTmp };

NameKind classify(std::string_view name, uint64_t* start_unix_ns) {
  NameKind kind = NameKind::kChunk;
  if (ends_with(name, kSalvageSuffix)) {
    kind = NameKind::kSalvageTmp;
    name.remove_suffix(std::strlen(kSalvageSuffix));
  } else if (ends_with(name, kTmpSuffix)) {
    kind = NameKind::kTmp;
    name.remove_suffix(std::strlen(kTmpSuffix));
  }
  if (name.size() != kPrefix.size() + kStampLength + kSuffix.size() ||
      name.substr(0, kPrefix.size()) != kPrefix || !ends_with(name, kSuffix))
    return NameKind::kNotOurs;
  const std::string_view s = name.substr(kPrefix.size(), kStampLength);
  // YYYYMMDD T HHMMSS . mmm Z
  if (!all_digits(s.substr(0, 8)) || s[8] != 'T' || !all_digits(s.substr(9, 6)) || s[15] != '.' ||
      !all_digits(s.substr(16, 3)) || s[19] != 'Z')
    return NameKind::kNotOurs;
  std::tm tm{};
  tm.tm_year = to_int(s.substr(0, 4)) - 1900;
  tm.tm_mon = to_int(s.substr(4, 2)) - 1;
  tm.tm_mday = to_int(s.substr(6, 2));
  tm.tm_hour = to_int(s.substr(9, 2));
  tm.tm_min = to_int(s.substr(11, 2));
  tm.tm_sec = to_int(s.substr(13, 2));
  if (tm.tm_year < 70 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60)
    return NameKind::kNotOurs;
  const time_t seconds = timegm(&tm);
  if (seconds < 0) return NameKind::kNotOurs;
  if (start_unix_ns != nullptr)
    *start_unix_ns =
        static_cast<uint64_t>(seconds) * 1'000'000'000ULL + to_int(s.substr(16, 3)) * 1'000'000ULL;
  return kind;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

void add_note(std::vector<std::string>* notes, std::string note) {
  if (notes != nullptr) notes->push_back(std::move(note));
}

}  // namespace

// ---- store_files.h ----

DirectoryLock::DirectoryLock(const fs::path& dir) {
  const fs::path path = dir / kLockName;
  fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd_) throw std::runtime_error("cannot create " + path.string() + ": " + errno_text(errno));
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    fd_.reset();
    if (err == EWOULDBLOCK)
      throw std::runtime_error("another continuous profiler is writing into " + dir.string() + " (it holds " +
                               path.string() + ")");
    throw std::runtime_error("cannot lock " + path.string() + ": " + errno_text(err));
  }
}

void fsync_directory(const fs::path& dir) {
  const UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw std::runtime_error("cannot open " + dir.string() + ": " + errno_text(errno));
  const int rc = ::fsync(fd.get());
  const int err = errno;
  if (rc != 0) throw std::runtime_error("fsync of " + dir.string() + " failed: " + errno_text(err));
}

void set_modification_time(const fs::path& path, uint64_t unix_ns) {
  struct timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;
  times[1].tv_sec = static_cast<time_t>(unix_ns / 1'000'000'000ULL);
  times[1].tv_nsec = static_cast<long>(unix_ns % 1'000'000'000ULL);
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);  // best effort: only window selection uses it
}

void rename_durably(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw std::runtime_error("cannot rename " + from.string() + " to " + to.string() + ": " +
                             errno_text(errno));
  fsync_directory(to.parent_path().empty() ? fs::path(".") : to.parent_path());
}

// ---- continuous.h ----

std::string chunk_file_name(uint64_t start_unix_ns) {
  const time_t seconds = static_cast<time_t>(start_unix_ns / 1'000'000'000ULL);
  const unsigned millis = static_cast<unsigned>(start_unix_ns % 1'000'000'000ULL / 1'000'000ULL);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char stamp[40];
  std::snprintf(stamp, sizeof stamp, "%04d%02d%02dT%02d%02d%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return std::string(kPrefix) + stamp + std::string(kSuffix);
}

std::optional<uint64_t> parse_chunk_file_name(std::string_view name) {
  uint64_t start = 0;
  const NameKind kind = classify(name, &start);
  if (kind == NameKind::kChunk || kind == NameKind::kTmp) return start;
  return std::nullopt;
}

StoreScan scan_store(const fs::path& dir) {
  StoreScan scan;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory)
      throw std::runtime_error(dir.string() + " does not exist; is continuous mode on in /etc/hpd/hpd.conf?");
    if (ec == std::errc::permission_denied)
      throw std::runtime_error("cannot read " + dir.string() +
                               ": permission denied; reading the continuous profile needs read and search "
                               "permission on the directory and its files (root, or the directory's group)");
    throw std::runtime_error("cannot read " + dir.string() + ": " + ec.message());
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) throw std::runtime_error("cannot read " + dir.string() + ": " + ec.message());
    const std::string name = it->path().filename().string();
    // hpd's own files beside the chunks: the lock, the push cursors, and the unwind-table cache that
    // shares the state directory (daemon/src/service/server.cpp).
    if (name == kLockName || name.rfind(kPushCursorPrefix, 0) == 0 || name == kHpdUnwindCacheDirectoryName)
      continue;
    uint64_t start = 0;
    const NameKind kind = classify(name, &start);
    struct stat st {};
    const bool regular = ::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode);
    if (kind == NameKind::kNotOurs || !regular) {
      scan.notes.push_back("ignoring " + it->path().string() + ": not a chunk file of hpd");
      continue;
    }
    if (kind != NameKind::kChunk) {
      scan.temporaries.push_back(it->path());
      continue;
    }
    ChunkFile chunk;
    chunk.path = it->path();
    chunk.start_unix_ns = start;
    const uint64_t mtime = static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ULL +
                           static_cast<uint64_t>(st.st_mtim.tv_nsec);
    chunk.end_unix_ns = std::max(mtime, start);
    chunk.bytes = static_cast<uint64_t>(st.st_size);
    scan.chunks.push_back(std::move(chunk));
  }
  std::sort(scan.chunks.begin(), scan.chunks.end(), [](const ChunkFile& a, const ChunkFile& b) {
    return a.start_unix_ns != b.start_unix_ns ? a.start_unix_ns < b.start_unix_ns : a.path < b.path;
  });
  std::sort(scan.temporaries.begin(), scan.temporaries.end());
  std::sort(scan.notes.begin(), scan.notes.end());
  return scan;
}

std::vector<fs::path> apply_retention(const fs::path& dir, const RetentionLimits& limits,
                                      uint64_t now_unix_ns, std::vector<std::string>* notes) {
  StoreScan scan = scan_store(dir);
  std::vector<fs::path> removed;
  auto remove = [&](const ChunkFile& c) {
    std::error_code ec;
    if (fs::remove(c.path, ec)) {
      removed.push_back(c.path);
      return true;
    }
    add_note(notes, "cannot remove expired chunk " + c.path.string() + ": " + ec.message());
    return false;
  };
  std::vector<ChunkFile> kept;
  const uint64_t max_age_ns = limits.max_age_s * 1'000'000'000ULL;
  for (const ChunkFile& c : scan.chunks) {
    if (limits.max_age_s != 0 && c.end_unix_ns + max_age_ns < now_unix_ns && remove(c)) continue;
    kept.push_back(c);
  }
  if (limits.max_bytes != 0) {
    uint64_t total = 0;
    for (const ChunkFile& c : kept) total += c.bytes;
    for (const ChunkFile& c : kept) {  // oldest first
      if (total <= limits.max_bytes) break;
      if (remove(c)) total -= c.bytes;
    }
  }
  if (!removed.empty()) fsync_directory(dir);
  return removed;
}

size_t recover_temporaries(const fs::path& dir, std::vector<std::string>* notes) {
  const StoreScan scan = scan_store(dir);
  size_t salvaged = 0;
  bool changed = false;
  auto remove = [&](const fs::path& path, const std::string& why) {
    std::error_code ec;
    fs::remove(path, ec);
    changed = true;
    add_note(notes, "removed " + path.string() + ": " + why);
  };
  for (const fs::path& tmp : scan.temporaries) {
    const std::string name = tmp.filename().string();
    if (classify(name, nullptr) == NameKind::kSalvageTmp) {
      remove(tmp, "an interrupted salvage (its source is salvaged again)");
      continue;
    }
    const fs::path final_path = dir / name.substr(0, name.size() - std::strlen(kTmpSuffix));
    std::error_code ec;
    if (fs::exists(final_path, ec)) {
      remove(tmp, "its chunk was already finished");
      continue;
    }
    CaptureContents contents;
    try {
      contents = read_capture_file(tmp.string());
    } catch (const std::exception& e) {
      remove(tmp, std::string("unreadable chunk of a crashed run (") + e.what() + ")");
      continue;
    }
    RawProfile& profile = contents.profile;
    if (profile.samples.empty()) {
      remove(tmp, "a crashed run's chunk without samples");
      continue;
    }
    // The end time arrives with the last flush; a crashed run never wrote it.
    uint64_t end = profile.info.end_mono_ns;
    for (const RawSample& s : profile.samples) end = std::max(end, s.time_ns);
    profile.info.end_mono_ns = end;
    try {
      const fs::path staging = dir / (final_path.filename().string() + kSalvageSuffix);
      CaptureWriterOptions options;
      options.writer = "hpd continuous (salvaged after a crash)";
      options.file_mode = 0640;  // as every chunk: it holds every process's command line
      write_capture_file(profile, staging.string(), options);
      rename_durably(staging, final_path);
    } catch (const std::exception& e) {
      add_note(notes, "cannot salvage " + tmp.string() + ": " + e.what());
      continue;
    }
    fs::remove(tmp, ec);
    changed = true;
    ++salvaged;
    uint64_t start_unix = profile.info.start_unix_ns;
    if (start_unix == 0) start_unix = parse_chunk_file_name(name).value_or(0);
    if (start_unix != 0 && end >= profile.info.start_mono_ns)
      set_modification_time(final_path, start_unix + (end - profile.info.start_mono_ns));
    add_note(notes, "salvaged " + final_path.filename().string() + " from a crashed run: " +
                        std::to_string(profile.samples.size()) + " samples up to its last complete block");
  }
  if (changed) fsync_directory(dir);
  return salvaged;
}

}  // namespace hpd::continuous
