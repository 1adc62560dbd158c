// UnwindCache: the directory of compiled CFI tables (hpd/collect/unwind_cache.h), one file per build-id
// (BUILDID.cfi, hpd/unwind/cfi_table_file.h), written to a temporary file and renamed into place, its
// total size bounded by removing the least recently used files (a hit refreshes the file's mtime).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hpd/collect/unwind_cache.h"
#include "hpd/unwind/cfi_table.h"
#include "hpd/unwind/cfi_table_file.h"

namespace hpd {

class UnwindCache {
 public:
  explicit UnwindCache(UnwindCacheSettings settings);

  // What the module with `build_id` would be compiled from now: the first of `candidates` that can be
  // stat'ed, and its separate debug file under `debug_root` (found by build-id) when it has one. False
  // when no candidate exists or the build-id is not a plain hex string (nothing is cached for it).
  static bool source_of(const std::vector<std::string>& candidates, const std::string& build_id,
                        const std::string& debug_root, CfiTableSource* source, std::string* path);
  // The same for one file.
  static bool source_of_file(const std::string& path, const std::string& build_id,
                             const std::string& debug_root, CfiTableSource* source);

  // The cached table compiled from `source`, or null: none cached, or a file that is refused
  // (truncated, damaged, another format version, compiled from another file), which is then removed
  // so that the table is compiled and stored again; `*refused` (when given) then says "FILE: why".
  std::shared_ptr<const CfiTable> load(const CfiTableSource& source, std::string* refused = nullptr);
  // Writes the table (compiled from `source`); a failure is said once through the settings' warn and
  // the recording goes on. True when the file was written.
  bool store(const CfiTable& table, const CfiTableSource& source);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t refused = 0;  // files found but not trusted (then removed and compiled again)
    uint64_t stored = 0;
    uint64_t store_failures = 0;
    uint64_t evicted = 0;
    std::string last_refusal;  // "FILE: why"
    std::string problem;       // why tables could not be stored, once it happened
  };
  Stats stats() const;
  const std::string& directory() const { return settings_.directory; }
  // Bytes of cache files in the directory now (a scan).
  uint64_t disk_bytes() const;

 private:
  int open_directory(bool create);
  void fail_store(const std::string& what, int error);
  void evict_locked(int dir_fd);

  UnwindCacheSettings settings_;
  mutable std::mutex mutex_;
  Stats stats_;
  bool warned_ = false;
  int64_t no_store_until_ns_ = 0;  // after a failure to write: not before this (monotonic)
  int64_t total_bytes_ = -1;       // estimated size of the files; -1 until scanned
  uint64_t temp_counter_ = 0;
};

// The cache configure_unwind_cache set (null: none), shared with the recordings that use it.
std::shared_ptr<UnwindCache> current_unwind_cache();

}  // namespace hpd
