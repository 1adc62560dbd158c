// The report's rows in order and their shares: shared by the computation, the text and the JSON.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hpd/export/report.h"

namespace hpd::report_rows {

inline uint64_t lost_total(const LostCounts& l) {
  return l.lost_records + l.throttle_events + l.stack_failures + l.truncated_stacks;
}

inline double percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

inline uint64_t sort_key(const ReportRow& r, ReportSort sort) {
  switch (sort) {
    case ReportSort::kSelf: return r.self_samples;
    case ReportSort::kTotal: return r.total_samples;
    case ReportSort::kSelfWall: return r.self_wall_ns;
    case ReportSort::kTotalWall: return r.total_wall_ns;
    case ReportSort::kSelfCpu: return r.self_cpu_ns;
    case ReportSort::kCalls: return r.calls;
  }
  return r.self_samples;
}

// The other key of the same view breaks ties, then the name, for a stable order.
inline ReportSort tie_breaker(ReportSort sort) {
  switch (sort) {
    case ReportSort::kSelf: return ReportSort::kTotal;
    case ReportSort::kTotal: return ReportSort::kSelf;
    case ReportSort::kSelfWall: return ReportSort::kTotalWall;
    case ReportSort::kTotalWall: return ReportSort::kSelfWall;
    case ReportSort::kSelfCpu: return ReportSort::kSelf;
    case ReportSort::kCalls: return ReportSort::kSelf;
  }
  return ReportSort::kTotal;
}

inline void sort_rows(std::vector<ReportRow>& rows, ReportSort sort) {
  const ReportSort second = tie_breaker(sort);
  std::sort(rows.begin(), rows.end(), [&](const ReportRow& a, const ReportRow& b) {
    const uint64_t ka = sort_key(a, sort), kb = sort_key(b, sort);
    if (ka != kb) return ka > kb;
    const uint64_t sa = sort_key(a, second), sb = sort_key(b, second);
    if (sa != sb) return sa > sb;
    if (a.name != b.name) return a.name < b.name;
    return a.func < b.func;
  });
}

inline const char* sort_name(ReportSort sort) {
  switch (sort) {
    case ReportSort::kSelf: return "self";
    case ReportSort::kTotal: return "total";
    case ReportSort::kSelfWall: return "self-wall";
    case ReportSort::kTotalWall: return "total-wall";
    case ReportSort::kSelfCpu: return "cpu";
    case ReportSort::kCalls: return "calls";
  }
  return "self";
}

// The first `limit` rows (0 = all) by `sort`, without copying rows. The stable sort keeps the
// report's name order among equal keys.
// With `in_view_of`, rows with nothing in the sort's view (an off-CPU-only function in the CPU view)
// are left out and the number of the others is stored there.
inline std::vector<const ReportRow*> top_rows(const std::vector<ReportRow>& all, ReportSort sort,
                                              size_t limit, size_t* in_view_of = nullptr) {
  const bool wall = sort == ReportSort::kSelfWall || sort == ReportSort::kTotalWall;
  std::vector<const ReportRow*> rows;
  rows.reserve(all.size());
  for (const ReportRow& r : all) {
    if (in_view_of == nullptr || (wall ? r.total_wall_ns > 0 : r.total_samples > 0)) rows.push_back(&r);
  }
  if (in_view_of != nullptr) *in_view_of = rows.size();
  const ReportSort second = tie_breaker(sort);
  std::stable_sort(rows.begin(), rows.end(), [&](const ReportRow* a, const ReportRow* b) {
    const uint64_t ka = sort_key(*a, sort), kb = sort_key(*b, sort);
    if (ka != kb) return ka > kb;
    return sort_key(*a, second) > sort_key(*b, second);
  });
  if (limit != 0 && rows.size() > limit) rows.resize(limit);
  return rows;
}

}  // namespace hpd::report_rows
