// Firefox Profiler processed-format writer (version 66): derives the rows of each table from the
// Profile (firefox/tables.h for the shared ones, the threads' samples and markers here) and has the
// tables (firefox/*_table.h) serialize themselves; the meta, libs and thread objects are written here.
//
// Version 66 because it is what samply emits and what the deployed profiler.firefox.com accepts
// unchanged; the newer 70 is refused by the production build (see the format reference).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "firefox/extensions_write.h"
#include "firefox/marker_table.h"
#include "firefox/native_allocations_table.h"
#include "firefox/samples_table.h"
#include "firefox/tables.h"
#include "firefox_format.h"
#include "hpd/base/hex.h"
#include "hpd/base/output_file.h"
#include "hpd/export/firefox.h"
#include "hpd/export/firefox/schema.h"
#include "hpd/model/validate.h"
#include "json_writer.h"
#include "output_file.h"

namespace hpd {

namespace {

// zlib level 4: on bench/export_bench.cpp's 30 MB of JSON it took 0.69 s for 11.6 MB, against
// 2.2 s / 11.3 MB at the default 6 and 0.44 s / 12.4 MB at 1.
constexpr int kGzipLevel = 4;

// Bytes of a hex string; empty when it is empty, of odd length or not hex.
std::vector<uint8_t> hex_bytes(std::string_view hex) {
  return from_hex(hex).value_or(std::vector<uint8_t>{});
}

class FirefoxWriter {
 public:
  FirefoxWriter(const Profile& profile, const firefox::Tables& tables, json::ByteSink& sink)
      : p_(profile), w_(sink), t_(tables) {}

  void write() {
    w_.begin_object();
    write_meta();
    write_libs();
    write_shared();
    write_threads();
    w_.end_object();
    w_.finish();
  }

 private:
  void extra_entry(const char* label, const char* format, const std::string& value) {
    if (value.empty()) return;
    w_.begin_object();
    w_.key(firefox::extra::kLabel);
    w_.string(label);
    w_.key(firefox::extra::kFormat);
    w_.string(format);
    w_.key(firefox::extra::kValue);
    w_.string(value);
    w_.end_object();
  }

  void extra_entry(const char* label, uint64_t value) {
    w_.begin_object();
    w_.key(firefox::extra::kLabel);
    w_.string(label);
    w_.key(firefox::extra::kFormat);
    w_.string("integer");
    w_.key(firefox::extra::kValue);
    w_.uint(value);
    w_.end_object();
  }

