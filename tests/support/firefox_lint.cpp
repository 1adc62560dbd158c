// The Firefox processed-profile linter: column-by-column checks after the format reference (v66).
#include "firefox_lint.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "hpd/export/firefox/schema.h"

namespace hpd::testing {

namespace {

using nlohmann::json;

constexpr size_t kMaxProblems = 200;
constexpr std::string_view kMicroSecond = "\xC2\xB5s";  // MICRO SIGN U+00B5, then 's'

const char* const kColors[] = {"transparent", "purple",  "green", "orange",   "yellow",   "lightblue", "blue",
                               "brown",       "magenta", "red",   "lightred", "darkgrey", "grey"};

std::optional<int64_t> integer(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

bool is_hex(const std::string& s, bool upper) {
  for (char c : s) {
    const bool digit = c >= '0' && c <= '9';
    const bool letter = upper ? (c >= 'A' && c <= 'F') : (c >= 'a' && c <= 'f');
    if (!digit && !letter) return false;
  }
  return true;
}

class Linter {
 public:
  explicit Linter(const json& root) : root_(root) {}

  std::vector<std::string> run() {
    if (!root_.is_object()) {
      problem("the profile is not a JSON object");
      return problems_;
    }
    check_meta();
    check_libs();
    check_shared();
    check_threads();
    return problems_;
  }

 private:
  void problem(const std::string& text) {
    if (problems_.size() < kMaxProblems) {
      problems_.push_back(text);
    } else if (problems_.size() == kMaxProblems) {
      problems_.push_back("... further problems not listed");
    }
  }

  const json* get(const json& object, const char* key, const std::string& where) {
    if (!object.is_object()) {
      problem(where + " is not an object");
      return nullptr;
    }
    const auto it = object.find(key);
    if (it == object.end()) {
      problem(where + "." + key + " is missing");
      return nullptr;
    }
    return &*it;
  }

  void expect_string(const json& object, const char* key, const std::string& where) {
    const json* v = get(object, key, where);
    if (v != nullptr && !v->is_string()) problem(where + "." + key + " is not a string");
  }

  void expect_number(const json& object, const char* key, const std::string& where, bool nullable = false) {
    const json* v = get(object, key, where);
    if (v != nullptr && !v->is_number() && !(nullable && v->is_null())) {
      problem(where + "." + key + (nullable ? " is neither a number nor null" : " is not a number"));
    }
  }

  // ---- meta ----

  void check_meta() {
    const json* meta = get(root_, firefox::profile::kMeta, "profile");
    if (meta == nullptr || !meta->is_object()) {
      if (meta != nullptr) problem("meta is not an object");
      return;
    }
    if (const json* v = get(*meta, firefox::meta::kPreprocessedProfileVersion, "meta")) {
      if (integer(*v) != 66) problem("meta.preprocessedProfileVersion is " + v->dump() + ", expected 66");
    }
    if (const json* v = get(*meta, firefox::meta::kInterval, "meta")) {
      if (!v->is_number() || v->get<double>() <= 0) problem("meta.interval is not a positive number");
    }
    expect_number(*meta, firefox::meta::kStartTime, "meta");
    expect_number(*meta, firefox::meta::kVersion, "meta");
    expect_number(*meta, firefox::meta::kProcessType, "meta");
    expect_string(*meta, firefox::meta::kProduct, "meta");
    expect_number(*meta, firefox::meta::kStackwalk, "meta");
    check_marker_schema(*meta);
    check_categories(*meta);
    if (const auto it = meta->find(firefox::meta::kSampleUnits); it != meta->end()) {
      if (const json* unit = get(*it, firefox::sample_units::kThreadCpuDelta, "meta.sampleUnits")) {
        if (!unit->is_string() ||
            (unit->get<std::string>() != kMicroSecond && unit->get<std::string>() != "ns")) {
          problem("meta.sampleUnits.threadCPUDelta is " + unit->dump() +
                  ", expected \"\xC2\xB5s\" (U+00B5 MICRO SIGN) or \"ns\"");
        }
      }
      has_cpu_unit_ = true;
    }
    // The profiler asserts that every listed thread exists (tracks.ts, computeDefaultVisibleThreads).
    const auto threads = root_.find(firefox::profile::kThreads);
    const size_t thread_count = threads != root_.end() && threads->is_array() ? threads->size() : 0;
    for (const char* key : {firefox::meta::kInitialVisibleThreads, firefox::meta::kInitialSelectedThreads}) {
      const auto it = meta->find(key);
      if (it == meta->end()) continue;
      if (!it->is_array() || it->empty()) {
        problem(std::string("meta.") + key + " is not a non-empty array");
        continue;
      }
      for (const json& index : *it) {
        if (!index.is_number_unsigned() || index.get<size_t>() >= thread_count) {
          problem(std::string("meta.") + key + " holds " + index.dump() + ", not a thread index");
        }
      }
    }
  }

  void check_marker_schema(const json& meta) {
    const json* schema = get(meta, firefox::meta::kMarkerSchema, "meta");
    if (schema == nullptr) return;
    if (!schema->is_array()) {
      problem("meta.markerSchema is not an array");
      return;
    }
    for (size_t i = 0; i < schema->size(); ++i) {
      const json& s = (*schema)[i];
      const std::string where = "meta.markerSchema[" + std::to_string(i) + "]";
      expect_string(s, firefox::marker_schema::kName, where);
      const json* display = get(s, firefox::marker_schema::kDisplay, where);
      if (display != nullptr && !display->is_array()) problem(where + ".display is not an array");
      const json* fields = get(s, firefox::marker_schema::kFields, where);
      if (fields == nullptr) continue;
      if (!fields->is_array()) {
        problem(where + ".fields is not an array");
        continue;
      }
      for (size_t k = 0; k < fields->size(); ++k) {
        const std::string field = where + ".fields[" + std::to_string(k) + "]";
        expect_string((*fields)[k], firefox::marker_schema::kFieldKey, field);
        if (const json* format = get((*fields)[k], firefox::marker_schema::kFieldFormat, field)) {
          if (!format->is_string() && !format->is_object())
            problem(field + ".format is not a string or object");
        }
      }
    }
  }

  void check_categories(const json& meta) {
    const json* categories = get(meta, firefox::meta::kCategories, "meta");
    if (categories == nullptr) return;
    if (!categories->is_array() || categories->empty()) {
      problem("meta.categories is not a non-empty array");
      return;
    }
    bool grey = false, idle = false;
    for (size_t i = 0; i < categories->size(); ++i) {
      const json& c = (*categories)[i];
      const std::string where = "meta.categories[" + std::to_string(i) + "]";
      const json* name = get(c, firefox::category::kName, where);
      const json* color = get(c, firefox::category::kColor, where);
      const json* subcategories = get(c, firefox::category::kSubcategories, where);
      if (name != nullptr && name->is_string() && name->get<std::string>() == "Idle") idle = true;
      if (color != nullptr) {
        bool known = false;
        for (const char* k : kColors) known = known || (color->is_string() && color->get<std::string>() == k);
        if (!known) problem(where + ".color " + color->dump() + " is not a profiler color");
        if (color->is_string() && color->get<std::string>() == "grey") grey = true;
      }
      size_t count = 0;
      if (subcategories != nullptr) {
        if (!subcategories->is_array() || subcategories->empty()) {
          problem(where + ".subcategories is not a non-empty array");
        } else {
          count = subcategories->size();
        }
      }
      subcategory_counts_.push_back(count);
    }
    if (!grey) problem("meta.categories has no grey category (the profiler's default)");
    if (!idle) problem("meta.categories has no category named \"Idle\"");
  }

  // ---- libs ----

  void check_libs() {
    const json* libs = get(root_, firefox::profile::kLibs, "profile");
    if (libs == nullptr) return;
    if (!libs->is_array()) {
      problem("libs is not an array");
      return;
    }
    lib_count_ = libs->size();
    for (size_t i = 0; i < libs->size(); ++i) {
      const json& lib = (*libs)[i];
      const std::string where = "libs[" + std::to_string(i) + "]";
      for (const char* key : {firefox::lib::kArch, firefox::lib::kName, firefox::lib::kPath,
                              firefox::lib::kDebugName, firefox::lib::kDebugPath})
        expect_string(lib, key, where);
      if (const json* id = get(lib, firefox::lib::kBreakpadId, where); id != nullptr && !id->is_null()) {
        if (!id->is_string() || id->get<std::string>().size() != 33 ||
            !is_hex(id->get<std::string>(), true)) {
          problem(where + ".breakpadId " + id->dump() + " is not 33 upper-case hex digits");
        }
      }
      if (const json* id = get(lib, firefox::lib::kCodeId, where); id != nullptr && !id->is_null()) {
        if (!id->is_string() || id->get<std::string>().empty() || id->get<std::string>().size() % 2 != 0 ||
            !is_hex(id->get<std::string>(), false)) {
          problem(where + ".codeId " + id->dump() + " is not lower-case hex bytes");
        }
      }
    }
  }

  // ---- tables ----

  // A column-oriented table; columns are checked as they are asked for.
  struct Table {
    const json* object = nullptr;
    std::string where;
    size_t length = 0;
    bool ok = false;
  };

  Table table(const json& parent, const char* key, const std::string& where) {
    Table t;
    t.where = where + "." + key;
    const json* object = get(parent, key, where);
    if (object == nullptr) return t;
    if (!object->is_object()) {
      problem(t.where + " is not an object");
      return t;
    }
    t.object = object;
    const json* length = get(*object, firefox::kLength, t.where);
    if (length == nullptr) return t;
    const auto n = integer(*length);
    if (!n || *n < 0) {
      problem(t.where + ".length is not a count");
      return t;
    }
    t.length = static_cast<size_t>(*n);
    t.ok = true;
    return t;
  }

  // The column, when present, an array and as long as the table.
  const json* column(const Table& t, const char* key) {
    if (!t.ok) return nullptr;
    const json* c = get(*t.object, key, t.where);
    if (c == nullptr) return nullptr;
    if (!c->is_array()) {
      problem(t.where + "." + key + " is not an array");
      return nullptr;
    }
    if (c->size() != t.length) {
      problem(t.where + "." + key + " has " + std::to_string(c->size()) + " entries but " + t.where +
              ".length is " + std::to_string(t.length));
      return nullptr;
    }
    return c;
  }

  enum Null { kNotNull, kNullable, kMinusOne };

  // Checks every entry is an index < limit (or null / -1 where allowed); returns the values with
  // -1 for null or -1 entries, or nothing when the column is unusable.
  std::optional<std::vector<int64_t>> indices(const Table& t, const char* key, size_t limit,
                                              const std::string& target, Null null = kNotNull) {
    const json* c = column(t, key);
    if (c == nullptr) return std::nullopt;
    std::vector<int64_t> values(c->size(), -1);
    for (size_t i = 0; i < c->size(); ++i) {
      const json& v = (*c)[i];
      if (v.is_null() && null == kNullable) continue;
      const auto n = integer(v);
      if (n && *n == -1 && null == kMinusOne) continue;
      if (!n || *n < 0 || static_cast<uint64_t>(*n) >= limit) {
        problem(t.where + "." + key + "[" + std::to_string(i) + "] = " + v.dump() + " is out of range for " +
                target + " (length " + std::to_string(limit) + ")");
        continue;
      }
      values[i] = *n;
    }
    return values;
  }

  // Integers (or null where allowed) within [lo, hi].
  std::optional<std::vector<int64_t>> integers(const Table& t, const char* key, int64_t lo, int64_t hi,
                                               bool nullable, int64_t if_null = -1) {
    const json* c = column(t, key);
    if (c == nullptr) return std::nullopt;
    std::vector<int64_t> values(c->size(), if_null);
    for (size_t i = 0; i < c->size(); ++i) {
      const json& v = (*c)[i];
      if (v.is_null() && nullable) continue;
      const auto n = integer(v);
      if (!n || *n < lo || *n > hi) {
        problem(t.where + "." + key + "[" + std::to_string(i) + "] = " + v.dump() +
                " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" +
                (nullable ? " or null" : ""));
        continue;
      }
      values[i] = *n;
    }
    return values;
  }

  void booleans(const Table& t, const char* key) {
    const json* c = column(t, key);
    if (c == nullptr) return;
    for (size_t i = 0; i < c->size(); ++i) {
      if (!(*c)[i].is_boolean())
        problem(t.where + "." + key + "[" + std::to_string(i) + "] is not a boolean");
    }
  }

  void nulls_or_strings(const Table& t, const char* key) {
    const json* c = column(t, key);
    if (c == nullptr) return;
    for (size_t i = 0; i < c->size(); ++i) {
      if (!(*c)[i].is_null() && !(*c)[i].is_string()) {
        problem(t.where + "." + key + "[" + std::to_string(i) + "] is neither a string nor null");
      }
    }
  }

  void check_shared() {
    const json* shared = get(root_, firefox::profile::kShared, "profile");
    if (shared == nullptr) return;
    const std::string where = "shared";
    constexpr int64_t kMax = INT64_MAX;

    if (const json* strings = get(*shared, firefox::shared::kStringArray, where)) {
      if (!strings->is_array()) {
        problem("shared.stringArray is not an array");
      } else {
        string_count_ = strings->size();
        for (size_t i = 0; i < strings->size(); ++i) {
          if (!(*strings)[i].is_string())
            problem("shared.stringArray[" + std::to_string(i) + "] is not a string");
        }
      }
    }
    const std::string strings = "shared.stringArray";

    const Table sources = table(*shared, firefox::shared::kSources, where);
    nulls_or_strings(sources, firefox::sources::kId);
    indices(sources, firefox::sources::kFilename, string_count_, strings);
    integers(sources, firefox::sources::kStartLine, 1, kMax, false);
    integers(sources, firefox::sources::kStartColumn, 1, kMax, false);
    indices(sources, firefox::sources::kSourceMapUrl, string_count_, strings, kNullable);
    nulls_or_strings(sources, firefox::sources::kContent);

    const Table locations = table(*shared, firefox::shared::kSourceLocationTable, where);
    indices(locations, firefox::source_locations::kSource, sources.length, sources.where);
    integers(locations, firefox::source_locations::kLine, 0, kMax, true);
    integers(locations, firefox::source_locations::kColumn, 0, kMax, true);

    const Table resources = table(*shared, firefox::shared::kResourceTable, where);
    indices(resources, firefox::resources::kLib, lib_count_, "libs", kNullable);
    indices(resources, firefox::resources::kName, string_count_, strings);
    indices(resources, firefox::resources::kHost, string_count_, strings, kNullable);
    integers(resources, firefox::resources::kType, 0, 5, false);

    const Table symbols = table(*shared, firefox::shared::kNativeSymbols, where);
    indices(symbols, firefox::native_symbols::kLibIndex, lib_count_, "libs");
    integers(symbols, firefox::native_symbols::kAddress, 0, kMax, false);
    indices(symbols, firefox::native_symbols::kName, string_count_, strings);
    integers(symbols, firefox::native_symbols::kFunctionSize, 0, kMax, true);

    const Table funcs = table(*shared, firefox::shared::kFuncTable, where);
    indices(funcs, firefox::funcs::kName, string_count_, strings);
    booleans(funcs, firefox::funcs::kIsJs);
    booleans(funcs, firefox::funcs::kRelevantForJs);
    indices(funcs, firefox::funcs::kResource, resources.length, resources.where, kMinusOne);
    indices(funcs, firefox::funcs::kSource, sources.length, sources.where, kNullable);
    integers(funcs, firefox::funcs::kLineNumber, 0, kMax, true);
    integers(funcs, firefox::funcs::kColumnNumber, 0, kMax, true);
    indices(funcs, firefox::funcs::kOriginalLocation, locations.length, locations.where, kNullable);

    const Table frames = table(*shared, firefox::shared::kFrameTable, where);
    const auto address = integers(frames, firefox::frames::kAddress, -1, kMax, false);
    const auto depth = integers(frames, firefox::frames::kInlineDepth, 0, 255, false);
    const auto category =
        indices(frames, firefox::frames::kCategory, subcategory_counts_.size(), "meta.categories", kNullable);
    const auto subcategory = integers(frames, firefox::frames::kSubcategory, 0, kMax, true);
    indices(frames, firefox::frames::kFunc, funcs.length, funcs.where);
    const auto native_symbol =
        indices(frames, firefox::frames::kNativeSymbol, symbols.length, symbols.where, kNullable);
    integers(frames, firefox::frames::kInnerWindowId, 0, kMax, true);
    integers(frames, firefox::frames::kLine, 0, kMax, true);
    integers(frames, firefox::frames::kColumn, 0, kMax, true);
    indices(frames, firefox::frames::kOriginalLocation, locations.length, locations.where, kNullable);
    if (category && subcategory) {
      for (size_t i = 0; i < frames.length; ++i) {
        const int64_t c = (*category)[i];
        const int64_t s = (*subcategory)[i];
        if (c < 0) continue;
        if (s < 0) {
          problem(frames.where + ".subcategory[" + std::to_string(i) + "] is null but its category is not");
        } else if (static_cast<size_t>(s) >= subcategory_counts_[static_cast<size_t>(c)]) {
          problem(frames.where + ".subcategory[" + std::to_string(i) + "] = " + std::to_string(s) +
                  " is out of range for category " + std::to_string(c));
        }
      }
    }

    const Table stacks = table(*shared, firefox::shared::kStackTable, where);
    stack_count_ = stacks.length;
    const auto stack_frame = indices(stacks, firefox::stacks::kFrame, frames.length, frames.where);
    if (stacks.ok && stacks.object->contains(firefox::stacks::kPrefixBefore66)) {
      problem("shared.stackTable has a 'prefix' column: version 66 uses prefixOffset");
    }
    const auto offset = integers(stacks, firefox::stacks::kPrefixOffset, 0, kMax, false);
    if (!offset) return;
    std::vector<int64_t> parent(stacks.length, -1);
    for (size_t i = 0; i < stacks.length; ++i) {
      const int64_t off = (*offset)[i];
      if (off < 0) continue;  // already reported
      if (static_cast<uint64_t>(off) > i) {
        problem(stacks.where + ".prefixOffset[" + std::to_string(i) + "] = " + std::to_string(off) +
                " points before the first stack (the parent must precede the child)");
        continue;
      }
      parent[i] = off == 0 ? -1 : static_cast<int64_t>(i) - off;
    }

    // Inlined frames (depth d > 0) hang under the frame of depth d-1 at the same address and
    // native symbol; the call tree and the "inlined" badge rely on that.
    if (!stack_frame || !address || !depth || !native_symbol) return;
    for (size_t i = 0; i < stacks.length; ++i) {
      const int64_t f = (*stack_frame)[i];
      if (f < 0) continue;
      const int64_t d = (*depth)[static_cast<size_t>(f)];
      if (d <= 0) continue;
      const std::string at = stacks.where + "[" + std::to_string(i) + "] (frame " + std::to_string(f) +
                             ", inlineDepth " + std::to_string(d) + ")";
      if (parent[i] < 0) {
        problem(at + " is inlined but has no parent stack");
        continue;
      }
      const int64_t pf = (*stack_frame)[static_cast<size_t>(parent[i])];
      if (pf < 0) continue;
      const auto pfi = static_cast<size_t>(pf);
      const auto fi = static_cast<size_t>(f);
      if ((*depth)[pfi] != d - 1) {
        problem(at + ": its parent's frame " + std::to_string(pf) + " has inlineDepth " +
                std::to_string((*depth)[pfi]) + ", expected " + std::to_string(d - 1));
      }
      if ((*address)[pfi] != (*address)[fi]) {
        problem(at + ": its address differs from the parent frame " + std::to_string(pf) + "'s");
      }
      if ((*native_symbol)[pfi] != (*native_symbol)[fi]) {
        problem(at + ": its nativeSymbol differs from the parent frame " + std::to_string(pf) + "'s");
      }
    }
  }

  // ---- threads ----

  void check_threads() {
    const json* threads = get(root_, firefox::profile::kThreads, "profile");
    if (threads == nullptr) return;
    if (!threads->is_array()) {
      problem("threads is not an array");
      return;
    }
    for (size_t i = 0; i < threads->size(); ++i)
      check_thread((*threads)[i], "threads[" + std::to_string(i) + "]");
  }

  void check_thread(const json& t, const std::string& where) {
    expect_string(t, firefox::thread::kName, where);
    if (const json* pid = get(t, firefox::thread::kPid, where); pid != nullptr && !pid->is_string()) {
      problem(where + ".pid is " + pid->dump() + ", not a string (required since version 47)");
    }
    if (const json* tid = get(t, firefox::thread::kTid, where);
        tid != nullptr && !tid->is_number() && !tid->is_string()) {
      problem(where + ".tid is neither a number nor a string");
    }
    if (const json* main = get(t, firefox::thread::kIsMainThread, where);
        main != nullptr && !main->is_boolean()) {
      problem(where + ".isMainThread is not a boolean");
    }
    expect_number(t, firefox::thread::kProcessStartupTime, where);
    expect_number(t, firefox::thread::kProcessShutdownTime, where, true);
    expect_number(t, firefox::thread::kRegisterTime, where);
    expect_number(t, firefox::thread::kUnregisterTime, where, true);
    if (const json* paused = get(t, firefox::thread::kPausedRanges, where);
        paused != nullptr && !paused->is_array()) {
      problem(where + ".pausedRanges is not an array");
    }

    const Table samples = table(t, firefox::thread::kSamples, where);
    indices(samples, firefox::samples::kStack, stack_count_, "shared.stackTable", kNullable);
    if (samples.ok) {
      const bool has_time = samples.object->contains(firefox::samples::kTime);
      const bool has_deltas = samples.object->contains(firefox::samples::kTimeDeltas);
      if (!has_time && !has_deltas) problem(samples.where + " has neither time nor timeDeltas");
      if (has_time) check_ascending(samples, firefox::samples::kTime, false);
      if (has_deltas) check_ascending(samples, firefox::samples::kTimeDeltas, true);
      if (const auto it = samples.object->find(firefox::samples::kWeight);
          it != samples.object->end() && !it->is_null()) {
        if (const json* weight = column(samples, firefox::samples::kWeight)) {
          for (size_t i = 0; i < weight->size(); ++i) {
            if (!(*weight)[i].is_number() || (*weight)[i].get<double>() < 0) {
              problem(samples.where + ".weight[" + std::to_string(i) + "] is not a non-negative number");
            }
          }
        }
      }
      if (const auto it = samples.object->find(firefox::samples::kWeightType); it != samples.object->end()) {
        const std::string type = it->is_string() ? it->get<std::string>() : "";
        if (type != "samples" && type != "tracing-ms" && type != "bytes") {
          problem(samples.where + ".weightType " + it->dump() + " is not samples, tracing-ms or bytes");
        }
      }
      if (samples.object->contains(firefox::samples::kThreadCpuDelta)) {
        if (!has_cpu_unit_) problem(samples.where + ".threadCPUDelta is present but meta.sampleUnits is not");
        if (const json* cpu = column(samples, firefox::samples::kThreadCpuDelta)) {
          for (size_t i = 0; i < cpu->size(); ++i) {
            const json& v = (*cpu)[i];
            if (!v.is_null() && (!v.is_number() || v.get<double>() < 0)) {
              problem(samples.where + ".threadCPUDelta[" + std::to_string(i) +
                      "] is not a non-negative number");
            }
          }
        }
      }
    }

    if (t.contains(firefox::thread::kNativeAllocations)) check_native_allocations(t, where);

    const Table markers = table(t, firefox::thread::kMarkers, where);
    const json* data = column(markers, firefox::markers::kData);
    indices(markers, firefox::markers::kName, string_count_, "shared.stringArray");
    const json* start = column(markers, firefox::markers::kStartTime);
    const json* end = column(markers, firefox::markers::kEndTime);
    integers(markers, firefox::markers::kPhase, 0, 3, false);
    indices(markers, firefox::markers::kCategory, subcategory_counts_.size(), "meta.categories");
    // Loops run over the columns' real sizes: a bogus length must not drive them.
    const auto at = [&](size_t i) { return markers.where + "[" + std::to_string(i) + "]"; };
    for (size_t i = 0; data != nullptr && i < data->size(); ++i) {
      const json& d = (*data)[i];
      if (!d.is_null() && !(d.is_object() && d.contains(firefox::markers::kDataType) &&
                            d[firefox::markers::kDataType].is_string())) {
        problem(at(i) + ".data is neither null nor an object with a string type");
      }
    }
    for (const auto& [c, key] :
         {std::pair{start, firefox::markers::kStartTime}, std::pair{end, firefox::markers::kEndTime}}) {
      for (size_t i = 0; c != nullptr && i < c->size(); ++i) {
        if (!(*c)[i].is_null() && !(*c)[i].is_number())
          problem(at(i) + "." + key + " is neither a number nor null");
      }
    }
  }

  // threads[i].nativeAllocations, the balanced table (profile.ts): time ascending (the profiler
  // bisects it), weights in bytes (negative: a deallocation), stacks into the shared stack table or
  // null, memory addresses a JavaScript number holds exactly (the retained view pairs rows by them),
  // and thread ids.
  void check_native_allocations(const json& t, const std::string& where) {
    const Table a = table(t, firefox::thread::kNativeAllocations, where);
    if (!a.ok) return;
    for (const auto& [key, value] : a.object->items()) {
      // hpdUntracked: hpd's own column (firefox_format.h), which the profiler ignores.
      const bool known = key == firefox::kLength || key == firefox::native_allocations::kWeightType ||
                         key == "hpdUntracked" ||
                         std::any_of(std::begin(firefox::native_allocations::kAll),
                                     std::end(firefox::native_allocations::kAll),
                                     [&](const char* column) { return key == column; });
      if (!known) problem(a.where + "." + key + " is not a column of the native allocations table");
    }
    const auto type = a.object->find(firefox::native_allocations::kWeightType);
    if (type == a.object->end() || *type != "bytes") problem(a.where + ".weightType is not \"bytes\"");
    check_ascending(a, firefox::native_allocations::kTime, false);
    indices(a, firefox::native_allocations::kStack, stack_count_, "shared.stackTable", kNullable);
    if (const json* weight = column(a, firefox::native_allocations::kWeight)) {
      for (size_t i = 0; i < weight->size(); ++i) {
        if (!(*weight)[i].is_number())
          problem(a.where + ".weight[" + std::to_string(i) + "] is not a number");
      }
    }
    integers(a, firefox::native_allocations::kMemoryAddress, 0, (int64_t{1} << 53) - 1, false);
    integers(a, firefox::native_allocations::kThreadId, 0, INT32_MAX, false);
  }

  // time must ascend (the profiler bisects it); timeDeltas must not be negative after the first.
  void check_ascending(const Table& samples, const char* key, bool deltas) {
    const json* c = column(samples, key);
    if (c == nullptr) return;
    double previous = 0;
    for (size_t i = 0; i < c->size(); ++i) {
      const json& v = (*c)[i];
      if (!v.is_number()) {
        problem(samples.where + "." + key + "[" + std::to_string(i) + "] is not a number");
        return;
      }
      const double x = v.get<double>();
      if (i > 0 && (deltas ? x < 0 : x < previous)) {
        problem(samples.where + "." + key + " is not sorted ascending at index " + std::to_string(i));
        return;
      }
      previous = x;
    }
  }

  const json& root_;
  std::vector<std::string> problems_;
  std::vector<size_t> subcategory_counts_;  // per meta category
  size_t lib_count_ = 0;
  size_t string_count_ = 0;
  size_t stack_count_ = 0;
  bool has_cpu_unit_ = false;
};

}  // namespace

std::vector<std::string> lint_firefox_profile(const nlohmann::json& profile) {
  return Linter(profile).run();
}

nlohmann::json load_json_maybe_gzip(const std::string& path) {
  // gzread passes files without the gzip magic through unchanged.
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) throw std::runtime_error("cannot open '" + path + "'");
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const int n = gzread(file.get(), buffer, sizeof(buffer));
    if (n < 0) {
      int code = 0;
      throw std::runtime_error("cannot read '" + path + "': " + gzerror(file.get(), &code));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  // gzread stops quietly at a truncated stream; gzerror tells.
  int code = 0;
  gzerror(file.get(), &code);
  if (code != Z_OK) throw std::runtime_error("cannot read '" + path + "': corrupt or truncated gzip data");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("'" + path + "' is not valid JSON: " + e.what());
  }
}

}  // namespace hpd::testing
