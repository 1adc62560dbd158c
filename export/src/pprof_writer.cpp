// pprof writer: a hand-written protobuf encoder for perftools.profiles.Profile (proto3, profile.proto).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "address_groups.h"
#include "hpd/export/pprof.h"
#include "hpd/model/validate.h"
#include "output_file.h"
#include "proto_writer.h"

namespace hpd {
namespace {

constexpr int kGzipLevel = 6;

class PprofBuilder {
 public:
  PprofBuilder(const Profile& p, const PprofOptions& options) : p_(p), options_(options) {
    strings_.emplace_back();
    string_index_.emplace("", 0);
  }

  std::string build() {
    validate(p_);
    const RecordingInfo& info = p_.meta.recording;
    interval_ns_ = interval_ns_or_assumed(info);
    bool has_off_cpu = false;
    for (const Thread& t : p_.threads) {
      for (const Sample& s : t.samples) has_off_cpu |= is_off_cpu_interval(s.kind);
    }
    lay_out_mappings();

    // Each column's index is the one its type gets here, whichever optional columns come before it.
    std::vector<std::pair<std::string, std::string>> types;
    const auto column = [&types](const char* type, const char* unit) {
      types.emplace_back(type, unit);
      return types.size() - 1;
    };
    samples_column_ = column("samples", "count");
    cpu_column_ = column("cpu", "nanoseconds");
    if (has_off_cpu) wall_column_ = column("wall", "nanoseconds");
    if (!p_.call_edges.empty()) calls_column_ = column("calls", "count");
    if (!p_.call_latency.empty()) latency_column_ = column("latency", "nanoseconds");
    if (p_.meta.alloc.mean_bytes != 0) {
      // Go's heap profile columns, so that `go tool pprof -sample_index=inuse_space` reads them.
      alloc_objects_column_ = column("alloc_objects", "count");
      alloc_space_column_ = column("alloc_space", "bytes");
      inuse_objects_column_ = column("inuse_objects", "count");
      inuse_space_column_ = column("inuse_space", "bytes");
    }
    value_count_ = types.size();
    for (const auto& [type, unit] : types) {
      ProtoWriter vt;
      vt.uint_field(1, str(type));
      vt.uint_field(2, str(unit));
      out_.message_field(1, vt);
    }

    add_samples();
    add_call_edges();
    add_call_latency();
    add_allocations();

    for (const AggregatedSample& s : samples_) {
      ProtoWriter m;
      m.packed_field(1, locations_of_stack(s.stack));
      m.packed_field(2, s.values);
      if (options_.thread_labels && s.thread != kNoIndex) {
        const Thread& t = p_.threads[s.thread];
        label(m, "thread", str(t.name.empty() ? t.process_name : t.name), 0);
        label(m, "thread_id", 0, t.tid);
        label(m, "pid", 0, t.pid);
      }
      // Off-CPU time says why the thread was not running: blocked, or runnable waiting for a CPU.
      if (s.kind == SampleKind::kOffCpu) label(m, "off_cpu", str("blocked"), 0);
      if (s.kind == SampleKind::kWaitCpu) label(m, "off_cpu", str("waiting for CPU"), 0);
      out_.message_field(2, m);
    }
    for (const ProtoWriter& m : exact_samples_) out_.message_field(2, m);

    write_mappings();
    for (const ProtoWriter& loc : locations_) out_.message_field(4, loc);
    write_functions();

    // Header fields after the tables: their strings must be interned before the table is written.
    ProtoWriter period_type;
    period_type.uint_field(1, str("cpu"));
    period_type.uint_field(2, str("nanoseconds"));
    const uint64_t comment =
        str("hpd recording" + (info.target.empty() ? std::string() : " of " + info.target));
    const uint64_t default_type = str("cpu");
    for (const std::string& s : strings_) out_.bytes_field(6, s);
    out_.uint_field(9, info.start_unix_ns);
    if (info.end_mono_ns > info.start_mono_ns) out_.uint_field(10, info.end_mono_ns - info.start_mono_ns);
    out_.message_field(11, period_type);
    out_.uint_field(12, interval_ns_);
    std::vector<uint64_t> comments{comment};
    out_.packed_field(13, comments);
    out_.uint_field(14, default_type);
    return out_.take();
  }

 private:
  struct AggregatedSample {
    uint32_t stack = kNoIndex;
    uint32_t thread = kNoIndex;
    SampleKind kind = SampleKind::kOnCpu;
    std::vector<int64_t> values;
  };

