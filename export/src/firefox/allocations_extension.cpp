// hpd's sampled allocations (--alloc) in the Firefox format: each thread's nativeAllocations table and
// the meta.extra section of the sampling (firefox_format.h), written and read back.
#include "firefox/extensions_read.h"
#include "firefox/extensions_write.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "firefox_format.h"
#include "hpd/export/firefox/schema.h"
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
    row.untracked = !a.tracked;
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

using nlohmann::json;

void read_allocation_extra(RawAllocStats& alloc, const std::string& label, uint64_t count) {
  if (label == kAllocMeanLabel) alloc.mean_bytes = count;
  if (label == kAllocProcessesLabel) alloc.processes = count;
  if (label == kAllocDroppedLabel) alloc.dropped = count;
  if (label == kAllocUntrackedLabel) alloc.untracked = count;
  if (label == kAllocFreesUnmatchedLabel) alloc.frees_unmatched = count;
}

namespace {

// The size whose estimate (size weighted for the sampling at `mean`, as the writer weighs it) is
// `weight`. The estimate grows with the size by at least half a byte a byte, so one size has exactly
// the weight the writer wrote (the shortest text that reads back as the same double); a weight no size
// has (another producer's file) gives the size whose estimate is nearest.
uint64_t size_from_weight(double weight, uint64_t mean) {
  const auto estimate = [mean](uint64_t size) { return double(size) * alloc_sample_scale(size, mean); };
  if (!(weight > 0)) return 0;
  // estimate(size) >= size: the size is at most the weight.
  uint64_t low = 0,
           high = weight >= 9.0e18 ? uint64_t{9'000'000'000'000'000'000u} : uint64_t(std::ceil(weight));
  while (low < high) {  // the first size whose estimate reaches the weight
    const uint64_t mid = low + (high - low) / 2;
    if (estimate(mid) < weight) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  if (low > 0 && weight - estimate(low - 1) < estimate(low) - weight) return low - 1;
  return low;
}

}  // namespace

// Each allocation row (weight >= 0) is one sampled allocation of the thread's process; each
// deallocation row (weight < 0) frees the latest allocation of its address before it that is not
// freed yet and whose free could be watched. A deallocation with no such allocation (a free of a block
// another producer did not sample) is left out.
void read_native_allocations(Profile& p, const json& t, const JsonPath& where, int32_t pid, int32_t tid,
                             const std::vector<uint32_t>& stack_map) {
  if (optional_member(t, thread::kNativeAllocations) == nullptr) return;
  const Table a(t, thread::kNativeAllocations, where);
  const JsonPath table = where.key(thread::kNativeAllocations);
  if (const json* type =
          optional_member(member(t, thread::kNativeAllocations, where), native_allocations::kWeightType);
      type != nullptr && !(type->is_string() && type->get<std::string>() == "bytes"))
    throw FormatError(table.key(native_allocations::kWeightType).str() + " is " + type->dump() +
                      ", not \"bytes\" (only allocations weighed in bytes are read)");
  if (!a.has(native_allocations::kMemoryAddress))
    throw FormatError(table.str() +
                      " has no memoryAddress column (an unbalanced table: its deallocations cannot be paired "
                      "with their allocations, so it is not read)");
  // A file without the sampling's mean (an hpd file from before it was written, or another producer's):
  // every allocation taken as sampled, its weight as its size.
  if (p.meta.alloc.mean_bytes == 0) p.meta.alloc.mean_bytes = 1;
  const uint64_t mean = p.meta.alloc.mean_bytes;
  const json& time = a.column(native_allocations::kTime);
  const json& weight = a.column(native_allocations::kWeight);
  const json& stack = a.column(native_allocations::kStack);
  const json& address = a.column(native_allocations::kMemoryAddress);
  const json* thread_id =
      a.has(native_allocations::kThreadId) ? &a.column(native_allocations::kThreadId) : nullptr;
  const json* untracked = a.has(kAllocUntrackedColumn) ? &a.column(kAllocUntrackedColumn) : nullptr;
  std::unordered_map<uint64_t, std::vector<size_t>> live;  // by address: allocations not freed yet
  for (size_t i = 0; i < a.length(); ++i) {
    const double ms = as_number(time[i], a.element(native_allocations::kTime, i));
    const uint64_t when = to_mono(p, ms, a.element(native_allocations::kTime, i));
    const double w = as_number(weight[i], a.element(native_allocations::kWeight, i));
    const json& at = address[i];
    uint64_t addr = 0;
    if (at.is_number_unsigned()) {
      addr = at.get<uint64_t>();
    } else if (const auto n = as_integer(at); n && *n >= 0) {
      addr = static_cast<uint64_t>(*n);
    } else {
      throw FormatError(a.element(native_allocations::kMemoryAddress, i).str() + " = " + at.dump() +
                        " is not an address");
    }
    int32_t by = tid;
    if (thread_id != nullptr && !(*thread_id)[i].is_null())
      by = parse_id((*thread_id)[i], table.key(native_allocations::kThreadId).at(i));
    if (w < 0) {
      const auto it = live.find(addr);
      if (it == live.end() || it->second.empty()) continue;
      Allocation& freed = p.allocations[it->second.back()];
      it->second.pop_back();
      freed.freed = true;
      freed.free_time_ns = when;
      freed.free_tid = by;
      continue;
    }
    Allocation alloc;
    alloc.pid = pid;
    alloc.tid = by;
    const uint32_t st = a.index(stack, native_allocations::kStack, i, stack_map.size(),
                                path::shared(shared::kStackTable), true);
    alloc.stack = st == kNoIndex ? kNoIndex : stack_map[st];
    alloc.address = addr;
    alloc.size = size_from_weight(w, mean);
    alloc.time_ns = when;
    if (untracked != nullptr) {
      const json& u = (*untracked)[i];
      const auto flag = as_integer(u);
      if (!flag || (*flag != 0 && *flag != 1))
        throw FormatError(a.element(kAllocUntrackedColumn, i).str() + " = " + u.dump() + " is not 0 or 1");
      alloc.tracked = *flag == 0;
    }
    if (alloc.tracked) live[addr].push_back(p.allocations.size());
    p.allocations.push_back(alloc);
  }
}

void order_allocations(Profile& p) {
  std::stable_sort(p.allocations.begin(), p.allocations.end(),
                   [](const Allocation& x, const Allocation& y) { return x.time_ns < y.time_ns; });
}

}  // namespace hpd::firefox
