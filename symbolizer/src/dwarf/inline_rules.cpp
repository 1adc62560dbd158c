// SubroutineMapBuilder's out-of-line parts: the nodes of a range's subroutine and of the inlined
// ones around it (made when first needed), and the finished map turned into sorted spans.
#include "inline_rules.h"

#include <algorithm>

namespace hpd {

void SubroutineMapBuilder::finish(SubroutineMap& out) {
  out.nodes = std::move(nodes_);
  out.spans.clear();
  out.long_span_ends.clear();
  out.spans.reserve(map_.size());
  for (const auto& [low, entry] : map_) {
    const uint64_t size = entry.first - low;  // map entries never end below their start
    if (size >= SubroutineSpan::kLongSpan) out.long_span_ends.emplace_back(low, entry.first);
    out.spans.push_back(
        {low, static_cast<uint32_t>(std::min<uint64_t>(size, SubroutineSpan::kLongSpan)), entry.second});
  }
  // The nodes keep their spare capacity: DwarfIndex frees them once it has copied them.
}

uint32_t SubroutineMapBuilder::materialize(size_t index) {
  Open& a = stack_[index];
  if (a.node != kNoSubroutine) return a.node;
  const uint32_t parent = (!a.is_subprogram && index > 0) ? materialize(index - 1) : kNoSubroutine;
  a.node = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({a.offset, parent, a.is_subprogram});
  return a.node;
}

}  // namespace hpd
