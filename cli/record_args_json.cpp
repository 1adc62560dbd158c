// RecordArgs and RecordSummary to and from JSON, one line per field, with strict type checks.
#include "record_args_json.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace hpd::cli {
namespace {

using nlohmann::json;

// Every field of RecordArgs that travels; a new field is one line here.
#define HPD_RECORD_ARGS_FIELDS(X) \
  X(pids)                         \
  X(command)                      \
  X(duration_s)                   \
  X(frequency_hz)                 \
  X(output)                       \
  X(event)                        \
  X(kernel)                       \
  X(backend)                      \
  X(all)                          \
  X(cgroup)                       \
  X(off_cpu)                      \
  X(off_cpu_min_us)               \
  X(no_follow_children)           \
  X(call_graph)                   \
  X(stack_size)                   \
  X(mip)                          \
  X(calls)                        \
  X(calls_counter)                 \
  X(print_report)                 \
  X(report_limit)                 \
  X(quiet)

#define HPD_RECORD_SUMMARY_FIELDS(X) \
  X(mode)                            \
  X(samples)                         \
  X(threads)                         \
  X(seconds)                         \
  X(backend)                         \
  X(lost_records)                    \
  X(throttle_events)                 \
  X(call_graph)                      \
  X(stack_copy_bytes)                \
  X(call_graph_reason)               \
  X(backend_fallback_reason)         \
  X(capture)                         \
  X(mip_enabled)                     \
  X(mip_snapshots_kept)              \
  X(mip_snapshots_taken)             \
  X(command_exit_status)             \
  X(notes)

[[noreturn]] void bad(const char* name, const char* expected) {
  throw std::invalid_argument(std::string("field '") + name + "' must be " + expected);
}

// nlohmann converts between number kinds silently (-1 into a uint32_t); these checks do not.
template <typename T>
void read_value(const json& v, const char* name, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad(name, "true or false");
    out = v.get<bool>();
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

template <typename T>
void read_field(const json& object, const char* name, T& out) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return;
  read_value(*it, name, out);
}

}  // namespace

json record_args_to_json(const RecordArgs& args) {
  json j = json::object();
#define HPD_PUT(field) j[#field] = args.field;
  HPD_RECORD_ARGS_FIELDS(HPD_PUT)
#undef HPD_PUT
  return j;
}

RecordArgs record_args_from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("the record arguments must be a JSON object");
  RecordArgs args;
#define HPD_GET(field) read_field(j, #field, args.field);
  HPD_RECORD_ARGS_FIELDS(HPD_GET)
#undef HPD_GET
  return args;
}

json record_summary_to_json(const RecordSummary& s) {
  json j = json::object();
#define HPD_PUT(field) j[#field] = s.field;
  HPD_RECORD_SUMMARY_FIELDS(HPD_PUT)
#undef HPD_PUT
  return j;
}

RecordSummary record_summary_from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("the summary must be a JSON object");
  RecordSummary s;
#define HPD_GET(field) read_field(j, #field, s.field);
  HPD_RECORD_SUMMARY_FIELDS(HPD_GET)
#undef HPD_GET
  return s;
}

}  // namespace hpd::cli