  void write_meta() {
    const ProfileMeta& meta = p_.meta;
    const RecordingInfo& info = meta.recording;
    w_.key(firefox::profile::kMeta);
    w_.begin_object();
    w_.key(firefox::meta::kVersion);
    w_.int64(firefox::kGeckoVersion);
    w_.key(firefox::meta::kPreprocessedProfileVersion);
    w_.int64(kFirefoxProfileVersion);
    w_.key(firefox::meta::kInterval);
    w_.ns_as_ms(static_cast<int64_t>(t_.interval_ns));
    w_.key(firefox::meta::kStartTime);
    w_.ns_as_ms(static_cast<int64_t>(info.start_unix_ns));
    // The monotonic clock reading at startTime, so that sample times map back to CLOCK_MONOTONIC.
    w_.key(firefox::meta::kStartTimeAsClockMonotonicNs);
    w_.uint(info.start_mono_ns);
    w_.key(firefox::meta::kProcessType);
    w_.int64(0);
    w_.key(firefox::meta::kProduct);
    w_.string(meta.product);
    w_.key(firefox::meta::kStackwalk);
    w_.int64(1);
    w_.key(firefox::meta::kDebug);
    w_.boolean(false);
    w_.key(firefox::meta::kSymbolicated);
    w_.boolean(true);
    w_.key(firefox::meta::kPlatform);
    w_.string("Linux");
    w_.key(firefox::meta::kOscpu);
    w_.string(info.kernel_release.empty() ? std::string("Linux") : "Linux " + info.kernel_release);
    w_.key(firefox::meta::kUsesOnlyOneStackType);
    w_.boolean(true);
    w_.key(firefox::meta::kSourceCodeIsNotOnSearchfox);
    w_.boolean(true);
    if (info.logical_cpus > 0) {
      w_.key(firefox::meta::kLogicalCpus);
      w_.uint(info.logical_cpus);
    }
    if (!info.arguments.empty()) {
      w_.key(firefox::meta::kArguments);
      w_.string(firefox::join_shell_words(info.arguments));
    }
    const int64_t end = t_.profiling_end_ns(p_);
    if (end > 0) {
      w_.key(firefox::meta::kProfilingStartTime);
      w_.int64(0);
      w_.key(firefox::meta::kProfilingEndTime);
      w_.ns_as_ms(end);
    }

    w_.key(firefox::meta::kCategories);
    w_.begin_array();
    for (const auto& category : firefox::kCategories) {
      w_.begin_object();
      w_.key(firefox::category::kName);
      w_.string(category.name);
      w_.key(firefox::category::kColor);
      w_.string(category.color);
      w_.key(firefox::category::kSubcategories);
      w_.begin_array();
      for (const char* subcategory : category.subcategories) w_.string(subcategory);
      w_.end_array();
      w_.end_object();
    }
    w_.end_array();

    w_.key(firefox::meta::kSampleUnits);
    w_.begin_object();
    w_.key(firefox::sample_units::kTime);
    w_.string("ms");
    w_.key(firefox::sample_units::kEventDelay);
    w_.string("ms");
    // Nanoseconds rather than samply's microseconds: the exact CPU deltas survive a round trip.
    w_.key(firefox::sample_units::kThreadCpuDelta);
    w_.string("ns");
    w_.end_object();

    // Which tracks the profiler shows and selects first (thread_hints.cpp). The calls tracks come
    // after p_.threads, so these indices are the written threads' too; a process's calls track is
    // shown with the process.
    const InitialThreads initial = choose_initial_threads(p_);
    if (!initial.visible.empty()) {
      w_.key(firefox::meta::kInitialVisibleThreads);
      w_.begin_array();
      for (uint32_t i : initial.visible) w_.uint(i);
      for (size_t k = 0; k < t_.calls_tracks.size(); ++k) {
        const bool shown = std::any_of(initial.visible.begin(), initial.visible.end(), [&](uint32_t i) {
          return p_.threads[i].pid == t_.calls_tracks[k].pid;
        });
        if (shown) w_.uint(p_.threads.size() + k);
      }
      w_.end_array();
      w_.key(firefox::meta::kInitialSelectedThreads);
      w_.begin_array();
      for (uint32_t i : initial.selected) w_.uint(i);
      w_.end_array();
    }

    write_marker_schema();
    write_extra();
    w_.end_object();
  }

  void write_marker_schema() {
    w_.key(firefox::meta::kMarkerSchema);
    w_.begin_array();
    write_schema(firefox::kOffCpuMarkerSchema);
    write_schema(firefox::kWaitCpuMarkerSchema);
    if (!p_.mip_counts.empty()) write_schema(firefox::kMipMarkerSchema);
    if (!p_.call_latency.empty()) write_schema(firefox::kLatencyMarkerSchema);
    if (!t_.tail_calls_of_thread.empty()) write_schema(firefox::kTailCallMarkerSchema);
    w_.end_array();
  }

  void write_schema(const firefox::MarkerSchema& schema) {
    namespace key = firefox::marker_schema;
    w_.begin_object();
    w_.key(key::kName);
    w_.string(schema.name);
    w_.key(key::kDisplay);
    w_.begin_array();
    for (const char* place : schema.display) w_.string(place);
    w_.end_array();
    if (schema.chart_label != nullptr) {
      w_.key(key::kChartLabel);
      w_.string(schema.chart_label);
    }
    w_.key(key::kTableLabel);
    w_.string(schema.table_label);
    w_.key(key::kTooltipLabel);
    w_.string(schema.tooltip_label);
    w_.key(key::kDescription);
    w_.string(schema.description);
    w_.key(key::kFields);
    w_.begin_array();
    for (const firefox::MarkerField& field : schema.fields) {
      w_.begin_object();
      w_.key(key::kFieldKey);
      w_.string(field.key);
      w_.key(key::kFieldLabel);
      w_.string(field.label);
      w_.key(key::kFieldFormat);
      w_.string(field.format);
      if (field.hidden) {
        w_.key(key::kFieldHidden);
        w_.boolean(true);
      }
      w_.end_object();
    }
    w_.end_array();
    w_.end_object();
  }

