// hpd's sampled allocations (--alloc) in the Firefox format: each thread's nativeAllocations table. Written
// only: the reader does not read them back.
#include "firefox/extensions_read.h"
#include "firefox/extensions_write.h"

#include <algorithm>

#include "hpd/model/raw_profile.h"

namespace hpd::firefox {

// The sampled allocations (--alloc), in the table of the thread that made each one (else its
// process's main thread, else another of its threads), each deallocation in its allocation's table
// (so that each table pairs them: the profiler's "Retained memory" is what a table leaves unpaired).
// An allocation weighs its size weighted for the sampling (alloc_sample_scale), as in the report.
std::unordered_map<size_t, NativeAllocationsTable> allocation_tables(const Profile& p, const Tables& tables) {
  std::unordered_map<size_t, firefox::NativeAllocationsTable> out;
  if (p.allocations.empty() || p.meta.alloc.mean_bytes == 0) return out;
  std::unordered_map<uint64_t, size_t> by_thread;
  std::unordered_map<int32_t, size_t> by_process;
  const auto key = [](int32_t pid, int32_t tid) {
    return uint64_t{static_cast<uint32_t>(pid)} << 32 | static_cast<uint32_t>(tid);
  };
  for (size_t i = 0; i < p.threads.size(); ++i) {
    const Thread& t = p.threads[i];
    by_thread.emplace(key(t.pid, t.tid), i);
    auto [it, inserted] = by_process.emplace(t.pid, i);
    if (!inserted && t.is_main) it->second = i;
  }
  // Times unknown (a capture from before they were logged) are the recording's start.
  const auto when = [&](uint64_t mono_ns) { return mono_ns == 0 ? 0 : tables.relative_ns(mono_ns); };
  for (size_t i = 0; i < p.allocations.size(); ++i) {
    const Allocation& a = p.allocations[i];
    size_t thread = 0;
    if (const auto it = by_thread.find(key(a.pid, a.tid)); it != by_thread.end()) {
      thread = it->second;
    } else if (const auto jt = by_process.find(a.pid); jt != by_process.end()) {
      thread = jt->second;
    } else {
      continue;  // a process without a track (the symbolizer gives each allocating thread one)
    }
    firefox::NativeAllocationsTable& table = out[thread];
    const double bytes = double(a.size) * alloc_sample_scale(a.size, p.meta.alloc.mean_bytes);
    firefox::NativeAllocationsTable::Row row;
    row.time_ns = when(a.time_ns);
    row.weight = bytes;
    if (a.stack != kNoIndex) row.stack = firefox::stack_row(a.stack);
    row.memory_address = a.address;
    row.thread_id = a.tid;
    row.order = 2 * uint64_t{i};
    table.add(row);
    if (!a.freed) continue;
    // Freed where its free was not seen (its address came back while it was live): freed at once.
    firefox::NativeAllocationsTable::Row free_row;
    free_row.time_ns = std::max(row.time_ns, a.free_time_ns == 0 ? row.time_ns : when(a.free_time_ns));
    free_row.weight = -bytes;
    free_row.memory_address = a.address;
    free_row.thread_id = a.free_tid != 0 ? a.free_tid : a.tid;
    free_row.order = 2 * uint64_t{i} + 1;
    table.add(free_row);
  }
  for (auto& [thread, table] : out) table.sort();
  return out;
}

}  // namespace hpd::firefox
