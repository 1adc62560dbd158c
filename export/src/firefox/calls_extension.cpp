// hpd's calls tracks in the Firefox format (firefox_format.h): one thread object per process whose
// samples are its call edges, written and read back.
#include "firefox/extensions_read.h"
#include "firefox/extensions_write.h"

#include <algorithm>
#include <optional>
#include <string>

#include "firefox/samples_table.h"
#include "firefox_format.h"
#include "hpd/export/firefox/schema.h"

namespace hpd::firefox {

// The calls track of one process: a sample per edge, weighted by its count. The samples all sit at
// the process's start: the counts cover the whole recording and have no time of their own. There is
// no threadCPUDelta column, so the track adds nothing to any CPU figure.
void write_calls_thread(hpd::json::Writer& w, const Profile& p, const Tables& tables,
                        const CallsTrack& track) {
  std::string process_name;
  for (const Thread& t : p.threads) {
    if (t.pid == track.pid && (process_name.empty() || t.is_main)) process_name = t.process_name;
  }
  const auto process = tables.processes.find(track.pid);
  const int64_t start = process != tables.processes.end() ? process->second.startup : 0;

  w.begin_object();
  w.key(firefox::thread::kName);
  w.string(firefox::kCallsThreadName);
  w.key(firefox::thread::kProcessName);
  w.string(process_name);
  w.key(firefox::thread::kProcessType);
  w.string("default");
  w.key(firefox::thread::kIsMainThread);
  w.boolean(false);
  w.key(firefox::thread::kPid);
  w.string(std::to_string(track.pid));
  w.key(firefox::thread::kTid);
  w.string(firefox::calls_thread_tid(track.pid));
  w.key(firefox::kCallsThreadField);
  w.boolean(true);
  write_lifetimes(w, process != tables.processes.end() ? &process->second : nullptr, start, std::nullopt);

  firefox::SamplesTable samples({.weight = true, .cpu = false});
  samples.reserve(track.edges.size());
  for (size_t i = 0; i < track.edges.size(); ++i) {
    firefox::SamplesTable::Row row;
    row.stack = track.stacks[i];
    row.time_ns = start;
    row.weight = p.call_edges[track.edges[i]].count;
    samples.add(row);
  }
  w.key(firefox::thread::kSamples);
  samples.serialize(w);

  // The latency summary spans the process's part of the recording: to its end, else the recording's.
  const int64_t end = process != tables.processes.end() && process->second.ended ? process->second.shutdown
                                                                                 : tables.profiling_end_ns(p);
  w.key(firefox::thread::kMarkers);
  latency_markers(p, track.pid, start, std::max(start, end)).serialize(w);
  w.end_object();
}

using nlohmann::json;

// The calls track (see firefox_format.h): each sample is one edge, its leaf frame's function the
// callee, the function of the frame before it the caller (none: unknown caller), its weight the
// count. Deeper frames, which hpd never writes, are ignored; a sample without a stack is no edge.
void read_calls_thread(Profile& p, const json& t, const JsonPath& where,
                       const std::vector<uint32_t>& stack_map) {
  const int32_t pid = parse_id(member(t, firefox::thread::kPid, where), where.key(firefox::thread::kPid));
  const Table samples(t, firefox::thread::kSamples, where);
  const json& stack = samples.column(firefox::samples::kStack);
  const json* weight = nullptr;
  if (const json* w = optional_member(member(t, firefox::thread::kSamples, where), firefox::samples::kWeight);
      w != nullptr && !w->is_null())
    weight = &samples.column(firefox::samples::kWeight);
  for (size_t i = 0; i < samples.length(); ++i) {
    const uint32_t st = samples.index(stack, firefox::samples::kStack, i, stack_map.size(),
                                      path::shared(firefox::shared::kStackTable), true);
    if (st == kNoIndex || stack_map[st] == kNoIndex) continue;
    int64_t count = 1;
    if (weight != nullptr) {
      count = samples.integer(*weight, firefox::samples::kWeight, i, -1);
      if (count < 0)
        throw FormatError(samples.element(firefox::samples::kWeight, i).str() + " is not a call count");
    }
    const Stack& leaf = p.stacks[stack_map[st]];
    CallEdge e;
    e.pid = pid;
    e.callee_func = p.frames[leaf.frame].func;
    if (leaf.prefix != kNoIndex) e.caller_func = p.frames[p.stacks[leaf.prefix].frame].func;
    e.count = static_cast<uint64_t>(count);
    p.call_edges.push_back(e);
  }
  if (optional_member(t, firefox::thread::kMarkers) == nullptr) return;
  const Table markers(t, firefox::thread::kMarkers, where);
  const json& data = markers.column(firefox::markers::kData);
  for (size_t i = 0; i < markers.length(); ++i) {
    if (data[i].is_object() &&
        optional_string(data[i], firefox::markers::kDataType) == firefox::kLatencySchema)
      read_latency_marker(p, markers, i, pid);
  }
}

}  // namespace hpd::firefox
