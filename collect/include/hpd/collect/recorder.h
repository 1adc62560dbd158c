// Recorder: samples processes with eBPF or perf_event and produces a RawProfile.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hpd/calls/call_stats.h"
#include "hpd/collect/record_choices.h"
#include "hpd/collect/record_target.h"
#include "hpd/model/raw_profile.h"

namespace hpd {

class KernelSymbols;  // hpd/symbolizer/symbolizer.h

// A failure the user can act on; what() says what happened and what to do.
class RecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Default stack copy in dwarf mode: measured to unwind Rust programs with large stack frames
// completely where 16 KiB does not (docs/performance.md). perf_event caps it at 65528, and so does
// the eBPF backend.
inline constexpr uint32_t kDefaultStackCopyBytes = 32768;
inline constexpr uint32_t kMaxStackCopyBytes = 65528;

struct RecordProgress {
  double elapsed_s = 0;
  double duration_s = 0;  // 0 = open-ended
  uint64_t samples = 0;
  uint64_t lost = 0;
};

struct RecordOptions {
  // What is recorded: pids, a command to launch, all processes, a cgroup (target_problem says which
  // go together).
  RecordTarget target;
  double duration_s = 0;  // 0 = until the target exits or a stop is requested
  uint32_t frequency_hz = 999;
  // The pids' processes as pidfds (borrowed, in pids order; -1 or missing: one is opened when the
  // recording starts): the processes the caller checked, not whatever has their numbers by the time
  // the events are attached. A target that is no longer running once everything is attached fails the
  // recording ("exited before the recording started"), and nothing of another process that got its pid
  // is kept.
  std::vector<int> pid_fds;
  // The sampling clock (perf_event backend; the eBPF backend uses task-clock per thread for pid and
  // command targets, cpu-clock per CPU for all processes and a cgroup).
  SamplingEvent event = SamplingEvent::kTaskClock;
  Switch kernel = Switch::kAuto;  // kernel frames; kAuto: when perf_event_paranoid / capabilities allow
  // Pages per ring buffer, a power of two; 0 = chosen from the rate. perf_event: one ring per CPU;
  // eBPF: the one ring all CPUs share.
  uint32_t ring_pages = 0;
  const std::atomic<bool>* stop = nullptr;  // set (e.g. from a SIGINT handler) to end the recording
  std::function<void(const RecordProgress&)> on_progress;  // called about every 250 ms
  // Called about every 250 ms from the recording loop with the profile so far, on the thread that
  // mutates it (no locking needed), e.g. to stream it into a capture file. The profile is not final:
  // the last samples, exit times and lost counts arrive after the loop, in RecordResult::profile.
  // The callee may release the samples it wrote out (RawProfile::release_samples); the recorder
  // keeps no reference to them, so memory then stays flat however long the recording.
  std::function<void(RawProfile&)> on_flush;
  // For a recording without end that must not grow with what it outlives (continuous mode): called
  // right after each on_flush. A time it returns (monotonic ns; 0 = not now) makes the recorder drop
  // the processes and threads that exited before it (RawProfile::forget_exited), with what it keeps
  // for them itself, and every stack that neither a sample still held nor a record it still waits on
  // names (RawProfile::forget_unused_stacks): stack indices and the positions of processes and
  // threads in the profile change then. No record of a dropped process may still be on its way.
  std::function<uint64_t()> forget_before;
  // For a recording whose samples on_flush writes out and releases and whose stacks nothing reads back
  // from memory at the end (a capture streamed and not symbolized by the recording process): when,
  // right after an on_flush that released every sample, the stacks and the released sums take more
  // than this many bytes (RawProfile::stack_memory_bytes), the recorder lets go of every stack only the
  // sums name (RawProfile::forget_released_stacks): a new stack generation, which the capture writer
  // marks. Its memory then stays bounded, however many distinct stacks a long recording of a whole
  // machine meets. 0: never.
  size_t stack_memory_bound = 0;

