// The unwind-table cache on disk: the compact CFI tables the eBPF programs unwind with (cfi mode) are
// compiled once per binary, not once per recording, and kept in a directory as one file per build-id.
// A recording loads a module's table from there when it was compiled from the same file (build-id,
// size, modification time), else compiles it and stores it. The directory is the caller's choice: hpd
// keeps it under its state directory, hpctl's local recordings in the user's cache directory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace hpd {

inline constexpr uint64_t kDefaultUnwindCacheBytes = 256ull << 20;

// hpd's cache is this directory of its state directory (daemon/src/service/server.cpp), which it
// shares with the continuous profile's chunks by default: the chunk scan skips it by this name.
inline constexpr const char* kHpdUnwindCacheDirectoryName = "unwind-cache";

struct UnwindCacheSettings {
  std::string directory;  // created when missing; empty: no cache on disk
  // Bound on the files' total size: beyond it the least recently used tables are removed. 0: no cache.
  uint64_t max_bytes = kDefaultUnwindCacheBytes;
  // Said once when the directory cannot be created or written (read-only, full, not permitted):
  // recordings then go on without storing tables. Called from a recording's table worker thread.
  std::function<void(const std::string&)> warn;
};

// Sets the cache every later recording of this process uses (hpd at start and on reload, hpctl
// before recording). Recordings that run without it compile every table.
void configure_unwind_cache(const UnwindCacheSettings& settings);

// The directory in the user's cache: $XDG_CACHE_HOME/hpd when set (an absolute path), else
// ~/.cache/hpd. For root (hpctl under sudo) root's own home from the password database, never the
// invoking user's, so that no root-owned file lands in a user's home.
std::string user_unwind_cache_directory();

}  // namespace hpd
