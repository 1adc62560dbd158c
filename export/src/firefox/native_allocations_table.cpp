// Serializes threads[i].nativeAllocations (native_allocations_table.h).
#include "firefox/native_allocations_table.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "firefox/columns.h"
#include "firefox_format.h"

namespace hpd::firefox {

void NativeAllocationsTable::sort() {
  std::stable_sort(rows_.begin(), rows_.end(), [](const Row& a, const Row& b) {
    if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
    return a.order < b.order;
  });
}

namespace {

// The shortest text that reads back as the same double (weights are estimates with fractions).
void write_double(json::Writer& w, double v) {
  if (!std::isfinite(v)) v = 0;
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, v);
  w.raw(std::string_view(text, static_cast<size_t>(result.ptr - text)));
}

}  // namespace

void NativeAllocationsTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  t.field(native_allocations::kWeightType);
  w.string("bytes");
  t.column(native_allocations::kTime, [&](size_t i) { w.ns_as_ms(rows_[i].time_ns); });
  t.column(native_allocations::kWeight, [&](size_t i) { write_double(w, rows_[i].weight); });
  t.column(native_allocations::kStack, [&](size_t i) { write_index_or_null(w, rows_[i].stack); });
  t.column(native_allocations::kMemoryAddress, [&](size_t i) { w.uint(rows_[i].memory_address); });
  t.column(native_allocations::kThreadId, [&](size_t i) { w.int64(rows_[i].thread_id); });
  if (std::any_of(rows_.begin(), rows_.end(), [](const Row& r) { return r.untracked; }))
    t.column(kAllocUntrackedColumn, [&](size_t i) { w.uint(rows_[i].untracked ? 1 : 0); });
  t.end();
}

}  // namespace hpd::firefox