  Backend backend = Backend::kAuto;
  // Off-CPU samples. kAuto: for pid, command and cgroup targets with the eBPF backend; none for all
  // processes (every context switch of the system would be recorded) and none with perf_event. kOn with
  // perf_event: intervals from its context-switch records, blocked or waiting for a CPU, without a
  // stack (a switch record carries none).
  Switch off_cpu = Switch::kAuto;
  // Off-CPU intervals shorter than this are not recorded (0 = all).
  uint32_t off_cpu_min_us = 0;
  // Processes the targets fork are recorded too (eBPF; perf_event always follows them), and with pids
  // the child processes the targets have when the recording begins (both backends).
  bool follow_children = true;
  // For an unprivileged client: the uid and gid every followed process must keep (all of its real,
  // effective, saved and filesystem ids). A process whose exec gives it others (a set-user-ID program)
  // stops being followed at that exec and keeps no sample from then on (eBPF, in the exec hook;
  // perf_event: the kernel itself ends the events of a task whose exec made it non-dumpable).
  bool restrict_to_client = false;
  uint32_t client_uid = 0;
  uint32_t client_gid = 0;
  CallGraph call_graph = CallGraph::kAuto;
  // Bytes of user stack copied per sample in dwarf mode, a multiple of 8 up to kMaxStackCopyBytes;
  // 0 = kDefaultStackCopyBytes.
  uint32_t stack_copy_bytes = 0;
  // perf backend in fp mode: every sample also carries the registers and a dwarf-sized stack copy, and
  // an on-CPU stack whose frame-pointer chain stops short of its thread's first frame is unwound with
  // CFI instead. For --call-graph auto on --pid targets and launched commands that were all built with
  // frame pointers: a process may exec a program whose code has none, and a perf event's sampling
  // attributes cannot change once it is open.
  bool fp_with_cfi_fallback = false;
  // cfi mode: rows the eBPF row map holds, up to kMaxCfiRowCapacity (0 = kDefaultCfiRowCapacity). When the
  // tables of the modules the targets map do not fit, the least recently used modules no followed process
  // maps are evicted; a module that still does not fit is walked by frame pointer and named in the summary.
  uint32_t cfi_row_capacity = 0;
  // cfi mode: false = each frame's row found by a binary search over all of its module's rows instead
  // of the rows of its bucket in the module's index (to measure what the index saves).
  bool cfi_row_index = true;
  // eBPF backend: false = the sampling program does not read the hypervisor's steal clock, and a
  // runtime brought up to a sample keeps the steal since its run queue's last update (to measure what
  // the read costs).
  bool read_steal_clock = true;
  // Count every call exactly through the targets' mcount/__fentry__ instrumentation (eBPF uprobes),
  // into RawProfile::call_edges. A target without instrumentation is still sampled (see
  // RecordResult::calls.messages).
  bool count_calls = false;
  // pids[0] is a command its launcher (hpctl, recording through hpd) started and holds stopped
  // right after its exec, before its first instruction: it is recorded as a launched command (its
  // call probes, libc's mcount hooks included, are set up at once), and on_attached releases it.
  bool pid_held_at_exec = false;
  // Called once, when every sampling event and probe is attached and before the first sample is
  // read: where a launcher lets a held command run.
  std::function<void()> on_attached;
  // hpd's sessions: at this recording's end its programs and maps are given back, every map reset
  // (emptied, zeroed, its globals as loaded), for the next recording like it, which then need not load
  // them (prepare_recording); when the reset fails they are destroyed and a fresh set loaded.
  bool load_next_ahead = false;
  // When the recording was asked for (CLOCK_MONOTONIC): hpctl's start, or hpd's receipt of the request.
  // 0: when record() is called. The profile's info carries it (RecordingInfo::requested_mono_ns).
  uint64_t requested_mono_ns = 0;
  // How calls are counted. kAuto: a launched command gets hpd's in-process runtime (libhpdcalls.so,
  // preloaded: cheaper, and it times each call), unless it cannot take it (static, its own mcount),
  // then uprobes, as --pid targets always get.
  CallCounterKind call_counter = CallCounterKind::kAuto;
  // With uprobes: also time the functions probed at their first instruction (a return probe each,
  // uprobe sessions, Linux 6.13+), into RawProfile::call_latency. Off: counting only, which costs the
  // target less per call and leaves sampled stacks whole (a pending return probe replaces the return
  // address, so a stack walk cannot always reach the root). The runtime times calls either way.
  bool time_calls = false;
  // The runtime library; empty = hpd::calls::find_preload_runtime().
  std::string call_runtime;
  // The runtime's table, made by the launcher of pids[0] (hpctl, recording through hpd), whose
  // command was started with the runtime preloaded and counting into it: its calls are read from
  // there, as untrusted data (calls::PreloadTable), and no uprobes are set. Borrowed (dup'ed); -1: none.
  int call_table_fd = -1;
  // Sample the allocations of a launched command (hpctl record --alloc -- CMD) in hpd's preloaded
  // runtime, one sample per `alloc_mean_bytes` allocated on average (0 = 512 KiB), into
  // RawProfile::allocations. For pids: sample_allocations probes their allocator (AllocProbes); not
  // for all processes or a cgroup (record_option_problem refuses it).
  bool sample_allocations = false;
  uint64_t alloc_mean_bytes = 0;
  // hpd recording a command hpctl started with the runtime preloaded and sampling allocations into
  // a log hpctl made (`hpctl record --alloc -- CMD` through hpd): that log's descriptor, read as
  // untrusted data (calls::AllocLog), for the processes this recording follows only. Borrowed (dup'ed);
  // -1: none. Takes the place of sample_allocations, whose log the recorder would make itself.
  int alloc_log_fd = -1;
};

// Where RawSample::cpu_delta_ns comes from.
enum class CpuTimeSource {
  // The thread's own task-clock count read with each sample (PERF_SAMPLE_READ, Linux >= 6.12).
  kThreadCounter,
  // The sampling period (older kernels refuse PERF_SAMPLE_READ with inherit).
  kSamplePeriod,
  // eBPF: the task's sum_exec_runtime brought up to the sample's instant (plus the time it ran since
  // the scheduler last updated it).
  kSchedRuntimeAtSample,
};
const char* to_string(CpuTimeSource source);

struct RecordResult {
  RawProfile profile;
  // The kernel's symbols when the recording read them (eBPF off-CPU with kernel frames: its scheduler
  // frames), for symbolize_profile (ConvertOptions::kernel_symbols) so that /proc/kallsyms is read once
  // per recording; null when the recording did not need them (symbolization then reads the file).
  std::shared_ptr<const KernelSymbols> kernel_symbols;
  // eBPF: on-CPU samples taken in a thread's exit after its exit stack (its memory being released: the
  // user stack unreadable), which took the user stack of its exit stack: a thread past its exit
  // system call never returns to user mode.
  uint64_t samples_given_exit_user_stack = 0;
  // Kernel code [start, end) outside the kernel image whose names kernel_symbols holds as a read of
  // /proc/kallsyms at the recording's end would: the eBPF session's own programs, when the table (one
  // hpd kept) was read with them loaded where they ran. Their samples need no new read.
  std::vector<std::pair<uint64_t, uint64_t>> kernel_code_named;
  bool target_exited = false;    // every recorded process exited before the end
  int command_exit_status = -1;  // launched command: its wait status decoded (exit code, or 128+signal)
  CpuTimeSource cpu_time_source = CpuTimeSource::kSamplePeriod;
  uint64_t duplicate_samples = 0;  // dropped: a thread attached twice during the attach race
  // perf: records of the per-CPU rings the time-ordering stage (perf/record_ordering.h) handed on; of
  // those, delivered before their round was over (its memory bound), handed on after a younger one
  // (late: out of time order), and without a timestamp. The last three are 0 when every record reached
  // the builder in time order.
  uint64_t ordered_records = 0;
  uint64_t records_delivered_early = 0;
  uint64_t records_late = 0;
  uint64_t records_untimed = 0;
  // perf: records the stage held in their ring, then copied out to give a ring more than half full of
  // them back to the kernel (a reader slower than the rings fill; 0 otherwise).
  uint64_t records_copied_out = 0;
  // CPU time of the recording thread while samples were coming in (reading and decoding them, from
  // the first poll to the last drain); setup such as loading BPF programs is not included.
  uint64_t collection_cpu_ns = 0;
  // Backend::kAuto chose perf_event: why the eBPF backend could not be used. Empty otherwise.
  std::string backend_fallback_reason;
  // eBPF: processes whose memory maps could not be read (they exited first); their user frames have
  // no module.
  uint64_t processes_without_maps = 0;
  // eBPF: executable mappings learnt from the kernel's mmap records as they were made, and such
  // records lost (a full ring, or too many kept for processes not seen yet; also in lost_records).
  uint64_t mmap_records = 0;
  uint64_t mmap_records_lost = 0;
  // eBPF: why those records could not be watched (the events could not be opened, e.g. out of
  // descriptors with many targets); mappings were then read from /proc/PID/maps when each process
  // was first seen, so processes that lived only milliseconds may keep frames without a module.
  // Empty when the watch ran.
  std::string mmap_watch_fallback_reason;
  // Samples added for the CPU time threads used after their last timer sample: eBPF, exited threads;
  // perf_event, a thread's time after its last sample on each CPU (PerfEventDecoder::finish_cpu_tails).
  uint64_t cpu_tail_samples = 0;
  // perf_event: threads whose time after their last sample on each CPU is not known: created during
  // the recording and still running at its end (their events' counts cannot be read), their creator's,
  // or all when records were lost. Up to a sampling interval per CPU each (more in the kernel when
  // only user mode was sampled).
  uint64_t cpu_tails_unknown = 0;
  // eBPF: CPU time exited threads' last samples were given beyond the thread's final CPU time (their
  // runtime, brought up to the sample's instant, counted time that was not the thread's: steal the
  // programs could not read, IRQ time), the threads so affected, and what was taken back from those
  // samples (the rest: samples a continuous chunk had taken already).
  uint64_t cpu_excess_ns = 0;
  uint64_t threads_with_cpu_excess = 0;
  uint64_t cpu_excess_taken_back_ns = 0;
  // eBPF: samples of threads that had no CPU-time baseline (their delta is one period, a guess).
  uint64_t samples_without_cpu_baseline = 0;
  // eBPF: samples whose thread CPU time could not be brought up to the sample's instant (a kernel
  // without CONFIG_FAIR_GROUP_SCHED, or clocks that made no sense); their deltas lag by up to a
  // scheduler tick, and the thread's total stays exact.
  uint64_t samples_with_stale_cpu_time = 0;
  // eBPF: the hypervisor's steal taken out of samples' thread CPU times as they were brought up to the
  // sample's instant (the steal since the run queue last accounted it), and the samples whose steal
  // clock could not be read (theirs kept it; a later delta gives it back).
  uint64_t steal_taken_from_runtimes_ns = 0;
  uint64_t samples_with_steal_unread = 0;
  // eBPF: stack copies not taken because the ring buffer was half full or more (the reader fell
  // behind; the samples come first): cfi mode's copies of samples whose tables were not in the maps
  // yet, and switch-out copies. Those samples keep the frame-pointer walk taken with them.
  uint64_t stack_copies_skipped_ring_full = 0;
  // eBPF: threads whose baseline could not be stored (the per-thread map was full).
  uint64_t threads_without_cpu_baseline = 0;
  // eBPF: off-CPU intervals not recorded because the map of blocked threads was full.
  uint64_t off_cpu_intervals_lost = 0;
  // eBPF: threads that exited during the recording whose CPU time after their last sample did not
  // come before it ended (their last switch-out's record lost or late): that time is missing.
  uint64_t cpu_tails_missing = 0;
  // eBPF: off-CPU intervals whose switch-in the kernel's sched_switch tracepoint did not report: their
  // end was taken from the thread's CPU time (HPD_SAMPLE_SWITCH_IN_INFERRED in bpf/profile_event.h).
  uint64_t off_cpu_switch_ins_inferred = 0;
  // eBPF: blocked intervals split at the thread's wakeup (sched_wakeup) into blocked time and the
  // wait for a CPU that followed, and those that ended with no wakeup seen (woken before the hook was
  // attached), whose wait for a CPU after the wakeup, if any, is counted as blocked.
  uint64_t blocked_split_at_wakeup = 0;
  uint64_t blocked_without_wakeup = 0;
  // eBPF: waits for a CPU after a wakeup that the scheduler charged to the thread as CPU time (its
  // runtime starts at the run queue's clock as the wakeup left it), and that CPU time in all: given to
  // the waiting-for-CPU samples, not to the next on-CPU one (charged_ns in bpf/profile_event.h).
  uint64_t waits_charged_as_cpu = 0;
  uint64_t waits_charged_ns = 0;
  // eBPF, --call-graph dwarf: off-CPU records unwound from the copy of the stack their switch-out took,
  // and those without one (not written while the ring was half full, lost, or a thread already off
  // the CPU when the recording began), which keep a frame-pointer walk.
  uint64_t off_cpu_with_stack_copy = 0;
  uint64_t off_cpu_without_stack_copy = 0;
  // eBPF, pid targets with off-CPU samples: threads found off the CPU when the recording began (blocked,
  // or runnable and waiting for a CPU), whose time from then on is counted with the stack where they
  // waited; why such threads could not be looked for ("" when they were).
  uint64_t off_cpu_at_attach = 0;
  std::string attach_state_error;
  // --pid: child processes the targets had when the recording began (and theirs) that could not be
  // given events of their own (eBPF: made targets), counted from the first failure (at least that
  // many), and its reason. perf_event samples them only where they inherited events while the targets'
  // were being opened; eBPF does not record them.
  uint64_t children_not_attached = 0;
  std::string children_attach_error;
  // perf_event: the ring buffer per CPU, in KiB, the recording asked for and the one it mapped, when
  // the locked-memory limit refused the first (0 when it did not): the kernel charges a ring beyond the
  // user's perf_event_mlock_kb allowance, which all of the user's processes share (a perf record running
  // beside), to RLIMIT_MEMLOCK, unless the process has CAP_IPC_LOCK. Smaller rings may lose records
  // (counted as lost).
  uint64_t perf_ring_kib_asked = 0;
  uint64_t perf_ring_kib = 0;
  // The call-graph mode used (kFp or kDwarf) and, for CallGraph::kAuto, why, in words for the user
  // (also in profile.info.call_graph as "fp", "dwarf", "auto:fp" or "auto:dwarf").
  CallGraph call_graph = CallGraph::kFp;
  std::string call_graph_reason;
  uint32_t stack_copy_bytes = 0;  // dwarf: bytes of stack copied per sample; fp: the small leaf copy
  // User-space unwinding (dwarf mode) and the frameless-leaf fix (fp mode), part of collection_cpu_ns.
  uint64_t unwind_ns = 0;  // monotonic time spent in the unwinder, summed over samples
  uint64_t unwound_samples = 0;
  uint64_t leaf_callers_added = 0;  // fp: callers of frameless leaves put back into the chain
  uint64_t sample_bytes = 0;        // bytes of sample records read from the kernel
  // eBPF, with kernel.bpf_stats_enabled=1 (else 0): the kernel's count of runs of the sampling
  // program (one per timer tick of every CPU, targets or not), of the sched_switch program and of the
  // sched_wakeup program (one per wakeup of the system), and the time they took, measured around each
  // run by the kernel itself.
  uint64_t bpf_sample_prog_runs = 0;
  uint64_t bpf_sample_prog_ns = 0;
  uint64_t bpf_switch_prog_runs = 0;
  uint64_t bpf_switch_prog_ns = 0;
  uint64_t bpf_wakeup_prog_runs = 0;
  uint64_t bpf_wakeup_prog_ns = 0;
  // eBPF: pages of the ring buffer written once before the recording started (0 when the kernel lacks
  // syscall programs or bpf_loop), so that the target does not pay each page's first write.
  uint64_t bpf_ring_pages_warmed = 0;
  // The eBPF programs and maps were loaded ahead (prepare_recording), not by this recording.
  bool bpf_loaded_ahead = false;
  // cfi mode: the tables in the eBPF maps and how the programs' user walks ended.
  struct CfiSummary {
    uint64_t modules = 0;         // module files seen mapped
    uint64_t modules_loaded = 0;  // with a table in the maps
    uint64_t rows = 0;
    uint64_t map_bytes = 0;  // kernel memory the rows take
    uint64_t row_capacity = 0;
    uint64_t modules_evicted = 0;  // tables taken out of the maps to make room (LRU, unmapped modules)
    uint64_t modules_refused = 0;  // tables that did not fit even then: walked by frame pointer
    // The most rows the mapped modules' tables and a refused one needed at once (CfiMapStats).
    uint64_t rows_wanted = 0;
    uint64_t compile_ns = 0;       // compiling tables that were not cached yet
    uint64_t tables_compiled = 0;  // tables this recording compiled
    // Tables kept in memory by earlier recordings of this process (hpd keeps them across its
    // recordings, bounded, least recently used dropped): neither compiled nor read from disk again.
    uint64_t tables_kept = 0;
    uint64_t tables_stored = 0;  // of those, written to the unwind-table cache on disk
    // The unwind-table cache on disk (hpd/collect/unwind_cache.h): its directory ("" when none), the
    // tables loaded from it, and its files refused (damaged, stale, another version) and compiled again.
    std::string disk_cache;
    uint64_t tables_from_disk = 0;
    uint64_t disk_load_ns = 0;
    uint64_t disk_refused = 0;
    std::string disk_refusal;  // the first one, "FILE: why"
    // Samples walked by frame pointer (and not again) because a table they needed was not in the eBPF
    // maps when they were taken: its module just mapped, its table being read from the disk cache or
    // compiled.
    uint64_t samples_tables_pending = 0;
    // Off-CPU samples of threads that blocked before their tables were in the maps, walked again with
    // the tables (not in samples_tables_pending): their stack read while the thread was still off the
    // CPU, or else (the thread ran again before the tables came) the copy its switch-out wrote.
    uint64_t off_cpu_rewalked = 0;
    uint64_t off_cpu_rewalked_from_copy = 0;  // of off_cpu_rewalked
    // On-CPU samples taken before their tables were in the maps, held with a copy of their stack and
    // walked again once the tables were (not in samples_tables_pending).
    uint64_t on_cpu_rewalked = 0;
    uint64_t samples_with_fp_frames = 0;     // samples with a frame of a module without a table
    uint64_t mappings_dropped = 0;           // executable mappings beyond the per-process limit
    std::vector<std::string> without_table;  // "path: reason"; their frames were walked by frame pointer
  } cfi;
  // eBPF: how user walks ended, by name ("root", "read fault", ...), for on-CPU [0] and off-CPU [1]
  // samples (cfi and fp modes; dwarf mode's on-CPU walks are counted by the unwinder).
  std::vector<std::pair<std::string, uint64_t>> user_stack_ends[2];
  // RecordOptions::count_calls: probe hits, their estimated cost, and messages for the user.
  CallCountStats calls;
  // RecordOptions::sample_allocations: what went wrong or was lost, for the user.
  std::vector<std::string> alloc_messages;
  // Where the allocations came from when not from hpd's in-process runtime: "uprobes on pid N's
  // allocator in PATH" (--alloc --pid); empty for the runtime.
  std::string alloc_source;
};

inline constexpr uint32_t kMaxFrequencyHz = 100000;
// cfi mode: kernel memory of a row of the eBPF row map (its pc and the index of its rule; the rules,
// each distinct one stored once, take a map of 512 KiB beside it), and of a bucket of the rows' index,
// which has a bucket for every 4 rows.
inline constexpr uint32_t kCfiRowBytes = 8;
// cfi mode: default capacity of the eBPF row map: 4 Mi rows, 32 MiB, and 8 MiB more for the rows'
// index. libc has about 28,000 rows, libstdc++ 34,000, a 100 MB C++ program about a million; the
// programs of a machine building with clang (clang, libLLVM, libclang-cpp, cc1plus) about 3.7 million
// at once.
inline constexpr uint32_t kDefaultCfiRowCapacity = 1u << 22;
// The largest row map a recording may ask for (256 MiB of rows, 64 MiB of index).
inline constexpr uint32_t kMaxCfiRowCapacity = 1u << 25;

// The eBPF CFI maps of every recording running in this process now (the daemon's sessions and its
// continuous mode), for `hpctl status`.
struct CfiMapsStatus {
  uint64_t recordings = 0;  // recordings in cfi mode
  uint64_t rows = 0;        // rows in their maps
  uint64_t row_capacity = 0;
  uint64_t modules_loaded = 0;
  uint64_t modules_evicted = 0;
  uint64_t modules_refused = 0;
  uint64_t map_bytes = 0;  // kernel memory the rows and their indexes take
  // The most rows one of them needed at once for the tables it loaded and those it refused for lack of
  // room (CfiMapStats::rows_wanted; 0: none refused): a row map of this many would have held them.
  uint64_t rows_wanted = 0;
};
CfiMapsStatus cfi_maps_status();

// The compiled unwind tables kept in this process across recordings, for the next ones (hpd: its
// sessions and continuous mode; docs/architecture.md, "Kept in memory"), least recently used dropped
// past a bound. A local recording keeps them for its own run only, with the default bound.
inline constexpr uint64_t kDefaultKeptCfiTablesBytes = 128ull << 20;
struct KeptCfiTablesStatus {
  uint64_t tables = 0;       // kept now
  uint64_t bytes = 0;        // what they count against the bound (rows, index, segments)
  uint64_t limit_bytes = 0;  // the bound
  uint64_t evicted = 0;      // dropped for the bound since the process started
};
KeptCfiTablesStatus kept_cfi_tables_status();
// A new bound (hpd.conf's max_kept_unwind_tables_mb): a smaller one drops tables at once. Returns the
// number dropped.
uint64_t set_kept_cfi_tables_limit(uint64_t bytes);

// Whether this process keeps the kernel's symbols (/proc/kallsyms, about 120,000 text symbols, 5 MiB)
// across its recordings (hpd: on): a recording then starts with the table an earlier one read, and
// reads it again at its end only when one of its kernel addresses is not in the kernel image (a
// module's, a BPF program's: docs/performance.md, "Fixed cost of a recording"). Off (hpctl's local
// recordings), each recording reads its own.
void keep_kernel_symbols(bool keep);
struct KernelSymbolsStatus {
  bool kept = false;     // keeping is on
  uint64_t symbols = 0;  // in the table kept now
  uint64_t reads = 0;    // reads of /proc/kallsyms by recordings since the process started
  // Times the kept table was completed with a recording's own programs instead (loaded after it was read)
  uint64_t completions = 0;
};
KernelSymbolsStatus kernel_symbols_status();
// The table for naming kernel addresses outside a recording (hpd's continuous chunks), so that the
// process holds one copy: with keeping on, the table kept (read now when none is), or, `read_again`,
// /proc/kallsyms read now and kept in its place; with keeping off, a table read now and not kept.
std::shared_ptr<const KernelSymbols> kept_kernel_symbols(bool read_again);

// What keeps a recording's other options from going together (checked after the targets).
enum class OptionProblem {
  kNone,
  kCfiWithPerf,            // call_graph kCfi with backend kPerf (cfi unwinds in the eBPF programs)
  kAllWithPerf,            // all_processes with backend kPerf
  kCgroupWithPerf,         // a cgroup with backend kPerf
  kAllocWithAll,           // sample_allocations of all processes (only a command or pids)
  kAllocWithCgroup,        // sample_allocations of a cgroup
  kBpfUnprivileged,        // backend kBpf without CAP_BPF and CAP_PERFMON (or root)
  kBpfNeededUnprivileged,  // all processes, a cgroup or cfi (eBPF only) without them
};

// The one check of the options that do not go together, whatever the privileges (kCfiWithPerf,
// k*WithPerf, kAlloc*; kNone when the targets themselves are wrong): validate_record_options throws
// RecordOptionError with it, and session::record_options_from_request checks it for hpctl and hpd.
OptionProblem record_option_problem(const RecordOptions& options);

// The engine's own words for a problem, naming no caller's options ("both process ids and a command
// to run were given"). hpctl words a problem with its flags (cli/record_problem_words.cpp), hpd with
// its request's fields (daemon/src/service/error_reply.cpp); these are what() of the errors below.
const char* record_problem_text(TargetProblem problem);
const char* record_problem_text(OptionProblem problem);

// The reasons' names where they travel (hpd's error reply, "reason": docs/protocol.md): "no_target",
// "pids_and_command", ..., "cfi_with_perf", ...; "" for kNone. A name of neither kind gives kNone.
const char* to_string(TargetProblem problem);
const char* to_string(OptionProblem problem);
TargetProblem target_problem_named(std::string_view name);
OptionProblem option_problem_named(std::string_view name);

// A RecordError about the targets, carrying the reason.
class RecordTargetError : public RecordError {
 public:
  explicit RecordTargetError(TargetProblem problem)
      : RecordError(record_problem_text(problem)), problem_(problem) {}
  [[nodiscard]] TargetProblem problem() const { return problem_; }

