// Derives the Firefox writer's tables from a Profile (see firefox_tables.h); no JSON here.
#include "firefox_tables.h"

#include <algorithm>
#include <unordered_map>

#include "firefox_format.h"

namespace hpd::firefox {

namespace {

constexpr uint64_t kDefaultIntervalNs = 1000000;  // 1 ms, when the recording does not say

// A function-level frame: no address, line or native symbol. The calls track uses these rather than
// some sampled frame of the function, so that no sampled line or instruction is credited with
// calls; the call tree groups frames by function, so they are the same nodes as the sampled ones.
bool is_bare_frame(const Frame& f) {
  return f.address < 0 && f.native_symbol == kNoIndex && f.line == 0 && f.column == 0 &&
         f.inline_depth == 0 && f.category == Category::kUser;
}

// Frames and stacks of the calls track (caller -> callee, or the callee alone when the caller is
// unknown), appended after the profile's own. Equal ones already in the profile are reused, so a
// profile read back from such a file is written again without growing.
void derive_calls(const Profile& p, Tables& t) {
  if (p.call_edges.empty()) return;
  std::unordered_map<uint32_t, uint32_t> frame_of_func;
  for (size_t i = 0; i < p.frames.size(); ++i) {
    if (is_bare_frame(p.frames[i])) frame_of_func.emplace(p.frames[i].func, static_cast<uint32_t>(i));
  }
  const auto stack_key = [](uint32_t prefix, uint32_t frame) { return uint64_t{prefix} << 32 | frame; };
  std::unordered_map<uint64_t, uint32_t> stack_of;
  for (size_t i = 0; i < p.stacks.size(); ++i) {
    const Stack& s = p.stacks[i];
    if (is_bare_frame(p.frames[s.frame]))
      stack_of.emplace(stack_key(s.prefix, s.frame), static_cast<uint32_t>(i));
  }
  const auto frame = [&](uint32_t func) {
    auto [it, inserted] =
        frame_of_func.emplace(func, static_cast<uint32_t>(p.frames.size() + t.calls_frames.size()));
    if (inserted) {
      Frame f;
      f.func = func;
      f.lib = p.funcs[func].lib;
      t.calls_frames.push_back(f);
    }
    return it->second;
  };
  const auto stack = [&](uint32_t prefix, uint32_t frame_index) {
    auto [it, inserted] = stack_of.emplace(stack_key(prefix, frame_index),
                                           static_cast<uint32_t>(p.stacks.size() + t.calls_stacks.size()));
    if (inserted) t.calls_stacks.push_back(Stack{prefix, frame_index});
    return it->second;
  };
  std::unordered_map<int32_t, size_t> track_of_pid;
  for (size_t i = 0; i < p.call_edges.size(); ++i) {
    const CallEdge& e = p.call_edges[i];
    auto [it, inserted] = track_of_pid.emplace(e.pid, t.calls_tracks.size());
    if (inserted) t.calls_tracks.push_back(CallsTrack{e.pid, {}, {}});
    CallsTrack& track = t.calls_tracks[it->second];
    const uint32_t caller = e.caller_func == kNoIndex ? kNoIndex : stack(kNoIndex, frame(e.caller_func));
    track.edges.push_back(static_cast<uint32_t>(i));
    track.stacks.push_back(stack(caller, frame(e.callee_func)));
  }
}

}  // namespace

int64_t Tables::profiling_end_ns(const Profile& p) const {
  const RecordingInfo& info = p.meta.recording;
  if (info.end_mono_ns > info.start_mono_ns) return relative_ns(info.end_mono_ns);
  int64_t end = 0;
  for (const Thread& thread : p.threads) {
    for (const Sample& s : thread.samples) end = std::max(end, relative_ns(s.time_ns));
  }
  return end;
}

Tables derive_tables(const Profile& p) {
  Tables t;
  const RecordingInfo& info = p.meta.recording;
  t.start_mono_ns = info.start_mono_ns;
  t.interval_ns = info.interval_ns;
  if (t.interval_ns == 0 && info.frequency_hz > 0) t.interval_ns = 1000000000ull / info.frequency_hz;
  if (t.interval_ns == 0) t.interval_ns = kDefaultIntervalNs;
  derive_calls(p, t);

  // One source per distinct file name, in order of first use.
  std::unordered_map<uint32_t, uint32_t> source_of_file;
  t.source_of_func.assign(p.funcs.size(), kNoIndex);
  for (size_t i = 0; i < p.funcs.size(); ++i) {
    const uint32_t file = p.funcs[i].file;
    if (file == kNoIndex) continue;
    auto [it, inserted] = source_of_file.emplace(file, static_cast<uint32_t>(t.source_files.size()));
    if (inserted) t.source_files.push_back(file);
    t.source_of_func[i] = it->second;
  }

  // nativeSymbols.libIndex cannot be null: a symbol without a lib is left out, and frames
  // pointing at it get a null nativeSymbol.
  t.native_symbol_out.assign(p.native_symbols.size(), kNoIndex);
  for (size_t i = 0; i < p.native_symbols.size(); ++i) {
    if (p.native_symbols[i].lib == kNoIndex) continue;
    t.native_symbol_out[i] = static_cast<uint32_t>(t.native_symbols_written.size());
    t.native_symbols_written.push_back(static_cast<uint32_t>(i));
  }

  // Strings the Profile does not hold go after its own, so its indices stay valid as they are.
  const auto base = static_cast<uint32_t>(p.strings.size());
  for (const Lib& lib : p.libs) {
    t.lib_name_string.push_back(base + static_cast<uint32_t>(t.extra_strings.size()));
    t.extra_strings.push_back(lib.name);
  }
  t.off_cpu_name_string = base + static_cast<uint32_t>(t.extra_strings.size());
  t.extra_strings.push_back(kOffCpuMarkerName);

  // MIP markers go to each process's main thread (else its first thread).
  std::unordered_map<int32_t, size_t> mip_thread;  // pid -> thread holding its MIP markers
  for (size_t i = 0; i < p.threads.size(); ++i) {
    const Thread& thread = p.threads[i];
    auto [it, inserted] = mip_thread.emplace(thread.pid, i);
    if (!inserted && thread.is_main && !p.threads[it->second].is_main) it->second = i;
  }
  for (size_t i = 0; i < p.mip_counts.size(); ++i) {
    if (auto it = mip_thread.find(p.mip_counts[i].pid); it != mip_thread.end())
      t.mip_of_thread[it->second].push_back(static_cast<uint32_t>(i));
  }

  // Where each process starts and ends, for the tracks' process times.
  for (const Thread& thread : p.threads) {
    const int64_t start = t.thread_start(thread);
    auto [it, inserted] = t.processes.emplace(thread.pid, ProcessTimes{start, 0, true});
    ProcessTimes& times = it->second;
    times.startup = std::min(times.startup, start);
    if (thread.end_ns == 0) {
      times.ended = false;
    } else {
      times.shutdown = std::max(times.shutdown, t.relative_ns(thread.end_ns));
    }
  }
  return t;
}

}  // namespace hpd::firefox
