// hpd's side of the allocation sampling of its preloaded runtime (`hpctl record --alloc -- CMD`): the
// log file the runtime appends sampled allocations and their frees to (alloc_abi.h), made before the
// command starts and read into the RawProfile when the recording ends.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "hpd/calls/shared_file.h"
#include "hpd/model/raw_profile.h"

namespace hpd::calls {

// How much of a log AllocLog::read() keeps at most.
struct AllocLogLimits {
  uint64_t allocations = UINT64_MAX;  // sampled allocations kept (each a RawAllocation and a stack)
};

class AllocLog {
 public:
  // Makes the log under /dev/shm (a SharedFile: 0600, removed on destruction or when this process
  // dies) for a sampling mean of `mean_bytes`.
  // Throws CallCountError when it cannot be made.
  explicit AllocLog(uint64_t mean_bytes);
  // Adopts a log made by someone else (hpctl, for a command it starts and hpd records), from its
  // descriptor only (no path is ever opened). Every byte of it is the client's: throws CallCountError,
  // saying why, unless it is a regular file on tmpfs (whose reads cannot block) of the log's size whose
  // header holds this layout with a sampling mean within kMinMean..kMaxMean.
  explicit AllocLog(UniqueFd handed_over);
  ~AllocLog();
  AllocLog(const AllocLog&) = delete;
  AllocLog& operator=(const AllocLog&) = delete;

  // "NAME=VALUE" entries for the launched command: LD_PRELOAD (the runtime first, then what was
  // preloaded before) and the log's path.
  [[nodiscard]] std::vector<std::string> environment(const std::string& runtime) const;
  [[nodiscard]] const std::string& path() const { return file_.path(); }
  // The log's descriptor (to hand over to hpd).
  [[nodiscard]] int fd() const { return file_.fd(); }
  [[nodiscard]] uint64_t mean_bytes() const { return mean_bytes_; }

  // The sampling means a handed-over log may ask for (--alloc-mean's bounds).
  static constexpr uint64_t kMinMean = 1;
  static constexpr uint64_t kMaxMean = uint64_t{1} << 40;
  // For a log a client hands over: one million sampled allocations (about 60 MiB of hpd's memory
  // with their stacks' share); the rest is counted as dropped.
  static constexpr AllocLogLimits kClientLimits{1u << 20};

  // Appends the sampled allocations to profile.allocations (their stacks interned into
  // profile.stacks), matches the frees, and fills profile.alloc. Returns messages for the user (what
  // was lost, a runtime that never started). The log is read with pread() in bounded chunks (a log
  // truncated meanwhile reads short, never faults), every record checked against the layout; a
  // record of a process not in `allowed_pids` (when given) is ignored, and at most `limits` kept.
  std::vector<std::string> read(RawProfile& profile, const std::set<int32_t>* allowed_pids = nullptr,
                                const AllocLogLimits& limits = AllocLogLimits{}) const;

 private:
  uint64_t mean_bytes_;  // before file_: the header written at its making holds it
  SharedFile file_;
};

}  // namespace hpd::calls
