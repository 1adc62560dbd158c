// OTLP profiles writer: a hand-written protobuf encoder for
// opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest (see
// hpd/export/otlp_profiles.h for what goes where). Field numbers are those of the
// profiles/v1development .proto files the collector's pdata v1.67 reads.
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string_view>
#include <unordered_map>

#include "address_groups.h"
#include "hpd/base/proc_files.h"
#include "hpd/export/otlp_profiles.h"
#include "hpd/model/validate.h"
#include "proto_writer.h"

namespace hpd {
namespace {

// Field numbers, per message.
namespace request {  // ExportProfilesServiceRequest
constexpr uint32_t kResourceProfiles = 1, kDictionary = 2;
}
namespace dictionary {  // ProfilesDictionary
constexpr uint32_t kMapping = 1, kLocation = 2, kFunction = 3, kLink = 4, kString = 5, kAttribute = 6,
                   kStack = 7;
}
namespace resource_profiles {  // ResourceProfiles; Resource: attributes = 1
constexpr uint32_t kResource = 1, kScopeProfiles = 2;
}
namespace scope_profiles {  // ScopeProfiles; InstrumentationScope: name = 1, version = 2
constexpr uint32_t kScope = 1, kProfiles = 2;
}
namespace profile {  // Profile
constexpr uint32_t kSampleType = 1, kSamples = 2, kTimeUnixNano = 3, kDurationNano = 4, kPeriodType = 5,
                   kPeriod = 6, kProfileId = 7;
}
namespace sample {  // Sample
constexpr uint32_t kStackIndex = 1, kAttributeIndices = 2, kValues = 4;
}
// Stack: location_indices = 1. Location: mapping_index = 1, address = 2, lines = 3.
// Line: function_index = 1, line = 2, column = 3. Function: name = 1, system_name = 2, filename = 3.
// Mapping: memory_start = 1, memory_limit = 2, file_offset = 3, filename = 4, attribute_indices = 5.
// KeyValueAndUnit: key = 1, value = 2 (AnyValue), unit = 3. AnyValue: string = 1, int = 3.
// KeyValue: key = 1, value = 2. ValueType: type = 1, unit = 2.

// The sample types, one Profile each.
enum Column : size_t { kSamples, kCpu, kBlocked, kWaiting, kColumnCount };
constexpr const char* kColumnType[kColumnCount] = {"samples", "cpu", "off_cpu_blocked", "off_cpu_waiting"};
constexpr const char* kColumnUnit[kColumnCount] = {"count", "nanoseconds", "nanoseconds", "nanoseconds"};

ProtoWriter string_value(std::string_view s) {
  ProtoWriter v;
  v.bytes_field(1, s);
  return v;
}

ProtoWriter int_value(int64_t i) {
  ProtoWriter v;
  v.uint_field(3, static_cast<uint64_t>(i));
  return v;
}

class OtlpBuilder {
 public:
  OtlpBuilder(const Profile& p, const OtlpProfilesOptions& options) : p_(p), options_(options) {
    str("");
    dict_.message_field(dictionary::kMapping, ProtoWriter());
    dict_.message_field(dictionary::kLocation, ProtoWriter());
    dict_.message_field(dictionary::kFunction, ProtoWriter());
    dict_.message_field(dictionary::kLink, ProtoWriter());
    dict_.message_field(dictionary::kAttribute, ProtoWriter());
    dict_.message_field(dictionary::kStack, ProtoWriter());
    mapping_of_lib_.assign(p_.libs.size(), 0);
    function_of_func_.assign(p_.funcs.size(), 0);
  }

  std::string build() {
    validate(p_);
    const RecordingInfo& info = p_.meta.recording;
    interval_ns_ = interval_ns_or_assumed(info);
    measure_libs();
    aggregate();

    ProtoWriter out;
    for (const auto& [pid, threads] : processes_) out.message_field(request::kResourceProfiles, process(pid));
    for (const std::string& s : strings_) dict_.bytes_field(dictionary::kString, s);
    out.message_field(request::kDictionary, dict_);
    return out.take();
  }

 private:
  struct Aggregate {
    uint32_t stack = kNoIndex;
    uint32_t thread = 0;
    int64_t values[kColumnCount] = {};
  };

