// hpd's side of the in-process call counter (libhpdcalls.so): finding the runtime, deciding whether a
// command can use it, making the shared table it counts into, and reading the table back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpd/calls/call_stats.h"
#include "hpd/model/raw_profile.h"

namespace hpd::calls {

// The runtime library: $HPD_CALLS_RUNTIME when set, else libhpdcalls.so next to the running binary
// (a build tree), in ../lib/hpd or ../lib/<multiarch>/hpd beside it (an install), in the
// configured install directory, or in the build tree it was built in. Empty when none exists.
std::string find_preload_runtime();

// Why the runtime cannot count `executable`'s calls, or "" when it can: a static executable (no
// dynamic loader to preload with), or one that defines mcount/__fentry__ itself.
std::string preload_unusable_reason(const std::string& executable);

// The table: a sparse file under /dev/shm that the runtime maps shared; removed on destruction.
class PreloadTable {
 public:
  // Throws CallCountError when the file cannot be made.
  PreloadTable();
  ~PreloadTable();
  PreloadTable(const PreloadTable&) = delete;
  PreloadTable& operator=(const PreloadTable&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  // "NAME=VALUE" entries for the launched command: LD_PRELOAD (the runtime first, then what the
  // environment already preloads) and the table's path.
  [[nodiscard]] std::vector<std::string> environment(const std::string& runtime) const;

  // Reads the table as it is now (the programs may still run): adds every counted edge to
  // profile.call_edges and the latency of every timed function to profile.call_latency, summed over
  // the threads of each process; fills the runtime's part of `stats`.
  void read(RawProfile& profile, CallCountStats& stats) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  uint64_t size_ = 0;
  uint64_t start_tsc_ = 0;
  uint64_t start_mono_ns_ = 0;
};

}  // namespace hpd::calls
