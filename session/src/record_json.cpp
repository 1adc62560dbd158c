// RecordRequest and RecordSummary to and from JSON, one line per field, with strict type checks.
#include "hpd/session/record_json.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace hpd::session {
namespace {

using nlohmann::json;

// A bool that travels as its negation: the wire keeps the command line's "no_follow_children".
template <typename B>
struct Inverted {
  B& value;
};

// Every field of RecordRequest that travels, under its wire name; a new field is one line here.
template <typename Request, typename Field>
void for_each_request_field(Request& r, Field&& field) {
  field("pids", r.target.pids);
  field("command", r.target.command);
  field("duration_s", r.duration_s);
  field("frequency_hz", r.frequency_hz);
  field("output", r.output);
  field("event", r.event);
  field("kernel", r.kernel);
  field("backend", r.backend);
  field("all", r.target.all_processes);
  field("cgroup", r.target.cgroup);
  field("off_cpu", r.off_cpu);
  field("off_cpu_min_us", r.off_cpu_min_us);
  field("no_follow_children",
        Inverted<std::remove_reference_t<decltype((r.follow_children))>>{r.follow_children});
  field("call_graph", r.call_graph);
  field("stack_size", r.stack_size);
  field("cfi_rows", r.cfi_rows);
  field("mip", r.mip);
  field("calls", r.calls);
  field("calls_counter", r.calls_counter);
  field("call_latency", r.call_latency);
  // --alloc of --pid targets (hpd probes their allocator); a launched command's travels as "alloc_log".
  field("alloc", r.alloc);
  field("alloc_mean", r.alloc_mean);
}

template <typename Summary, typename Field>
void for_each_summary_field(Summary& s, Field&& field) {
  field("mode", s.mode);
  field("samples", s.samples);
  field("threads", s.threads);
  field("seconds", s.seconds);
  field("unsampled_start_s", s.unsampled_start_s);
  field("host_steal_s", s.host_steal_s);
  field("backend", s.backend);
  field("lost_records", s.lost_records);
  field("throttle_events", s.throttle_events);
  field("call_graph", s.call_graph);
  field("stack_copy_bytes", s.stack_copy_bytes);
  field("call_graph_reason", s.call_graph_reason);
  field("backend_fallback_reason", s.backend_fallback_reason);
  field("capture", s.capture);
  field("mip_enabled", s.mip_enabled);
  field("mip_snapshots_kept", s.mip_snapshots_kept);
  field("mip_snapshots_taken", s.mip_snapshots_taken);
  field("command_exit_status", s.command_exit_status);
  field("notes", s.notes);
}

// The words of each choice, for reading it.
template <typename E>
struct Choice;
template <>
struct Choice<Switch> {
  static std::optional<Switch> parse(std::string_view w) { return parse_switch(w); }
  static std::string words() { return switch_words(); }
};
template <>
struct Choice<SamplingEvent> {
  static std::optional<SamplingEvent> parse(std::string_view w) { return parse_sampling_event(w); }
  static std::string words() { return sampling_event_words(); }
};
template <>
struct Choice<Backend> {
  static std::optional<Backend> parse(std::string_view w) { return parse_backend(w); }
  static std::string words() { return backend_words(); }
};
template <>
struct Choice<CallGraph> {
  static std::optional<CallGraph> parse(std::string_view w) { return parse_call_graph(w); }
  static std::string words() { return call_graph_words(); }
};
template <>
struct Choice<CallCounterKind> {
  static std::optional<CallCounterKind> parse(std::string_view w) { return parse_call_counter(w); }
  static std::string words() { return call_counter_words(); }
};

[[noreturn]] void bad(const char* name, const std::string& expected) {
  throw std::invalid_argument(std::string("field '") + name + "' must be " + expected);
}

// nlohmann converts between number kinds silently (-1 into a uint32_t); these checks do not.
template <typename T>
void read_value(const json& v, const char* name, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad(name, "true or false");
    out = v.get<bool>();
  } else if constexpr (std::is_enum_v<T>) {
    if (!v.is_string()) bad(name, Choice<T>::words());
    const auto choice = Choice<T>::parse(v.get_ref<const std::string&>());
    if (!choice) bad(name, Choice<T>::words());
    out = *choice;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) bad(name, "a string");
    out = v.get<std::string>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) bad(name, "a number");
    out = v.get<T>();
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    if (!v.is_number_unsigned()) bad(name, "a non-negative integer");
    const uint64_t n = v.get<uint64_t>();
    if (n > std::numeric_limits<T>::max()) bad(name, "a smaller integer");
    out = static_cast<T>(n);
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) bad(name, "an integer");
    const int64_t n = v.get<int64_t>();
    if (n < std::numeric_limits<T>::min() || n > std::numeric_limits<T>::max())
      bad(name, "a smaller integer");
    out = static_cast<T>(n);
  } else {
    // std::vector<E>
    if (!v.is_array()) bad(name, "an array");
    T items;
    for (const json& item : v) {
      typename T::value_type value{};
      read_value(item, name, value);
      items.push_back(std::move(value));
    }
    out = std::move(items);
  }
}

// Reads `name` into `out` when present (absent or null keeps the default).
struct FieldReader {
  const json& object;
  template <typename T>
  void operator()(const char* name, T& out) const {
    const auto it = object.find(name);
    if (it == object.end() || it->is_null()) return;
    read_value(*it, name, out);
  }
  void operator()(const char* name, Inverted<bool> inverted) const {
    bool negated = !inverted.value;
    (*this)(name, negated);
    inverted.value = !negated;
  }
};

struct FieldWriter {
  json& object;
  template <typename T>
  void operator()(const char* name, const T& value) const {
    if constexpr (std::is_enum_v<T>) {
      object[name] = to_string(value);
    } else {
      object[name] = value;
    }
  }
  void operator()(const char* name, Inverted<const bool> inverted) const { object[name] = !inverted.value; }
};

}  // namespace

json record_request_to_json(const RecordRequest& request) {
  json j = json::object();
  for_each_request_field(request, FieldWriter{j});
  return j;
}

RecordRequest record_request_from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("the record arguments must be a JSON object");
  RecordRequest request;
  for_each_request_field(request, FieldReader{j});
  return request;
}

json record_summary_to_json(const RecordSummary& s) {
  json j = json::object();
  for_each_summary_field(s, FieldWriter{j});
  return j;
}

RecordSummary record_summary_from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("the summary must be a JSON object");
  RecordSummary s;
  for_each_summary_field(s, FieldReader{j});
  return s;
}

}  // namespace hpd::session