  uint64_t str(const std::string& s) {
    auto [it, added] = string_index_.emplace(s, strings_.size());
    if (added) strings_.push_back(s);
    return it->second;
  }

  void label(ProtoWriter& sample, const char* key, uint64_t str_value, int64_t num,
             const char* num_unit = nullptr) {
    ProtoWriter l;
    l.uint_field(1, str(key));
    l.uint_field(2, str_value);
    l.uint_field(3, static_cast<uint64_t>(num));
    if (num_unit != nullptr) l.uint_field(4, str(num_unit));
    sample.message_field(3, l);
  }

  void add_samples() {
    // Per kind: (stack + 1) << 32 | thread -> samples_.
    std::unordered_map<uint64_t, size_t> index[kSampleKindCount];
    for (uint32_t ti = 0; ti < p_.threads.size(); ++ti) {
      const uint32_t thread = options_.thread_labels ? ti : kNoIndex;
      for (const Sample& s : p_.threads[ti].samples) {
        const uint64_t key = (uint64_t{s.stack} + 1) << 32 | thread;
        auto [it, added] =
            index[static_cast<size_t>(s.kind) % kSampleKindCount].emplace(key, samples_.size());
        if (added)
          samples_.push_back(
              AggregatedSample{s.stack, thread, s.kind, std::vector<int64_t>(value_count_, 0)});
        std::vector<int64_t>& v = samples_[it->second].values;
        // An off-CPU sample's CPU: what the scheduler charged the thread for a wait after its wakeup.
        v[cpu_column_] += static_cast<int64_t>(s.cpu_delta_ns);
        if (s.kind == SampleKind::kOnCpu) {
          v[samples_column_] += 1;
          if (wall_column_ != kNoColumn) v[wall_column_] += static_cast<int64_t>(interval_ns_);
        } else if (wall_column_ != kNoColumn) {
          v[wall_column_] += static_cast<int64_t>(s.off_cpu_ns);
        }
      }
    }
  }

  void add_call_edges() {
    for (const CallEdge& e : p_.call_edges) {
      std::vector<uint64_t> locs{function_location(e.callee_func)};
      if (e.caller_func != kNoIndex) locs.push_back(function_location(e.caller_func));
      std::vector<int64_t> values(value_count_, 0);
      values[calls_column_] = static_cast<int64_t>(e.count);
      ProtoWriter m;
      m.packed_field(1, locs);
      m.packed_field(2, values);
      label(m, "pid", 0, e.pid);
      exact_samples_.push_back(std::move(m));
    }
  }

  // The in-process runtime's latency: one sample per (process, function) whose `latency` value is
  // the function's total time, recursion counted once (so `top` ranks functions by it), labelled
  // with the calls timed and the average, p95 and maximum per call (`pprof -tags` lists them).
  void add_call_latency() {
    for (const CallLatency& l : p_.call_latency) {
      std::vector<int64_t> values(value_count_, 0);
      values[latency_column_] = static_cast<int64_t>(l.outer_ns);
      ProtoWriter m;
      m.packed_field(1, std::vector<uint64_t>{function_location(l.func)});
      m.packed_field(2, values);
      label(m, "pid", 0, l.pid);
      label(m, "timed_calls", 0, static_cast<int64_t>(l.calls), "count");
      if (l.calls != 0) {
        label(m, "avg", 0, static_cast<int64_t>(l.avg_ns()), "nanoseconds");
        label(m, "p95", 0, static_cast<int64_t>(l.p95_ns()), "nanoseconds");
        label(m, "max", 0, static_cast<int64_t>(l.max_ns), "nanoseconds");
      }
      exact_samples_.push_back(std::move(m));
    }
  }

  // Sampled allocations, summed per stack and weighted for the sampling (alloc_sample_scale): what
  // was allocated, and what was still live when the recording ended.
  void add_allocations() {
    if (alloc_objects_column_ == kNoColumn) return;
    struct Sums {
      double alloc_objects = 0, alloc_space = 0, inuse_objects = 0, inuse_space = 0;
    };
    std::map<std::pair<int32_t, uint32_t>, Sums> by_stack;
    for (const Allocation& a : p_.allocations) {
      const double scale = alloc_sample_scale(a.size, p_.meta.alloc.mean_bytes);
      Sums& s = by_stack[{a.pid, a.stack}];
      s.alloc_objects += scale;
      s.alloc_space += scale * double(a.size);
      if (!a.freed && a.tracked) {
        s.inuse_objects += scale;
        s.inuse_space += scale * double(a.size);
      }
    }
    for (const auto& [key, s] : by_stack) {
      std::vector<int64_t> values(value_count_, 0);
      values[alloc_objects_column_] = std::llround(s.alloc_objects);
      values[alloc_space_column_] = std::llround(s.alloc_space);
      values[inuse_objects_column_] = std::llround(s.inuse_objects);
      values[inuse_space_column_] = std::llround(s.inuse_space);
      ProtoWriter m;
      m.packed_field(1, locations_of_stack(key.second));
      m.packed_field(2, values);
      label(m, "pid", 0, key.first);
      exact_samples_.push_back(std::move(m));
    }
  }

