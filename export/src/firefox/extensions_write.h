// The write halves of hpd's extensions of the Firefox format (firefox_format.h), each defined in the
// extension's file beside its read half (extensions_read.h): firefox/calls_extension.cpp,
// latency_extension.cpp, mip_extension.cpp, off_cpu_extension.cpp, tail_call_extension.cpp and
// allocations_extension.cpp.
// firefox_writer.cpp calls them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "firefox/marker_table.h"
#include "firefox/native_allocations_table.h"
#include "firefox/tables.h"
#include "hpd/model/profile.h"
#include "json_writer.h"

namespace hpd::firefox {

// Calls (calls_extension.cpp): the thread object of a process's calls track.
void write_calls_thread(json::Writer& w, const Profile& p, const Tables& tables, const CallsTrack& track);

// Call latency (latency_extension.cpp): the markers of a calls track, from `start` to `end`.
MarkerTable latency_markers(const Profile& p, int32_t pid, int64_t start, int64_t end);

// MIP (mip_extension.cpp): the instant marker of one MIP count.
void add_mip_marker(const Profile& p, const Tables& tables, const MipCount& c, MarkerTable& markers);

// Off-CPU (off_cpu_extension.cpp): the weights of a thread's off-CPU samples, and the interval marker
// of off-CPU sample `s`, row `sample` of its thread's samples, at `time_ns`.
// The call tree sums weights, so an off-CPU sample weighs the number of sampling intervals it
// stood for: its off-CPU time over the interval, rounded, with the rounding remainder carried to
// the thread's next off-CPU sample. A thread's off-CPU weights thus add up to its total off-CPU
// time in intervals, and a short block may weigh 0 (visible in the timeline, not in the tree),
// where "at least 1" would inflate many short waits to many whole intervals.
class OffCpuWeights {
 public:
  explicit OffCpuWeights(uint64_t interval_ns) : interval_(static_cast<int64_t>(interval_ns)) {}
  uint64_t next(uint64_t off_cpu_ns);

 private:
  int64_t interval_;
  int64_t carry_ = 0;  // stays within [-interval/2, interval/2)
};
MarkerTable::Row off_cpu_marker(const Sample& s, uint32_t sample, int64_t time_ns, const Tables& tables);

// Tail calls (tail_call_extension.cpp): Tables::tail_calls_of_thread (derive_tables calls it), and
// the markers of thread `thread` (its index in p.threads).
void derive_tail_calls(const Profile& p, Tables& t);
void add_tail_call_markers(const Profile& p, const Tables& t, size_t thread, MarkerTable& markers);

// Allocations (allocations_extension.cpp): the nativeAllocations table of each thread (by its index
// in p.threads) that has any.
std::unordered_map<size_t, NativeAllocationsTable> allocation_tables(const Profile& p, const Tables& tables);

// From the general writer (firefox_writer.cpp), for the calls track's thread object too.
// The lifetime fields of a thread object, for sampled threads and calls tracks alike: its
// process's (a null process: started at 0, still running) and its own (unregister: none = alive).
void write_lifetimes(json::Writer& w, const ProcessTimes* process, int64_t register_ns,
                     std::optional<int64_t> unregister_ns);

}  // namespace hpd::firefox
