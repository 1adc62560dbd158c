// threads[i].samples: one row per sample of a thread, in time order (the profiler bisects the time
// column). A sampled thread has CPU columns; a calls track has weights and no CPU columns.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "firefox/table_index.h"
#include "hpd/model/profile.h"
#include "json_writer.h"

namespace hpd::firefox {

class SamplesTable {
 public:
  struct Columns {
    bool weight = false;  // a weight column; without it "weight" is null and every sample weighs 1
    bool cpu = true;      // threadCPUDelta and hpd's stack-end column
  };
  struct Row {
    std::optional<StackIndex> stack;
    int64_t time_ns = 0;  // relative to meta.startTime
    uint64_t weight = 1;
    uint64_t cpu_delta_ns = 0;
    StackEnd stack_end = StackEnd::kUnknown;
  };

  explicit SamplesTable(Columns columns) : columns_(columns) {}

  void reserve(size_t rows) { rows_.reserve(rows); }
  void add(const Row& row) { rows_.push_back(row); }
  size_t size() const { return rows_.size(); }

  void serialize(json::Writer& w) const;

 private:
  Columns columns_;
  std::vector<Row> rows_;
};

}  // namespace hpd::firefox
