// One eBPF recording (BpfSession), whose parts are defined in bpf_session_*.cpp and bpf_recorder.cpp:
// - bpf_session_targets.cpp: the target and filter maps, and the targets' state at the start (CPU
//   baselines, threads off the CPU at the attach, process descriptions);
// - bpf_session_attach.cpp: attaching the sampling program (per thread or per CPU) and the call-counting
//   runtime's uprobe;
// - bpf_session_tables.cpp: cfi mode's unwind tables (the initial ones, forks and exits, held walks);
// - bpf_session_reading.cpp: the ring and the mmap watch drained into the builder, the kernel's symbols;
// - bpf_session_summary.cpp: what is left in the maps at the end, and the recording's summary;
// - bpf_recorder.cpp: the load and run(), which orders them.
// Internal to the eBPF backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpf/bpf_event_decoder.h"
#include "bpf/bpf_load.h"
#include "bpf/bpf_reuse.h"
#include "bpf/cfi_maps.h"
#include "bpf/mmap_watch.h"
#include "bpf/off_cpu_rewalk.h"
#include "bpf/sched_frames.h"
#include "hpd/base/proc_files.h"
#include "hpd/base/unique_fd.h"
#include "hpd/symbolizer/symbolizer.h"
#include "proc/build_id.h"
#include "raw_profile_builder.h"
#include "recording_calls.h"
#include "recording_common.h"

namespace hpd::bpf_recording {

// How long the recording waits, before sampling starts, for the tables of the modules mapped then.
constexpr int kInitialTablesWaitMs = 10000;

class BpfSession {
 public:
  BpfSession(const RecordOptions& options, const PerfPrivileges& privileges)
      : options_(options), cpus_(online_cpus()), config_(load_config_of(options, privileges, cpus_.size())) {
    kernel_frames_ = config_.capture_kernel;
    off_cpu_ = config_.off_cpu;
    dwarf_ = config_.dwarf;
    cfi_ = config_.cfi;
    stack_copy_ = config_.stack_copy;
    period_ns_ = config_.sample_period_ns;
    filter_ = config_.filter_mode;
    attach_state_ = config_.attach_state;
    warm_ring_ = config_.warm_ring;
  }

  // hpd's sessions (RecordOptions::load_next_ahead) give their skeleton back to the Preloader, to be
  // reset and used by the next recording of its kind; others destroy it.
  ~BpfSession();
  BpfSession(const BpfSession&) = delete;
  BpfSession& operator=(const BpfSession&) = delete;

  RecordResult run();

 private:
  struct ProgramStats {
    uint64_t runs = 0;
    uint64_t ns = 0;
  };
  void load();
  void warm_ring();
  void set_targets();
  void attach_sampling();
  void attach_calls_unwind(const std::string& runtime);
  bool attach_per_task();
  void attach_per_cpu();
  bool attach_clock(uint64_t config, uint64_t period_ns, int pid, int cpu, const std::string& what);
  bool attach_thread(int32_t tid, uint64_t period_ns);  // false when the thread is gone
  // The threads of `pid` attached (0: it exited); those created during the attach with periods a few ns
  // longer (the sampling program keeps the smallest period a thread has).
  size_t attach_process(int32_t pid, uint64_t period_ns);
  // per_task_: the sampling events of a descendant found in add_descendants' round `generation`.
  void sample_descendant(int32_t pid, int generation, DescriptorBudget& budget);
  // follow_children: the processes the targets forked before the scheduler hooks were attached, and
  // theirs, made targets like those the fork program adds (descendants_).
  void add_descendants();
  void seed_cpu_baselines();
  void seed_thread(int32_t pid, int32_t tid);
  void describe_process(RawProcess& process);
  void describe_initial(int32_t pid);
  // `rewalk`: also walk again the waiting off-CPU stacks (OffCpuRewalk), which is sound only while the
  // programs are attached (they take a thread's entry away when it runs again).
  void drain(bool rewalk = true);
  // Reads the ring, the programs still attached, until every thread that exited has reported its CPU
  // time after its last sample (at its last switch-out, microseconds after its exit record), for at
  // most half a second (those still missing are counted in the result by collect_leftovers).
  void await_cpu_tails();
  // Decodes the records the decoder held for a second walk, as far as their tables allow
  // (`mappings_read_at`: the mappings made before then have been read); `final`: all of them.
  void release_held(uint64_t mappings_read_at, bool final);
  // The kernel's symbols, which the builder needs before it reads the first records (the off-CPU samples'
  // scheduler frames): given to the builder and the result.
  struct KernelTable {
    std::shared_ptr<const KernelSymbols> symbols;
    std::shared_ptr<SchedulerFrames> sched;  // the scheduler's functions among them
  };
  // The table and its scheduler's functions (a scan of every symbol, done where the table is read).
  static KernelTable kernel_table(std::shared_ptr<const KernelSymbols> symbols);
  void use_kallsyms(KernelTable table);
  // The result's table completed with the functions of these programs (descriptors) it does not name.
  void name_own_programs(const std::vector<int>& fds);
  // Whether the kernel's symbols read in the background (kallsyms_) are in use; `wait`: wait for them.
  bool kallsyms_ready(bool wait);
  std::future<KernelTable> kallsyms_;  // valid while read in the background
  // A launched command's recording reads the kernel's symbols while its programs load, and completes the
  // table with them (own_programs.h) once this is set: every program of the recording is loaded. (After
  // kallsyms_: destroyed first, so that a recording that fails before then ends the read's wait.)
  std::promise<void> programs_loaded_;
  void load_initial_tables();
  void note_for_cfi(const Event& event);
  // The second walk of an on-CPU sample held by the decoder, with the tables as published now.
  BpfEventDecoder::HeldWalk walk_held(const hpd_sample_event& e, std::span<const uint8_t> stack,
                                      BpfEventDecoder::UserWalk& out);
  // Per process, the held sample whose walk last met a table still to come, and the publication it met.
  std::unordered_map<int32_t, CfiMaps::WalkTried> held_tried_;
  void open_mmap_watch();
  void drain_mmaps();
  void collect_leftovers();
  void snapshot_switches();
  void read_attach_state();
  // The end-of-recording summary in result_: the decoder's, builder's, tables' and watch's counts.
  void summarize();
  // The kernel's counts of `program`'s runs and their time so far (0 while kernel.bpf_stats_enabled is
  // 0): a skeleton used before counts from its first load, so the session subtracts those it started with.
  static ProgramStats program_stats(const bpf_program* program);
  ProgramStats sample_prog_at_start_, switch_prog_at_start_, wakeup_prog_at_start_;
  static int on_ring_record(void* ctx, void* data, size_t size);

