// threads[i].nativeAllocations: the sampled allocations (hpctl record --alloc) of the thread that made
// them, and their deallocations, in the profiler's balanced native allocations table.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "firefox/table_index.h"
#include "json_writer.h"

namespace hpd::firefox {

class NativeAllocationsTable {
 public:
  struct Row {
    int64_t time_ns = 0;  // relative to meta.startTime
    // Bytes: an allocation's estimate (its size weighted for the sampling), a deallocation's the
    // negative of its allocation's.
    double weight = 0;
    std::optional<StackIndex> stack;  // none for a deallocation (its stack is not sampled)
    uint64_t memory_address = 0;
    int64_t thread_id = 0;
    bool untracked = false;  // an allocation whose free could not be watched (hpd's column, below)
    uint64_t order = 0;      // ties at one time: the log's order, an allocation before its deallocation
  };

  void add(const Row& row) { rows_.push_back(row); }
  size_t size() const { return rows_.size(); }
  // Sorts the rows by time (then order), as the profiler needs them.
  void sort();
  // The profiler's columns, and hpd's hpdUntracked (firefox_format.h) when a row is untracked.
  void serialize(json::Writer& w) const;

 private:
  std::vector<Row> rows_;
};

}  // namespace hpd::firefox
