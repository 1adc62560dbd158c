// Serializes threads[i].samples (samples_table.h).
#include "firefox/samples_table.h"

#include "firefox/columns.h"
#include "firefox_format.h"

namespace hpd::firefox {

void SamplesTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  // "samples": the call tree sums the weights as counts (its Float64 sums are exact up to 2^53);
  // "tracing-ms" would show them as milliseconds.
  t.field(samples::kWeightType);
  w.string("samples");
  if (columns_.weight) {
    t.column(samples::kWeight, [&](size_t i) { w.uint(rows_[i].weight); });
  } else {
    t.field(samples::kWeight);
    w.null();
  }
  t.column(samples::kStack, [&](size_t i) { write_index_or_null(w, rows_[i].stack); });
  t.column(samples::kTime, [&](size_t i) { w.ns_as_ms(rows_[i].time_ns); });
  if (columns_.cpu) {
    t.column(samples::kThreadCpuDelta, [&](size_t i) { w.uint(rows_[i].cpu_delta_ns); });
    t.column(kStackEndColumn, [&](size_t i) { w.uint(static_cast<uint8_t>(rows_[i].stack_end)); });
  }
  t.end();
}

}  // namespace hpd::firefox
