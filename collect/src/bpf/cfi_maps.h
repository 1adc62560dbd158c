// CfiMaps: keeps the cfi walk's two BPF maps current (bpf/cfi_walk.bpf.h). Module tables are compiled
// (hpd/unwind/cfi_table.h) on a worker thread, once per build-id for the life of the daemon, and
// copied into the row array (a table compiled before, by this or another recording, is loaded from the
// unwind-table cache on disk, hpd/collect/unwind_cache.h); each process's executable mappings, from
// /proc/PID/maps at attach and from the kernel's mmap records afterwards, are published with their module's
// rows and load bias. Until a module's table is in place its frames are walked by frame pointer, and samples
// say so. When the maps are full, the least recently used tables of modules no followed process maps are
// evicted; a module that still does not fit is walked by frame pointer and named in the summary, and its
// table is let go (asked for again when the module is mapped again and room may be made by then).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hpd/base/proc_maps.h"
#include "hpd/base/unique_fd.h"
#include "hpd/collect/recorder.h"
#include "hpd/unwind/cfi_table.h"
#include "proc/build_id.h"
#include "proc/program_modules.h"
#include "profile_event.h"

namespace hpd {

// Bytes between entries of the row, rule and index maps (BPF array values are 8-byte aligned).
inline constexpr size_t kRowStride = (sizeof(hpd_cfi_row) + 7) / 8 * 8;
inline constexpr size_t kRuleStride = (sizeof(hpd_cfi_rule) + 7) / 8 * 8;
inline constexpr size_t kBucketStride = (sizeof(hpd_cfi_bucket) + 7) / 8 * 8;
static_assert(kRowStride == kCfiRowBytes, "recorder.h's figure of a row's kernel memory");

struct CfiMapStats {
  uint64_t modules = 0;          // module files seen mapped
  uint64_t modules_loaded = 0;   // with a table in the row map
  uint64_t rows = 0;             // rows in the map
  uint64_t row_capacity = 0;     // rows the map holds
  uint64_t buckets = 0;          // index buckets in the index map
  uint64_t rules = 0;            // distinct rules the rows name, in the rule map
  uint64_t map_bytes = 0;        // kernel memory of the rows, rules and buckets in use (8 bytes each)
  uint64_t modules_evicted = 0;  // tables taken out to make room
  uint64_t modules_refused = 0;  // tables that did not fit even after evicting: frame pointers
  // The most rows the tables loaded and those refused for lack of room (not loaded since) needed at
  // once: a row map of this many would have held them all.
  uint64_t rows_wanted = 0;
  uint64_t tables_released = 0;   // evicted tables of modules no followed process maps, let go
  uint64_t compile_ns = 0;        // worker time compiling tables not cached before
  uint64_t tables_compiled = 0;   // tables compiled by this recording
  uint64_t tables_kept = 0;       // tables kept in this process by earlier recordings (shared_cfi_tables)
  uint64_t tables_stored = 0;     // of those, written to the cache on disk
  uint64_t tables_from_disk = 0;  // tables loaded from the cache on disk
  uint64_t disk_load_ns = 0;      // worker time loading them
  uint64_t disk_refused = 0;      // cache files refused (damaged, stale, another version): compiled again
  std::string disk_refusal;       // the first refusal, "FILE: why"
  std::string disk_cache;         // the cache's directory ("" when none)
  uint64_t processes = 0;         // processes published
  uint64_t mappings_dropped = 0;  // executable mappings beyond HPD_MAX_PROC_MAPPINGS per process
  uint64_t publish_failures = 0;  // process entries the map refused (full)
  // Modules walked by frame pointer, each with the reason: "path: no .eh_frame_hdr", "...: the row map
  // is full".
  std::vector<std::string> without_table;
};

// CfiMaps' row, rule and index maps mapped into this process. Mapping a BPF array maps every page of it
// at once (about 10,000 for the default 32 + 0.5 + 8 MiB): 3-12 ms on a loaded machine, which hpd spends
// when it loads a session's programs ahead (bpf_recorder.cpp, Preloader) rather than when a session
// starts.
struct CfiMapArrays {
  uint8_t* rows = nullptr;
  size_t rows_bytes = 0;
  uint8_t* rules = nullptr;
  size_t rules_bytes = 0;
  uint8_t* index = nullptr;
  size_t index_bytes = 0;
  CfiMapArrays() = default;
  CfiMapArrays(CfiMapArrays&& other) noexcept { *this = std::move(other); }
  CfiMapArrays& operator=(CfiMapArrays&& other) noexcept;
  CfiMapArrays(const CfiMapArrays&) = delete;
  CfiMapArrays& operator=(const CfiMapArrays&) = delete;
  ~CfiMapArrays() { reset(); }
  void reset();
};

class CfiMaps {
 public:
  using MappedArrays = CfiMapArrays;
  // The maps' descriptors and sizes: `rows_fd`, the BPF_F_MMAPABLE array of hpd_cfi_row with
  // `row_capacity` entries; `rules_fd`, the one of hpd_cfi_rule with `rule_capacity`; `index_fd`, the
  // one of hpd_cfi_bucket with `index_capacity`; `procs_fd`, the hash of hpd_proc_mappings.
  struct Fds {
    int rows_fd = -1;
    uint32_t row_capacity = 0;
    int rules_fd = -1;
    uint32_t rule_capacity = HPD_CFI_RULES;
    int index_fd = -1;
    uint32_t index_capacity = 0;
    int procs_fd = -1;
  };
  // Maps the three arrays as the constructor would; throws RecordError when they cannot be mapped.
  static MappedArrays map_arrays(const Fds& fds);

