#include "whole_functions.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace hpd::report_rows {

std::vector<uint32_t> whole_functions(const Profile& p) {
  const size_t n = p.funcs.size();
  // The lowest address of each func's outer frames: the part holding the function's entry stands for
  // the whole (its file is the function's own, where the prologue's lines are).
  std::vector<int64_t> lowest(n, std::numeric_limits<int64_t>::max());
  for (const Frame& frame : p.frames) {
    if (frame.inline_depth == 0 && frame.native_symbol != kNoIndex && frame.func < n && frame.address >= 0)
      lowest[frame.func] = std::min(lowest[frame.func], frame.address);
  }
  std::vector<uint32_t> whole(n);
  for (uint32_t f = 0; f < n; ++f) whole[f] = f;
  const auto root = [&](uint32_t f) {
    while (whole[f] != f) f = whole[f] = whole[whole[f]];
    return f;
  };
  // (native symbol, name) -> a func seen with them.
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> seen;
  for (const Frame& frame : p.frames) {
    if (frame.inline_depth != 0 || frame.native_symbol == kNoIndex || frame.func >= n) continue;
    const auto [it, inserted] = seen.try_emplace({frame.native_symbol, p.funcs[frame.func].name}, frame.func);
    if (inserted) continue;
    uint32_t a = root(it->second), b = root(frame.func);
    if (a == b) continue;
    if (std::make_pair(lowest[b], b) < std::make_pair(lowest[a], a)) std::swap(a, b);
    whole[b] = a;
  }
  for (uint32_t f = 0; f < n; ++f) whole[f] = root(f);
  return whole;
}

}  // namespace hpd::report_rows
