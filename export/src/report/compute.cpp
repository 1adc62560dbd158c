// The report's computation: per-function exclusive/inclusive attribution of on-CPU samples, CPU time
// and wall time, summed once per unique stack; moves, MIP counts and exact calls beside them.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <string_view>

#include "hpd/export/report.h"
#include "hpd/model/validate.h"
#include "rows.h"
#include "whole_functions.h"

namespace hpd {

using namespace report_rows;

namespace {

struct Tally {
  uint64_t on = 0;  // on-CPU samples
  uint64_t cpu_ns = 0;
  uint64_t off = 0;  // off-CPU samples, blocked
  uint64_t off_ns = 0;
  uint64_t wait = 0;  // off-CPU samples runnable, waiting for a CPU
  uint64_t wait_ns = 0;

  bool empty() const { return on == 0 && off == 0 && wait == 0; }
  Tally& operator+=(const Tally& o) {
    on += o.on;
    cpu_ns += o.cpu_ns;
    off += o.off;
    off_ns += o.off_ns;
    wait += o.wait;
    wait_ns += o.wait_ns;
    return *this;
  }
};

// Linux keeps 15 bytes of a thread's name: a longer --thread matches the name it was cut to.
bool thread_name_matches(const std::string& name, const std::string& wanted) {
  if (wanted.empty() || name == wanted) return true;
  return name.size() == 15 && wanted.size() > 15 && wanted.compare(0, 15, name) == 0;
}

// Adds `n` stacks that ended as `end` to the totals' and the thread's counters: {complete, truncated,
// failed} of each.
void add_stack_end(StackEnd end, uint64_t n, uint64_t* (&counters)[6]) {
  const int column = end == StackEnd::kComplete    ? 0
                     : end == StackEnd::kTruncated ? 1
                     : end == StackEnd::kFailed    ? 2
                                                   : -1;
  if (column < 0) return;
  *counters[column] += n;
  *counters[column + 3] += n;
}

bool selected(const Thread& t, const ReportOptions& options) {
  return report_selects_thread(t, options);
}

// The position of the last top-level ", " in generic arguments: T itself may hold commas inside
// <>, (), or [].
size_t last_top_level_comma(std::string_view args) {
  int depth = 0;
  size_t found = std::string_view::npos;
  for (size_t i = 0; i < args.size(); ++i) {
    const char c = args[i];
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) found = i;
  }
  return found;
}

struct MoveKey {
  bool copy;
  std::string type;
  uint64_t size;
  bool operator<(const MoveKey& o) const {
    if (copy != o.copy) return copy < o.copy;
    if (size != o.size) return size < o.size;
    return type < o.type;
  }
};

// Attributes each stack's on-CPU samples to its innermost compiler_move/compiler_copy frame, if any.
void compute_moves(const Profile& p, const std::vector<uint32_t>& whole, const std::vector<Tally>& per_stack,
                   Report& report) {
  // Parsed once per function: most profiles have no move frames at all.
  std::vector<int32_t> key_of_func(p.funcs.size(), -1);
  std::vector<MoveKey> keys;
  std::map<MoveKey, int32_t> key_index;
  for (uint32_t f = 0; f < p.funcs.size(); ++f) {
    const std::string& name = p.func_name(f);
    if (name.find("compiler_") == std::string::npos) continue;
    auto move = parse_compiler_move(name);
    if (!move) continue;
    MoveKey key{move->copy, std::move(move->type), move->size};
    auto [it, inserted] = key_index.try_emplace(key, static_cast<int32_t>(keys.size()));
    if (inserted) keys.push_back(key);
    key_of_func[f] = it->second;
  }
  if (keys.empty()) return;

  struct Acc {
    Tally tally;
    std::map<uint32_t, Tally> callers;  // by func
  };
  std::vector<Acc> acc(keys.size());
  for (uint32_t s = 0; s < per_stack.size(); ++s) {
    const Tally& tally = per_stack[s];
    if (tally.on == 0) continue;
    uint32_t node = s;
    while (node != kNoIndex && key_of_func[p.frames[p.stacks[node].frame].func] < 0)
      node = p.stacks[node].prefix;
    if (node == kNoIndex) continue;
    const Frame& move_frame = p.frames[p.stacks[node].frame];
    // The caller is the real (depth 0) function at the move's address; a move frame that is itself
    // a real frame (no inline information) is credited to the frame that called it.
    uint32_t caller = p.stacks[node].prefix;
    if (move_frame.inline_depth != 0) {
      while (caller != kNoIndex && p.frames[p.stacks[caller].frame].inline_depth != 0) {
        caller = p.stacks[caller].prefix;
      }
    }
    Tally on = tally;
    on.off = 0;
    on.off_ns = 0;
    on.wait = 0;
    on.wait_ns = 0;
    Acc& a = acc[static_cast<size_t>(key_of_func[move_frame.func])];
    a.tally += on;
    if (caller != kNoIndex) a.callers[whole[p.frames[p.stacks[caller].frame].func]] += on;
    report.move_samples += on.on;
    report.move_cpu_ns += on.cpu_ns;
  }

  for (size_t k = 0; k < keys.size(); ++k) {
    if (acc[k].tally.on == 0) continue;
    MoveRow row;
    row.move = CompilerMoveName{keys[k].copy, keys[k].type, keys[k].size};
    row.samples = acc[k].tally.on;
    row.cpu_ns = acc[k].tally.cpu_ns;
    row.percent = percent(row.samples, report.totals.samples);
    for (const auto& [func, t] : acc[k].callers) row.callers.push_back({p.func_name(func), t.on, t.cpu_ns});
    std::sort(row.callers.begin(), row.callers.end(), [](const MoveCaller& a, const MoveCaller& b) {
      return a.samples != b.samples ? a.samples > b.samples : a.name < b.name;
    });
    report.moves.push_back(std::move(row));
  }
  std::sort(report.moves.begin(), report.moves.end(), [](const MoveRow& a, const MoveRow& b) {
    if (a.samples != b.samples) return a.samples > b.samples;
    if (a.move.size != b.move.size) return a.move.size > b.move.size;
    if (a.move.type != b.move.type) return a.move.type < b.move.type;
    return a.move.copy < b.move.copy;
  });
}

void compute_mip(const Profile& p, const std::vector<uint32_t>& whole, const ReportOptions& options,
                 Report& report) {
  if (p.mip_counts.empty()) return;
  std::vector<const ReportRow*> sampled(p.funcs.size(), nullptr);
  for (const ReportRow& r : report.rows) sampled[r.func] = &r;
  std::map<uint32_t, MipRow> by_func;  // several processes of one binary add up
  for (const MipCount& c : p.mip_counts) {
    if (options.pid != 0 && c.pid != options.pid) continue;
    const uint32_t func = whole[c.func];
    auto [it, inserted] = by_func.try_emplace(func);
    MipRow& row = it->second;
    if (inserted) {
      row.func = func;
      row.name = p.func_name(func);
      const uint32_t lib = p.funcs[func].lib;
      if (lib != kNoIndex && lib < p.libs.size()) row.library = p.libs[lib].name;
      row.counts_calls = c.counts_calls;
    }
    row.calls += c.calls;
    if (c.first_call != 0 && (row.first_call == 0 || c.first_call < row.first_call))
      row.first_call = c.first_call;
    row.blocks_covered = std::max(row.blocks_covered, c.blocks_covered);
    row.blocks_total = std::max(row.blocks_total, c.blocks_total);
    row.counts_calls = row.counts_calls && c.counts_calls;
  }
  for (auto& [func, row] : by_func) {
    if (const ReportRow* r = sampled[func]; r != nullptr) {
      row.self_samples = r->self_samples;
      row.self_cpu_ns = r->self_cpu_ns;
    }
    if (row.counts_calls && row.calls != 0) row.cpu_per_call_ns = row.self_cpu_ns / row.calls;
    (row.calls != 0 ? report.mip_called : report.mip_never_called).push_back(std::move(row));
  }
  std::stable_sort(report.mip_called.begin(), report.mip_called.end(), [](const MipRow& a, const MipRow& b) {
    const uint64_t fa = a.first_call != 0 ? a.first_call : UINT64_MAX;
    const uint64_t fb = b.first_call != 0 ? b.first_call : UINT64_MAX;
    if (fa != fb) return fa < fb;
    if (a.calls != b.calls) return a.calls > b.calls;
    return a.name < b.name;
  });
  std::stable_sort(report.mip_never_called.begin(), report.mip_never_called.end(),
                   [](const MipRow& a, const MipRow& b) { return a.name < b.name; });
}

// The runtime's latency per function (merged over processes unless one is chosen), beside the
// counts of the rows compute_calls made.
void add_call_latency(const Profile& p, const std::vector<uint32_t>& whole, const ReportOptions& options,
                      Report& report) {
  report.calls_counter = p.meta.recording.call_counter;
  const RecordingInfo& rec = p.meta.recording;
  // The call graph as recorded: "cfi", "fp", "dwarf", or "auto:<the one chosen>".
  const std::string walk = rec.call_graph.substr(rec.call_graph.find(':') + 1);
  report.calls_stacks_through_hook =
      rec.call_counter == "runtime" && rec.backend == "bpf" && (walk == "cfi" || walk == "fp");
  if (p.call_latency.empty()) return;
  std::map<uint32_t, CallLatency> by_func;
  for (const CallLatency& l : p.call_latency) {
    if (options.pid != 0 && l.pid != options.pid) continue;
    CallLatency& m = by_func[whole[l.func]];
    m.func = whole[l.func];
    m.merge(l);
  }
  const uint64_t duration = report.totals.duration_ns;
  for (CallRow& row : report.calls) {
    auto it = by_func.find(row.func);
    if (it == by_func.end() || it->second.calls == 0) continue;
    const CallLatency& l = it->second;
    row.timed_calls = l.calls;
    row.avg_ns = l.avg_ns();
    row.p95_ns = l.p95_ns();
    row.max_ns = l.max_ns;
    row.latency_total_ns = l.outer_ns;
    row.latency_wall_percent = duration != 0 ? 100.0 * double(l.outer_ns) / double(duration) : 0;
    report.calls_timed = true;
  }
}

void compute_calls(const Profile& p, const std::vector<uint32_t>& whole, const ReportOptions& options,
                   Report& report) {
  if (p.call_edges.empty()) return;
  std::vector<const ReportRow*> sampled(p.funcs.size(), nullptr);
  for (const ReportRow& r : report.rows) sampled[r.func] = &r;
  std::map<uint32_t, CallRow> by_func;
  std::map<uint32_t, std::map<uint32_t, uint64_t>> callers, callees;  // func -> peer -> calls
  const auto name_of = [&](uint32_t f) {
    return f == kNoIndex ? std::string("(unknown caller)") : p.func_name(f);
  };
  for (const CallEdge& e : p.call_edges) {
    if (options.pid != 0 && e.pid != options.pid) continue;
    const uint32_t callee = whole[e.callee_func];
    const uint32_t caller = e.caller_func == kNoIndex ? kNoIndex : whole[e.caller_func];
    auto [it, inserted] = by_func.try_emplace(callee);
    if (inserted) {
      it->second.func = callee;
      it->second.name = p.func_name(callee);
      const uint32_t lib = p.funcs[callee].lib;
      if (lib != kNoIndex && lib < p.libs.size()) it->second.library = p.libs[lib].name;
    }
    it->second.calls += e.count;
    report.calls_total += e.count;
    callers[callee][caller] += e.count;
    if (caller != kNoIndex) callees[caller][callee] += e.count;
  }
  const auto peers = [&](const std::map<uint32_t, uint64_t>& m) {
    std::vector<CallPeer> out;
    for (const auto& [f, n] : m) out.push_back(CallPeer{name_of(f), n});
    std::stable_sort(out.begin(), out.end(),
                     [](const CallPeer& a, const CallPeer& b) { return a.calls > b.calls; });
    return out;
  };
  for (auto& [func, row] : by_func) {
    if (const ReportRow* r = sampled[func]; r != nullptr) {
      row.self_cpu_ns = r->self_cpu_ns;
      row.total_cpu_ns = r->total_cpu_ns;
      row.total_wall_ns = r->total_wall_ns;
    }
    if (row.calls != 0) row.cpu_per_call_ns = row.total_cpu_ns / row.calls;
    row.callers = peers(callers[func]);
    if (auto c = callees.find(func); c != callees.end()) row.callees = peers(c->second);
    report.calls.push_back(std::move(row));
  }
  add_call_latency(p, whole, options, report);
  std::stable_sort(report.calls.begin(), report.calls.end(), [](const CallRow& a, const CallRow& b) {
    if (a.calls != b.calls) return a.calls > b.calls;
    return a.name < b.name;
  });
}

// Sampled allocations per function, weighted by alloc_sample_scale so that every sum estimates what
// the program did.
void compute_allocations(const Profile& p, const std::vector<uint32_t>& whole, const ReportOptions& options,
                         Report& report) {
  report.alloc_mean_bytes = p.meta.alloc.mean_bytes;
  if (report.alloc_mean_bytes == 0) return;
  std::map<uint32_t, AllocRow> by_func;
  std::set<uint32_t> seen;
  for (const Allocation& a : p.allocations) {
    if (options.pid != 0 && a.pid != options.pid) continue;
    if (options.tid != 0 && a.tid != options.tid) continue;
    const double scale = alloc_sample_scale(a.size, report.alloc_mean_bytes);
    const double bytes = scale * double(a.size);
    const bool live = !a.freed && a.tracked;
    ++report.alloc_samples;
    report.alloc_frees_matched += a.freed ? 1 : 0;
    report.alloc_bytes += bytes;
    report.alloc_objects += scale;
    if (live) {
      report.live_bytes += bytes;
      report.live_objects += scale;
    }
    if (a.stack == kNoIndex) continue;
    const std::vector<uint32_t> frames = p.stack_frames_root_first(a.stack);
    seen.clear();
    for (size_t i = 0; i < frames.size(); ++i) {
      const uint32_t func = whole[p.frames[frames[i]].func];
      auto [it, inserted] = by_func.try_emplace(func);
      AllocRow& row = it->second;
      if (inserted) {
        row.func = func;
        row.name = p.func_name(func);
        const uint32_t lib = p.funcs[func].lib;
        if (lib != kNoIndex && lib < p.libs.size()) row.library = p.libs[lib].name;
      }
      if (i + 1 == frames.size()) {
        row.self_bytes += bytes;
        row.self_objects += scale;
        if (live) row.live_self_bytes += bytes;
      }
      if (!seen.insert(func).second) continue;  // recursion: once per stack
      ++row.samples;
      row.total_bytes += bytes;
      row.total_objects += scale;
      if (live) {
        row.live_total_bytes += bytes;
        row.live_total_objects += scale;
      }
    }
  }
  for (auto& [func, row] : by_func) report.allocations.push_back(std::move(row));
  std::stable_sort(report.allocations.begin(), report.allocations.end(),
                   [](const AllocRow& a, const AllocRow& b) {
                     if (a.total_bytes != b.total_bytes) return a.total_bytes > b.total_bytes;
                     return a.name < b.name;
                   });
}

}  // namespace