  // `fds`: the maps (above). `use_index` false: the walker binary-searches all of a module's rows (to
  // measure what the index saves). `lazy` (system-wide and cgroup recordings): a module's table is
  // compiled only once a process that maps it has been sampled (sampled()), since the mmap records of a
  // whole system name every module of every short-lived compiler and shell. (A worker at idle priority
  // was tried: on a busy machine it never ran.) Throws RecordError when the maps cannot be mapped.
  // `mapped`: the three arrays mapped already (map_arrays of the same descriptors and capacities), taken
  // over; empty: mapped here.
  explicit CfiMaps(const Fds& fds, bool lazy = false, bool use_index = true, MappedArrays mapped = {});
  ~CfiMaps();
  CfiMaps(const CfiMaps&) = delete;
  CfiMaps& operator=(const CfiMaps&) = delete;

  // The executable file mappings of a process at attach (other entries are ignored).
  void add_process_maps(int32_t pid, const std::vector<MapsEntry>& maps);
  // One executable mapping made while recording (PERF_RECORD_MMAP2). `found`: what the live process
  // told of the mapping's file (BuildIdReader::for_mapping), if asked already; null: asked here.
  void add_mapping(int32_t pid, uint64_t start, uint64_t length, uint64_t file_offset,
                   const std::string& path, const MappedModule* found, uint64_t time_ns);
  // A new process shares its parent's mappings until it execs (unless its exec was seen already).
  void fork(int32_t parent, int32_t child);
  // Compiles and loads the tables of these files before any process maps them (a launched command's
  // executable and the libraries it needs), so that its first samples find them.
  void prewarm(const std::vector<std::string>& paths);
  // The process began an exec at `time_ns`: its mappings from before are gone (the new image's come
  // as mmap records, which may be read before this one: the watch has a ring per CPU).
  void exec(int32_t pid, uint64_t time_ns);
  // hpd_exec's record of `pid`, at `time_ns`: the programs took the process's mappings out of the
  // kernel's map at its exec (after the exec's own record and the new image's mmap records, which user
  // space may have published by then). Published again, unless that exec's own record is still to come
  // (exec() publishes it then).
  void exec_in_kernel(int32_t pid, uint64_t time_ns);
  void exit(int32_t pid);

