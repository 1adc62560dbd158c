// hpd's MIP (Machine IR Profile) markers in the Firefox format (firefox_format.h): one instant marker per
// function count, written and read back.
#include "firefox/extensions_read.h"
#include "firefox/extensions_write.h"

#include <cstdio>
#include <string>

#include "firefox_format.h"
#include "hpd/export/firefox/schema.h"

namespace hpd::firefox {

void add_mip_marker(const Profile& p, const Tables& tables, const MipCount& c, MarkerTable& markers) {
  const Func& f = p.funcs[c.func];
  firefox::MipMarkerData data;
  data.function = firefox::string_row(f.name);
  data.module = f.lib != kNoIndex ? p.libs[f.lib].path : std::string();
  data.calls = c.calls;
  data.first_call = c.first_call;
  if (c.blocks_total != 0)
    data.blocks = std::to_string(c.blocks_covered) + "/" + std::to_string(c.blocks_total);
  data.func = firefox::func_row(c.func);
  data.counts_calls = c.counts_calls;
  markers.add(std::move(data), firefox::string_row(f.name), tables.relative_ns(c.time_ns), std::nullopt,
              Category::kUser);
}

using nlohmann::json;

// A MIP marker becomes a MipCount of the thread's process. The function is the one "funcIndex"
// names; a profile written by something else gets the marker's function name in its module's lib.
void read_mip_marker(Profile& p, const Table& markers, size_t i, int32_t pid,
                     const std::vector<uint32_t>& func_map,
                     const std::vector<const std::string*>& string_values) {
  const json& d = markers.column(firefox::markers::kData)[i];
  const auto integer = [&](const char* key) -> int64_t {
    const json* v = optional_member(d, key);
    return v != nullptr ? as_integer(*v).value_or(-1) : -1;
  };
  const int64_t calls = integer(firefox::kMipCallsField);
  const int64_t first = integer(firefox::kMipFirstCallField);
  if (calls < 0 || first < 0)
    throw FormatError(markers.element(firefox::markers::kData, i).str() +
                      " is a MIP marker without valid calls or firstCall");
  MipCount c;
  c.pid = pid;
  c.calls = static_cast<uint64_t>(calls);
  c.first_call = static_cast<uint64_t>(first);
  c.never_called = c.calls == 0;
  c.counts_calls = integer(firefox::kMipCountsCallsField) != 0;
  const int64_t func = integer(firefox::kMipFuncField);
  if (func >= 0 && static_cast<uint64_t>(func) < func_map.size()) {
    c.func = func_map[static_cast<size_t>(func)];
  } else {
    const int64_t name = integer(firefox::kMipFunctionField);
    if (name < 0 || static_cast<uint64_t>(name) >= string_values.size())
      throw FormatError(markers.element(firefox::markers::kData, i).str() +
                        " is a MIP marker without a valid function");
    const std::string module = optional_string(d, firefox::kMipModuleField);
    uint32_t lib = kNoIndex;
    for (uint32_t l = 0; l < p.libs.size(); ++l) {
      if (!module.empty() && p.libs[l].path == module) lib = l;
    }
    c.func = p.intern_func(*string_values[static_cast<size_t>(name)], {}, lib);
  }
  const std::string blocks = optional_string(d, firefox::kMipBlocksField);
  unsigned covered = 0, total = 0;
  if (std::sscanf(blocks.c_str(), "%u/%u", &covered, &total) == 2 && covered <= total) {
    c.blocks_covered = covered;
    c.blocks_total = total;
  }
  const json& start = markers.column(firefox::markers::kStartTime)[i];
  if (start.is_number())
    c.time_ns = to_mono(p, start.get<double>(), markers.element(firefox::markers::kStartTime, i));
  p.mip_counts.push_back(c);
}

}  // namespace hpd::firefox
