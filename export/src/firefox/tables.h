// What the Firefox writer derives from a Profile before it writes a byte: the shared tables, each
// a typed builder of its own (string array, sources, resources, native symbols, funcs, frames,
// stacks), filled with the Profile's rows and those the writer adds (the calls tracks' frames and
// stacks, strings the Profile lacks), where markers go and each process's lifetime.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "firefox/frame_table.h"
#include "firefox/func_table.h"
#include "firefox/native_symbol_table.h"
#include "firefox/resource_table.h"
#include "firefox/source_location_table.h"
#include "firefox/source_table.h"
#include "firefox/stack_table.h"
#include "firefox/string_array.h"
#include "hpd/model/profile.h"

namespace hpd::firefox {

struct ProcessTimes {
  int64_t startup = 0;
  int64_t shutdown = 0;
  bool ended = true;  // every thread of the process has an end time
};

// The calls track of one process: a sample per call edge.
struct CallsTrack {
  int32_t pid = 0;
  std::vector<uint32_t> edges;     // into Profile::call_edges, in the profile's order
  std::vector<StackIndex> stacks;  // the written stack of each edge
};

// A (caller, callee) pair of functions that a thread reached by a tail call (Stack::tail_call), as
// its marker tells it (firefox_format.h, kTailCallSchema).
struct TailCallEdge {
  uint32_t caller_func = 0;  // Profile::funcs
  uint32_t callee_func = 0;
  std::vector<uint32_t> stacks;  // the Profile's (and stack table's) rows of that edge, ascending
  uint64_t samples = 0;          // the thread's on-CPU samples through one of them (once each)
  uint64_t thread_samples = 0;   // all the thread's on-CPU samples
  StringIndex name;              // "caller → callee (tail call)"
};

// The Profile's strings, funcs and stacks are the first rows of the string array, func table and
// stack table, in the Profile's order: its indices name the same rows, typed by these.
inline StringIndex string_row(uint32_t profile_string) {
  return StringIndex{profile_string};
}
inline FuncIndex func_row(uint32_t profile_func) {
  return FuncIndex{profile_func};
}
inline StackIndex stack_row(uint32_t profile_stack) {
  return StackIndex{profile_stack};
}

struct Tables {
  uint64_t start_mono_ns = 0;
  uint64_t interval_ns = 0;  // the recording's, else 1 / frequency, else 1 ms

  StringArray strings;
  SourceTable sources;
  SourceLocationTable source_locations;
  ResourceTable resources;
  NativeSymbolTable native_symbols;
  FuncTable funcs;
  FrameTable frames;
  StackTable stacks;

  StringIndex off_cpu_name;
  StringIndex wait_cpu_name;
  std::unordered_map<int32_t, ProcessTimes> processes;
  std::unordered_map<size_t, std::vector<uint32_t>> mip_of_thread;  // thread -> MIP counts it carries
  std::vector<CallsTrack> calls_tracks;
  // thread -> its tail-call edges, most samples first; their names are in tail_call_names, which
  // the string array views (a deque: its strings stay where they are when it grows or moves).
  std::unordered_map<size_t, std::vector<TailCallEdge>> tail_calls_of_thread;
  std::deque<std::string> tail_call_names;
  // The written stack of each off-CPU sample: its own extended by the "[blocked]" or "[waiting for
  // CPU]" leaf frame in the Idle category (firefox_format.h), keyed by off_cpu_key().
  std::unordered_map<uint64_t, StackIndex> off_cpu_leaves;
  static uint64_t off_cpu_key(const Sample& s) {
    return uint64_t{s.stack} << 1 | (s.kind == SampleKind::kWaitCpu ? 1 : 0);
  }
  StackIndex off_cpu_leaf(const Sample& s) const { return off_cpu_leaves.at(off_cpu_key(s)); }

  // Nanoseconds relative to meta.startTime, from a monotonic timestamp. Unsigned wrap-around then
  // the cast gives the right negative value for times before the start.
  int64_t relative_ns(uint64_t mono_ns) const { return static_cast<int64_t>(mono_ns - start_mono_ns); }
  // 0 = already running when the recording began.
  int64_t thread_start(const Thread& t) const { return t.start_ns == 0 ? 0 : relative_ns(t.start_ns); }
  // The recording's end, else its last sample's time.
  int64_t profiling_end_ns(const Profile& profile) const;
};

// The tables of a Profile that validate() accepted. The string array views the Profile's strings
// and lib names: the Profile must outlive the Tables.
Tables derive_tables(const Profile& profile);

}  // namespace hpd::firefox
