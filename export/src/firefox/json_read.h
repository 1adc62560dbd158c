// The reader's view of a Firefox profile's JSON: members and numbers checked with the place they are at
// (json_path.h), and the column tables. Shared by firefox_reader.cpp and the extensions' read halves
// (extensions_read.h).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "firefox/json_path.h"
#include "hpd/export/error.h"
#include "hpd/model/profile.h"

namespace hpd::firefox {

// Thrown inside the reader; read_firefox_file adds the source name.
struct FormatError : ExportError {
  using ExportError::ExportError;
};

const nlohmann::json& member(const nlohmann::json& object, const char* key, const JsonPath& where);

const nlohmann::json* optional_member(const nlohmann::json& object, const char* key);

std::string string_member(const nlohmann::json& object, const char* key, const JsonPath& where);

std::string optional_string(const nlohmann::json& object, const char* key);

// An integer-valued JSON number (integers may be written as 3.0 by other tools).
std::optional<int64_t> as_integer(const nlohmann::json& v);

// `where` is a JsonPath or a JsonColumnElement: anything spelled by str().
template <typename Where>
double as_number(const nlohmann::json& v, const Where& where) {
  if (!v.is_number()) throw FormatError(where.str() + " is not a number");
  return v.get<double>();
}

// Milliseconds (as written) to whole nanoseconds, refusing values no profile can hold.
template <typename Where>
int64_t ms_to_ns(double ms, const Where& where) {
  const double ns = std::round(ms * 1e6);
  if (!std::isfinite(ns) || std::fabs(ns) > 9.0e18) throw FormatError(where.str() + " is out of range");
  return static_cast<int64_t>(ns);
}

// One column table: {length, col: [...]} with every column checked against the length.
class Table {
 public:
  Table(const nlohmann::json& parent, const char* key, const JsonPath& where)
      : table_(member(parent, key, where)), where_(where.key(key)) {
    const nlohmann::json& length = member(table_, firefox::kLength, where_);
    const auto n = as_integer(length);
    if (!n || *n < 0) throw FormatError(where_.key(firefox::kLength).str() + " is not a count");
    length_ = static_cast<size_t>(*n);
  }

  size_t length() const { return length_; }
  bool has(const char* key) const { return optional_member(table_, key) != nullptr; }

  const nlohmann::json& column(const char* key) const {
    const nlohmann::json& c = member(table_, key, where_);
    if (!c.is_array()) throw FormatError(where_.key(key).str() + " is not an array");
    if (c.size() != length_) {
      throw FormatError(where_.key(key).str() + " has " + std::to_string(c.size()) + " entries, but " +
                        where_.key(firefox::kLength).str() + " is " + std::to_string(length_));
    }
    return c;
  }

  // An index < limit; `nullable` admits null (returned as kNoIndex), `minus_one` admits -1 likewise.
  uint32_t index(const nlohmann::json& col, const char* key, size_t i, size_t limit, const JsonPath& target,
                 bool nullable = false, bool minus_one = false) const {
    const nlohmann::json& v = col[i];
    if (nullable && v.is_null()) return kNoIndex;
    const auto n = as_integer(v);
    if (minus_one && n && *n == -1) return kNoIndex;
    if (!n || *n < 0 || static_cast<uint64_t>(*n) >= limit) {
      throw FormatError(element(key, i).str() + " = " + v.dump() + " is not a valid index into " +
                        target.str() + " (length " + std::to_string(limit) + ")");
    }
    return static_cast<uint32_t>(*n);
  }

  int64_t integer(const nlohmann::json& col, const char* key, size_t i, int64_t if_null) const {
    const nlohmann::json& v = col[i];
    if (v.is_null()) return if_null;
    const auto n = as_integer(v);
    if (!n) throw FormatError(element(key, i).str() + " = " + v.dump() + " is not an integer");
    return *n;
  }

  firefox::JsonColumnElement element(const char* key, size_t i) const { return {where_, key, i}; }

 private:
  const nlohmann::json& table_;
  JsonPath where_;
  size_t length_ = 0;
};

// A time in ms relative to meta.startTime as a monotonic timestamp (clamped at 0).
template <typename Where>
uint64_t to_mono(const Profile& p, double ms, const Where& where) {
  const int64_t rel = ms_to_ns(ms, where);
  const auto start = static_cast<int64_t>(std::min<uint64_t>(p.meta.recording.start_mono_ns, INT64_MAX / 2));
  return static_cast<uint64_t>(std::max<int64_t>(0, start + rel));
}

// A pid or tid: a decimal string (as hpd writes them) or an integer.
int32_t parse_id(const nlohmann::json& v, const JsonPath& where);

}  // namespace hpd::firefox
