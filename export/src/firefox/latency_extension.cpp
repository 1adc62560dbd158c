// hpd's call-latency markers in the Firefox format (firefox_format.h): one interval marker per timed
// function on its process's calls track, written and read back.
#include "firefox/extensions_read.h"
#include "firefox/extensions_write.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "firefox_format.h"
#include "hpd/export/firefox/schema.h"

namespace hpd::firefox {

namespace {

std::string histogram_text(const LatencyHistogram& h) {
  char scale[40];
  std::snprintf(scale, sizeof scale, "%.17g", h.ns_per_tick);
  std::string out = scale;
  for (const auto& [bucket, count] : h.buckets)
    out +=
        (out.size() == std::strlen(scale) ? " " : ",") + std::to_string(bucket) + ":" + std::to_string(count);
  return out;
}

}  // namespace

// One interval marker per timed function of the process (see firefox_format.h).
MarkerTable latency_markers(const Profile& p, int32_t pid, int64_t start, int64_t end) {
  firefox::MarkerTable markers;
  for (const CallLatency& l : p.call_latency) {
    if (l.pid != pid || l.calls == 0) continue;
    const firefox::StringIndex name = firefox::string_row(p.funcs[l.func].name);
    firefox::LatencyMarkerData data;
    data.function = name;
    data.calls = l.calls;
    data.avg_ns = l.avg_ns();
    data.p95_ns = l.p95_ns();
    data.max_ns = l.max_ns;
    data.total_ns = l.outer_ns;
    data.sum_ns = l.sum_ns;
    data.histogram = histogram_text(l.histogram);
    data.func = firefox::func_row(l.func);
    markers.add(std::move(data), name, start, end, Category::kUser);
  }
  return markers;
}

using nlohmann::json;

// A call-latency marker of the calls track: the function its hidden index names, the exact sums
// and the histogram.
void read_latency_marker(Profile& p, const Table& markers, size_t i, int32_t pid) {
  const json& d = markers.column(firefox::markers::kData)[i];
  const auto integer = [&](const char* key) -> int64_t {
    const json* v = optional_member(d, key);
    return v != nullptr ? as_integer(*v).value_or(-1) : -1;
  };
  const int64_t func = integer(firefox::kLatencyFuncField), calls = integer(firefox::kLatencyCallsField);
  const int64_t sum = integer(firefox::kLatencySumField), total = integer(firefox::kLatencyTotalField);
  const int64_t max = integer(firefox::kLatencyMaxField);
  if (func < 0 || static_cast<uint64_t>(func) >= p.funcs.size() || calls <= 0 || sum < 0 || total < 0 ||
      max < 0)
    throw FormatError(markers.element(firefox::markers::kData, i).str() +
                      " is a call-latency marker without valid fields");
  CallLatency l;
  l.pid = pid;
  l.func = static_cast<uint32_t>(func);
  l.calls = static_cast<uint64_t>(calls);
  l.sum_ns = static_cast<uint64_t>(sum);
  l.outer_ns = static_cast<uint64_t>(total);
  l.max_ns = static_cast<uint64_t>(max);
  // "scale bucket:count,bucket:count..."
  const std::string text = optional_string(d, firefox::kLatencyHistogramField);
  if (!text.empty()) {
    char* end = nullptr;
    l.histogram.ns_per_tick = std::strtod(text.c_str(), &end);
    const char* at = end;
    while (at != nullptr && *at != '\0') {
      if (*at == ' ' || *at == ',') ++at;
      char* colon = nullptr;
      const unsigned long long bucket = std::strtoull(at, &colon, 10);
      if (colon == at || *colon != ':' || bucket > UINT32_MAX)
        throw FormatError(markers.element(firefox::markers::kData, i).str() +
                          " has a malformed latency histogram");
      char* next = nullptr;
      const unsigned long long count = std::strtoull(colon + 1, &next, 10);
      if (next == colon + 1)
        throw FormatError(markers.element(firefox::markers::kData, i).str() +
                          " has a malformed latency histogram");
      l.histogram.buckets.emplace_back(static_cast<uint32_t>(bucket), count);
      at = next;
    }
  }
  p.call_latency.push_back(std::move(l));
}

}  // namespace hpd::firefox
