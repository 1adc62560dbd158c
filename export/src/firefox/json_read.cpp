// The reader's view of a Firefox profile's JSON (json_read.h).
#include "firefox/json_read.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace hpd::firefox {

using nlohmann::json;

const json& member(const json& object, const char* key, const JsonPath& where) {
  if (!object.is_object()) throw FormatError(where.str() + " is not an object");
  const auto it = object.find(key);
  if (it == object.end()) throw FormatError("missing " + where.key(key).str());
  return *it;
}

const json* optional_member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string string_member(const json& object, const char* key, const JsonPath& where) {
  const json& v = member(object, key, where);
  if (!v.is_string()) throw FormatError(where.key(key).str() + " is not a string");
  return v.get<std::string>();
}

std::string optional_string(const json& object, const char* key) {
  const json* v = optional_member(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// An integer-valued JSON number (integers may be written as 3.0 by other tools).
std::optional<int64_t> as_integer(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

int32_t parse_id(const json& v, const JsonPath& where) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || n < INT32_MIN || n > INT32_MAX) {
      throw FormatError(where.str() + " = \"" + s + "\" is not a number");
    }
    return static_cast<int32_t>(n);
  }
  const auto n = as_integer(v);
  if (!n || *n < INT32_MIN || *n > INT32_MAX) throw FormatError(where.str() + " is not a number");
  return static_cast<int32_t>(*n);
}

}  // namespace hpd::firefox
