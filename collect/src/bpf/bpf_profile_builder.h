// Turns the records of hpd's BPF programs into a RawProfile: on- and off-CPU samples with their
// stacks, threads and processes with names, lifetimes and memory maps. System access goes through
// the injected readers, so tests can feed it synthetic records.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "hpd/model/raw_profile.h"
#include "hpd/unwind/unwinder.h"
#include "perf/profile_builder.h"
#include "proc/proc_maps.h"
#include "profile_event.h"

namespace hpd {

struct BpfBuilderConfig {
  uint64_t start_ns = 0;  // the recording's start; threads that existed then start there
  // The least time between two reads of one process's maps when its samples hit unknown addresses.
  uint64_t maps_reread_interval_ns = 200'000'000;
  // dwarf mode: on-CPU user stacks are unwound from the records' registers and stack copies (the
  // programs walk no user frame pointers then). Otherwise the copies only put back the callers of
  // frameless leaves into the frame-pointer chains.
  bool dwarf = false;
  uint32_t stack_copy_bytes = 0;  // bytes of stack the programs were asked to copy (0 = unknown)
};

class BpfProfileBuilder {
 public:
  // /proc/PID/maps; an empty vector when the process is gone (or is a kernel thread).
  using MapsReader = std::function<std::vector<MapsEntry>(int32_t pid)>;
  using BuildIdLookup = hpd::BuildIdLookup;
  // Fills a process's exe and cmdline (and name when empty) from the system.
  using ProcessDescriber = std::function<void(RawProcess&)>;

  BpfProfileBuilder(RawProfile& profile, BpfBuilderConfig config, MapsReader read_maps = {},
                    BuildIdLookup build_ids = {}, ProcessDescriber describe = {});

  // A process that was described and whose maps were read when the recording began.
  void add_initial_process(int32_t pid, const std::vector<MapsEntry>& maps);

  // One ring-buffer record. Records that are too short or of an unknown type are counted, not used.
  void on_record(std::span<const uint8_t> bytes);

  // The unwinder for records with registers and a stack copy (owned by the caller, one per recording).
  // Without one, such records keep the frame-pointer chain as it is (and dwarf-mode ones have no user
  // frames).
  void set_unwinder(Unwinder* unwinder) { unwinder_ = unwinder; }

  // An executable mapping reported by the kernel as it was made (a PERF_RECORD_MMAP2 read by
  // MmapWatch, bpf/mmap_watch.h). Processes that exit within milliseconds are gone before
  // /proc/PID/maps can be read, so these are what resolves their samples. A mapping of a process not
  // in the profile yet is kept until its first record (bounded: kMaxPendingMappings in all).
  void on_mmap(int32_t pid, uint64_t start, uint64_t length, uint64_t file_offset, const std::string& path,
               const std::string& build_id, uint64_t time_ns);
  // The kernel began an exec in `pid` at `time_ns` (before mapping the new image; the eBPF exec
  // record comes after it is mapped): mappings made before belong to the old image.
  void on_exec_start(int32_t pid, uint64_t time_ns);
  // Called when a sample's address lies in no known mapping, before /proc is read again, and before
  // an exec record is handled: delivers the mmap records written so far.
  void set_mmap_source(std::function<void()> drain) { drain_mmaps_ = std::move(drain); }

  // Off-CPU stacks: the kernel part starts at the function that blocked. Leading kernel frames for
  // which this returns true (the scheduler's own: __schedule, schedule, schedule_timeout, the
  // tracepoint's and the program's frames) are dropped.
  void set_scheduler_frames(std::function<bool(uint64_t)> is_scheduler_frame) {
    is_scheduler_frame_ = std::move(is_scheduler_frame);
  }

  // How the programs' user walks ended (enum hpd_user_end), on-CPU [0] and off-CPU [1].
  using UserEnds = std::array<std::array<uint64_t, HPD_USER_END_COUNT>, 2>;
  [[nodiscard]] const UserEnds& user_ends() const { return user_ends_; }
  // cfi walks that stepped by frame pointer because their process's or a module's table was not loaded.
  [[nodiscard]] uint64_t samples_tables_pending() const { return tables_pending_; }
  // cfi walks with at least one frame stepped by frame pointer (modules without a table).
  [[nodiscard]] uint64_t samples_with_fp_frames() const { return with_fp_frames_; }

  // A thread still off the CPU when the recording ended: its interval runs until `end_ns`.
  void on_still_off_cpu(const hpd_sample_event& event, uint64_t end_ns);

  // Ring-buffer records of a thread that did not fit, as counted by the programs.
  void add_thread_drops(int32_t pid, int32_t tid, uint64_t drops);

