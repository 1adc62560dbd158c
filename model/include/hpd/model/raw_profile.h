// RawProfile: what a recording measured, before any symbolization.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hpd/base/unique_fd.h"
#include "hpd/model/hashed_index_set.h"

namespace hpd {

inline constexpr uint32_t kNoIndex = UINT32_MAX;

enum class SampleKind : uint8_t {
  kOnCpu = 0,   // a timer sample taken while the thread ran
  kOffCpu = 1,  // an interval the thread spent blocked off the CPU (sleeping, waiting for I/O or a lock)
  // An interval the thread spent runnable but not running: preempted or yielding, waiting for a CPU
  // (the scheduler ran something else). Its stack is where it was switched out (the preemption point),
  // not something that blocked it.
  kWaitCpu = 2,
};
inline constexpr int kSampleKindCount = 3;

// Whether a sample stands for an interval off the CPU (blocked or waiting for a CPU), weighted by its
// off_cpu_ns, rather than a timer sample of a running thread.
constexpr bool is_off_cpu_interval(SampleKind kind) {
  return kind != SampleKind::kOnCpu;
}

// How the capture of a sample's user stack ended.
enum class StackEnd : uint8_t {
  kUnknown = 0,
  kComplete = 1,   // the walk reached the outermost frame
  kTruncated = 2,  // stopped by a depth or copy-size limit
  kFailed = 3,     // the walk could not continue (bad frame pointer, no unwind info)
};

const char* to_string(StackEnd end);

// A module file held open (read-only) since a live process mapped it: opened through
// /proc/PID/map_files, it is the very file the process ran, readable after the process exited and
// whatever mount namespace (PrivateTmp, a container) the reader runs in. Closed with its last owner.
class HeldFile {
 public:
  explicit HeldFile(int fd) : fd_(fd) {}
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

// One file seen mapped executable in some process (or the kernel image).
struct RawModule {
  std::string path;      // as the process saw it (/proc/PID/maps); "[kernel.kallsyms]" for the kernel
  std::string build_id;  // lower-case hex, empty when the file has none or could not be read
  bool is_kernel = false;
  // The ELF image of a module that has no file, as a process mapped it: the vDSO ("[vdso]"), read
  // from /proc/PID/mem while the process lived. Empty for files. Kept in .hpr captures.
  std::vector<uint8_t> image;
  // The file, held open while recording (see HeldFile); null when it could not be opened. Only
  // meaningful inside the recording process: not kept in captures.
  std::shared_ptr<const HeldFile> file;
};

// An executable mapping of a module into a process's address space.
struct RawMapping {
  uint64_t start = 0;  // runtime address range [start, end)
  uint64_t end = 0;
  uint64_t file_offset = 0;  // file offset mapped at `start`
  uint32_t module = kNoIndex;
  uint64_t time_ns = 0;      // when it was seen mapped; 0 = already mapped when recording began
  uint64_t unmapped_ns = 0;  // when it stopped being valid (e.g. the process exec'd); 0 = never
};

struct RawProcess {
  int32_t pid = 0;
  std::string name;  // comm
  std::string exe;   // /proc/PID/exe target at the time it was seen
  std::vector<std::string> cmdline;
  // Its cgroup when it was seen (and again at each exec), from /proc/PID/cgroup: the cgroup v2 path
  // ("/system.slice/foo.service"), or on a hybrid system whose v2 tree holds it at the root, its path
  // in systemd's name=systemd tree; "" when unknown (an older capture, a process already gone).
  std::string cgroup;
  uint64_t start_ns = 0;  // first time seen (monotonic ns)
  uint64_t end_ns = 0;    // exit time; 0 = still alive when recording ended
  // When set (monotonic ns): the recorder stopped following the process at this exec, which gave it
  // credentials the client may not trace (a set-user-ID program run for an unprivileged client); it
  // has no samples from then on.
  uint64_t unfollowed_ns = 0;
  // In the order seen; a later mapping over the same range replaces an earlier one from its time on.
  std::vector<RawMapping> mappings;

