// Exclusive (self) and inclusive (total) attribution per function, as a text table or JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/export/error.h"
#include "hpd/model/profile.h"
#include "hpd/model/validate.h"

namespace hpd {

enum class ReportSort : uint8_t {
  kSelf = 0,       // on-CPU samples whose leaf is the function
  kTotal = 1,      // on-CPU samples with the function anywhere on the stack
  kSelfWall = 2,   // wall-clock time (on-CPU samples x interval + off-CPU time, blocked or waiting), self
  kTotalWall = 3,  // the same, total
  kSelfCpu = 4,    // CPU time (the samples' thread CPU deltas), self
  kCalls = 5,      // exact or MIP call counts (ReportRow::calls), then self samples
};

struct ReportOptions {
  size_t limit = 20;  // rows printed; 0 = all
  ReportSort sort = ReportSort::kSelf;
  int32_t pid = 0;     // only threads of this process; 0 = all
  int32_t tid = 0;     // only this thread; 0 = all
  std::string thread;  // only threads with this name (Linux cuts names at 15 bytes); "" = all
  // Only rows whose function name matches this ECMAScript regular expression (searched anywhere in
  // the name); the totals stay those of the selected threads. "" = all.
  std::string function;
  // Text: columns of the table (a terminal's width); 0 = no limit, names never cut (not a TTY).
  size_t width = 80;
};

// Whether the pid, tid and thread-name filters of `options` select the thread.
bool report_selects_thread(const Thread& thread, const ReportOptions& options);

// One function. "self" counts samples whose deepest frame (innermost inline level) is the function;
// "total" counts samples whose stack contains it at least once (recursion counted once).
struct ReportRow {
  uint32_t func = 0;  // index into Profile::funcs
  std::string name;
  std::string library;  // file name of the function's library; "" = unknown

  // CPU view: on-CPU samples only.
  uint64_t self_samples = 0;
  uint64_t total_samples = 0;
  double self_percent = 0;  // of ReportTotals::samples
  double total_percent = 0;
  uint64_t self_cpu_ns = 0;  // sum of the samples' cpu_delta_ns
  uint64_t total_cpu_ns = 0;

  // Wall-clock view: on-CPU samples count one interval each, off-CPU samples their off-CPU time.
  // off_cpu: blocked (SampleKind::kOffCpu); wait_cpu: runnable, waiting for a CPU (kWaitCpu).
  uint64_t self_off_cpu_samples = 0;
  uint64_t total_off_cpu_samples = 0;
  uint64_t self_off_cpu_ns = 0;
  uint64_t total_off_cpu_ns = 0;
  uint64_t self_wait_cpu_samples = 0;
  uint64_t total_wait_cpu_samples = 0;
  uint64_t self_wait_cpu_ns = 0;
  uint64_t total_wait_cpu_ns = 0;
  uint64_t self_wall_ns = 0;
  uint64_t total_wall_ns = 0;
  double self_wall_percent = 0;  // of ReportTotals::wall_ns
  double total_wall_percent = 0;