  [[nodiscard]] uint64_t samples() const { return samples_; }
  [[nodiscard]] uint64_t malformed_records() const { return malformed_; }
  [[nodiscard]] uint64_t processes_without_maps() const { return processes_without_maps_; }
  [[nodiscard]] uint64_t samples_without_baseline() const { return samples_without_baseline_; }
  // Samples dropped because their process was no longer followed (HPD_TASK_UNFOLLOWED).
  [[nodiscard]] uint64_t unfollowed_samples() const { return unfollowed_samples_; }
  [[nodiscard]] const UnwindCounters& unwind_counters() const { return unwind_; }
  [[nodiscard]] uint64_t mmaps_recorded() const { return mmaps_recorded_; }
  [[nodiscard]] uint64_t mmaps_dropped() const { return mmaps_dropped_; }
  // Samples added for the CPU time threads used after their last timer sample (HPD_EVENT_CPU_TAIL).
  [[nodiscard]] uint64_t cpu_tails() const { return cpu_tails_; }

  // About 10 MB of records kept for processes without a record yet; more are dropped and counted.
  static constexpr size_t kMaxPendingMappings = 1u << 16;

 private:
  struct ProcessState {
    bool maps_read = false;
    bool counted_without_maps = false;
    uint64_t maps_read_at = 0;  // record time of the last read
    // An unknown address may read the maps again before maps_reread_interval_ns: after an exec
    // (ld.so maps the libraries after the exec record was read) and after a read that found what it
    // was looking for. Only reads that find nothing make the next one wait.
    bool reread_at_once = false;
    // The last mapping a user leaf hit, to skip the search for the next sample.
    uint64_t hit_start = 0, hit_end = 0;
    uint64_t exec_ns = 0;  // the last exec's start: mmap records from before it are of the old image
    uint64_t last_exec_record_ns = 0;  // the time of the last eBPF exec record
  };
  struct PendingMapping {
    RawMapping mapping;
    std::string path;
    std::string build_id;
  };

  void on_sample(const hpd_sample_event& e, size_t frames_present, std::span<const uint8_t> stack);
  // Unwinds (dwarf) or completes (fp) user_ from the record's registers and stack copy; returns how a
  // dwarf walk ended, kUnknown when none was done.
  StackEnd apply_user_state(const hpd_sample_event& e, const RawProcess& process,
                            std::span<const uint8_t> stack);
  void on_fork(const hpd_fork_event& e);
  void on_exec(const hpd_task_event& e);
  void on_exit(const hpd_task_event& e);
  void on_cpu_tail(const hpd_task_event& e);
  RawProcess& ensure_process(int32_t pid, uint64_t time_ns);
  RawThread& ensure_thread(int32_t pid, int32_t tid, uint64_t time_ns, const char* comm);
  void read_maps(RawProcess& process, ProcessState& state, uint64_t time_ns, uint64_t mapping_time_ns);
  bool has_user_mapping(RawProcess& process, ProcessState& state, uint64_t address, uint64_t time_ns);
  // Moves the mmap records kept for `pid` into its process (those of a replaced image excepted).
  void apply_pending_mappings(int32_t pid);
  void add_mmap_mapping(RawProcess& process, const RawMapping& mapping, const std::string& path,
                        const std::string& build_id);
  // The executable entries of a maps file, seen at `time_ns` (0: mapped before the recording).
  void add_maps(RawProcess& process, const std::vector<MapsEntry>& maps, uint64_t time_ns);

  RawProfile& profile_;
  BpfBuilderConfig config_;
  MapsReader read_maps_;
  BuildIdLookup build_ids_;
  ProcessDescriber describe_;
  std::unordered_map<int32_t, ProcessState> states_;
  std::array<uint64_t, HPD_MAX_FRAMES> ips_{};
  std::vector<uint64_t> user_;
  std::vector<uint64_t> unwound_;
  Unwinder* unwinder_ = nullptr;
  UnwindCounters unwind_;
  uint64_t samples_ = 0;
  uint64_t malformed_ = 0;
  uint64_t processes_without_maps_ = 0;
  uint64_t samples_without_baseline_ = 0;
  uint64_t unfollowed_samples_ = 0;
  std::function<void()> drain_mmaps_;
  std::function<bool(uint64_t)> is_scheduler_frame_;
  UserEnds user_ends_{};
  uint64_t tables_pending_ = 0;
  uint64_t with_fp_frames_ = 0;
  // Per thread, its last on-CPU sample (index into profile_.samples): an exit's CPU tail repeats it.
  std::unordered_map<int32_t, size_t> last_on_cpu_;
  std::unordered_map<int32_t, std::vector<PendingMapping>> pending_;
  size_t pending_count_ = 0;
  uint64_t mmaps_recorded_ = 0;
  uint64_t cpu_tails_ = 0;
  uint64_t mmaps_dropped_ = 0;
};

// The comm of a record, without the padding.
std::string comm_of(const hpd_event_header& header);

}  // namespace hpd