  // The mapping covering `address` at monotonic time `time_ns`, or nullptr.
  const RawMapping* find_mapping(uint64_t address, uint64_t time_ns) const;
};

// What was lost on the way; never silent.
struct LostCounts {
  uint64_t lost_records = 0;      // PERF_RECORD_LOST / ring-buffer reservation failures
  uint64_t throttle_events = 0;   // PERF_RECORD_THROTTLE
  uint64_t stack_failures = 0;    // samples whose stack could not be captured
  uint64_t truncated_stacks = 0;  // samples whose stack hit a depth/size limit

  LostCounts& operator+=(const LostCounts& o) {
    lost_records += o.lost_records;
    throttle_events += o.throttle_events;
    stack_failures += o.stack_failures;
    truncated_stacks += o.truncated_stacks;
    return *this;
  }
};

struct RawThread {
  int32_t pid = 0;
  int32_t tid = 0;
  std::string name;
  uint64_t start_ns = 0;  // first time seen (monotonic ns)
  uint64_t end_ns = 0;    // exit time; 0 = alive when recording ended
  LostCounts lost;        // this thread's share of RawProfile::lost, where the backend knows it
};

// What the first user address of a stack is: the thread's user pc when the stack was taken.
enum class UserLeaf : uint8_t {
  // The instruction the thread was interrupted at and will run next: a timer sample of user code, an
  // interrupt or an exception (a page fault), a preemption of user code. Looked up as it is.
  kInterrupted = 0,
  // The thread entered the kernel by a system call: its user pc is the instruction after `syscall`,
  // which behaves as a return address and is looked up one byte back, as every caller frame is.
  kAfterSyscall = 1,
};

// The user leaf of a stack recorded before hpd said which it was (captures without the column): the
// rule of those recordings, interrupted without kernel frames, after a system call under them.
constexpr UserLeaf presumed_user_leaf(size_t kernel_depth) {
  return kernel_depth == 0 ? UserLeaf::kInterrupted : UserLeaf::kAfterSyscall;
}

// A unique captured stack, leaf first: `kernel_depth` kernel addresses, then `user_depth` user ones.
// The first user address is the thread's user pc (`user_leaf` says what it is); every later user
// entry is a return address. The first kernel address is the interrupted kernel instruction of an
// on-CPU sample, and a return address (a call into the scheduler) in an off-CPU stack.
struct RawStack {
  uint32_t block = 0;   // RawStackTable's block of addresses that holds the stack's
  uint32_t offset = 0;  // into that block
  uint16_t kernel_depth = 0;
  uint16_t user_depth = 0;
  UserLeaf user_leaf = UserLeaf::kInterrupted;
};

// Interns captured stacks: samples refer to a stack by index, identical stacks are stored once. Two
// stacks with the same addresses but different user leaves are different stacks.
class RawStackTable {
 public:
  uint32_t intern(std::span<const uint64_t> kernel_leaf_first, std::span<const uint64_t> user_leaf_first,
                  UserLeaf user_leaf);
  // With the user leaf presumed from the kernel part (presumed_user_leaf).
  uint32_t intern(std::span<const uint64_t> kernel_leaf_first, std::span<const uint64_t> user_leaf_first) {
    return intern(kernel_leaf_first, user_leaf_first, presumed_user_leaf(kernel_leaf_first.size()));
  }

  size_t size() const { return stacks_.size(); }
  const RawStack& operator[](uint32_t index) const { return stacks_[index]; }
  std::span<const uint64_t> kernel_frames(uint32_t index) const;
  std::span<const uint64_t> user_frames(uint32_t index) const;
  // Every stack's addresses, in the stacks' order (a copy).
  std::vector<uint64_t> addresses() const;
  // The heap the addresses hold.
  size_t address_bytes() const;
  // The heap the whole table holds: the addresses, the stacks and the index.
  size_t memory_bytes() const;
  // The part of it the stacks in the table use: their addresses, their entries and the index slots
  // they need. What retain let go is held for the next stacks, not used.
  size_t used_bytes() const;
  // Keeps only the stacks `keep` marks (one flag per stack), renumbered in their order; returns each
  // old index's new one (kNoIndex: dropped). The memory of the others stays with the table for the
  // stacks interned next: a recording that lets its stacks go every few seconds would otherwise
  // allocate and fault in the same megabytes again each time (the kernel zeroing each page). What the
  // table holds stays at the most it held at once.
  std::vector<uint32_t> retain(const std::vector<bool>& keep);