  void write_extra() {
    const ProfileMeta& meta = p_.meta;
    const RecordingInfo& info = meta.recording;
    w_.key(firefox::meta::kExtra);
    w_.begin_array();

    w_.begin_object();
    w_.key(firefox::extra::kLabel);
    w_.string(firefox::kRecordingSection);
    w_.key(firefox::extra::kEntries);
    w_.begin_array();
    extra_entry(firefox::kTargetLabel, "string", info.target);
    extra_entry(firefox::kBackendLabel, "string", info.backend);
    extra_entry(firefox::kEventLabel, "string", info.event);
    extra_entry(firefox::kCallGraphLabel, "string", info.call_graph);
    extra_entry(firefox::kFrequencyLabel, info.frequency_hz);
    extra_entry(firefox::kKernelFramesLabel, "string", std::string(info.kernel_frames ? "yes" : "no"));
    extra_entry(firefox::kHostnameLabel, "string", info.hostname);
    extra_entry(firefox::kKernelReleaseLabel, "string", info.kernel_release);
    if (!info.call_counter.empty()) extra_entry(firefox::kCallCounterLabel, "string", info.call_counter);
    if (info.requested_mono_ns != 0 && info.first_sample_mono_ns >= info.requested_mono_ns) {
      extra_entry(firefox::kRequestedLabel, info.requested_mono_ns);
      extra_entry(firefox::kFirstSampleLabel, info.first_sample_mono_ns);
      char text[64];
      std::snprintf(text, sizeof text, "%.1f ms (from the request to the first sample)",
                    static_cast<double>(info.first_sample_mono_ns - info.requested_mono_ns) / 1e6);
      extra_entry(firefox::kUnsampledStartLabel, "string", std::string(text));
    }
    if (info.host_steal_known) {
      extra_entry(firefox::kHostStealLabel, info.host_steal_ns);
      if (std::string note = host_steal_note(info); !note.empty())
        extra_entry(firefox::kHostStealNoteLabel, "string", std::move(note));
    }
    if (std::string note = samples_not_taken_note(p_); !note.empty())
      extra_entry(firefox::kNotTakenNoteLabel, "string", std::move(note));
    w_.end_array();
    w_.end_object();

    w_.begin_object();
    w_.key(firefox::extra::kLabel);
    w_.string(firefox::kLostSection);
    w_.key(firefox::extra::kEntries);
    w_.begin_array();
    extra_entry(firefox::kLostRecordsLabel, meta.lost.lost_records);
    extra_entry(firefox::kThrottleLabel, meta.lost.throttle_events);
    extra_entry(firefox::kStackFailuresLabel, meta.lost.stack_failures);
    extra_entry(firefox::kTruncatedLabel, meta.lost.truncated_stacks);
    extra_entry(firefox::kMissingModulesLabel, meta.missing_modules.size());
    for (size_t i = 0; i < meta.missing_modules.size(); ++i) {
      const std::string label = firefox::kMissingModulePrefix + std::to_string(i + 1);
      extra_entry(label.c_str(), "file-path", meta.missing_modules[i]);
    }
    w_.end_array();
    w_.end_object();

    write_allocation_sampling();
    write_lost_by_thread();
    write_stack_completeness();
    w_.end_array();
  }

  // The share of complete stacks per thread, on-CPU and off-CPU apart (the hpdStackEnd column summed).
  void write_stack_completeness() {
    struct Ends {
      uint64_t complete = 0, truncated = 0, failed = 0;
      // Off-CPU: the time of the samples whose stack end is known, and of the complete ones.
      uint64_t known_ns = 0, complete_ns = 0;
      void add(StackEnd e, uint64_t off_cpu_ns) {
        complete += e == StackEnd::kComplete;
        truncated += e == StackEnd::kTruncated;
        failed += e == StackEnd::kFailed;
        if (e == StackEnd::kComplete || e == StackEnd::kTruncated || e == StackEnd::kFailed)
          known_ns += off_cpu_ns;
        if (e == StackEnd::kComplete) complete_ns += off_cpu_ns;
      }
      uint64_t known() const { return complete + truncated + failed; }
      std::string text() const {
        char buf[128];
        std::snprintf(buf, sizeof buf, "%.1f%% complete of %llu (%llu truncated, %llu failed)",
                      100.0 * double(complete) / double(known()), static_cast<unsigned long long>(known()),
                      static_cast<unsigned long long>(truncated), static_cast<unsigned long long>(failed));
        std::string out = buf;
        if (known_ns != 0) {
          std::snprintf(buf, sizeof buf, "; %.1f%% of the time",
                        100.0 * double(complete_ns) / double(known_ns));
          out += buf;
        }
        return out;
      }
    };
    Ends all[2];
    std::vector<std::array<Ends, 2>> per_thread(p_.threads.size());
    for (size_t i = 0; i < p_.threads.size(); ++i) {
      for (const Sample& s : p_.threads[i].samples) {
        const int kind = is_off_cpu_interval(s.kind) ? 1 : 0;
        const uint64_t off_cpu_ns = kind == 1 ? s.off_cpu_ns : 0;
        all[kind].add(s.stack_end, off_cpu_ns);
        per_thread[i][kind].add(s.stack_end, off_cpu_ns);
      }
    }
    if (all[0].known() + all[1].known() == 0) return;
    w_.begin_object();
    w_.key(firefox::extra::kLabel);
    w_.string(firefox::kStacksSection);
    w_.key(firefox::extra::kEntries);
    w_.begin_array();
    const char* const kKinds[2] = {"on-CPU", "off-CPU"};
    for (int kind = 0; kind < 2; ++kind) {
      if (all[kind].known() != 0)
        extra_entry((std::string("All threads: ") + kKinds[kind]).c_str(), "string", all[kind].text());
    }
    for (size_t i = 0; i < p_.threads.size(); ++i) {
      const Thread& t = p_.threads[i];
      for (int kind = 0; kind < 2; ++kind) {
        if (per_thread[i][kind].known() == 0) continue;
        extra_entry(firefox::thread_loss_label(t.pid, t.tid, t.name, kKinds[kind]).c_str(), "string",
                    per_thread[i][kind].text());
      }
    }
    w_.end_array();
    w_.end_object();
  }