  // A sample of `pid` arrived: in lazy mode, its modules' tables are compiled from now on.
  void sampled(int32_t pid);
  // A sample of `pid` is held until its tables are published: the tables it waits for move ahead in the
  // worker's queue (the most samples waiting per byte of file to compile first).
  void waiting(int32_t pid);
  // Loads the tables compiled since the last call and publishes the processes that changed.
  void poll();
  // Waits until the worker has compiled every table asked for so far (at most `timeout_ms`), then polls.
  void wait_for_tables(int timeout_ms);
  // Waits until the worker has finished one more table (at most `timeout_ms`), then polls; false, without
  // waiting, when it has nothing left to do (no table asked for is still to come).
  bool wait_for_next_table(int timeout_ms);
  // Lazy mode: waits until the worker has looked up, in the cache on disk, the tables of every module
  // mapped so far (at most `timeout_ms`), then polls: with a warm cache, the first samples find them.
  void wait_for_cached_tables(int timeout_ms);

  // The programs' cfi walk done again here (cfi_user_walk.cpp), from registers `ip`, `sp`, `bp` of
  // process `pid`, with the tables as published now, over `stack`, a copy of the stack from `sp` up (a
  // slot outside it ends the walk with a read fault). For the stacks of threads that blocked while
  // their tables were not published yet: their stack does not change until they run again.
  struct StackWalk {
    std::vector<uint64_t> ips;  // the pc, then one return address per frame
    uint32_t end = HPD_USER_END_NONE;
    uint32_t fp_frames = 0;  // frames stepped by frame pointer
    bool pending = false;    // a table was still missing: a later walk may do better
  };
  // `rdi`: the sampled frame's, when known (a row that keeps the return address there: glibc's vfork).
  StackWalk walk_stack(int32_t pid, uint64_t ip, uint64_t sp, uint64_t bp, std::span<const uint8_t> stack,
                       std::optional<uint64_t> rdi = std::nullopt) const;
  // Publications since the start: a walk_stack that was pending may do better once this changed.
  [[nodiscard]] uint64_t publications() const { return tick_; }
  // The publication that last published `pid` (0: never), and whether it left any of its mappings
  // waiting for a table: a walk_stack of it now would still be pending.
  struct Published {
    uint64_t at = 0;
    bool tables_pending = true;
  };
  [[nodiscard]] Published published(int32_t pid) const;
  // A second walk (of a held sample, or of a thread still blocked) that met a table still to come: the
  // record, by its thread and time, and the publication of its process it was walked with. Walked again
  // only once the process is published again (BpfSession::walk_held, OffCpuRewalk).
  struct WalkTried {
    uint64_t time_ns = 0;
    int32_t tid = 0;
    uint64_t published_at = 0;
    bool operator==(const WalkTried&) const = default;
  };
  // When `pid` last exec'd (CLOCK_MONOTONIC, from its record; 0 when unknown or never): the mappings
  // published since are the new image's.
  [[nodiscard]] uint64_t exec_ns(int32_t pid) const {
    const auto it = exec_ns_.find(pid);
    return it == exec_ns_.end() ? 0 : it->second;
  }

  // The row, rule and index arrays, kept mapped for the next recording that uses the same maps (hpd's reset
  // skeletons, bpf_reuse.h): this object no longer unmaps them. Only right before it is destroyed.
  MappedArrays release_arrays();

  CfiMapStats stats() const;
  // Modules whose compiled table this recording holds (loaded, or kept for a followed process that
  // maps it; not those refused for lack of room), and the memory those tables take
  // (CfiTableCache::kept_bytes); the recorder's thread only.
  [[nodiscard]] size_t tables_held() const;
  [[nodiscard]] uint64_t table_bytes_held() const;
  // Readable when compiled tables wait for poll(): the recorder polls it with its other descriptors.
  [[nodiscard]] int ready_fd() const { return ready_fd_.get(); }

 private:
  // First-fit ranges of one of the BPF arrays (rows or index buckets).
  class SlotRanges {
   public:
    explicit SlotRanges(uint32_t capacity);
    bool take(uint32_t count, uint32_t* first);
    void give_back(uint32_t first, uint32_t count);
    uint64_t used() const { return used_; }

