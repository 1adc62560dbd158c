// Profile: a symbolized recording with interned strings, functions, frames and stacks.
// Exporters read this and nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hpd/model/raw_profile.h"

namespace hpd {

// Interns strings; index 0.. in insertion order.
class StringTable {
 public:
  uint32_t intern(std::string_view s);
  const std::string& operator[](uint32_t index) const { return strings_[index]; }
  size_t size() const { return strings_.size(); }
  const std::vector<std::string>& strings() const { return strings_; }

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t> index_;
};

// Order and names match the categories the Firefox exporter declares.
// kIdle: frames of blocked off-CPU samples; kWaitCpu: frames of samples waiting for a CPU (runnable).
enum class Category : uint8_t { kOther = 0, kIdle = 1, kUser = 2, kKernel = 3, kWaitCpu = 4 };
inline constexpr int kCategoryCount = 5;
const char* to_string(Category c);

struct Lib {
  std::string name;        // file name
  std::string path;        // path in the recorded process
  std::string debug_name;  // file the debug info came from (name)
  std::string debug_path;
  std::string build_id;  // lower-case hex; may be empty
  std::string arch = "x86_64";
  bool is_kernel = false;
};

struct Func {
  uint32_t name = 0;         // string index, demangled
  uint32_t file = kNoIndex;  // string index of the source file, kNoIndex = unknown
  uint32_t lib = kNoIndex;   // index into Profile::libs
};

// The outer (real, non-inlined) function a native address lies in.
struct NativeSymbol {
  uint32_t lib = kNoIndex;
  uint64_t address = 0;  // lib-relative start
  uint64_t size = 0;     // 0 = unknown
  uint32_t name = 0;     // string index
};

struct Frame {
  uint32_t func = 0;
  uint32_t native_symbol = kNoIndex;
  uint32_t lib = kNoIndex;
  int64_t address = -1;      // lib-relative; return address - 1 for non-leaf frames; -1 = none
  uint32_t line = 0;         // 0 = unknown
  uint32_t column = 0;       // 0 = unknown
  uint8_t inline_depth = 0;  // 0 = the real frame, 1.. = inlined callees at the same address
  Category category = Category::kUser;
};

// Stacks form a prefix tree in topological order: a stack's prefix has a smaller index.
struct Stack {
  uint32_t prefix = kNoIndex;  // kNoIndex = root
  uint32_t frame = 0;
  // The edge from the prefix's frame (a caller, at its return address) to this one (the outer frame
  // of the function below) is a tail call: the call there called another function, which
  // tail-called (jumped) on, once or more, to this one, leaving no frame of its own. Set only where
  // the caller's DWARF call-site information names its callee and this frame lies outside that
  // callee's code; false also when nothing is known (no call-site information, an indirect call).
  bool tail_call = false;
};

struct Sample {
  uint64_t time_ns = 0;  // monotonic clock, same base as ProfileMeta::start_mono_ns
  uint32_t stack = kNoIndex;
  uint64_t cpu_delta_ns = 0;
  uint64_t off_cpu_ns = 0;  // kOffCpu, kWaitCpu: the interval's length
  SampleKind kind = SampleKind::kOnCpu;
  StackEnd stack_end = StackEnd::kUnknown;
};

// Samples summed per stack, kind and stack end (from RawSampleSum): in the profile `hpctl record`
// symbolizes for its summary and report after streaming the samples themselves to a capture file.
// Enough for the report, not for a timeline: exporters that need each sample read Thread::samples.
struct SampleSum {
  uint32_t stack = kNoIndex;
  SampleKind kind = SampleKind::kOnCpu;
  StackEnd stack_end = StackEnd::kUnknown;
  uint64_t samples = 0;
  uint64_t cpu_delta_ns = 0;
  uint64_t off_cpu_ns = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  SamplesNotTaken not_taken;  // RawSampleSum::not_taken
};

struct Thread {
  int32_t pid = 0;
  int32_t tid = 0;
  std::string name;
  std::string process_name;
  std::string process_cgroup;  // the process's cgroup (RawProcess::cgroup); "" when unknown
  bool is_main = false;
  uint64_t start_ns = 0;               // monotonic
  uint64_t end_ns = 0;                 // 0 = alive at the end of the recording
  std::vector<Sample> samples;         // sorted by time
  std::vector<SampleSum> sample_sums;  // samples not kept one by one (see SampleSum)
  LostCounts lost;  // this thread's share of ProfileMeta::lost, where the backend could attribute it
};

// A function-level call edge with an exact count.
struct CallEdge {
  int32_t pid = 0;
  uint32_t caller_func = kNoIndex;  // kNoIndex = unknown caller
  uint32_t callee_func = 0;
  uint64_t count = 0;
};

// The latency of one function's calls in one process (see RawCallLatency).
// The exports and the report print its figures through these members, so they agree.
struct CallLatency {
  int32_t pid = 0;
  uint32_t func = 0;
  uint64_t calls = 0;
  uint64_t sum_ns = 0;
  uint64_t outer_ns = 0;
  uint64_t max_ns = 0;
  LatencyHistogram histogram;