  // How the allocation sampling went (--alloc only): the reader needs the mean to read the
  // nativeAllocations tables' weights back as sizes.
  void write_allocation_sampling() {
    const RawAllocStats& alloc = p_.meta.alloc;
    if (alloc.mean_bytes == 0) return;
    w_.begin_object();
    w_.key(firefox::extra::kLabel);
    w_.string(firefox::kAllocSection);
    w_.key(firefox::extra::kEntries);
    w_.begin_array();
    extra_entry(firefox::kAllocMeanLabel, alloc.mean_bytes);
    extra_entry(firefox::kAllocProcessesLabel, alloc.processes);
    extra_entry(firefox::kAllocDroppedLabel, alloc.dropped);
    extra_entry(firefox::kAllocUntrackedLabel, alloc.untracked);
    extra_entry(firefox::kAllocFreesUnmatchedLabel, alloc.frees_unmatched);
    w_.end_array();
    w_.end_object();
  }

  void write_lost_by_thread() {
    const auto lost_any = [](const Thread& t) {
      return t.lost.lost_records != 0 || t.lost.throttle_events != 0 || t.lost.stack_failures != 0 ||
             t.lost.truncated_stacks != 0;
    };
    if (std::none_of(p_.threads.begin(), p_.threads.end(), lost_any)) return;
    w_.begin_object();
    w_.key(firefox::extra::kLabel);
    w_.string(firefox::kLostByThreadSection);
    w_.key(firefox::extra::kEntries);
    w_.begin_array();
    for (const Thread& t : p_.threads) {
      const auto entry = [&](const char* what, uint64_t count) {
        if (count != 0) extra_entry(firefox::thread_loss_label(t.pid, t.tid, t.name, what).c_str(), count);
      };
      entry(firefox::kLostRecordsLabel, t.lost.lost_records);
      entry(firefox::kThrottleLabel, t.lost.throttle_events);
      entry(firefox::kStackFailuresLabel, t.lost.stack_failures);
      entry(firefox::kTruncatedLabel, t.lost.truncated_stacks);
    }
    w_.end_array();
    w_.end_object();
  }

  void write_libs() {
    w_.key(firefox::profile::kLibs);
    w_.begin_array();
    for (const Lib& lib : p_.libs) {
      w_.begin_object();
      w_.key(firefox::lib::kArch);
      w_.string(lib.arch);
      w_.key(firefox::lib::kName);
      w_.string(lib.name);
      w_.key(firefox::lib::kPath);
      w_.string(lib.path);
      w_.key(firefox::lib::kDebugName);
      w_.string(lib.debug_name.empty() ? lib.name : lib.debug_name);
      w_.key(firefox::lib::kDebugPath);
      w_.string(lib.debug_path.empty() ? lib.path : lib.debug_path);
      // Without a build-id there is no real debug id; the nil id keeps `samply load`, which parses
      // every breakpadId, working. The names are already symbolicated, so nothing is looked up.
      const std::string breakpad = breakpad_id_from_build_id(lib.build_id);
      w_.key(firefox::lib::kBreakpadId);
      w_.string(breakpad.empty() ? std::string(33, '0') : breakpad);
      const std::string code_id = code_id_from_build_id(lib.build_id);
      w_.key(firefox::lib::kCodeId);
      if (code_id.empty()) {
        w_.null();
      } else {
        w_.string(code_id);
      }
      w_.end_object();
    }
    w_.end_array();
  }