   private:
    std::map<uint32_t, uint32_t> free_;  // first -> count
    uint64_t used_ = 0;
  };
  // The rule map's entries: each distinct rule once, with the number of loaded tables whose rows name it;
  // an entry no table names any more is free for another rule.
  class RuleSlots {
   public:
    explicit RuleSlots(uint32_t capacity) : capacity_(capacity) {}
    // The entry of `rule`, one more table naming it; false when the map is full.
    bool take(uint64_t rule, uint32_t* index);
    void give_back(uint32_t index);
    uint64_t used() const { return by_rule_.size(); }
    // `rule`'s fields, packed into the key take() expects.
    static uint64_t key(const CfiRow& row);

   private:
    uint32_t capacity_;
    std::unordered_map<uint64_t, uint32_t> by_rule_;  // key -> entry
    std::vector<uint64_t> rule_of_;                   // per entry ever used: its key
    std::vector<uint32_t> users_;                     // per entry ever used: tables naming it (0: free)
    std::vector<uint32_t> free_;                      // entries no table names
  };
  struct Module {
    std::string path;
    std::string build_id;
    std::shared_ptr<const CfiTable> table;  // set when compiled
    bool loaded = false;                    // rows in the map
    bool failed = false;                    // no table: frame pointers
    bool no_room = false;                   // refused for lack of room: tried again when mapped again
    uint32_t refused_rows = 0;              // no_room: the rows and buckets its table needs
    uint32_t refused_buckets = 0;
    uint64_t refused_at = 0;       // no_room: releases_ when it was refused
    bool refused_counted = false;  // its refused_rows are in refused_rows_: refused, and still mapped
    uint32_t row_first = 0;
    uint32_t row_count = 0;
    uint32_t index_first = 0;
    uint32_t index_count = 0;
    std::vector<uint32_t> rules;          // loaded: the rule map's entries its rows name, each once
    uint64_t last_used = 0;               // tick of the last publication of a process that maps it
    bool queued = false;                  // its compile (or cache lookup) job was handed to the worker
    bool asked = false;                   // asked for before (its table let go since)
    bool wanted = false;                  // needed now (lazy mode: a process that maps it was sampled)
    bool counted = false;                 // in stats_.modules
    std::vector<std::string> candidates;  // files to compile it from
    std::string identity;                 // device:inode of the file mapped ("" when unknown)
    uint64_t file_bytes = 0;              // the file's size: what compiling it costs, roughly
    // Samples held for a second walk that wait for its table (waiting()), read by the worker.
    std::shared_ptr<std::atomic<uint64_t>> waiting = std::make_shared<std::atomic<uint64_t>>(0);
  };
  struct Mapping {
    uint64_t start, end, file_offset;
    std::string module;    // key into modules_
    uint64_t time_ns = 0;  // of its mmap record; 0 = read from /proc or inherited
  };
  struct Job {
    std::string key;
    std::string path;
    std::string build_id;
    std::vector<std::string> candidates;
    bool lookup_only = false;  // lazy mode: from the cache on disk, or nothing (compiled once wanted)
    std::string identity;      // Module::identity
    bool again = false;        // Module::asked: found among the kept tables, it is not counted as kept
    uint64_t file_bytes = 0;   // Module::file_bytes
    std::shared_ptr<const std::atomic<uint64_t>> waiting;  // Module::waiting
  };
  // The job the worker takes next (under mutex_): cache lookups first, in their order; then the
  // compile with the most samples waiting per byte of file (a small program before a large library
  // that as many wait for), the oldest of equals.
  std::deque<Job>::iterator next_job();
  struct Done {
    std::string key;
    std::shared_ptr<const CfiTable> table;  // null: a lookup_only job found nothing
    bool lookup_only = false;
  };