  // Per process (pid), its threads' aggregates in the order first seen.
  void aggregate() {
    std::unordered_map<uint64_t, size_t> index;  // (stack + 1) << 32 | thread -> aggregates_
    auto add = [&](uint32_t ti, uint32_t stack, SampleKind kind, uint64_t samples, uint64_t cpu_ns,
                   uint64_t off_ns) {
      const uint64_t key = (uint64_t{stack} + 1) << 32 | ti;
      auto [it, added] = index.emplace(key, aggregates_.size());
      if (added) aggregates_.push_back(Aggregate{stack, ti, {}});
      int64_t* v = aggregates_[it->second].values;
      if (kind != SampleKind::kOnCpu) v[kCpu] += static_cast<int64_t>(cpu_ns);  // charged for a wait
      switch (kind) {
        case SampleKind::kOnCpu:
          v[kSamples] += static_cast<int64_t>(samples);
          v[kCpu] += static_cast<int64_t>(cpu_ns);
          break;
        case SampleKind::kOffCpu: v[kBlocked] += static_cast<int64_t>(off_ns); break;
        case SampleKind::kWaitCpu: v[kWaiting] += static_cast<int64_t>(off_ns); break;
      }
    };
    for (uint32_t ti = 0; ti < p_.threads.size(); ++ti) {
      const Thread& t = p_.threads[ti];
      processes_[t.pid];
      for (const Sample& s : t.samples) add(ti, s.stack, s.kind, 1, s.cpu_delta_ns, s.off_cpu_ns);
      for (const SampleSum& s : t.sample_sums)
        add(ti, s.stack, s.kind, s.samples, s.cpu_delta_ns, s.off_cpu_ns);
    }
    for (size_t i = 0; i < aggregates_.size(); ++i) {
      processes_[p_.threads[aggregates_[i].thread].pid].push_back(i);
    }
  }

  ProtoWriter process(int32_t pid) {
    const std::vector<size_t>& members = processes_[pid];
    const Thread* first = nullptr;
    for (const Thread& t : p_.threads) {
      if (t.pid == pid && (first == nullptr || t.is_main)) first = &t;
    }
    ProtoWriter resource;
    const auto attribute = [&resource](std::string_view key, const ProtoWriter& value) {
      ProtoWriter kv;
      kv.bytes_field(1, key);
      kv.message_field(2, value);
      resource.message_field(1, kv);
    };
    const RecordingInfo& info = p_.meta.recording;
    if (!info.hostname.empty()) attribute("host.name", string_value(info.hostname));
    attribute("process.pid", int_value(pid));
    if (first != nullptr && !first->process_name.empty())
      attribute("process.executable.name", string_value(first->process_name));
    const std::string exe = executable_path(first);
    if (!exe.empty()) attribute("process.executable.path", string_value(exe));
    if (first != nullptr && !first->process_cgroup.empty()) {
      attribute("process.linux.cgroup", string_value(first->process_cgroup));
      const CgroupOwner owner = cgroup_owner(first->process_cgroup);
      if (!owner.systemd_unit.empty()) attribute("systemd.unit", string_value(owner.systemd_unit));
      if (!owner.container_id.empty()) attribute("container.id", string_value(owner.container_id));
    }
    for (const auto& [key, value] : options_.resource_labels) attribute(key, string_value(value));

    ProtoWriter scope;
    scope.bytes_field(1, options_.scope_name);
    if (!options_.scope_version.empty()) scope.bytes_field(2, options_.scope_version);
    ProtoWriter scope_profiles;
    scope_profiles.message_field(scope_profiles::kScope, scope);
    for (size_t column = 0; column < kColumnCount; ++column) {
      bool any = false;
      for (const size_t a : members) any |= aggregates_[a].values[column] != 0;
      // samples and cpu always (a process may have been seen without a sample); off-CPU when recorded.
      if (!any && column != kSamples && column != kCpu) continue;
      scope_profiles.message_field(scope_profiles::kProfiles, profile_of(members, column));
    }
    ProtoWriter rp;
    rp.message_field(resource_profiles::kResource, resource);
    rp.message_field(resource_profiles::kScopeProfiles, scope_profiles);
    return rp;
  }