 private:
  // Appends stack `s` (its addresses, kernel then user, where they fit) under `hash`; returns its index.
  uint32_t append(RawStack s, std::span<const uint64_t> kernel, std::span<const uint64_t> user,
                  uint64_t hash);
  const uint64_t* frames_of(const RawStack& s) const { return blocks_[s.block].data() + s.offset; }

  std::vector<RawStack> stacks_;
  // The addresses, in blocks that never move: a stack is appended whole to the block being filled, or
  // to the next one when it does not fit, a new one twice as large (up to kMaxBlockWords) past the last.
  // A single vector's doubling copied every address and faulted in twice the memory at each growth, a
  // recording of a whole machine's stacks spending a tenth of its CPU there.
  std::vector<std::vector<uint64_t>> blocks_;
  size_t filling_ = 0;      // the block being filled
  HashedIndexSet by_hash_;  // stack indices by their frames' hash
};

struct RawSample {
  uint64_t time_ns = 0;  // monotonic clock
  int32_t pid = 0;
  int32_t tid = 0;
  uint32_t stack = kNoIndex;  // into RawProfile::stacks; kNoIndex = no stack captured
  uint64_t cpu_delta_ns = 0;  // CPU time the thread used since its previous sample
  uint64_t off_cpu_ns = 0;    // kOffCpu, kWaitCpu: how long the thread was off the CPU
  uint16_t cpu = 0;
  SampleKind kind = SampleKind::kOnCpu;
  StackEnd stack_end = StackEnd::kUnknown;
};

// On-CPU samples the sampling timer did not take though their thread's CPU clock ran on: a sample
// stands for the CPU time since its thread's previous one (its cpu_delta_ns), and one that stands for
// n intervals (rounded) stands for n - 1 samples not taken. The perf backend recording a user not
// allowed kernel samples (perf_event_paranoid) takes none while a thread runs in the kernel; a timer
// that fires late or a record lost leaves the same gap. That CPU time is in the CPU ms of the sample
// after it, but not in the sample counts or the shares made of them.
struct SamplesNotTaken {
  uint64_t samples = 0;  // samples not taken
  uint64_t ns = 0;       // the CPU time beyond one interval of the samples that stood for more
  // One on-CPU sample, or `n` summed (their cpu_delta_ns together), of `cpu_ns`. A sum of samples of
  // unequal CPU gives a lower bound only (a sample of 1.6 intervals and one of 0.6 stand for one not
  // taken, their 2.2 together for none): counted sample by sample where the samples are known.
  void add(uint64_t cpu_ns, uint64_t n, uint64_t interval_ns);
  void add(const SamplesNotTaken& other) {
    samples += other.samples;
    ns += other.ns;
  }
};

// Samples a recording released once they were written out (RawProfile::release_samples), summed per
// thread, stack, kind, stack end and mapping epoch: what the summary and the report need, not a
// timeline.
struct RawSampleSum {
  int32_t pid = 0;
  int32_t tid = 0;
  uint32_t stack = kNoIndex;  // into RawProfile::stacks; kNoIndex = no stack captured
  SampleKind kind = SampleKind::kOnCpu;
  StackEnd stack_end = StackEnd::kUnknown;
  // How many of the process's distinct mapping times (RawMapping::time_ns) preceded the samples when
  // they were released: samples of one stack on either side of a new mapping may resolve differently.
  uint32_t epoch = 0;
  uint64_t samples = 0;
  uint64_t cpu_delta_ns = 0;  // sums of the samples' fields
  uint64_t off_cpu_ns = 0;
  uint64_t first_ns = 0;  // the earliest and the latest sample's time
  uint64_t last_ns = 0;
  // The on-CPU samples' samples not taken, counted one sample at a time as they were released (a sum's
  // CPU time would give only a lower bound): the same figure the samples themselves give.
  SamplesNotTaken not_taken;
};

// An exact count of calls from one call site to one function (mcount/__fentry__ instrumentation).
struct RawCallEdge {
  int32_t pid = 0;
  uint64_t caller_address = 0;  // runtime address inside the caller (a return address)
  uint64_t callee_address = 0;  // runtime address inside the callee (its entry)
  uint64_t count = 0;
};

// A latency histogram of hpd's in-process call counter: log-linear buckets over clock ticks (16 per
// power of two, the layout of hpd/calls/preload_abi.h), with the scale that turns ticks into ns.
struct LatencyHistogram {
  double ns_per_tick = 0;                              // 0 = no histogram
  std::vector<std::pair<uint32_t, uint64_t>> buckets;  // (bucket, calls), sorted by bucket

