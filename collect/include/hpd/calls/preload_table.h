// hpd's side of the in-process call counter (libhpdcalls.so): finding the runtime, deciding whether a
// command can use it, making the shared table it counts into, and reading the table back.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "hpd/calls/call_stats.h"
#include "hpd/calls/shared_file.h"
#include "hpd/model/raw_profile.h"

namespace hpd::calls {

// The runtime library: $HPD_CALLS_RUNTIME when set, else libhpdcalls.so next to the running binary
// (a build tree), in ../lib/hpd or ../lib/<multiarch>/hpd beside it (an install), in the
// configured install directory, or in the build tree it was built in. Empty when none exists.
std::string find_preload_runtime();

// Why the runtime cannot count `executable`'s calls, or "" when it can: a static executable (no
// dynamic loader to preload with), or one that defines mcount/__fentry__ itself.
std::string preload_unusable_reason(const std::string& executable);

// How much of a table PreloadTable::read() keeps at most.
struct PreloadTableLimits {
  uint64_t edges = UINT64_MAX;      // distinct (process, caller, callee)
  uint64_t functions = UINT64_MAX;  // distinct timed (process, function)
  uint64_t buckets = UINT64_MAX;    // latency histogram buckets in use, over all functions
};

// The table: a sparse file under /dev/shm that the runtime maps shared (a SharedFile). Made by
// whoever starts the command (hpctl, or the recorder for a command it launches), or handed over as a
// descriptor (hpd, recording through the daemon a command that hpctl started): then every byte of it
// is the client's and is treated as untrusted (see read()).
class PreloadTable {
 public:
  // Makes the file (removed on destruction, or when this process dies). Throws CallCountError when it
  // cannot be made.
  PreloadTable();
  // Adopts a table made by someone else, from its descriptor only (no path is ever opened). Throws
  // CallCountError, saying why, unless it is a regular file on tmpfs (a file system that cannot block
  // a read) of the table's size whose header holds this layout.
  explicit PreloadTable(UniqueFd handed_over);
  ~PreloadTable();
  PreloadTable(const PreloadTable&) = delete;
  PreloadTable& operator=(const PreloadTable&) = delete;

  [[nodiscard]] const std::string& path() const;
  // The table's descriptor (to hand over to hpd).
  [[nodiscard]] int fd() const;
  // "NAME=VALUE" entries for the launched command: LD_PRELOAD (the runtime first, then what the
  // environment already preloads) and the table's path.
  [[nodiscard]] std::vector<std::string> environment(const std::string& runtime) const;

  using Limits = PreloadTableLimits;
  // For a table a client hands over: as many edges as the uprobes' edge map holds (bpf/calls.bpf.c),
  // as many timed functions, 16 histogram buckets each on average (a few MiB of hpd's memory).
  static constexpr Limits kClientLimits{65536, 65536, 65536 * 16};

  // Reads the table as it is now (the programs may still run): adds every counted edge to
  // profile.call_edges and the latency of every timed function to profile.call_latency, summed over
  // the threads of each process; fills the runtime's part of `stats`. False when nothing of the table
  // could be used (unreadable, or its header overwritten); stats.messages says why.
  // The programs that count into the table can write any byte of it, so it is read with pread() into
  // hpd's own memory (a truncated file reads short, never faults), only within the layout hpd was
  // built with (never at a size or offset the file gives), values clamped to what a runtime can
  // write, at most `limits` kept; a thread slot of a process not in `allowed_pids` (when given) is
  // ignored. What was ignored is said in stats.messages.
  bool read(RawProfile& profile, CallCountStats& stats, const std::set<int32_t>* allowed_pids = nullptr,
            const Limits& limits = PreloadTableLimits{}) const;

 private:
  PreloadTable(uint64_t start_mono_ns, uint64_t start_tsc);

  uint64_t start_tsc_ = 0;
  uint64_t start_mono_ns_ = 0;
  SharedFile file_;
};

}  // namespace hpd::calls
