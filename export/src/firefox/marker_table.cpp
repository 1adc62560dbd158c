// Serializes threads[i].markers (marker_table.h); the data objects' keys are hpd's marker schemas'.
#include "firefox/marker_table.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

#include "firefox/columns.h"
#include "firefox_format.h"

namespace hpd::firefox {

namespace {

// A duration in ns, written as milliseconds (the profiler's 'duration' format), exactly.
struct NsAsMs {
  uint64_t ns;
};
// A fraction (the profiler's 'percentage' format: 0.25 is shown as 25%).
struct Ratio {
  double value;
};
using FieldValue = std::variant<uint64_t, std::string_view, NsAsMs, Ratio>;

// A marker's data object: its schema's name as "type", then one value per field of the schema, in
// the schema's order, so that the keys cannot drift from what meta.markerSchema declares.
void write_data(json::Writer& w, const MarkerSchema& schema, std::initializer_list<FieldValue> values) {
  if (values.size() != schema.fields.size())
    throw std::logic_error(std::string("marker data for ") + schema.name + " does not match its schema");
  w.key(markers::kDataType);
  w.string(schema.name);
  const FieldValue* value = values.begin();
  for (const MarkerField& field : schema.fields) {
    w.key(field.key);
    if (const auto* number = std::get_if<uint64_t>(value)) {
      w.uint(*number);
    } else if (const auto* duration = std::get_if<NsAsMs>(value)) {
      w.ns_as_ms(static_cast<int64_t>(std::min<uint64_t>(duration->ns, INT64_MAX)));
    } else if (const auto* ratio = std::get_if<Ratio>(value)) {
      char text[32];
      std::snprintf(text, sizeof text, "%.6g", ratio->value);
      w.raw(text);
    } else {
      w.string(std::get<std::string_view>(*value));
    }
    ++value;
  }
}

void write_data(json::Writer& w, const OffCpuMarkerData& d) {
  write_data(w, d.waiting ? kWaitCpuMarkerSchema : kOffCpuMarkerSchema, {d.off_cpu_ns, uint64_t{d.sample}});
}

void write_data(json::Writer& w, const MipMarkerData& d) {
  write_data(w, kMipMarkerSchema,
             {uint64_t{d.function.v}, d.module, d.calls, d.first_call, d.blocks, uint64_t{d.func.v},
              uint64_t{d.counts_calls ? 1u : 0u}});
}

void write_data(json::Writer& w, const LatencyMarkerData& d) {
  write_data(w, kLatencyMarkerSchema,
             {uint64_t{d.function.v}, d.calls, NsAsMs{d.avg_ns}, NsAsMs{d.p95_ns}, NsAsMs{d.max_ns},
              NsAsMs{d.total_ns}, d.avg_ns, d.p95_ns, d.max_ns, d.total_ns, d.sum_ns, d.histogram,
              uint64_t{d.func.v}});
}

void write_data(json::Writer& w, const TailCallMarkerData& d) {
  write_data(w, kTailCallMarkerSchema,
             {uint64_t{d.caller.v}, uint64_t{d.callee.v}, d.samples, Ratio{d.share}, d.stacks});
}

}  // namespace

void MarkerTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  t.column(markers::kData, [&](size_t i) {
    w.begin_object();
    std::visit([&](const auto& data) { write_data(w, data); }, rows_[i].data);
    w.end_object();
  });
  t.column(markers::kName, [&](size_t i) { w.uint(rows_[i].name.v); });
  t.column(markers::kStartTime, [&](size_t i) { w.ns_as_ms(rows_[i].start_ns); });
  t.column(markers::kEndTime, [&](size_t i) {
    if (rows_[i].end_ns) {
      w.ns_as_ms(*rows_[i].end_ns);
    } else {
      w.null();
    }
  });
  // The phase follows from the end: 1 = Interval, 0 = Instant.
  t.column(markers::kPhase, [&](size_t i) { w.uint(rows_[i].end_ns ? 1 : 0); });
  t.column(markers::kCategory, [&](size_t i) { w.uint(static_cast<uint32_t>(rows_[i].category)); });
  t.end();
}

}  // namespace hpd::firefox