  [[nodiscard]] bool empty() const { return buckets.empty() || ns_per_tick <= 0; }
  [[nodiscard]] uint64_t count() const;
  // The q-quantile (0 < q <= 1) in ns: linear within the bucket it falls in, at most `max_ns`.
  [[nodiscard]] uint64_t quantile_ns(double q, uint64_t max_ns) const;
  // Adds `other`'s counts (same scale: both from one recording's machine).
  void merge(const LatencyHistogram& other);
  // The smallest tick value of a bucket, and the bucket of a tick value.
  static uint64_t bucket_low_ticks(uint32_t bucket);
  static uint32_t bucket_of_ticks(uint64_t ticks);
};

// The latency of the calls of one function of one process, each call from its entry to its return,
// callees included: timed by hpd's in-process runtime (TSC ticks), or by the call counter's uprobes
// at the entry and return of functions probed at their first instruction (ns: ns_per_tick = 1).
struct RawCallLatency {
  int32_t pid = 0;
  uint64_t callee_address = 0;  // as RawCallEdge::callee_address
  uint64_t calls = 0;           // calls timed (those that returned through the hook)
  uint64_t sum_ns = 0;          // all timed calls: sum_ns / calls is the average
  uint64_t outer_ns = 0;        // outermost activations only, so recursion counts once
  uint64_t max_ns = 0;
  LatencyHistogram histogram;
};

// One allocation sampled by hpd's in-process runtime (`hpctl record --alloc -- CMD`): allocations are
// sampled by bytes, each with probability 1 - exp(-size/mean) (see alloc_sample_scale).
struct RawAllocation {
  int32_t pid = 0;
  int32_t tid = 0;
  uint64_t address = 0;       // what the allocator returned
  uint64_t size = 0;          // bytes asked for
  uint32_t stack = kNoIndex;  // into RawProfile::stacks: user return addresses, innermost first
  bool freed = false;         // its free was seen; else still live when the recording ended
  bool tracked = true;        // false: its free could not be watched (counted allocated, never live)
  uint64_t time_ns = 0;       // CLOCK_MONOTONIC when it was sampled; 0 = unknown (an older capture)
  uint64_t free_time_ns = 0;  // when its free was seen (freed only); 0 = unknown
  int32_t free_tid = 0;       // the thread that freed it (freed only); 0 = unknown
};

// How the allocation sampling went (RawProfile::alloc).
struct RawAllocStats {
  uint64_t mean_bytes = 0;       // the sampling's mean distance in bytes; 0 = allocations not sampled
  uint64_t processes = 0;        // process starts of the runtime with the log
  uint64_t dropped = 0;          // samples and frees lost because the log was full
  uint64_t untracked = 0;        // sampled allocations whose free could not be watched
  uint64_t frees_unmatched = 0;  // frees logged without their allocation
};

// The factor that makes a sampled allocation of `size` bytes stand for what it was sampled from: it
// was sampled with probability 1 - exp(-size/mean), so it weighs size / (1 - exp(-size/mean)) bytes
// and 1 / (1 - exp(-size/mean)) allocations, which keeps every sum unbiased. 0 when size or mean is 0.
double alloc_sample_scale(uint64_t size, uint64_t mean_bytes);

// One function of a MIP (Machine IR Profile) snapshot: exact counts the instrumented program kept.
struct RawMipFunction {
  std::string name;      // mangled, as in the module's __llvm_mipmap
  uint64_t address = 0;  // link-time address (ELF vaddr) of the entry; 0 = unknown
  uint32_t size = 0;
  uint64_t call_count = 0;      // exact with call counting; 1 = "called" in coverage mode
  uint64_t first_call = 0;      // first-call order (1 = the first function called); 0 = never / untimed
  uint32_t blocks_covered = 0;  // including the entry block; 0/0 without block coverage
  uint32_t blocks_total = 0;
};

// The MIP counts of one module of one process at one moment.
struct RawMipSnapshot {
  int32_t pid = 0;
  uint64_t time_ns = 0;        // monotonic, when the read began
  uint32_t module = kNoIndex;  // into RawProfile::modules
  uint32_t module_hash = 0;
  bool counts_calls = false;  // call counts are exact (else call_count is 0/1 coverage)
  std::vector<RawMipFunction> functions;
};

// RecordingInfo::target of a recording of every process, the start of one of a cgroup's ("cgroup
// PATH") and of the continuous profile's merged chunks ("continuous profile (N chunks, FROM to TO)");
// the first two may be followed by " while running CMD". Any other target names its processes ("pid
// 12", "pids 3,4", the command's words).
inline constexpr std::string_view kAllProcessesTarget = "all processes";
inline constexpr std::string_view kCgroupTargetPrefix = "cgroup ";
inline constexpr std::string_view kContinuousTargetPrefix = "continuous profile";
enum class TargetScope {
  kNamed,         // pids or a command: their threads were sampled on their own CPU time
  kCgroup,        // a cgroup's processes, sampled per CPU
  kAllProcesses,  // every process, sampled per CPU
  kContinuous,    // hpd's continuous profile (every process), chunks merged
};
TargetScope target_scope(std::string_view target);

struct RecordingInfo {
  uint64_t start_unix_ns = 0;  // wall clock at start_mono_ns
  uint64_t start_mono_ns = 0;
  uint64_t end_mono_ns = 0;
  uint64_t interval_ns = 0;  // the sampling period
  uint32_t frequency_hz = 0;
  std::string backend;                 // "perf", "bpf"
  std::string event;                   // "task-clock", "cpu-clock"
  std::string call_graph;              // "fp", "dwarf"
  std::string target;                  // what was recorded, for the profile's title
  std::vector<std::string> arguments;  // the hpctl command line
  std::string hostname;
  std::string kernel_release;
  bool kernel_frames = false;  // whether kernel callchains were captured
  uint32_t logical_cpus = 0;
  // What counted the call edges: "runtime" (hpd's preloaded mcount/__fentry__), "uprobes", both
  // ("runtime+uprobes"), or "" (no call counting).
  std::string call_counter;
  // When the recording was asked for (hpctl started it, or hpd received the request) and when its
  // first on-CPU sample was taken, both CLOCK_MONOTONIC; 0 = unknown (no on-CPU sample, an older
  // file). Between them the targets ran unsampled: the report, the summary and the Firefox profile
  // say how long, and count the recording's duration from the first sample.
  uint64_t requested_mono_ns = 0;
  uint64_t first_sample_mono_ns = 0;
  // The CPU time the hypervisor took from this machine's CPUs between start_mono_ns and end_mono_ns
  // (/proc/stat's steal, all CPUs; read_host_steal_ns), when known. The sampling timers count it as
  // the running threads' time while the threads' own CPU clocks do not: samples can exceed the CPU
  // time the threads used by up to this much, and the summary, the report and the Firefox profile
  // say so (host_steal_note).
  bool host_steal_known = false;
  uint64_t host_steal_ns = 0;
  // States it as a meter gives it (HostStealMeter::since_start, base/proc_files.h): unknown when empty.
  void state_host_steal(std::optional<uint64_t> steal_ns) {
    host_steal_known = steal_ns.has_value();
    host_steal_ns = steal_ns.value_or(0);
  }
};

// The share of the recording's CPU time (its length x logical_cpus) the hypervisor took; nullopt when
// not known.
std::optional<double> host_steal_share(const RecordingInfo& info);
// What the summary and the report print about it: "" when unknown or below 0.5% (10 ms ticks make
// smaller shares noise), else a sentence (no trailing period) saying how much and what it does to
// the figures.
std::string host_steal_note(const RecordingInfo& info);

// Counted only for recordings whose timers ran on their threads' CPU time (a pid, a command: the timer
// stops with the thread), at an interval they state: a timer per CPU (all processes, a cgroup) samples
// a thread now and then, and a sample standing for several intervals is chance there, not a sample
// not taken.
bool samples_not_taken_counted(const RecordingInfo& info);
// What the summary and the report say of it: "" below 1% of the on-CPU samples (`taken`) or 5 samples,
// else a sentence (no trailing period) saying how many, how much CPU time, the likely cause for this
// recording (`info`: its backend and whether it sampled the kernel) and what it does to the figures.
std::string samples_not_taken_note(const SamplesNotTaken& missed, uint64_t taken, const RecordingInfo& info);
// The sampling interval a recording's samples stand for: interval_ns, else one over frequency_hz; 0
// when neither is known.
uint64_t sampling_interval_ns(const RecordingInfo& info);
// The interval the exports weigh an on-CPU sample with: sampling_interval_ns, else 1 ms when the
// recording does not say.
inline constexpr uint64_t kAssumedIntervalNs = 1'000'000;
uint64_t interval_ns_or_assumed(const RecordingInfo& info);

// A symbol of JIT-generated code, from the process's /tmp/perf-PID.map (perf's convention: one
// "START SIZE NAME" line per code blob, hex, written by the runtime: node --perf-basic-prof, the JVM
// with perf-map-agent, LuaJIT, ...) or its jit-PID.dump (perf's jitdump: node --perf-prof). Read
// when the recording ends; not stored in .hpr captures.
struct RawJitSymbol {
  int32_t pid = 0;
  uint64_t start = 0;  // runtime address
  uint64_t size = 0;
  std::string name;
};

struct RawProfile {
  RecordingInfo info;
  std::vector<RawModule> modules;
  std::vector<RawProcess> processes;
  std::vector<RawThread> threads;
  RawStackTable stacks;
  // In the order recorded; not necessarily sorted by time. samples[0] is sample number sample_offset
  // of the recording: the earlier ones were written out and released (release_samples).
  std::vector<RawSample> samples;
  uint64_t sample_offset = 0;
  std::vector<RawSampleSum> released;  // the released samples, summed; in the order first released
  // How many times the stacks were let go (forget_released_stacks): each time the indices start over,
  // and a capture being written says so before it writes the stacks again.
  uint32_t stack_generation = 0;
  // Whether `released` lost its stacks (forget_released_stacks, or samples released by thread only,
  // ReleasedSums::kByThread): the sums still count the samples by
  // thread, kind and stack end, but no longer say where they were; only the capture they were written
  // to does.
  bool released_stacks_forgotten = false;
  // The kernel addresses of the stacks let go (forget_released_stacks), sorted, each once: the kernel
  // symbols kept with the recording (kernel_symbols) name them too. Bounded by the kernel's code.
  std::vector<uint64_t> kernel_addresses_let_go;
  std::vector<RawCallEdge> call_edges;
  // Per (process, function) call latency: the in-process counter's, or the uprobes' (session mode).
  std::vector<RawCallLatency> call_latency;
  // Oldest first; several per (pid, module) may be kept, the last one is what the process reached.
  std::vector<RawMipSnapshot> mip_snapshots;
  std::vector<RawJitSymbol> jit_symbols;  // of all processes; for one address the last line wins
  // Allocations sampled by hpd's runtime (--alloc), in the order logged, and how the sampling went.
  std::vector<RawAllocation> allocations;
  RawAllocStats alloc;
  LostCounts lost;
  // The kernel symbols that name the stacks' kernel addresses, as /proc/kallsyms listed them while
  // the recording ran (its lines, in its format: each symbol hit, the symbol after it, and the lowest
  // one): a capture converted later, or in another boot, names its kernel frames, BPF programs and
  // modules unloaded since included. Empty: read /proc/kallsyms when symbolizing.
  std::string kernel_symbols;