  void write_shared() {
    w_.key(firefox::profile::kShared);
    w_.begin_object();
    w_.key(firefox::shared::kStringArray);
    t_.strings.serialize(w_);
    w_.key(firefox::shared::kSources);
    t_.sources.serialize(w_);
    w_.key(firefox::shared::kSourceLocationTable);
    t_.source_locations.serialize(w_);
    w_.key(firefox::shared::kResourceTable);
    t_.resources.serialize(w_);
    w_.key(firefox::shared::kNativeSymbols);
    t_.native_symbols.serialize(w_);
    w_.key(firefox::shared::kFuncTable);
    t_.funcs.serialize(w_);
    w_.key(firefox::shared::kFrameTable);
    t_.frames.serialize(w_);
    w_.key(firefox::shared::kStackTable);
    t_.stacks.serialize(w_);
    w_.end_object();
  }

  void write_threads() {
    std::unordered_map<size_t, firefox::NativeAllocationsTable> allocations =
        firefox::allocation_tables(p_, t_);
    w_.key(firefox::profile::kThreads);
    w_.begin_array();
    for (size_t i = 0; i < p_.threads.size(); ++i) {
      auto it = t_.mip_of_thread.find(i);
      auto a = allocations.find(i);
      write_thread(i, it != t_.mip_of_thread.end() ? &it->second : nullptr,
                   a != allocations.end() ? &a->second : nullptr);
    }
    for (const firefox::CallsTrack& track : t_.calls_tracks) firefox::write_calls_thread(w_, p_, t_, track);
    w_.end_array();
  }

  void write_thread(size_t thread, const std::vector<uint32_t>* mip,
                    const firefox::NativeAllocationsTable* allocations) {
    const Thread& t = p_.threads[thread];
    // The profiler bisects samples.time, so it must ascend; the Profile promises sorted samples,
    // but a stable sort by index costs little when it does not hold.
    const size_t n = t.samples.size();
    std::vector<uint32_t> order;
    const bool sorted =
        std::is_sorted(t.samples.begin(), t.samples.end(),
                       [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; });
    if (!sorted) {
      order.resize(n);
      for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
      std::stable_sort(order.begin(), order.end(),
                       [&](uint32_t a, uint32_t b) { return t.samples[a].time_ns < t.samples[b].time_ns; });
    }
    const auto sample = [&](size_t i) -> const Sample& {
      return sorted ? t.samples[i] : t.samples[order[i]];
    };
    const bool has_off_cpu = std::any_of(t.samples.begin(), t.samples.end(),
                                         [](const Sample& s) { return is_off_cpu_interval(s.kind); });

    w_.begin_object();
    w_.key(firefox::thread::kName);
    w_.string(!t.name.empty()           ? t.name
              : !t.process_name.empty() ? t.process_name
                                        : "thread " + std::to_string(t.tid));
    w_.key(firefox::thread::kProcessName);
    w_.string(t.process_name);
    w_.key(firefox::thread::kProcessType);
    w_.string("default");
    w_.key(firefox::thread::kIsMainThread);
    w_.boolean(t.is_main);
    w_.key(firefox::thread::kPid);
    w_.string(std::to_string(t.pid));
    w_.key(firefox::thread::kTid);
    w_.int64(t.tid);
    firefox::write_lifetimes(w_, &t_.processes.at(t.pid), t_.thread_start(t),
                             t.end_ns != 0 ? std::optional<int64_t>(t_.relative_ns(t.end_ns)) : std::nullopt);

    // Off-CPU interval markers first, then one MIP instant marker per count in `mip`, then the
    // thread's tail-call edges.
    firefox::SamplesTable samples({.weight = has_off_cpu, .cpu = true});
    firefox::MarkerTable markers;
    samples.reserve(n);
    firefox::OffCpuWeights weights(t_.interval_ns);
    for (size_t i = 0; i < n; ++i) {
      const Sample& s = sample(i);
      firefox::SamplesTable::Row row;
      if (s.stack != kNoIndex) row.stack = firefox::stack_row(s.stack);
      row.time_ns = t_.relative_ns(s.time_ns);
      row.stack_end = s.stack_end;
      // An off-CPU sample's CPU: what the scheduler charged the thread for its wait after its wakeup.
      row.cpu_delta_ns = s.cpu_delta_ns;
      if (is_off_cpu_interval(s.kind)) {
        // Its stack ends in the [blocked] or [waiting for CPU] leaf (firefox_format.h).
        row.stack = t_.off_cpu_leaf(s);
        row.weight = weights.next(s.off_cpu_ns);
        markers.add(firefox::off_cpu_marker(s, static_cast<uint32_t>(i), row.time_ns, t_));
      }
      samples.add(row);
    }
    if (mip != nullptr) {
      for (uint32_t k : *mip) firefox::add_mip_marker(p_, t_, p_.mip_counts[k], markers);
    }
    firefox::add_tail_call_markers(p_, t_, thread, markers);
    w_.key(firefox::thread::kSamples);
    samples.serialize(w_);
    w_.key(firefox::thread::kMarkers);
    markers.serialize(w_);
    if (allocations != nullptr) {
      w_.key(firefox::thread::kNativeAllocations);
      allocations->serialize(w_);
    }
    w_.end_object();
  }

