// The report as one JSON document (hpctl report --json): the same totals, rows and views as the text.
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "hpd/export/report.h"
#include "rows.h"

namespace hpd {

using namespace report_rows;

void print_report_json(const Report& report, std::ostream& out, const ReportOptions& options) {
  using nlohmann::ordered_json;
  const ReportTotals& t = report.totals;
  ordered_json doc;
  doc["sort"] = sort_name(options.sort);
  doc["limit"] = options.limit;
  doc["filter"] = {
      {"pid", options.pid}, {"tid", options.tid}, {"thread", options.thread}, {"function", options.function}};
  ordered_json lost_by_thread = ordered_json::array();
  for (const ThreadLoss& l : t.lost_by_thread) {
    lost_by_thread.push_back({{"pid", l.pid},
                              {"tid", l.tid},
                              {"name", l.name},
                              {"lost_records", l.lost.lost_records},
                              {"throttle_events", l.lost.throttle_events},
                              {"stack_failures", l.lost.stack_failures},
                              {"truncated_stacks", l.lost.truncated_stacks}});
  }
  ordered_json stacks_by_thread = ordered_json::array();
  for (const ThreadStacks& s : t.stacks_by_thread) {
    stacks_by_thread.push_back(
        {{"pid", s.pid},
         {"tid", s.tid},
         {"name", s.name},
         {"on_cpu", {{"complete", s.on_complete}, {"truncated", s.on_truncated}, {"failed", s.on_failed}}},
         {"off_cpu",
          {{"complete", s.off_complete},
           {"truncated", s.off_truncated},
           {"failed", s.off_failed},
           {"complete_ns", s.off_complete_ns},
           {"truncated_ns", s.off_truncated_ns},
           {"failed_ns", s.off_failed_ns}}}});
  }
  ordered_json time_by_thread = ordered_json::array();
  for (const ThreadTime& tt : t.time_by_thread) {
    time_by_thread.push_back({{"pid", tt.pid},
                              {"tid", tt.tid},
                              {"name", tt.name},
                              {"samples", tt.samples},
                              {"cpu_ns", tt.cpu_ns},
                              {"off_cpu_samples", tt.off_cpu_samples},
                              {"off_cpu_ns", tt.off_cpu_ns},
                              {"wait_cpu_samples", tt.wait_cpu_samples},
                              {"wait_cpu_ns", tt.wait_cpu_ns},
                              {"wall_ns", tt.wall_ns}});
  }
  ordered_json unsampled_threads = ordered_json::array();
  for (const UnsampledThread& u : t.unsampled_threads)
    unsampled_threads.push_back({{"pid", u.pid}, {"tid", u.tid}, {"name", u.name}, {"why", u.why}});
  doc["totals"] = {
      {"samples", t.samples},
      {"samples_without_stack", t.samples_without_stack},
      {"off_cpu_samples", t.off_cpu_samples},
      {"wait_cpu_samples", t.wait_cpu_samples},
      {"threads", t.threads},
      {"processes", t.processes},
      {"duration_ns", t.duration_ns},
      {"unsampled_start_ns",
       t.unsampled_start_known ? ordered_json(t.unsampled_start_ns) : ordered_json(nullptr)},
      {"host_steal_ns", t.host_steal_known ? ordered_json(t.host_steal_ns) : ordered_json(nullptr)},
      {"samples_not_taken", t.not_taken_known
                                ? ordered_json{{"samples", t.not_taken.samples}, {"cpu_ns", t.not_taken.ns}}
                                : ordered_json(nullptr)},
      {"interval_ns", t.interval_ns},
      {"cpu_ns", t.cpu_ns},
      {"off_cpu_ns", t.off_cpu_ns},
      {"wait_cpu_ns", t.wait_cpu_ns},
      {"off_cpu_without_stack_ns", t.off_cpu_without_stack_ns},
      {"wall_ns", t.wall_ns},
      {"time_by_thread", time_by_thread},
      {"unsampled_threads", unsampled_threads},
      {"lost",
       {{"lost_records", t.lost.lost_records},
        {"throttle_events", t.lost.throttle_events},
        {"stack_failures", t.lost.stack_failures},
        {"truncated_stacks", t.lost.truncated_stacks}}},
      {"lost_by_thread", lost_by_thread},
      {"stacks",
       {{"complete", t.stacks_complete},
        {"truncated", t.stacks_truncated},
        {"failed", t.stacks_failed},
        {"off_cpu",
         {{"complete", t.off_stacks_complete},
          {"truncated", t.off_stacks_truncated},
          {"failed", t.off_stacks_failed},
          {"complete_ns", t.off_stacks_complete_ns},
          {"truncated_ns", t.off_stacks_truncated_ns},
          {"failed_ns", t.off_stacks_failed_ns},
          {"unknown_ns", t.off_stacks_unknown_ns}}},
        {"by_thread", stacks_by_thread}}},
      {"missing_modules", t.missing_modules},
      {"functions", report.rows.size()},
  };
  ordered_json functions = ordered_json::array();
  for (const ReportRow* r : top_rows(report.rows, options.sort, options.limit)) {
    functions.push_back({
        {"name", r->name},
        {"library", r->library},
        {"self_samples", r->self_samples},
        {"total_samples", r->total_samples},
        {"self_percent", r->self_percent},
        {"total_percent", r->total_percent},
        {"self_cpu_ns", r->self_cpu_ns},
        {"total_cpu_ns", r->total_cpu_ns},
        {"self_off_cpu_samples", r->self_off_cpu_samples},
        {"total_off_cpu_samples", r->total_off_cpu_samples},
        {"self_off_cpu_ns", r->self_off_cpu_ns},
        {"total_off_cpu_ns", r->total_off_cpu_ns},
        {"self_wait_cpu_samples", r->self_wait_cpu_samples},
        {"total_wait_cpu_samples", r->total_wait_cpu_samples},
        {"self_wait_cpu_ns", r->self_wait_cpu_ns},
        {"total_wait_cpu_ns", r->total_wait_cpu_ns},
        {"self_wall_ns", r->self_wall_ns},
        {"total_wall_ns", r->total_wall_ns},
        {"self_wall_percent", r->self_wall_percent},
        {"total_wall_percent", r->total_wall_percent},
        {"calls", r->calls},
    });
  }
  doc["functions"] = std::move(functions);
  if (!report.moves.empty()) {
    ordered_json moves = ordered_json::array();
    const size_t shown =
        options.limit != 0 ? std::min(options.limit, report.moves.size()) : report.moves.size();
    for (size_t i = 0; i < shown; ++i) {
      const MoveRow& m = report.moves[i];
      ordered_json callers = ordered_json::array();
      for (const MoveCaller& c : m.callers) {
        callers.push_back({{"name", c.name}, {"samples", c.samples}, {"cpu_ns", c.cpu_ns}});
      }
      moves.push_back({{"kind", m.move.copy ? "copy" : "move"},
                       {"type", m.move.type},
                       {"size", m.move.size},
                       {"samples", m.samples},
                       {"cpu_ns", m.cpu_ns},
                       {"percent", m.percent},
                       {"callers", std::move(callers)}});
    }
    doc["compiler_moves"] = {{"samples", report.move_samples},
                             {"cpu_ns", report.move_cpu_ns},
                             {"percent", percent(report.move_samples, t.samples)},
                             {"types", report.moves.size()},
                             {"moves", std::move(moves)}};
  }
  if (!report.mip_called.empty() || !report.mip_never_called.empty()) {
    const auto limited = [&](size_t n) { return options.limit != 0 ? std::min(options.limit, n) : n; };
    ordered_json called = ordered_json::array();
    for (size_t i = 0; i < limited(report.mip_called.size()); ++i) {
      const MipRow& r = report.mip_called[i];
      called.push_back({{"name", r.name},
                        {"library", r.library},
                        {"calls", r.calls},
                        {"counts_calls", r.counts_calls},
                        {"first_call", r.first_call},
                        {"blocks_covered", r.blocks_covered},
                        {"blocks_total", r.blocks_total},
                        {"self_samples", r.self_samples},
                        {"self_cpu_ns", r.self_cpu_ns},
                        {"cpu_per_call_ns", r.cpu_per_call_ns}});
    }
    ordered_json never = ordered_json::array();
    for (size_t i = 0; i < limited(report.mip_never_called.size()); ++i) {
      const MipRow& r = report.mip_never_called[i];
      never.push_back({{"name", r.name}, {"library", r.library}, {"blocks_total", r.blocks_total}});
    }
    doc["mip"] = {{"functions_called", report.mip_called.size()},
                  {"functions_never_called", report.mip_never_called.size()},
                  {"functions", std::move(called)},
                  {"never_called", std::move(never)}};
  }
  if (!report.calls.empty()) {
    const size_t shown =
        options.limit != 0 ? std::min(options.limit, report.calls.size()) : report.calls.size();
    const auto peers = [](const std::vector<CallPeer>& v) {
      ordered_json out = ordered_json::array();
      for (const CallPeer& c : v) out.push_back({{"name", c.name}, {"calls", c.calls}});
      return out;
    };
    ordered_json functions_called = ordered_json::array();
    for (size_t i = 0; i < shown; ++i) {
      const CallRow& r = report.calls[i];
      functions_called.push_back({{"name", r.name},
                                  {"library", r.library},
                                  {"calls", r.calls},
                                  {"self_cpu_ns", r.self_cpu_ns},
                                  {"total_cpu_ns", r.total_cpu_ns},
                                  {"total_wall_ns", r.total_wall_ns},
                                  {"cpu_per_call_ns", r.cpu_per_call_ns},
                                  {"callers", peers(r.callers)},
                                  {"callees", peers(r.callees)}});
      if (r.timed_calls != 0) {
        functions_called.back()["latency"] = {{"timed_calls", r.timed_calls},
                                              {"avg_ns", r.avg_ns},
                                              {"p95_ns", r.p95_ns},
                                              {"max_ns", r.max_ns},
                                              {"total_ns", r.latency_total_ns},
                                              {"wall_percent", r.latency_wall_percent}};
      }
    }
    doc["calls"] = {{"total", report.calls_total},
                    {"counter", report.calls_counter},
                    {"stacks_through_hook", report.calls_stacks_through_hook},
                    {"functions", report.calls.size()},
                    {"rows", std::move(functions_called)}};
  }
  if (report.alloc_mean_bytes != 0) {
    const size_t shown =
        options.limit != 0 ? std::min(options.limit, report.allocations.size()) : report.allocations.size();
    ordered_json rows = ordered_json::array();
    for (size_t i = 0; i < shown; ++i) {
      const AllocRow& r = report.allocations[i];
      rows.push_back({{"name", r.name},
                      {"library", r.library},
                      {"self_bytes", r.self_bytes},
                      {"total_bytes", r.total_bytes},
                      {"self_objects", r.self_objects},
                      {"total_objects", r.total_objects},
                      {"live_self_bytes", r.live_self_bytes},
                      {"live_total_bytes", r.live_total_bytes},
                      {"live_total_objects", r.live_total_objects},
                      {"samples", r.samples}});
    }
    doc["allocations"] = {{"mean_bytes", report.alloc_mean_bytes},
                          {"samples", report.alloc_samples},
                          {"frees_matched", report.alloc_frees_matched},
                          {"bytes", report.alloc_bytes},
                          {"objects", report.alloc_objects},
                          {"live_bytes", report.live_bytes},
                          {"live_objects", report.live_objects},
                          {"functions", report.allocations.size()},
                          {"rows", std::move(rows)}};
  }
  // Names are not guaranteed to be UTF-8; replace bad bytes instead of throwing.
  out << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << '\n';
}

}  // namespace hpd