bool report_selects_thread(const Thread& t, const ReportOptions& options) {
  return (options.pid == 0 || t.pid == options.pid) && (options.tid == 0 || t.tid == options.tid) &&
         thread_name_matches(t.name, options.thread);
}

std::optional<CompilerMoveName> parse_compiler_move(std::string_view name) {
  std::string_view rest;
  bool copy = false;
  for (const std::string_view marker :
       {std::string_view("compiler_move"), std::string_view("compiler_copy")}) {
    const size_t at = name.find(marker);
    if (at == std::string_view::npos) continue;
    // Either the whole name, or the item core::profiling::<marker> (a path ending right there).
    const std::string_view before = name.substr(0, at);
    if (!before.empty() && before != "core::profiling::") continue;
    copy = marker == "compiler_copy";
    rest = name.substr(at + marker.size());
    CompilerMoveName out;
    out.copy = copy;
    out.type = "?";
    if (rest.empty()) return out;  // legacy mangling: no generic arguments in the name
    if (rest.substr(0, 2) == "::") rest.remove_prefix(2);
    if (rest.size() < 2 || rest.front() != '<' || rest.back() != '>') return std::nullopt;
    const std::string_view args = rest.substr(1, rest.size() - 2);
    const size_t comma = last_top_level_comma(args);
    if (comma == std::string_view::npos) {
      out.type = std::string(args);
      return out;
    }
    out.type = std::string(args.substr(0, comma));
    std::string_view size = args.substr(comma + 1);
    while (!size.empty() && size.front() == ' ') size.remove_prefix(1);
    uint64_t value = 0;
    size_t digits = 0;
    while (digits < size.size() && std::isdigit(static_cast<unsigned char>(size[digits])) &&
           value < (1ull << 59)) {
      value = value * 10 + static_cast<uint64_t>(size[digits] - '0');
      ++digits;
    }
    // A type suffix (16usize) may follow the digits; anything else is not a size.
    if (digits == 0 || (digits < size.size() && size.substr(digits) != "usize")) {
      out.type = std::string(args);
      return out;
    }
    out.size = value;
    return out;
  }
  return std::nullopt;
}