  // The process's executable: the path of the library named like the process (cut at 15 bytes, as
  // Linux cuts names) that is not a shared object; "" when none is.
  std::string executable_path(const Thread* t) const {
    if (t == nullptr || t->process_name.empty()) return {};
    const std::string comm = t->process_name.substr(0, 15);
    for (const Lib& lib : p_.libs) {
      if (lib.is_kernel || lib.path.empty() || lib.name.find(".so") != std::string::npos) continue;
      if (lib.name.substr(0, 15) == comm) return lib.path;
    }
    return {};
  }

  ProtoWriter profile_of(const std::vector<size_t>& members, size_t column) {
    const RecordingInfo& info = p_.meta.recording;
    ProtoWriter m;
    ProtoWriter type;
    type.uint_field(1, str(kColumnType[column]));
    type.uint_field(2, str(kColumnUnit[column]));
    m.message_field(profile::kSampleType, type);
    for (const size_t a : members) {
      const Aggregate& agg = aggregates_[a];
      if (agg.values[column] == 0) continue;
      ProtoWriter s;
      s.uint_field(sample::kStackIndex, stack(agg.stack));
      s.packed_field(sample::kAttributeIndices, thread_attributes(agg.thread));
      s.packed_field(sample::kValues, std::vector<int64_t>{agg.values[column]});
      m.message_field(profile::kSamples, s);
    }
    m.fixed64_field(profile::kTimeUnixNano, info.start_unix_ns);
    if (info.end_mono_ns > info.start_mono_ns)
      m.uint_field(profile::kDurationNano, info.end_mono_ns - info.start_mono_ns);
    ProtoWriter period_type;
    period_type.uint_field(1, str("cpu"));
    period_type.uint_field(2, str("nanoseconds"));
    m.message_field(profile::kPeriodType, period_type);
    m.uint_field(profile::kPeriod, interval_ns_);
    m.bytes_field(profile::kProfileId, profile_id());
    return m;
  }

  std::string profile_id() {
    std::string id(16, '\0');
    for (size_t i = 0; i < id.size(); i += 4) {
      const uint32_t r = random_();
      for (size_t b = 0; b < 4; ++b) id[i + b] = static_cast<char>(r >> (8 * b));
    }
    return id;
  }

  std::vector<uint32_t> thread_attributes(uint32_t ti) {
    auto [it, added] = thread_attributes_.emplace(ti, std::vector<uint32_t>());
    if (!added) return it->second;
    const Thread& t = p_.threads[ti];
    it->second.push_back(attribute("thread.id", int_value(t.tid)));
    const std::string& name = t.name.empty() ? t.process_name : t.name;
    if (!name.empty()) it->second.push_back(attribute("thread.name", string_value(name)));
    return it->second;
  }

  // An entry of the attribute table (KeyValueAndUnit), interned by its encoding.
  uint32_t attribute(std::string_view key, const ProtoWriter& value) {
    ProtoWriter kv;
    kv.uint_field(1, str(key));
    kv.message_field(2, value);
    auto [it, added] = attribute_index_.emplace(kv.bytes(), attribute_count_ + 1);
    if (added) {
      ++attribute_count_;
      dict_.message_field(dictionary::kAttribute, kv);
    }
    return it->second;
  }

  uint64_t str(std::string_view s) {
    auto [it, added] = string_index_.emplace(std::string(s), strings_.size());
    if (added) strings_.emplace_back(s);
    return it->second;
  }

  // The stack table's index of a Profile stack: its locations leaf first, frames grouped into native
  // addresses (a frame of inline depth 0 followed by its inlined callees at the same address).
  uint32_t stack(uint32_t s) {
    if (s == kNoIndex) return 0;
    auto [it, added] = stack_index_.emplace(s, stack_count_ + 1);
    if (!added) return it->second;
    ++stack_count_;
    std::vector<uint32_t> ids;
    for_each_address_group(p_, s, [&](std::span<const uint32_t> group) { ids.push_back(location(group)); });
    std::reverse(ids.begin(), ids.end());
    ProtoWriter m;
    m.packed_field(1, ids);
    dict_.message_field(dictionary::kStack, m);
    return it->second;
  }