  // Every kernel address of the recording's stacks, those held and those let go, sorted, each once.
  [[nodiscard]] std::vector<uint64_t> kernel_addresses() const;
  // Every sample of the recording: those released and those still held.
  [[nodiscard]] uint64_t sample_count() const { return sample_offset + samples.size(); }
  // What a released sample's sum keeps of it.
  enum class ReleasedSums {
    // Its stack and mapping epoch too: the report and the profile made from memory at the end.
    kByStack,
    // Its thread, kind and stack end only (the stack is kNoIndex, the epoch 0): for a recording whose
    // capture holds its stacks and is not symbolized from memory (the summary needs no more). A few
    // sums per thread, found in a small index, where a sum per stack and thread took a cache miss or
    // two per sample and more than half of the bound's memory; released_stacks_forgotten is set.
    kByThread,
  };
  // Drops the samples held (after they were written out, e.g. streamed to a capture file), adding
  // them into `released`, so that a recording's memory grows with its distinct stacks and threads,
  // not with its length. The vector keeps its capacity for the next ones.
  void release_samples(ReleasedSums sums = ReleasedSums::kByStack);
  // Undoes the releases: `released_samples` (the first sample_offset samples, as written out and read
  // back) go in front of the samples held, and the sums are dropped.
  void restore_samples(std::vector<RawSample> released_samples);