  const Profile& p_;
  json::Writer w_;
  const firefox::Tables& t_;
};

// The one path of every entry point: validate, derive the tables, then stream them.
void write_profile(const Profile& profile, json::ByteSink& sink) {
  validate(profile);
  const firefox::Tables tables = firefox::derive_tables(profile);
  FirefoxWriter(profile, tables, sink).write();
}

// Writes through to a descriptor it does not own.
class FdSink : public json::ByteSink {
 public:
  explicit FdSink(int fd) : fd_(fd) {}
  void write(const char* data, size_t size) override {
    try {
      write_output_fully(fd_, data, size, "writing the profile failed");
    } catch (const std::runtime_error& e) {
      throw ExportError(e.what());  // the base write helper throws plain runtime_error
    }
  }

 private:
  int fd_;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// The lifetime fields of a thread object, for sampled threads and calls tracks alike: its
// process's (a null process: started at 0, still running) and its own (unregister: none = alive).
void firefox::write_lifetimes(json::Writer& w, const firefox::ProcessTimes* process, int64_t register_ns,
                              std::optional<int64_t> unregister_ns) {
  w.key(firefox::thread::kProcessStartupTime);
  w.ns_as_ms(process != nullptr ? process->startup : 0);
  w.key(firefox::thread::kProcessShutdownTime);
  if (process != nullptr && process->ended) {
    w.ns_as_ms(process->shutdown);
  } else {
    w.null();
  }
  w.key(firefox::thread::kRegisterTime);
  w.ns_as_ms(register_ns);
  w.key(firefox::thread::kUnregisterTime);
  if (unregister_ns) {
    w.ns_as_ms(*unregister_ns);
  } else {
    w.null();
  }
  w.key(firefox::thread::kPausedRanges);
  w.begin_array();
  w.end_array();
}

std::string breakpad_id_from_build_id(std::string_view build_id_hex) {
  std::vector<uint8_t> bytes = hex_bytes(build_id_hex);
  if (bytes.empty()) return "";
  bytes.resize(16, 0);
  // A GUID's first three fields are little-endian u32, u16, u16; printed as numbers they reverse.
  static constexpr int kOrder[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
  std::string id;
  id.reserve(33);
  for (int index : kOrder) {
    append_hex_byte(id, bytes[index], HexCase::kUpper);
  }
  id.push_back('0');  // age
  return id;
}

std::string code_id_from_build_id(std::string_view build_id_hex) {
  if (hex_bytes(build_id_hex).empty()) return "";
  std::string id(build_id_hex);
  for (char& c : id) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  }
  return id;
}

void write_firefox_json(const Profile& profile, std::ostream& out) {
  OstreamSink sink(out);
  write_profile(profile, sink);
  out.flush();
  if (!out) throw ExportError("writing the profile to the output stream failed");
}

void write_firefox_file(const Profile& profile, const std::string& path) {
  AtomicFile file(path);
  if (ends_with(path, ".gz")) {
    GzipSink gzip(file, kGzipLevel);
    write_profile(profile, gzip);
    gzip.finish();
  } else {
    write_profile(profile, file);
  }
  file.commit();
}

void write_firefox_fd(const Profile& profile, int fd, bool gzip) {
  FdSink sink(fd);
  if (gzip) {
    GzipSink compressed(sink, kGzipLevel);
    write_profile(profile, compressed);
    compressed.finish();
  } else {
    write_profile(profile, sink);
  }
}

}  // namespace hpd
