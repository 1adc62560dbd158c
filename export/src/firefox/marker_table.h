// threads[i].markers: hpd's markers of a thread (off-CPU intervals, blocked or waiting for a CPU;
// MIP counts; call latency; tail-call edges), each with the data its meta.markerSchema entry describes
// (firefox_format.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "firefox/table_index.h"
#include "hpd/model/profile.h"
#include "json_writer.h"

namespace hpd::firefox {

// The data of an off-CPU interval: its exact length and the sample (row of the thread's samples
// table) it belongs to; `waiting`: runnable, waiting for a CPU (its own schema), else blocked.
struct OffCpuMarkerData {
  uint64_t off_cpu_ns = 0;
  uint32_t sample = 0;
  bool waiting = false;
};

struct MipMarkerData {
  StringIndex function;
  std::string module;  // the library's path, "" when unknown
  uint64_t calls = 0;
  uint64_t first_call = 0;
  std::string blocks;  // "covered/total", "" without coverage
  FuncIndex func;
  bool counts_calls = true;
};

struct LatencyMarkerData {
  StringIndex function;
  uint64_t calls = 0;
  uint64_t avg_ns = 0;
  uint64_t p95_ns = 0;
  uint64_t max_ns = 0;
  uint64_t total_ns = 0;
  uint64_t sum_ns = 0;
  std::string histogram;  // "scale bucket:count,..."
  FuncIndex func;
};

// A tail-call edge of a thread (firefox_format.h, kTailCallSchema).
struct TailCallMarkerData {
  StringIndex caller;
  StringIndex callee;
  uint64_t samples = 0;
  double share = 0;    // of the thread's on-CPU samples, 0..1
  std::string stacks;  // "row,row,..."
};

using MarkerData = std::variant<OffCpuMarkerData, MipMarkerData, LatencyMarkerData, TailCallMarkerData>;

class MarkerTable {
 public:
  struct Row {
    MarkerData data;
    StringIndex name;
    int64_t start_ns = 0;           // relative to meta.startTime
    std::optional<int64_t> end_ns;  // an interval marker; none = an instant
    Category category = Category::kUser;
  };

  void add(Row row) { rows_.push_back(std::move(row)); }
  // A row with its data built in place in the table (GCC 12 at -O2 warns, wrongly, that a temporary
  // Row's variant may hold a tail-call marker with fields uninitialized).
  template <typename Data>
  void add(Data data, StringIndex name, int64_t start_ns, std::optional<int64_t> end_ns, Category category) {
    Row& row = rows_.emplace_back();
    row.data.template emplace<Data>(std::move(data));
    row.name = name;
    row.start_ns = start_ns;
    row.end_ns = end_ns;
    row.category = category;
  }
  size_t size() const { return rows_.size(); }

  void serialize(json::Writer& w) const;

 private:
  std::vector<Row> rows_;
};

}  // namespace hpd::firefox