  // Calls of the function: exact counts (--calls) when the profile has them, else MIP call counts;
  // 0 when neither counted it.
  uint64_t calls = 0;
};

// What one thread lost: its share of ProfileMeta::lost, as far as the backend could attribute it.
struct ThreadLoss {
  int32_t pid = 0;
  int32_t tid = 0;
  std::string name;
  LostCounts lost;
};

// A selected thread that existed in the recording but has no sample (the symbolizer keeps these for a
// recording of processes the user named): blocked or idle all along, or the backend saw only CPU time.
struct UnsampledThread {
  int32_t pid = 0;
  int32_t tid = 0;
  std::string name;
  // Why it has no sample when the recording shows it, e.g. that it holds no off-CPU sample at all
  // ("perf_event without --off-cpu samples only CPU time"); empty when hpd does not know.
  std::string why;
};

// How one thread's stacks ended, on-CPU and off-CPU (a stack is complete when the walk reached the
// thread's first frame: _start, clone3, or a frame whose CFI leaves no caller).
struct ThreadStacks {
  int32_t pid = 0;
  int32_t tid = 0;
  std::string name;
  uint64_t on_complete = 0, on_truncated = 0, on_failed = 0;
  uint64_t off_complete = 0, off_truncated = 0, off_failed = 0;
  // The off-CPU time (blocked and waiting) of those samples: one interval may stand for seconds.
  uint64_t off_complete_ns = 0, off_truncated_ns = 0, off_failed_ns = 0;
};

// Where one thread's time went: on the CPU, blocked off it, or runnable waiting for a CPU.
struct ThreadTime {
  int32_t pid = 0;
  int32_t tid = 0;
  std::string name;
  uint64_t samples = 0;  // on-CPU
  uint64_t cpu_ns = 0;
  uint64_t off_cpu_samples = 0;  // blocked
  uint64_t off_cpu_ns = 0;
  uint64_t wait_cpu_samples = 0;  // waiting for a CPU
  uint64_t wait_cpu_ns = 0;
  uint64_t wall_ns = 0;  // samples x interval + off_cpu_ns + wait_cpu_ns
};

struct ReportTotals {
  uint64_t samples = 0;                // on-CPU samples of the selected threads, with or without stack
  uint64_t samples_without_stack = 0;  // on-CPU samples that carry no stack
  uint64_t off_cpu_samples = 0;        // blocked off the CPU
  uint64_t wait_cpu_samples = 0;       // runnable, waiting for a CPU
  uint64_t threads = 0;                // threads selected by the pid/tid filter
  uint64_t processes = 0;
  // Recording length: from the first on-CPU sample to the end (from the start when the first sample's
  // time is unknown; the span of the samples when the end is).
  uint64_t duration_ns = 0;
  // From the request to the first on-CPU sample, when both are known: the targets ran unsampled.
  bool unsampled_start_known = false;
  uint64_t unsampled_start_ns = 0;
  // The CPU time the hypervisor took from the machine's CPUs during the recording, when known
  // (RecordingInfo::host_steal_ns), and what the header says of it (host_steal_note; may be "").
  bool host_steal_known = false;
  uint64_t host_steal_ns = 0;
  std::string host_steal_note;
  // On-CPU samples the timer did not take though the threads' CPU clocks ran (SamplesNotTaken), and
  // what the header says of them (samples_not_taken_note; may be ""). Known only where
  // samples_not_taken_counted.
  bool not_taken_known = false;
  SamplesNotTaken not_taken;
  std::string not_taken_note;
  uint64_t interval_ns = 0;  // sampling interval used for the wall-clock view
  uint64_t cpu_ns = 0;       // sum of the samples' cpu_delta_ns (an off-CPU one's: charged for a wait)
  uint64_t off_cpu_ns = 0;   // blocked
  uint64_t wait_cpu_ns = 0;  // waiting for a CPU
  // Off-CPU time (blocked or waiting) of samples without a stack, in no function's row (perf_event's
  // off-CPU intervals come from switch records, which carry none).
  uint64_t off_cpu_without_stack_ns = 0;
  uint64_t wall_ns = 0;  // samples x interval_ns + off_cpu_ns + wait_cpu_ns
  // How the on-CPU samples' stacks ended (Sample::stack_end); all zero when the profile does not say
  // (e.g. read back from a Firefox profile).
  uint64_t stacks_complete = 0;
  uint64_t stacks_truncated = 0;
  uint64_t stacks_failed = 0;
  // The same for off-CPU samples (blocked and waiting for a CPU: both stacks are taken at the switch-out).
  uint64_t off_stacks_complete = 0;
  uint64_t off_stacks_truncated = 0;
  uint64_t off_stacks_failed = 0;
  // Their off-CPU time: completeness by time, since one blocked interval may stand for seconds and
  // another for microseconds. unknown: off-CPU time whose stack end is not known.
  uint64_t off_stacks_complete_ns = 0;
  uint64_t off_stacks_truncated_ns = 0;
  uint64_t off_stacks_failed_ns = 0;
  uint64_t off_stacks_unknown_ns = 0;
  // Per selected thread with samples whose stack end is known, most samples first.
  std::vector<ThreadStacks> stacks_by_thread;
  // Per selected thread with samples: CPU, blocked and waiting-for-CPU time, most wall time first.
  std::vector<ThreadTime> time_by_thread;
  // The selected threads without any sample, in profile order; counted in `threads`, in no other figure.
  std::vector<UnsampledThread> unsampled_threads;
  LostCounts lost;  // of the whole recording, whatever the pid/tid filter
  // The selected threads that lost anything, most lost first (then by pid and tid).
  std::vector<ThreadLoss> lost_by_thread;
  std::vector<std::string> missing_modules;
};

// Rust -Zannotate-moves marks compiler-generated moves and copies of values of SIZE >= the flag's
// limit with inline frames named core::profiling::compiler_move<T, SIZE> or compiler_copy<T, SIZE>.
struct CompilerMoveName {
  bool copy = false;  // compiler_copy (else compiler_move)
  std::string type;   // T as demangled; "?" when the name carries no generic arguments
  uint64_t size = 0;  // SIZE in bytes; 0 = unknown
};
// Parses a demangled frame name: "core::profiling::compiler_move::<T, 16>" (rustc-demangle and
// LLVM style) or "compiler_move<T, 16>" (DW_AT_name); nullopt for any other name.
std::optional<CompilerMoveName> parse_compiler_move(std::string_view function_name);

// The function that contained the inlined move (the real function at the move's address).
struct MoveCaller {
  std::string name;
  uint64_t samples = 0;
  uint64_t cpu_ns = 0;
};

// On-CPU samples spent in moves (or copies) of one type and size. A sample counts for the move
// frame nearest its leaf: the move itself when sampled in its inline code, or the move whose call
// to memcpy/memmove is in progress (the leaf is then libc's memmove) when the stack has that frame.
struct MoveRow {
  CompilerMoveName move;
  uint64_t samples = 0;
  uint64_t cpu_ns = 0;
  double percent = 0;               // of ReportTotals::samples
  std::vector<MoveCaller> callers;  // most samples first
};

// A function's MIP counts (the last snapshot, summed over the selected processes) beside its sampled
// self CPU time.
struct MipRow {
  uint32_t func = 0;
  std::string name;
  std::string library;
  uint64_t calls = 0;
  uint64_t first_call = 0;  // 1 = called first; 0 = never / untimed (coverage mode)
  uint32_t blocks_covered = 0;
  uint32_t blocks_total = 0;  // 0 = no block coverage recorded
  bool counts_calls = true;   // false: calls is coverage (0/1), not a count
  uint64_t self_samples = 0;
  uint64_t self_cpu_ns = 0;
  uint64_t cpu_per_call_ns = 0;  // self_cpu_ns / calls; 0 when not called or not counted
};

// Exact calls of one function (mcount/__fentry__ call counts, summed over the selected processes)
// beside its sampled time; callers and callees most calls first.
struct CallPeer {
  std::string name;
  uint64_t calls = 0;
};
struct CallRow {
  uint32_t func = 0;
  std::string name;
  std::string library;
  uint64_t calls = 0;
  uint64_t self_cpu_ns = 0;
  uint64_t total_cpu_ns = 0;
  uint64_t total_wall_ns = 0;    // on-CPU samples x interval + off-CPU time, inclusive
  uint64_t cpu_per_call_ns = 0;  // total_cpu_ns / calls (inclusive CPU per call)
  // Latency of each call from entry to return (hpd's in-process runtime only; 0 = not timed).
  uint64_t timed_calls = 0;  // calls that returned through the hook
  uint64_t avg_ns = 0;       // exact: the sum of the timed calls over their number
  uint64_t p95_ns = 0;       // from a log-linear histogram (buckets 1/16 of a power of two wide)
  uint64_t max_ns = 0;
  uint64_t latency_total_ns = 0;    // outermost calls only (recursion once), summed over threads
  double latency_wall_percent = 0;  // latency_total_ns / the recording's duration (may pass 100 with threads)
  std::vector<CallPeer> callers;
  std::vector<CallPeer> callees;
};

// A function's sampled allocations (hpctl record --alloc), weighted for the sampling: estimates of
// what it allocated and of what was still live when the recording ended. Self: the allocations it
// made itself (its frame is the caller of malloc); total: those made in it and in its callees.
struct AllocRow {
  uint32_t func = 0;
  std::string name;
  std::string library;
  double self_bytes = 0;
  double total_bytes = 0;
  double self_objects = 0;
  double total_objects = 0;
  double live_self_bytes = 0;
  double live_total_bytes = 0;
  double live_total_objects = 0;
  uint64_t samples = 0;  // sampled allocations with the function on their stack
};

struct Report {
  ReportTotals totals;
  std::vector<ReportRow> rows;  // every function with a sample, ordered by ReportOptions::sort
  std::vector<MoveRow> moves;   // most samples first; empty without compiler_move/copy frames
  uint64_t move_samples = 0;    // on-CPU samples with a compiler_move/copy frame
  uint64_t move_cpu_ns = 0;
  // MIP (empty without MIP counts): called functions by first call (then calls, then name), and
  // the never-called ones by name.
  std::vector<MipRow> mip_called;
  std::vector<MipRow> mip_never_called;
  // Exact call counts (empty without call edges): most calls first.
  std::vector<CallRow> calls;
  uint64_t calls_total = 0;
  std::string calls_counter;  // what counted: "runtime", "uprobes", or "" (unknown: an older file)
  bool calls_timed = false;   // some rows have latency
  // The runtime's hook replaced return addresses while calls were timed: true when the recording's
  // stack walks put the originals back (the eBPF backend's cfi and fp walkers), so that inclusive CPU
  // of instrumented callers is whole; false when sampled stacks ended at the hook.
  bool calls_stacks_through_hook = false;
  // Sampled allocations (empty without --alloc): every function on a sampled stack, most bytes
  // allocated (total) first; the estimates of the whole recording beside them.
  std::vector<AllocRow> allocations;
  uint64_t alloc_mean_bytes = 0;  // 0 = allocations were not sampled
  uint64_t alloc_samples = 0;
  uint64_t alloc_frees_matched = 0;  // sampled allocations whose free was seen
  double alloc_bytes = 0;
  double alloc_objects = 0;
  double live_bytes = 0;
  double live_objects = 0;
};

// Throws InvalidProfileError when the profile's indices are inconsistent, ExportError when
// options.function is not a valid regular expression.
Report compute_report(const Profile& profile, const ReportOptions& options);

// A table that fits 80 columns: a header with the totals, the CPU view, the wall-clock view when
// the profile has off-CPU samples, the compiler moves and copies when there are any, and "Calls (MIP)"
// (exact call counts, first-call order, block coverage, CPU per call, never-called functions) when
// the profile has MIP counts. Prints at most options.limit rows per view.
void print_report(const Report& report, std::ostream& out, const ReportOptions& options);

// The same numbers as JSON for scripts (at most options.limit functions, in options.sort order); MIP
// counts under "mip".
void print_report_json(const Report& report, std::ostream& out, const ReportOptions& options);

}  // namespace hpd
