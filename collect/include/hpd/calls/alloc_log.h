// hpd's side of the allocation sampling of its preloaded runtime (`hpctl record --alloc -- CMD`): the
// log file the runtime appends sampled allocations and their frees to (alloc_abi.h), made before the
// command starts and read into the RawProfile when the recording ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "hpd/model/raw_profile.h"

namespace hpd::calls {

class AllocLog {
 public:
  // Makes the log under /dev/shm (0600, removed on destruction) for a sampling mean of `mean_bytes`.
  // Throws CallCountError when it cannot be made.
  explicit AllocLog(uint64_t mean_bytes);
  ~AllocLog();
  AllocLog(const AllocLog&) = delete;
  AllocLog& operator=(const AllocLog&) = delete;

  // "NAME=VALUE" entries for the launched command: LD_PRELOAD (the runtime first, then what was
  // preloaded before) and the log's path.
  [[nodiscard]] std::vector<std::string> environment(const std::string& runtime) const;
  [[nodiscard]] const std::string& path() const { return path_; }

  // Appends the sampled allocations to profile.allocations (their stacks interned into
  // profile.stacks), matches the frees, and fills profile.alloc. Returns messages for the user (what
  // was lost, a runtime that never started).
  std::vector<std::string> read(RawProfile& profile) const;

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t mean_bytes_;
};

}  // namespace hpd::calls
