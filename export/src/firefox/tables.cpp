// Derives the Firefox writer's tables from a Profile (see tables.h); no JSON here.
#include "firefox/tables.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "firefox/extensions_write.h"
#include "firefox_format.h"

namespace hpd::firefox {

namespace {

// The categories the Profile gives the frames of off-CPU samples.
bool is_off_cpu_category(Category c) {
  return c == Category::kIdle || c == Category::kWaitCpu;
}

// A function-level frame: no address, line or native symbol. The calls track uses these rather than
// some sampled frame of the function, so that no sampled line or instruction is credited with
// calls; the call tree groups frames by function, so they are the same nodes as the sampled ones.
bool is_bare_frame(const Frame& f) {
  return f.address < 0 && f.native_symbol == kNoIndex && f.line == 0 && f.column == 0 &&
         f.inline_depth == 0 && f.category == Category::kUser;
}

// Frames and stacks of the calls track (caller -> callee, or the callee alone when the caller is
// unknown), added after the profile's own. Equal ones already in the profile are reused, so a
// profile read back from such a file is written again without growing.
void derive_calls(const Profile& p, Tables& t) {
  if (p.call_edges.empty()) return;
  std::unordered_map<uint32_t, FrameIndex> frame_of_func;
  for (size_t i = 0; i < p.frames.size(); ++i) {
    if (is_bare_frame(p.frames[i]))
      frame_of_func.emplace(p.frames[i].func, FrameIndex{static_cast<uint32_t>(i)});
  }
  const auto stack_key = [](std::optional<StackIndex> prefix, FrameIndex frame) {
    return uint64_t{prefix ? prefix->v : kNoIndex} << 32 | frame.v;
  };
  std::unordered_map<uint64_t, StackIndex> stack_of;
  for (size_t i = 0; i < p.stacks.size(); ++i) {
    const Stack& s = p.stacks[i];
    if (is_bare_frame(p.frames[s.frame]))
      stack_of.emplace(uint64_t{s.prefix} << 32 | s.frame, stack_row(static_cast<uint32_t>(i)));
  }
  const auto frame = [&](uint32_t func) {
    auto it = frame_of_func.find(func);
    if (it == frame_of_func.end()) {
      FrameRow bare;
      bare.func = func_row(func);
      it = frame_of_func.emplace(func, t.frames.add(bare)).first;
    }
    return it->second;
  };
  const auto stack = [&](std::optional<StackIndex> prefix, FrameIndex frame_index) {
    auto it = stack_of.find(stack_key(prefix, frame_index));
    if (it == stack_of.end())
      it = stack_of.emplace(stack_key(prefix, frame_index), t.stacks.add(prefix, frame_index)).first;
    return it->second;
  };
  std::unordered_map<int32_t, size_t> track_of_pid;
  for (size_t i = 0; i < p.call_edges.size(); ++i) {
    const CallEdge& e = p.call_edges[i];
    auto [it, inserted] = track_of_pid.emplace(e.pid, t.calls_tracks.size());
    if (inserted) t.calls_tracks.push_back(CallsTrack{e.pid, {}, {}});
    CallsTrack& track = t.calls_tracks[it->second];
    std::optional<StackIndex> caller;
    if (e.caller_func != kNoIndex) caller = stack(std::nullopt, frame(e.caller_func));
    track.edges.push_back(static_cast<uint32_t>(i));
    track.stacks.push_back(stack(caller, frame(e.callee_func)));
  }
}

// The shared tables' rows for the Profile's own, in its order (tables.h relies on that for funcs,
// stacks and strings).
void derive_shared(const Profile& p, Tables& t) {
  // Strings the Profile does not hold go after its own, so its indices stay valid as they are.
  for (const std::string& s : p.strings.strings()) t.strings.add(s);

  // One source per distinct file name, in order of first use.
  std::unordered_map<uint32_t, SourceIndex> source_of_file;
  std::vector<std::optional<SourceIndex>> source_of_func(p.funcs.size());
  for (size_t i = 0; i < p.funcs.size(); ++i) {
    const uint32_t file = p.funcs[i].file;
    if (file == kNoIndex) continue;
    auto it = source_of_file.find(file);
    if (it == source_of_file.end()) it = source_of_file.emplace(file, t.sources.add(string_row(file))).first;
    source_of_func[i] = it->second;
  }

  // One resource per lib, at the lib's index, named by the lib's name.
  std::vector<ResourceIndex> resource_of_lib;
  for (size_t i = 0; i < p.libs.size(); ++i)
    resource_of_lib.push_back(
        t.resources.add({LibIndex{static_cast<uint32_t>(i)}, t.strings.add(p.libs[i].name)}));
  t.off_cpu_name = t.strings.add(kOffCpuMarkerName);
  t.wait_cpu_name = t.strings.add(kWaitCpuMarkerName);

  // nativeSymbols.libIndex cannot be null: a symbol without a lib is left out, and frames
  // pointing at it get a null nativeSymbol.
  std::vector<std::optional<NativeSymbolIndex>> symbol_row(p.native_symbols.size());
  for (size_t i = 0; i < p.native_symbols.size(); ++i) {
    const NativeSymbol& s = p.native_symbols[i];
    if (s.lib == kNoIndex) continue;
    symbol_row[i] = t.native_symbols.add({LibIndex{s.lib}, s.address, string_row(s.name), s.size});
  }

  for (size_t i = 0; i < p.funcs.size(); ++i) {
    const Func& f = p.funcs[i];
    FuncRow row{string_row(f.name), std::nullopt, source_of_func[i]};
    if (f.lib != kNoIndex) row.resource = resource_of_lib[f.lib];
    t.funcs.add(row);
  }

  // The frames of off-CPU samples take the category their function has on the CPU (firefox_format.h):
  // that of a frame of it outside off-CPU samples, else Kernel for the kernel's, else User.
  std::vector<std::optional<Category>> cpu_category(p.funcs.size());
  for (const Frame& f : p.frames) {
    if (!is_off_cpu_category(f.category) && !cpu_category[f.func]) cpu_category[f.func] = f.category;
  }
  const auto category_on_cpu = [&](const Frame& f) {
    if (cpu_category[f.func]) return *cpu_category[f.func];
    const uint32_t lib = f.lib != kNoIndex ? f.lib : p.funcs[f.func].lib;
    return lib != kNoIndex && p.libs[lib].is_kernel ? Category::kKernel : Category::kUser;
  };

  t.frames.reserve(p.frames.size());
  for (const Frame& f : p.frames) {
    FrameRow row;
    row.address = f.address;
    row.inline_depth = f.inline_depth;
    row.category = f.category;
    if (is_off_cpu_category(f.category)) {
      row.category = category_on_cpu(f);
      row.subcategory = f.category == Category::kWaitCpu ? kWaitingSubcategory : kBlockedSubcategory;
    }
    row.func = func_row(f.func);
    if (f.native_symbol != kNoIndex) row.native_symbol = symbol_row[f.native_symbol];
    row.line = f.line;
    row.column = f.column;
    t.frames.add(row);
  }

  // validate() ensured that each prefix precedes its stack, which the stack table requires.
  t.stacks.reserve(p.stacks.size());
  for (const Stack& s : p.stacks) {
    std::optional<StackIndex> prefix;
    if (s.prefix != kNoIndex) prefix = stack_row(s.prefix);
    t.stacks.add(prefix, FrameIndex{s.frame});
  }
}

// The leaf stacks of off-CPU samples (Tables::off_cpu_leaves), after the Profile's rows. The two leaf
// functions and frames are added only when some sample needs them.
void derive_off_cpu_leaves(const Profile& p, Tables& t) {
  std::optional<FrameIndex> leaf_frame[2];
  const auto frame = [&](bool waits) {
    std::optional<FrameIndex>& slot = leaf_frame[waits ? 1 : 0];
    if (!slot) {
      const FuncIndex func =
          t.funcs.add(FuncRow{t.strings.add(waits ? kWaitingLeafName : kBlockedLeafName), {}, {}});
      FrameRow row;
      row.category = Category::kIdle;
      row.subcategory = waits ? kWaitingSubcategory : kBlockedSubcategory;
      row.func = func;
      slot = t.frames.add(row);
    }
    return *slot;
  };
  for (const Thread& thread : p.threads) {
    for (const Sample& s : thread.samples) {
      if (!is_off_cpu_interval(s.kind)) continue;
      const uint64_t key = Tables::off_cpu_key(s);
      if (t.off_cpu_leaves.count(key) != 0) continue;
      std::optional<StackIndex> prefix;
      if (s.stack != kNoIndex) prefix = stack_row(s.stack);
      t.off_cpu_leaves.emplace(key, t.stacks.add(prefix, frame(s.kind == SampleKind::kWaitCpu)));
    }
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
  t.interval_ns = interval_ns_or_assumed(info);
  derive_shared(p, t);
  derive_off_cpu_leaves(p, t);  // before the calls track's rows, which a profile may have or not
  derive_calls(p, t);
  derive_tail_calls(p, t);

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
