// The process side of the RawProfile builder: processes and threads with their names and
// lifetimes, and the mappings of each process through forks, execs and mmaps. One set of rules for
// both backends; system access (/proc, build-ids) only through the injected lookups, so tests can feed
// it synthetic events.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "events.h"
#include "hpd/base/proc_maps.h"
#include "hpd/model/raw_profile.h"
#include "proc/build_id.h"

namespace hpd {

// What the live process tells about a mapping of a file or of the vDSO (BuildIdReader::for_mapping):
// its build-id, the file held open, the vDSO's image.
using BuildIdLookup =
    std::function<MappedModule(int32_t pid, uint64_t start, uint64_t end, const std::string& path)>;

// How the builder reaches the system. Each may be empty (tests, or a backend without the need).
struct SystemLookups {
  // /proc/PID/maps; empty when the process is gone (or is a kernel thread). Given, it is read for a
  // process first seen without a fork, after an exec, and when a sample's address lies in no known
  // mapping (at most every maps_reread_interval_ns while reads find nothing).
  std::function<std::vector<MapsEntry>(int32_t pid)> read_maps;
  BuildIdLookup build_ids;
  // Fills a process's exe, cmdline and cgroup (and name when empty) from the system.
  std::function<void(RawProcess&)> describe;
};

struct TrackerConfig {
  uint64_t start_ns = 0;  // the recording's start: processes and threads that existed then start there
  // The least time between two reads of one process's maps when its samples hit unknown addresses.
  uint64_t maps_reread_interval_ns = 200'000'000;
};

class ProcessTracker {
 public:
  ProcessTracker(RawProfile& profile, TrackerConfig config, SystemLookups lookups);

  // A process that was described and whose maps were read when the recording began.
  void add_initial_process(int32_t pid, const std::vector<MapsEntry>& maps);
  // The executable entries of a maps file read at `time_ns` (0: mapped before the recording began).
  void add_maps(int32_t pid, const std::vector<MapsEntry>& maps, uint64_t time_ns);

  void on_mmap(const MmapEvent& e);
  void on_comm(const CommEvent& e);
  void on_exec_start(const ExecStartEvent& e);
  void on_exec(const ExecEvent& e);
  void on_fork(const ForkEvent& e);
  void on_exit(const ExitEvent& e);

  // The thread of a record (created, and its process, when first seen), renamed to `comm` if given.
  RawThread& thread_for(int32_t pid, int32_t tid, uint64_t time_ns, std::string_view comm = {});
  // Whether records of the process from `time_ns` on are no longer the client's (ExecEvent::unfollowed).
  [[nodiscard]] bool unfollowed(int32_t pid, uint64_t time_ns) const;
  // A sample of a process in an exec: ends the old image's mappings if it shows the new image running
  // (taken in user mode, or its user leaf in a mapping of the new image only).
  void note_sample(int32_t pid, uint64_t time_ns, bool user_mode, std::span<const uint64_t> user);
  // Whether a mapping covers `address`; if none does, delivers waiting mmap records and reads the
  // maps again (see SystemLookups::read_maps) before saying no.
  bool has_user_mapping(int32_t pid, uint64_t address, uint64_t time_ns);
  // Counts a process whose user frames can never be placed: it has no mapping at all (it exited, or
  // exec'd and exited, before its maps could be read). Once per process image.
  void note_unplaced(int32_t pid, std::span<const uint64_t> user, uint64_t time_ns);

  // Called when a sample's address lies in no known mapping, before /proc is read again, and before
  // an exec is handled: delivers the mmap records written so far. `lost`, when given, counts the
  // records the source lost: while it is 0, an exec's mappings are all in its records and its maps
  // are not read again at the exec (a sample they miss still has them read at once).
  void set_mmap_source(std::function<void()> drain, std::function<uint64_t()> lost = {}) {
    drain_mmaps_ = std::move(drain);
    mmaps_lost_ = std::move(lost);
  }

  // Forgets what it keeps for the processes and threads the profile dropped (RawProfile::forget_exited).
  void forget(std::span<const int32_t> pids, std::span<const int32_t> tids);

  [[nodiscard]] uint64_t processes_without_maps() const { return processes_without_maps_; }
  [[nodiscard]] uint64_t mmaps_recorded() const { return mmaps_recorded_; }
  [[nodiscard]] uint64_t mmaps_dropped() const { return mmaps_dropped_; }

  // About 10 MB of mmap records kept for processes not seen yet; more are dropped and counted.
  static constexpr size_t kMaxPendingMappings = 1u << 16;