  // The mean time per timed call, rounded down; 0 when no call was timed.
  [[nodiscard]] uint64_t avg_ns() const { return calls != 0 ? sum_ns / calls : 0; }
  // The 95th percentile per call from the histogram, at most max_ns; 0 without a histogram.
  [[nodiscard]] uint64_t p95_ns() const { return histogram.quantile_ns(0.95, max_ns); }
  // Adds the calls `other` timed (the same function: another process, or another address of it).
  // pid and func stay this one's.
  void merge(const CallLatency& other);
};

// A function's MIP counts in one process: the last snapshot of its module taken while recording.
struct MipCount {
  int32_t pid = 0;
  uint32_t func = 0;  // into Profile::funcs, the same function sampled frames name
  uint64_t calls = 0;
  uint64_t first_call = 0;  // 1 = the first function called; 0 = never / untimed
  uint32_t blocks_covered = 0;
  uint32_t blocks_total = 0;  // 0 = no block coverage recorded
  bool never_called = false;
  bool counts_calls = true;  // false: coverage only, calls is 0/1
  uint64_t time_ns = 0;      // monotonic time of the snapshot
};

// A sampled allocation (RawAllocation) with its symbolized stack. Its estimate of what it stands for:
// alloc_sample_scale(size, ProfileMeta::alloc.mean_bytes) allocations, size times that in bytes.
struct Allocation {
  int32_t pid = 0;
  int32_t tid = 0;
  uint32_t stack = kNoIndex;  // into Profile::stacks
  uint64_t address = 0;
  uint64_t size = 0;
  bool freed = false;
  bool tracked = true;
  uint64_t time_ns = 0;       // as RawAllocation: when sampled, CLOCK_MONOTONIC; 0 = unknown
  uint64_t free_time_ns = 0;  // when freed (freed only); 0 = unknown
  int32_t free_tid = 0;       // the thread that freed it; 0 = unknown
};

struct ProfileMeta {
  std::string product = "hpd";
  RecordingInfo recording;
  LostCounts lost;
  std::vector<std::string> missing_modules;  // modules whose file could not be read for symbols
  RawAllocStats alloc;                       // allocation sampling (--alloc); mean_bytes 0 = none
};

class Profile {
 public:
  ProfileMeta meta;
  StringTable strings;
  std::vector<Lib> libs;
  std::vector<Func> funcs;
  std::vector<NativeSymbol> native_symbols;
  std::vector<Frame> frames;
  std::vector<Stack> stacks;
  std::vector<Thread> threads;
  std::vector<CallEdge> call_edges;
  std::vector<CallLatency> call_latency;
  std::vector<MipCount> mip_counts;
  std::vector<Allocation> allocations;  // sampled allocations (--alloc)

  // Interning helpers: each returns the existing index for an equal entry, else appends.
  uint32_t intern_lib(const Lib& lib);
  uint32_t intern_func(std::string_view name, std::string_view file, uint32_t lib);
  uint32_t intern_native_symbol(uint32_t lib, uint64_t address, uint64_t size, std::string_view name);
  uint32_t intern_frame(const Frame& frame);
  uint32_t intern_stack(uint32_t prefix, uint32_t frame, bool tail_call = false);

  // Frames of a stack from the root to the leaf.
  std::vector<uint32_t> stack_frames_root_first(uint32_t stack) const;
  const std::string& func_name(uint32_t func) const { return strings[funcs[func].name]; }

 private:
  // Interning keys hold the identifying fields packed into a byte string.
  std::unordered_map<std::string, uint32_t> lib_index_;
  std::unordered_map<std::string, uint32_t> func_index_;
  std::unordered_map<std::string, uint32_t> native_symbol_index_;
  std::unordered_map<std::string, uint32_t> frame_index_;
  std::unordered_map<uint64_t, uint32_t> stack_index_;
};

// samples_not_taken_note (raw_profile.h) over a profile's on-CPU samples and sums, every thread's.
std::string samples_not_taken_note(const Profile& profile);

}  // namespace hpd
