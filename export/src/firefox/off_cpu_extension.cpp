// hpd's off-CPU samples in the Firefox format (firefox_format.h): weighed in sampling intervals, each with
// an interval marker (blocked or waiting for a CPU) that names it, written and read back.
#include "firefox/extensions_read.h"
#include "firefox/extensions_write.h"

#include <algorithm>
#include <string>

#include "firefox_format.h"
#include "hpd/export/firefox/schema.h"

namespace hpd::firefox {

namespace {

// An off-CPU time that cannot overflow the signed nanosecond arithmetic of the times.
int64_t capped_off_cpu_ns(const Sample& s) {
  return static_cast<int64_t>(std::min<uint64_t>(s.off_cpu_ns, uint64_t{1} << 62));
}

}  // namespace

uint64_t OffCpuWeights::next(uint64_t off_cpu_ns) {
  carry_ += static_cast<int64_t>(std::min<uint64_t>(off_cpu_ns, uint64_t{1} << 62));
  const int64_t weight = std::max<int64_t>(0, (carry_ + interval_ / 2) / interval_);
  carry_ -= weight * interval_;
  return static_cast<uint64_t>(weight);
}

MarkerTable::Row off_cpu_marker(const Sample& s, uint32_t sample, int64_t time_ns, const Tables& tables) {
  // Blocked or waiting for a CPU, each its own schema. The interval assumes the sample is
  // stamped when it began: when the thread left the CPU (samply's convention), or, for the wait
  // of a woken thread (eBPF), at its wakeup.
  const bool waits = s.kind == SampleKind::kWaitCpu;
  return {OffCpuMarkerData{s.off_cpu_ns, sample, waits}, waits ? tables.wait_cpu_name : tables.off_cpu_name,
          time_ns, time_ns + capped_off_cpu_ns(s), waits ? Category::kWaitCpu : Category::kIdle};
}

using nlohmann::json;

// Off-CPU samples are named by their markers: marker `i` of a thread (an object), when it is an off-CPU
// or wait-for-CPU one, makes the sample it names one of that kind with its time. False for another marker.
bool read_off_cpu_marker(const Table& markers, size_t i, std::vector<Sample>& samples) {
  const json& d = markers.column(firefox::markers::kData)[i];
  const std::string type = optional_string(d, firefox::markers::kDataType);
  if (type != firefox::kOffCpuSchema && type != firefox::kWaitCpuSchema) return false;
  const json* index = optional_member(d, firefox::kOffCpuSampleField);
  const json* off = optional_member(d, firefox::kOffCpuNsField);
  // -1 stands for "absent or not an integer".
  const int64_t k = index != nullptr ? as_integer(*index).value_or(-1) : -1;
  const int64_t ns = off != nullptr ? as_integer(*off).value_or(-1) : -1;
  if (k < 0 || static_cast<uint64_t>(k) >= samples.size() || ns < 0) {
    throw FormatError(markers.element(firefox::markers::kData, i).str() +
                      " is an off-CPU marker with an invalid sample or time");
  }
  Sample& s = samples[static_cast<size_t>(k)];
  s.kind = type == firefox::kWaitCpuSchema ? SampleKind::kWaitCpu : SampleKind::kOffCpu;
  s.off_cpu_ns = static_cast<uint64_t>(ns);
  return true;
}

}  // namespace hpd::firefox