 private:
  struct ProcessState {
    bool maps_read = false;
    bool counted_without_maps = false;
    bool has_mappings = false;  // seen with a mapping (they are never removed)
    uint64_t maps_read_at = 0;  // record time of the last read
    // An unknown address may read the maps again before maps_reread_interval_ns: after an exec
    // (ld.so maps the libraries after the exec record was read) and after a read that found what it
    // was looking for. Only reads that find nothing make the next one wait.
    bool reread_at_once = false;
    // The last mapping a user leaf hit, to skip the search for the next sample.
    uint64_t hit_start = 0, hit_end = 0;
    uint64_t exec_ns = 0;              // the last exec's start: mappings made before are the old image's
    bool exec_open = false;            // the old image's mappings have not ended yet
    uint64_t exec_ended_ns = 0;        // when the last exec ended the old image's mappings
    uint64_t last_exec_record_ns = 0;  // the time of the last ExecEvent
    bool forked = false;               // its fork was seen: start time and mappings come from it
  };
  struct PendingMapping {
    RawMapping mapping;
    std::string path;
    std::string build_id;
    std::optional<MappedModule> found;  // MmapEvent::found, when given
    bool own_vdso = false;              // found's image was hpd's own vDSO (own_vdso()), not kept
  };

  RawProcess& ensure_process(int32_t pid, uint64_t time_ns);
  RawThread& ensure_thread(int32_t pid, int32_t tid, uint64_t time_ns);
  void read_maps(int32_t pid, uint64_t time_ns, uint64_t mapping_time_ns);
  void apply_pending_mappings(int32_t pid);
  void add_mmap_mapping(int32_t pid, const RawMapping& mapping, std::string_view path,
                        std::string_view build_id, const MappedModule* found = nullptr);
  // Ends the old image's mappings (made up to the exec's start) at `ended_ns`.
  void close_exec_window(RawProcess& process, ProcessState& state, uint64_t ended_ns);
  // A thread's exit at `time_ns`: its end, and its process's (the leader's exit, or any later one).
  void end_thread(RawThread& thread, int32_t pid, int32_t tid, uint64_t time_ns);

  RawProfile& profile_;
  TrackerConfig config_;
  SystemLookups lookups_;
  std::function<void()> drain_mmaps_;
  std::function<uint64_t()> mmaps_lost_;
  std::unordered_map<int32_t, ProcessState> states_;
  // Threads created by a record before their fork record came: the fork gives their real start.
  // Records out of order. perf's per-CPU rings go through its time-ordering stage
  // (perf/record_ordering.h), which leaves out of order only the records it counts (delivered early at
  // its memory bound, or late); the eBPF ring is written in reservation order, and a fork is reserved
  // before the child can run. Kept for those counted perf records.
  std::unordered_set<int32_t> started_unseen_;
  // The other way round: a thread's exit read before its fork record (nothing to end yet), by tid,
  // with its time. The fork that creates the thread then ends it too. Bounded: kept per exit of a
  // thread never seen, which --all has thousands of. Needed as started_unseen_ is (perf's counted
  // records out of order).
  std::unordered_map<int32_t, uint64_t> exited_before_fork_;
  // Mappings of processes not in the profile yet. The eBPF backend needs it: its mmap watch has rings
  // of its own, drained apart from the BPF ring, and with --all most records are of processes never
  // sampled. perf (time-ordered, its child's fork first) only for its counted records out of order.
  std::unordered_map<int32_t, std::vector<PendingMapping>> pending_;
  size_t pending_count_ = 0;
  uint64_t processes_without_maps_ = 0;
  uint64_t mmaps_recorded_ = 0;
  uint64_t mmaps_dropped_ = 0;
};

// Marks every mapping the process had before an exec that began at `exec_ns` as ended at
// `ended_ns` (by default the exec's start).
void end_mappings_at_exec(RawProcess& process, uint64_t exec_ns, uint64_t ended_ns = 0);

// "[anon]" for anonymous executable memory ("//anon" in MMAP2 records, "" in maps files); the whole name
// of a special mapping whose name MMAP2 records cut short ("[uprobes-trampo").
std::string module_path_for(std::string_view path);

// Whether a mapping so named is of a file or the vDSO, which the live process can tell more of
// (BuildIdLookup): its build-id, the file, the vDSO's image.
bool names_mapped_file(std::string_view path);

// Adds `mapping` unless the process already has it: /proc/PID/maps and MMAP2 records often describe
// the same mapping. A mapping an exec ended does not count: the new image may map the same file at
// the same place again (ASLR off, or a non-PIE program executing itself). Neither does one made
// before `image_since_ns` (the start of the process's last exec), which the old image keeps until
// execve has finished. Returns whether it was added.
bool add_mapping_once(RawProcess& process, const RawMapping& mapping, uint64_t image_since_ns = 0);

// Adds an executable mapping of `path` (as a maps file or an MMAP2 record names it) to `process`,
// its module interned with `build_id`, or, when that is empty and the mapping is of a file, with the
// file's own from `build_ids` (when given). A new module also gets what `build_ids` found: the
// file held open, or the vDSO's image (then interned by the image's build-id). `found`, when given,
// is what `build_ids` would say, asked already. Returns whether the mapping was added (not a
// duplicate).
bool add_module_mapping(RawProfile& profile, RawProcess& process, RawMapping mapping, std::string_view path,
                        std::string build_id, const BuildIdLookup& build_ids, uint64_t image_since_ns = 0,
                        const MappedModule* found = nullptr);

}  // namespace hpd
