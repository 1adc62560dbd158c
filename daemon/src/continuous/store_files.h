// File-system pieces of the chunk store shared by the profiler and the store functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "hpd/base/unique_fd.h"

namespace hpd::continuous {

inline constexpr const char* kTmpSuffix = ".tmp";
// A salvaged chunk is written here first, so that a crash while salvaging leaves the source intact.
inline constexpr const char* kSalvageSuffix = ".salvage.tmp";
inline constexpr const char* kLockName = ".hpd-continuous.lock";
// The cursor files of the push to OTLP endpoints (chunk_pusher.h), and their temporaries.
inline constexpr const char* kPushCursorPrefix = ".hpd-push-";

// An exclusive flock on DIR/.hpd-continuous.lock: one profiler per directory, since a second one
// would take the first one's chunk in progress for a crashed run's leftover.
class DirectoryLock {
 public:
  // Throws std::runtime_error when the lock is held elsewhere or cannot be created.
  explicit DirectoryLock(const std::filesystem::path& dir);
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  UniqueFd fd_;  // closing it releases the flock
};

// fsync of the directory itself, so that a rename or unlink in it survives a power loss.
void fsync_directory(const std::filesystem::path& dir);

// Sets a file's modification time (the end of a salvaged chunk, which selects it for a window).
void set_modification_time(const std::filesystem::path& path, uint64_t unix_ns);

// rename(from, to) then fsync of their directory. Throws std::runtime_error.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace hpd::continuous