  // `found`: as in add_mapping.
  std::string module_for(int32_t pid, uint64_t start, uint64_t end, const std::string& path,
                         const MappedModule* found);
  // A page of code the kernel maps (uprobe trampolines), named `path`: rows hpd wrote for it.
  std::string kernel_page_module(int32_t pid, uint64_t start, uint64_t end, const std::string& path);
  void insert_mapping(int32_t pid, Mapping m);
  void publish(int32_t pid);
  void publish_dirty();  // the processes whose mappings changed since they were last published
  // `may_evict` false: only when it fits as things are (a table loaded before it is wanted).
  void load(const std::string& key, Module& module, bool may_evict = true);
  void count(Module& module);
  std::shared_ptr<const CfiTable> table_for(const Job& job);
  // Writes the module's rows, rules and buckets into free room of the maps, or says which map lacked it.
  enum class Placed { kYes, kNoRoomForRows, kNoRoomForRules };
  Placed place(Module& module);
  // Gives a loaded module's room in the maps back.
  void give_back_room(Module& module);
  // A module refused for lack of room (its table let go) is asked for again only when it may fit now.
  bool room_may_be_made(const Module& module) const;
  bool evict_one();
  void mark_users_dirty(const std::string& key);
  void worker_loop();

  BuildIdReader build_ids_;
  void enqueue(const std::string& key, Module& module, bool lookup_only = false);

  bool lazy_ = false;
  bool use_index_ = true;  // publish each module's index (else the walker searches all its rows)
  std::unordered_map<int32_t, bool> sampled_;  // lazy mode: processes seen in samples
  UniqueFd ready_fd_;                          // eventfd, written by the worker
  int procs_fd_;  // the row, rule and index maps are used through their shared mappings below
  uint32_t capacity_;
  uint32_t rule_capacity_;
  uint32_t index_capacity_;
  uint8_t* rows_ = nullptr;  // the row map, shared with the kernel
  size_t rows_bytes_ = 0;
  uint8_t* rules_ = nullptr;  // the rule map, shared with the kernel
  size_t rules_bytes_ = 0;
  uint8_t* index_ = nullptr;  // the index map, shared with the kernel
  size_t index_bytes_ = 0;
  SlotRanges row_slots_;
  SlotRanges index_slots_;
  RuleSlots rule_slots_;
  uint64_t tick_ = 0;  // publications so far: the modules' use clock
  // Rows the tables of the modules refused for lack of room (and neither loaded since nor left unmapped
  // by every process) need, and the stats' rows_wanted brought up to date with them (after each refusal
  // and each load).
  uint64_t refused_rows_ = 0;
  void note_rows_wanted();
  // The refused modules among `gone` (mappings an exit or exec took away) that no process maps any
  // longer: their rows stop counting in refused_rows_ (a map that held them then was not wanted).
  void forget_unmapped_refusals(const std::vector<Mapping>& gone);
  // Exits, execs and mappings replaced so far: each may have left a loaded table that no process uses.
  uint64_t releases_ = 0;
  std::set<std::string> refused_noted_;  // modules already named in without_table for lack of room

  std::unordered_map<std::string, Module> modules_;
  std::map<int32_t, std::vector<Mapping>> processes_;
  std::unordered_map<int32_t, uint64_t> exec_ns_;         // per process, its last exec's time
  std::unordered_map<int32_t, uint64_t> kernel_exec_ns_;  // per process, its last hpd_exec record's time
  std::unordered_map<int32_t, Published> published_;      // per process, its last publication
  std::vector<int32_t> dirty_;
  CfiMapStats stats_;

  // Worker: jobs in, compiled tables out.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Job> jobs_;
  std::vector<Done> done_;
  // HPD_CFI_LATE_TABLE=TEXT:MS, a test's way to one slow module (as a large library's beside busy
  // compilers): the tables of modules whose path holds TEXT are loaded no sooner than MS after the start.
  std::string late_path_;
  std::chrono::steady_clock::time_point late_until_;
  std::vector<Done> late_;
  size_t busy_ = 0;
  size_t lookups_ = 0;  // lookup_only jobs queued or running
  bool stop_ = false;
  std::thread worker_;
};

// The process-wide cache of compiled tables (the daemon keeps them across recordings).
CfiTableCache& shared_cfi_tables();

}  // namespace hpd