  const RecordOptions& options_;
  std::vector<int> cpus_;
  const LoadConfig config_;
  bool kernel_frames_ = false;
  bool off_cpu_ = false;
  bool dwarf_ = false;
  bool cfi_ = false;
  uint32_t stack_copy_ = 0;
  uint64_t period_ns_ = 0;
  uint32_t filter_ = HPD_FILTER_PIDS;
  bool per_task_ = false;
  bool warm_ring_ = false;
  bool attach_state_ = false;  // hpd_attach_state runs once after the scheduler hooks are attached
  // The target threads' context switches before the recording's start (attach_switches).
  std::vector<std::pair<int32_t, uint64_t> > switches_before_start_;

  LibbpfLogCapture log_;
  Skeleton skel_;
  std::unique_ptr<CfiMaps> cfi_maps_;     // cfi mode: the tables in skel_'s maps
  CfiMaps::MappedArrays cfi_arrays_;      // skel_'s row and index maps, mapped ahead with it (or empty)
  GlobalsAtLoad globals_;                 // skel_'s .data and .bss right after its load (hpd's sessions)
  std::unique_ptr<OffCpuRewalk> rewalk_;  // cfi mode with off-CPU samples
  // HPD_DRAIN_PAUSE_US (a diagnostic, and the tests' way to a slow recorder): a pause after each read of
  // the mappings, before the ring's, as a recorder preempted there on a loaded machine takes.
  uint32_t drain_pause_us_ = 0;
  UniqueFd cgroup_fd_;
  std::vector<Link> sampling_;  // one per CPU or per target thread; each owns its perf_event fd
  Link calls_announce_;         // the uprobe on the call-counting runtime's hpd_calls_announce
  RingReader ring_;
  MmapWatch mmap_watch_;
  std::unique_ptr<LaunchedCommand> command_;
  uint64_t released_ns_ = 0;  // when the launched or held-at-exec command was let run
  std::vector<WatchedTarget> targets_;
  std::vector<int32_t> descendants_;  // add_descendants' children of the targets

  RecordResult result_;
  HostStealMeter steal_;
  BuildIdReader build_ids_;
  // One per recording: its CFI and rule caches serve every process of the recording.
  Unwinder unwinder_;
  // The ring's records become events (decoder_), which the one builder turns into the profile.
  std::unique_ptr<BpfEventDecoder> decoder_;
  std::unique_ptr<RawProfileBuilder> builder_;
  EventSink to_builder_;
  std::exception_ptr callback_error_;
  std::unique_ptr<RecordingCallCounter> calls_;  // detached (destroyed) before the skeleton
};

// The processes of a cgroup v2 directory and of the cgroups below it.
std::vector<int32_t> cgroup_processes(const std::string& directory);

}  // namespace hpd::bpf_recording