  // Location ids of a stack, leaf first: frames root first are grouped into native addresses (an
  // inline_depth 0 frame followed by its inlined callees at the same address).
  std::vector<uint64_t> locations_of_stack(uint32_t stack) {
    std::vector<uint64_t> ids;
    if (stack == kNoIndex) return ids;
    for_each_address_group(p_, stack,
                           [&](std::span<const uint32_t> group) { ids.push_back(location(group)); });
    std::reverse(ids.begin(), ids.end());
    return ids;
  }

  uint64_t location(std::span<const uint32_t> group) {
    std::string key(reinterpret_cast<const char*>(group.data()), group.size() * sizeof(uint32_t));
    auto [it, added] = location_index_.emplace(std::move(key), locations_.size() + 1);
    if (!added) return it->second;
    const Frame& head = p_.frames[group[0]];
    ProtoWriter loc;
    loc.uint_field(1, it->second);
    if (head.lib != kNoIndex) {
      loc.uint_field(2, uint64_t{head.lib} + 1);
      used_libs_.resize(p_.libs.size());
      LibUse& use = used_libs_[head.lib];
      use.used = true;
      use.inline_frames |= group.size() > 1;
      for (const uint32_t f : group) {
        use.line_numbers |= p_.frames[f].line != 0;
        use.filenames |= p_.funcs[p_.frames[f].func].file != kNoIndex;
      }
    }
    if (head.address >= 0) {
      const uint64_t base = head.lib != kNoIndex ? mapping_start_[head.lib] : 0;
      loc.uint_field(3, base + static_cast<uint64_t>(head.address));
    }
    write_inline_lines(loc, 4, p_, group,
                       [&](uint32_t func) { return function_id(func); });  // innermost first
    locations_.push_back(std::move(loc));
    return it->second;
  }

  uint64_t function_location(uint32_t func) {
    auto [it, added] = func_location_.emplace(func, locations_.size() + 1);
    if (!added) return it->second;
    ProtoWriter loc;
    loc.uint_field(1, it->second);
    ProtoWriter line;
    line.uint_field(1, function_id(func));
    loc.message_field(4, line);
    locations_.push_back(std::move(loc));
    return it->second;
  }

  uint64_t function_id(uint32_t func) {
    if (used_funcs_.size() < p_.funcs.size()) used_funcs_.resize(p_.funcs.size(), false);
    used_funcs_[func] = true;
    return uint64_t{func} + 1;
  }

  void write_functions() {
    for (uint32_t i = 0; i < used_funcs_.size(); ++i) {
      if (!used_funcs_[i]) continue;
      const Func& f = p_.funcs[i];
      ProtoWriter m;
      m.uint_field(1, uint64_t{i} + 1);
      const uint64_t name = str(p_.strings[f.name]);
      m.uint_field(2, name);
      m.uint_field(3, name);  // the Profile keeps only demangled names
      if (f.file != kNoIndex) m.uint_field(4, str(p_.strings[f.file]));
      out_.message_field(5, m);
    }
  }

  // Each library gets its own address range, laid end to end from 4 MiB, the main executable's
  // first: pprof takes the first mapping for the program, and tools that look locations up by
  // address need ranges that do not overlap. A location's address minus its mapping's start is the
  // lib-relative address (ELF vaddr - image base) the Profile keeps.
  void lay_out_mappings() {
    const size_t n = p_.libs.size();
    std::vector<uint64_t> extent(n, 0);
    for (const Frame& f : p_.frames) {
      if (f.lib != kNoIndex && f.lib < n && f.address >= 0) {
        extent[f.lib] = std::max(extent[f.lib], static_cast<uint64_t>(f.address) + 1);
      }
    }
    for (const NativeSymbol& sym : p_.native_symbols) {
      if (sym.lib != kNoIndex && sym.lib < n)
        extent[sym.lib] = std::max(extent[sym.lib], sym.address + sym.size);
    }
    mapping_order_.clear();
    const uint32_t main = main_executable();
    if (main != kNoIndex) mapping_order_.push_back(main);
    for (uint32_t i = 0; i < n; ++i) {
      if (i != main) mapping_order_.push_back(i);
    }
    mapping_start_.assign(n, 0);
    mapping_limit_.assign(n, 0);
    uint64_t next = 0x400000;
    for (const uint32_t i : mapping_order_) {
      mapping_start_[i] = next;
      mapping_limit_[i] = next + ((std::max<uint64_t>(extent[i], 1) + 0xfff) & ~uint64_t{0xfff});
      next = mapping_limit_[i] + 0x1000;
    }
  }

