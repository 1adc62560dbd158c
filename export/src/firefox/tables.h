// What the Firefox writer derives from a Profile before it writes a byte: the rows it adds (the
// calls tracks' frames and stacks, strings the Profile lacks), how the Profile's rows map onto the
// written ones (sources, native symbols), where markers go and each process's lifetime.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

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
  std::vector<uint32_t> edges;   // into Profile::call_edges, in the profile's order
  std::vector<uint32_t> stacks;  // the written stack of each edge
};

struct Tables {
  uint64_t start_mono_ns = 0;
  uint64_t interval_ns = 0;  // the recording's, else 1 / frequency, else 1 ms

  std::vector<uint32_t> source_of_func;          // func -> source row, kNoIndex = none
  std::vector<uint32_t> source_files;            // source row -> string index
  std::vector<uint32_t> native_symbol_out;       // profile symbol -> written row, kNoIndex = left out
  std::vector<uint32_t> native_symbols_written;  // written row -> profile symbol
  std::vector<std::string_view> extra_strings;   // appended to the string array after the profile's
  std::vector<uint32_t> lib_name_string;         // lib -> string index of its name
  uint32_t off_cpu_name_string = 0;
  std::unordered_map<int32_t, ProcessTimes> processes;
  std::unordered_map<size_t, std::vector<uint32_t>> mip_of_thread;  // thread -> MIP counts it carries

  std::vector<Frame> calls_frames;  // written after the profile's frames
  std::vector<Stack> calls_stacks;  // written after the profile's stacks
  std::vector<CallsTrack> calls_tracks;

  // Nanoseconds relative to meta.startTime, from a monotonic timestamp. Unsigned wrap-around then
  // the cast gives the right negative value for times before the start.
  int64_t relative_ns(uint64_t mono_ns) const { return static_cast<int64_t>(mono_ns - start_mono_ns); }
  // 0 = already running when the recording began.
  int64_t thread_start(const Thread& t) const { return t.start_ns == 0 ? 0 : relative_ns(t.start_ns); }
  // The recording's end, else its last sample's time.
  int64_t profiling_end_ns(const Profile& profile) const;
};

// The tables of a Profile that validate() accepted. extra_strings views the Profile's lib names: the
// Profile must outlive the Tables.
Tables derive_tables(const Profile& profile);

}  // namespace hpd::firefox