Report compute_report(const Profile& p, const ReportOptions& options) {
  // validate() without its pass over the samples: the loop below checks each sample's stack as it
  // reads it (see validate.h), so that the samples, most of a profile, are read once.
  validate_tables(p);
  Report report;
  ReportTotals& totals = report.totals;
  const RecordingInfo& info = p.meta.recording;
  totals.interval_ns = interval_ns_or_assumed(info);
  // Samples not taken are counted against the interval the recording states, never an assumed one.
  const uint64_t stated_interval_ns = sampling_interval_ns(info);
  totals.lost = p.meta.lost;
  totals.missing_modules = p.meta.missing_modules;

  // Recording length from the first on-CPU sample (the time before it is said apart); without an end
  // time, up to the last sample (as the Firefox writer does).
  const bool first_known = info.first_sample_mono_ns >= info.start_mono_ns &&
                           info.first_sample_mono_ns != 0 && info.first_sample_mono_ns <= info.end_mono_ns;
  if (info.requested_mono_ns != 0 && first_known && info.first_sample_mono_ns >= info.requested_mono_ns) {
    totals.unsampled_start_known = true;
    totals.unsampled_start_ns = info.first_sample_mono_ns - info.requested_mono_ns;
  }
  totals.host_steal_known = info.host_steal_known;
  totals.host_steal_ns = info.host_steal_ns;
  totals.host_steal_note = host_steal_note(info);
  if (info.end_mono_ns > info.start_mono_ns) {
    totals.duration_ns = info.end_mono_ns - (first_known ? info.first_sample_mono_ns : info.start_mono_ns);
  } else {
    uint64_t last = info.start_mono_ns;
    for (const Thread& t : p.threads) {
      for (const Sample& s : t.samples) last = std::max(last, s.time_ns);
      for (const SampleSum& s : t.sample_sums) last = std::max(last, s.last_ns);
    }
    totals.duration_ns = last - info.start_mono_ns;
  }

  // Samples are summed per unique stack first: stacks are far fewer than samples.
  std::vector<Tally> per_stack(p.stacks.size());
  std::set<int32_t> pids;
  for (const Thread& t : p.threads) {
    if (!selected(t, options)) {
      for (size_t i = 0; i < t.samples.size(); ++i) {
        if (!valid_sample(p, t.samples[i])) throw_sample_violation(p, t, i);
      }
      continue;
    }
    ++totals.threads;
    pids.insert(t.pid);
    if (lost_total(t.lost) != 0) totals.lost_by_thread.push_back(ThreadLoss{t.pid, t.tid, t.name, t.lost});
    ThreadStacks thread_stacks;
    thread_stacks.pid = t.pid;
    thread_stacks.tid = t.tid;
    thread_stacks.name = t.name;
    ThreadTime time{t.pid, t.tid, t.name};
    // `n` samples of one stack, kind and stack end, adding up to `cpu_ns` (on-CPU) or `off_ns`
    // (blocked or waiting for a CPU). Off-CPU samples may carry CPU time too: what the scheduler charged
    // the thread for its wait after its wakeup, the stack's CPU like any other.
    // `not_taken`: a sum's samples not taken, counted one sample at a time when they were summed
    // (SampleSum::not_taken); null for a sample, counted here.
    const auto count = [&](uint32_t stack, SampleKind kind, StackEnd end, uint64_t n, uint64_t cpu_ns,
                           uint64_t off_ns, const SamplesNotTaken* not_taken) {
      Tally tally;
      tally.cpu_ns = cpu_ns;
      totals.cpu_ns += cpu_ns;
      time.cpu_ns += cpu_ns;
      if (is_off_cpu_interval(kind)) {
        if (stack == kNoIndex) totals.off_cpu_without_stack_ns += off_ns;
        if (kind == SampleKind::kWaitCpu) {
          tally.wait = n;
          tally.wait_ns = off_ns;
          totals.wait_cpu_samples += n;
          totals.wait_cpu_ns += off_ns;
          time.wait_cpu_samples += n;
          time.wait_cpu_ns += off_ns;
        } else {
          tally.off = n;
          tally.off_ns = off_ns;
          totals.off_cpu_samples += n;
          totals.off_cpu_ns += off_ns;
          time.off_cpu_samples += n;
          time.off_cpu_ns += off_ns;
        }
        uint64_t* ends[] = {&totals.off_stacks_complete,  &totals.off_stacks_truncated,
                            &totals.off_stacks_failed,    &thread_stacks.off_complete,
                            &thread_stacks.off_truncated, &thread_stacks.off_failed};
        add_stack_end(end, n, ends);
        uint64_t* times[] = {&totals.off_stacks_complete_ns,  &totals.off_stacks_truncated_ns,
                             &totals.off_stacks_failed_ns,    &thread_stacks.off_complete_ns,
                             &thread_stacks.off_truncated_ns, &thread_stacks.off_failed_ns};
        add_stack_end(end, off_ns, times);
        if (end != StackEnd::kComplete && end != StackEnd::kTruncated && end != StackEnd::kFailed)
          totals.off_stacks_unknown_ns += off_ns;
      } else {
        tally.on = n;
        totals.samples += n;
        if (not_taken != nullptr)
          totals.not_taken.add(*not_taken);
        else
          totals.not_taken.add(cpu_ns, n, stated_interval_ns);
        time.samples += n;
        if (stack == kNoIndex) totals.samples_without_stack += n;
        uint64_t* ends[] = {&totals.stacks_complete,     &totals.stacks_truncated,
                            &totals.stacks_failed,       &thread_stacks.on_complete,
                            &thread_stacks.on_truncated, &thread_stacks.on_failed};
        add_stack_end(end, n, ends);
      }
      if (stack != kNoIndex) per_stack[stack] += tally;
    };
    for (size_t i = 0; i < t.samples.size(); ++i) {
      const Sample& s = t.samples[i];
      if (!valid_sample(p, s)) throw_sample_violation(p, t, i);
      count(s.stack, s.kind, s.stack_end, 1, s.cpu_delta_ns, s.off_cpu_ns, nullptr);
    }
    for (const SampleSum& s : t.sample_sums)
      count(s.stack, s.kind, s.stack_end, s.samples, s.cpu_delta_ns, s.off_cpu_ns, &s.not_taken);
    if (thread_stacks.on_complete + thread_stacks.on_truncated + thread_stacks.on_failed +
            thread_stacks.off_complete + thread_stacks.off_truncated + thread_stacks.off_failed >
        0)
      totals.stacks_by_thread.push_back(thread_stacks);
    if (time.samples + time.off_cpu_samples + time.wait_cpu_samples > 0) {
      time.wall_ns = time.samples * totals.interval_ns + time.off_cpu_ns + time.wait_cpu_ns;
      totals.time_by_thread.push_back(std::move(time));
    } else if (t.samples.empty() && t.sample_sums.empty()) {
      totals.unsampled_threads.push_back(UnsampledThread{t.pid, t.tid, t.name, {}});
    }
  }
  // Why a thread has no sample, when the recording shows it: one without any off-CPU sample saw
  // only the time threads spent on a CPU, and a thread that never ran then has none. Told by the
  // whole profile, whatever threads are selected (another thread's off-CPU samples say they were
  // taken); a profile without any sample (a file cut before its first samples) does not tell. A pass
  // over the samples only when some thread has none.
  bool any_sample = false, any_off_cpu = false;
  for (size_t i = 0; !totals.unsampled_threads.empty() && !any_off_cpu && i < p.threads.size(); ++i) {
    const Thread& t = p.threads[i];
    any_sample = any_sample || !t.samples.empty() ||
                 std::any_of(t.sample_sums.begin(), t.sample_sums.end(),
                             [](const SampleSum& s) { return s.samples != 0; });
    any_off_cpu = std::any_of(t.samples.begin(), t.samples.end(),
                              [](const Sample& s) { return is_off_cpu_interval(s.kind); }) ||
                  std::any_of(t.sample_sums.begin(), t.sample_sums.end(), [](const SampleSum& s) {
                    return s.samples != 0 && is_off_cpu_interval(s.kind);
                  });
  }
  if (any_sample && !any_off_cpu) {
    const char* why = info.backend == "perf"  ? "perf_event without --off-cpu samples only CPU time"
                      : info.backend == "bpf" ? "recorded without off-CPU samples: only CPU time"
                                              : "";
    for (UnsampledThread& u : totals.unsampled_threads) u.why = why;
  }
  // Records the kernel dropped (a ring that was full) may have been a thread's samples: it cannot be
  // told whose they were, so each thread without samples says so.
  if (totals.lost.lost_records != 0) {
    const std::string lost = "its samples may be among the " + std::to_string(totals.lost.lost_records) +
                             (totals.lost.lost_records == 1 ? " record" : " records") +
                             " lost when the ring was full";
    for (UnsampledThread& u : totals.unsampled_threads) u.why = u.why.empty() ? lost : u.why + ", or " + lost;
  }
  std::stable_sort(totals.time_by_thread.begin(), totals.time_by_thread.end(),
                   [](const ThreadTime& a, const ThreadTime& b) { return a.wall_ns > b.wall_ns; });
  totals.processes = pids.size();
  totals.not_taken_known = samples_not_taken_counted(info);
  totals.not_taken_note = samples_not_taken_note(totals.not_taken, totals.samples, info);
  const auto stack_samples = [](const ThreadStacks& s) {
    return s.on_complete + s.on_truncated + s.on_failed + s.off_complete + s.off_truncated + s.off_failed;
  };
  std::stable_sort(
      totals.stacks_by_thread.begin(), totals.stacks_by_thread.end(),
      [&](const ThreadStacks& a, const ThreadStacks& b) { return stack_samples(a) > stack_samples(b); });
  totals.wall_ns = totals.samples * totals.interval_ns + totals.off_cpu_ns + totals.wait_cpu_ns;
  std::stable_sort(totals.lost_by_thread.begin(), totals.lost_by_thread.end(),
                   [](const ThreadLoss& a, const ThreadLoss& b) {
                     const uint64_t la = lost_total(a.lost), lb = lost_total(b.lost);
                     if (la != lb) return la > lb;
                     return a.pid != b.pid ? a.pid < b.pid : a.tid < b.tid;
                   });

  // One row per function, also for one kept as several funcs (whole_functions.h).
  const std::vector<uint32_t> whole = whole_functions(p);
  std::vector<Tally> self(p.funcs.size());
  std::vector<Tally> total(p.funcs.size());
  std::vector<uint32_t> seen_in(p.funcs.size(), kNoIndex);  // last stack that counted the func
  for (uint32_t s = 0; s < per_stack.size(); ++s) {
    const Tally& tally = per_stack[s];
    if (tally.empty()) continue;
    // The stack node is the deepest frame, the innermost inline level at the sampled address.
    self[whole[p.frames[p.stacks[s].frame].func]] += tally;
    for (uint32_t node = s; node != kNoIndex; node = p.stacks[node].prefix) {
      const uint32_t func = whole[p.frames[p.stacks[node].frame].func];
      if (seen_in[func] == s) continue;  // recursion: once per sample
      seen_in[func] = s;
      total[func] += tally;
    }
  }

  for (uint32_t f = 0; f < p.funcs.size(); ++f) {
    if (total[f].empty()) continue;
    ReportRow row;
    row.func = f;
    row.name = p.func_name(f);
    const uint32_t lib = p.funcs[f].lib;
    if (lib != kNoIndex) row.library = p.libs[lib].name;
    row.self_samples = self[f].on;
    row.total_samples = total[f].on;
    row.self_percent = percent(row.self_samples, totals.samples);
    row.total_percent = percent(row.total_samples, totals.samples);
    row.self_cpu_ns = self[f].cpu_ns;
    row.total_cpu_ns = total[f].cpu_ns;
    row.self_off_cpu_samples = self[f].off;
    row.total_off_cpu_samples = total[f].off;
    row.self_off_cpu_ns = self[f].off_ns;
    row.total_off_cpu_ns = total[f].off_ns;
    row.self_wait_cpu_samples = self[f].wait;
    row.total_wait_cpu_samples = total[f].wait;
    row.self_wait_cpu_ns = self[f].wait_ns;
    row.total_wait_cpu_ns = total[f].wait_ns;
    row.self_wall_ns = self[f].on * totals.interval_ns + self[f].off_ns + self[f].wait_ns;
    row.total_wall_ns = total[f].on * totals.interval_ns + total[f].off_ns + total[f].wait_ns;
    row.self_wall_percent = percent(row.self_wall_ns, totals.wall_ns);
    row.total_wall_percent = percent(row.total_wall_ns, totals.wall_ns);
    report.rows.push_back(std::move(row));
  }
  sort_rows(report.rows, options.sort);
  compute_moves(p, whole, per_stack, report);
  compute_mip(p, whole, options, report);
  compute_calls(p, whole, options, report);
  compute_allocations(p, whole, options, report);
  // Calls per function for --sort calls: exact counts where there are any, else MIP's.
  std::map<uint32_t, uint64_t> calls_of;
  for (const CallRow& c : report.calls) calls_of[c.func] = c.calls;
  if (calls_of.empty()) {
    for (const MipRow& m : report.mip_called) {
      if (m.counts_calls) calls_of[m.func] = m.calls;
    }
  }
  for (ReportRow& row : report.rows) {
    if (auto it = calls_of.find(row.func); it != calls_of.end()) row.calls = it->second;
  }
  if (options.sort == ReportSort::kCalls) sort_rows(report.rows, options.sort);
  if (!options.function.empty()) {
    std::regex pattern;
    try {
      pattern = std::regex(options.function, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw ExportError("--function " + options.function + " is not a valid regular expression: " + e.what());
    }
    std::erase_if(report.rows, [&](const ReportRow& r) { return !std::regex_search(r.name, pattern); });
  }
  return report;
}

}  // namespace hpd