  // The library that is the recorded program: not a shared object, the kernel or JIT code, and
  // named like the process with the most samples when several are (Linux cuts names at 15 bytes).
  uint32_t main_executable() const {
    std::unordered_map<std::string, uint64_t> samples_of_process;
    for (const Thread& t : p_.threads) samples_of_process[t.process_name.substr(0, 15)] += t.samples.size();
    uint32_t best = kNoIndex;
    uint64_t best_samples = 0;
    for (uint32_t i = 0; i < p_.libs.size(); ++i) {
      const Lib& lib = p_.libs[i];
      if (lib.is_kernel || lib.name.empty() || lib.name.front() == '[' ||
          lib.name.find(".so") != std::string::npos || lib.name.rfind("perf-", 0) == 0) {
        continue;
      }
      const auto it = samples_of_process.find(lib.name.substr(0, 15));
      const uint64_t samples = it != samples_of_process.end() ? it->second + 1 : 0;
      if (best == kNoIndex || samples > best_samples) {
        best = i;
        best_samples = samples;
      }
    }
    return best;
  }

  void write_mappings() {
    used_libs_.resize(p_.libs.size());
    for (const uint32_t i : mapping_order_) {
      if (!used_libs_[i].used) continue;
      const Lib& lib = p_.libs[i];
      ProtoWriter m;
      m.uint_field(1, uint64_t{i} + 1);
      m.uint_field(2, mapping_start_[i]);
      m.uint_field(3, mapping_limit_[i]);
      m.uint_field(5, str(lib.path.empty() ? lib.name : lib.path));
      m.uint_field(6, str(lib.build_id));
      m.bool_field(7, true);
      m.bool_field(8, used_libs_[i].filenames);
      m.bool_field(9, used_libs_[i].line_numbers);
      m.bool_field(10, used_libs_[i].inline_frames);
      out_.message_field(3, m);
    }
  }

  struct LibUse {
    bool used = false, filenames = false, line_numbers = false, inline_frames = false;
  };

  const Profile& p_;
  const PprofOptions& options_;
  ProtoWriter out_;
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint64_t> string_index_;
  std::vector<AggregatedSample> samples_;
  std::vector<ProtoWriter> exact_samples_;  // call edges and latency: counted, not sampled
  std::vector<ProtoWriter> locations_;
  std::unordered_map<std::string, uint64_t> location_index_;
  std::unordered_map<uint32_t, uint64_t> func_location_;
  std::vector<bool> used_funcs_;
  std::vector<LibUse> used_libs_;
  std::vector<uint32_t> mapping_order_;  // the main executable first
  std::vector<uint64_t> mapping_start_;  // per lib
  std::vector<uint64_t> mapping_limit_;
  uint64_t interval_ns_ = kAssumedIntervalNs;
  // Indices into a sample's values, set as build() lists the sample types; kNoColumn = not listed
  // (wall only with off-CPU samples, calls only with call edges, latency only with call latency).
  static constexpr size_t kNoColumn = SIZE_MAX;
  size_t value_count_ = 0;
  size_t samples_column_ = kNoColumn;
  size_t cpu_column_ = kNoColumn;
  size_t wall_column_ = kNoColumn;
  size_t alloc_objects_column_ = kNoColumn;
  size_t alloc_space_column_ = kNoColumn;
  size_t inuse_objects_column_ = kNoColumn;
  size_t inuse_space_column_ = kNoColumn;
  size_t calls_column_ = kNoColumn;
  size_t latency_column_ = kNoColumn;
};

}  // namespace

std::string encode_pprof(const Profile& profile, const PprofOptions& options) {
  return PprofBuilder(profile, options).build();
}

void write_pprof_file(const Profile& profile, const std::string& path, const PprofOptions& options) {
  const std::string bytes = encode_pprof(profile, options);
  AtomicFile file(path);
  GzipSink gzip(file, kGzipLevel);
  gzip.write(bytes.data(), bytes.size());
  gzip.finish();
  file.commit();
}

}  // namespace hpd
