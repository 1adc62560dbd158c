// SubroutineMapBuilder: LLVM's DWARFUnit::updateAddressDieMap rules (a later, inner range wins
// inside itself, the outer one keeps both sides) over an arena-allocated ordered map.
#include "inline_rules.h"

#include <algorithm>
#include <iterator>

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

SubroutineMapBuilder::Map::iterator SubroutineMapBuilder::predecessor(uint64_t low) {
  if (last_ != map_.end() && last_->first <= low) {
    for (int step = 0; step < 2; ++step) {
      auto next = std::next(last_);
      if (next == map_.end() || next->first > low) return last_;
      last_ = next;
    }
  }
  auto it = map_.upper_bound(low);
  return it == map_.begin() ? map_.end() : std::prev(it);
}

void SubroutineMapBuilder::insert(uint64_t low, uint64_t high, uint32_t node) {
  auto it = predecessor(low);
  if (it != map_.end()) {
    if (low < it->second.first) {
      if (high < it->second.first) map_.insert_or_assign(std::next(it), high, it->second);
      if (low > it->first) it->second.first = low;
    }
    if (it->first == low) {
      it->second = {high, node};
      last_ = it;
      return;
    }
    last_ = map_.insert_or_assign(std::next(it), low, std::pair<uint64_t, uint32_t>{high, node});
    return;
  }
  last_ = map_.insert_or_assign(map_.begin(), low, std::pair<uint64_t, uint32_t>{high, node});
}

}  // namespace hpd