  uint32_t location(std::span<const uint32_t> group) {
    std::string key(reinterpret_cast<const char*>(group.data()), group.size() * sizeof(uint32_t));
    auto [it, added] = location_index_.emplace(std::move(key), location_count_ + 1);
    if (!added) return it->second;
    ++location_count_;
    const Frame& head = p_.frames[group[0]];
    ProtoWriter loc;
    if (head.lib != kNoIndex) loc.uint_field(1, mapping(head.lib));
    if (head.address >= 0) loc.uint_field(2, static_cast<uint64_t>(head.address));
    write_inline_lines(loc, 3, p_, group, [&](uint32_t func) { return function(func); });  // innermost first
    dict_.message_field(dictionary::kLocation, loc);
    return it->second;
  }

  uint32_t function(uint32_t func) {
    uint32_t& id = function_of_func_[func];
    if (id != 0) return id;
    id = ++function_count_;
    const Func& f = p_.funcs[func];
    ProtoWriter m;
    const uint64_t name = str(p_.strings[f.name]);
    m.uint_field(1, name);
    m.uint_field(2, name);  // the Profile keeps only demangled names
    if (f.file != kNoIndex) m.uint_field(3, str(p_.strings[f.file]));
    dict_.message_field(dictionary::kFunction, m);
    return id;
  }

  uint32_t mapping(uint32_t lib_index) {
    uint32_t& id = mapping_of_lib_[lib_index];
    if (id != 0) return id;
    id = ++mapping_count_;
    const Lib& lib = p_.libs[lib_index];
    ProtoWriter m;
    m.uint_field(2, lib_extent_[lib_index]);
    m.uint_field(4, str(lib.path.empty() ? lib.name : lib.path));
    if (!lib.build_id.empty()) {
      m.packed_field(
          5, std::vector<uint32_t>{attribute("process.executable.build_id.gnu", string_value(lib.build_id))});
    }
    dict_.message_field(dictionary::kMapping, m);
    return id;
  }

  // Each library's extent: past its highest address a frame or symbol names, page-aligned.
  void measure_libs() {
    const size_t n = p_.libs.size();
    lib_extent_.assign(n, 0);
    for (const Frame& f : p_.frames) {
      if (f.lib != kNoIndex && f.lib < n && f.address >= 0)
        lib_extent_[f.lib] = std::max(lib_extent_[f.lib], static_cast<uint64_t>(f.address) + 1);
    }
    for (const NativeSymbol& sym : p_.native_symbols) {
      if (sym.lib != kNoIndex && sym.lib < n)
        lib_extent_[sym.lib] = std::max(lib_extent_[sym.lib], sym.address + sym.size);
    }
    for (uint64_t& e : lib_extent_) e = (std::max<uint64_t>(e, 1) + 0xfff) & ~uint64_t{0xfff};
  }

  const Profile& p_;
  const OtlpProfilesOptions& options_;
  uint64_t interval_ns_ = kAssumedIntervalNs;
  ProtoWriter dict_;  // the dictionary's tables but its strings, written as entries are interned
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint64_t> string_index_;
  std::unordered_map<std::string, uint32_t> attribute_index_;
  uint32_t attribute_count_ = 0;
  std::unordered_map<uint32_t, uint32_t> stack_index_;
  uint32_t stack_count_ = 0;
  std::unordered_map<std::string, uint32_t> location_index_;
  uint32_t location_count_ = 0;
  std::vector<uint32_t> function_of_func_;  // 0 = not in the table yet
  uint32_t function_count_ = 0;
  std::vector<uint32_t> mapping_of_lib_;  // 0 = not in the table yet
  uint32_t mapping_count_ = 0;
  std::vector<uint64_t> lib_extent_;
  std::vector<Aggregate> aggregates_;
  std::map<int32_t, std::vector<size_t>> processes_;  // pid -> aggregates_ indices
  std::unordered_map<uint32_t, std::vector<uint32_t>> thread_attributes_;
  std::mt19937 random_{std::random_device{}()};
};

}  // namespace

std::string encode_otlp_profiles(const Profile& profile, const OtlpProfilesOptions& options) {
  return OtlpBuilder(profile, options).build();
}

}  // namespace hpd