 private:
  TargetProblem problem_;
};

// A RecordError about options that do not go together, carrying the reason.
class RecordOptionError : public RecordError {
 public:
  explicit RecordOptionError(OptionProblem problem)
      : RecordError(record_problem_text(problem)), problem_(problem) {}
  [[nodiscard]] OptionProblem problem() const { return problem_; }

 private:
  OptionProblem problem_;
};

// Checks the options without touching any process: the targets (target_problem, then
// RecordTargetError), the options (record_option_problem and the eBPF privileges, then
// RecordOptionError), frequency range, cgroup, pids and the privileges perf_event needs (RecordError
// with an actionable message).
void validate_record_options(const RecordOptions& options);

// Whether the eBPF backend can record here: built in, kernel BTF present, CAP_BPF and CAP_PERFMON
// (or root), and the programs pass the verifier (they are loaded once to find out). When not, *why
// (if given) says what is missing.
bool bpf_backend_available(std::string* why);

// hpd: keeps the eBPF programs and maps of a recording like `options` loaded ahead of it, in a thread
// of its own, so that a recording loaded alike (same targets' kind, frequency, call graph, off-CPU
// and kernel choices, maps' sizes) only fills its maps and attaches its events; the recording itself
// then gives them back, reset, for the next (RecordOptions::load_next_ahead). Two kinds are kept at
// most: the one loaded at hpd's start (bpf_backend_available_prepared) and the last other kind asked
// for, which replaces the one before it. Returns at once; does nothing when the eBPF backend cannot be used.
void prepare_recording(const RecordOptions& options);

// hpd's start: bpf_backend_available found by loading the programs and maps of a recording like
// `first` as prepare_recording does, waiting for them. They then wait for that recording, so that hpd
// reports ready (and serves its first request) with them loaded rather than still loading them, and
// the programs are loaded once at the start, not twice (a check, then the set). When that set cannot
// be loaded, the plain check decides and *error (if given) says why the set was not loaded.
bool bpf_backend_available_prepared(const RecordOptions& first, std::string* why, std::string* error);

struct PreparedRecordingStatus {
  bool ready = false;     // a set is loaded and waits for a recording
  size_t ready_sets = 0;  // how many wait: at most 2 (the start's kind, the last other kind)
  bool loading = false;   // one is being loaded
  uint64_t loads = 0;     // sets loaded ahead so far
  uint64_t taken = 0;     // recordings that took one
  // Sets a session gave back at its end, every map reset (emptied, zeroed, its globals as loaded), and
  // kept for the next recording of its kind instead of a fresh load; and those whose reset failed
  // (destroyed, and a fresh set loaded), with the last reason.
  uint64_t reuses = 0;
  uint64_t reset_failures = 0;
  std::string error;        // why the last load ahead failed ("" when it did not)
  std::string reset_error;  // why the last reset failed ("" when none did)
};
PreparedRecordingStatus prepared_recording_status();

// Drops the set loaded ahead and ends its thread (hpd's stop); prepare_recording does nothing after.
void release_prepared_recording();

// With HPD_TIMING set in the environment (to anything but "" or "0"): prints
// "hpd-timing STEP MONOTONIC_NS CPU_NS" on stderr (CPU_NS: the process's CPU time so far), for the
// steps of a recording's start (hpctl's, the recorder's and hpd's), so that where the time to the first
// sample goes, and how much of it was work rather than a wait for a CPU, can be read
// (bench/first_sample.sh).
void timing_mark(const char* step);

// Records until the duration ends, *stop becomes true, or every target process exits.
// Throws RecordError for a missing process, lacking privileges, or a command that cannot start.
RecordResult record(const RecordOptions& options);

}  // namespace hpd