  // Index of the module (path, build_id), added if new.
  uint32_t intern_module(const std::string& path, const std::string& build_id, bool is_kernel = false);
  // The process with `pid`, added if new.
  RawProcess& process(int32_t pid);
  const RawProcess* find_process(int32_t pid) const;
  // The thread (pid, tid), added if new.
  RawThread& thread(int32_t pid, int32_t tid);
  const RawThread* find_thread(int32_t pid, int32_t tid) const;

  // For a recording that outlives what it records (continuous mode), so that it holds what is still
  // running, not everything it met. forget_exited drops the processes that exited before
  // `exited_before_ns` and every thread that did (or whose process was dropped), except those a
  // sample held (`samples`) names; the positions of the others in `processes` and `threads` change.
  struct Forgotten {
    std::vector<uint32_t> threads;  // each old thread index's new one; kNoIndex: dropped
    std::vector<int32_t> pids;      // the processes dropped
    std::vector<int32_t> tids;      // the threads dropped
  };
  Forgotten forget_exited(uint64_t exited_before_ns);
  // Drops every stack that no sample held, no released sum, no allocation and no index in `also`
  // names, and renumbers the others in those; returns each old index's new one (kNoIndex: dropped),
  // for the caller's own references.
  std::vector<uint32_t> forget_unused_stacks(std::span<const uint32_t> also);
  // For a recording streamed to a capture whose stacks nothing reads back from memory at the end (the
  // capture holds them): the released sums let go of their stacks (those of one thread, kind, stack
  // end and epoch merge into one), then every stack no sample held, no allocation and no index in
  // `also` names is dropped, as forget_unused_stacks does, and a new stack generation begins. The
  // recording's memory then stays bounded by what it still holds, not by every distinct stack it met.
  std::vector<uint32_t> forget_released_stacks(std::span<const uint32_t> also);
  // The heap the distinct stacks a recording met use: the stack table's and the released sums' with
  // their index (what the stack memory bound counts; RawStackTable::used_bytes).
  size_t stack_memory_bytes() const;
  // Closes the held file (RawModule::file) of every module no process left maps, so that a program
  // that ran and was deleted (a deploy, a build) does not stay open, its disk space held, for as long as
  // the recording runs. The module keeps its index, path and build-id; a process mapping it again holds
  // the file again. Returns how many files were let go.
  size_t release_unmapped_module_files();

 private:
  uint32_t epoch_of(const RawSample& s,
                    std::unordered_map<int32_t, std::vector<uint64_t>>& mapping_times) const;

  std::unordered_map<std::string, uint32_t> module_index_;
  std::unordered_map<int32_t, size_t> process_index_;
  std::unordered_map<uint64_t, size_t> thread_index_;  // key: pid << 32 | tid
  // Indices into `released` by their key fields (pid, tid, stack, kind, stack_end, epoch).
  HashedIndexSet released_index_;
};

// samples_not_taken_note over a recording's on-CPU samples, those held and those released.
std::string samples_not_taken_note(const RawProfile& profile);

}  // namespace hpd
