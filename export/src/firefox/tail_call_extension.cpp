// hpd's tail-call edges in the Firefox format (firefox_format.h, kTailCallSchema): one interval marker
// per (caller, callee) pair a thread reached by a tail call, written and read back. The call tree is
// left as it is: no frame, stack or function is added or renamed.
#include "firefox/extensions_read.h"
#include "firefox/extensions_write.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <utility>

#include "firefox_format.h"
#include "hpd/export/firefox/schema.h"

namespace hpd::firefox {

// Per thread: the distinct stacks its samples and allocations end in (with their on-CPU samples),
// then the tail-call stacks on each one's path, grouped by the pair of functions of the edge.
void derive_tail_calls(const Profile& p, Tables& t) {
  if (std::none_of(p.stacks.begin(), p.stacks.end(), [](const Stack& s) { return s.tail_call; })) return;
  const auto func_of = [&](uint32_t stack) { return p.frames[p.stacks[stack].frame].func; };
  std::map<std::pair<int32_t, int32_t>, size_t> thread_of;  // (pid, tid) -> index in p.threads
  for (size_t i = 0; i < p.threads.size(); ++i)
    thread_of.emplace(std::pair{p.threads[i].pid, p.threads[i].tid}, i);
  std::vector<std::map<uint32_t, uint64_t>> ends(p.threads.size());  // stack -> on-CPU samples
  for (size_t i = 0; i < p.threads.size(); ++i) {
    for (const Sample& s : p.threads[i].samples) {
      if (s.stack != kNoIndex) ends[i][s.stack] += s.kind == SampleKind::kOnCpu ? 1 : 0;
    }
  }
  for (const Allocation& a : p.allocations) {
    const auto it = thread_of.find({a.pid, a.tid});
    if (it != thread_of.end() && a.stack != kNoIndex) ends[it->second].emplace(a.stack, 0);
  }
  for (size_t i = 0; i < p.threads.size(); ++i) {
    uint64_t on_cpu = 0;
    std::map<std::pair<uint32_t, uint32_t>, TailCallEdge> edges;  // (caller, callee) -> edge
    std::vector<std::pair<uint32_t, uint32_t>> on_path;
    for (const auto& [leaf, samples] : ends[i]) {
      on_cpu += samples;
      on_path.clear();
      for (uint32_t s = leaf; s != kNoIndex; s = p.stacks[s].prefix) {
        if (!p.stacks[s].tail_call || p.stacks[s].prefix == kNoIndex) continue;
        const std::pair<uint32_t, uint32_t> pair{func_of(p.stacks[s].prefix), func_of(s)};
        TailCallEdge& e = edges[pair];
        e.caller_func = pair.first;
        e.callee_func = pair.second;
        e.stacks.push_back(s);
        // A sample counts once per pair, however often its stack passes that way (recursion).
        if (std::find(on_path.begin(), on_path.end(), pair) == on_path.end()) {
          on_path.push_back(pair);
          e.samples += samples;
        }
      }
    }
    if (edges.empty()) continue;
    std::vector<TailCallEdge>& out = t.tail_calls_of_thread[i];
    for (auto& [pair, e] : edges) {
      std::sort(e.stacks.begin(), e.stacks.end());
      e.stacks.erase(std::unique(e.stacks.begin(), e.stacks.end()), e.stacks.end());
      t.tail_call_names.push_back(p.func_name(pair.first) + kTailCallArrow + p.func_name(pair.second) +
                                  kTailCallNameSuffix);
      e.name = t.strings.add(t.tail_call_names.back());
      out.push_back(std::move(e));
    }
    for (TailCallEdge& e : out) e.thread_samples = on_cpu;
    std::stable_sort(out.begin(), out.end(),
                     [](const TailCallEdge& a, const TailCallEdge& b) { return a.samples > b.samples; });
  }
}

// The thread's tail-call markers, from its start to its end (else the recording's).
void add_tail_call_markers(const Profile& p, const Tables& t, size_t thread, MarkerTable& markers) {
  const auto it = t.tail_calls_of_thread.find(thread);
  if (it == t.tail_calls_of_thread.end()) return;
  const Thread& th = p.threads[thread];
  const int64_t start = t.thread_start(th);
  const int64_t end = std::max(start, th.end_ns != 0 ? t.relative_ns(th.end_ns) : t.profiling_end_ns(p));
  for (const TailCallEdge& e : it->second) {
    std::string stacks;
    for (uint32_t s : e.stacks) stacks += (stacks.empty() ? "" : ",") + std::to_string(s);
    const double share =
        e.thread_samples == 0 ? 0.0 : static_cast<double>(e.samples) / static_cast<double>(e.thread_samples);
    MarkerTable::Row row;
    row.data =
        TailCallMarkerData{string_row(p.funcs[e.caller_func].name), string_row(p.funcs[e.callee_func].name),
                           e.samples, share, std::move(stacks)};
    row.name = e.name;
    row.start_ns = start;
    row.end_ns = end;
    markers.add(std::move(row));
  }
}

using nlohmann::json;

// The stacks a tail-call marker lists become tail-call edges again. Each must be a stack whose
// function and its prefix's are the marker's callee and caller: anything else is a damaged file.
void read_tail_call_marker(Profile& p, const Table& markers, size_t i, const std::vector<uint32_t>& stack_map,
                           const std::vector<bool>& leaf_rows,
                           const std::vector<const std::string*>& string_values) {
  const json& d = markers.column(firefox::markers::kData)[i];
  const auto bad = [&](const std::string& why) {
    return FormatError(markers.element(firefox::markers::kData, i).str() + " is a tail-call marker " + why);
  };
  const auto name = [&](const char* key) -> const std::string& {
    const json* v = optional_member(d, key);
    const int64_t index = v != nullptr ? as_integer(*v).value_or(-1) : -1;
    if (index < 0 || static_cast<uint64_t>(index) >= string_values.size())
      throw bad(std::string("without a valid ") + key);
    return *string_values[static_cast<size_t>(index)];
  };
  const std::string& caller = name(firefox::kTailCallCallerField);
  const std::string& callee = name(firefox::kTailCallCalleeField);
  const std::string text = optional_string(d, firefox::kTailCallStacksField);
  const char* at = text.data();
  const char* const stop = text.data() + text.size();
  while (at < stop) {
    uint64_t row = 0;
    const auto [next, ec] = std::from_chars(at, stop, row);
    if (ec != std::errc() || row >= stack_map.size() || leaf_rows[row] || (next != stop && *next != ','))
      throw bad("with a malformed or out-of-range stack list \"" + text + "\"");
    const uint32_t s = stack_map[row];
    if (s == kNoIndex || p.stacks[s].prefix == kNoIndex ||
        p.func_name(p.frames[p.stacks[s].frame].func) != callee ||
        p.func_name(p.frames[p.stacks[p.stacks[s].prefix].frame].func) != caller)
      throw bad("whose stack " + std::to_string(row) + " is no edge from " + caller + " to " + callee);
    p.stacks[s].tail_call = true;
    at = next == stop ? stop : next + 1;
  }
}

}  // namespace hpd::firefox
