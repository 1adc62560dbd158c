// SubroutineMapBuilder: LLVM's rules for putting a unit's subroutine ranges into its address map,
// and the limits on garbage DWARF that both walks (one-pass and libdw's) apply alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory_resource>
#include <new>
#include <utility>
#include <vector>

#include "subroutine_map.h"

namespace hpd {

// Garbage DWARF can nest DIEs arbitrarily deep; real code stays far below.
inline constexpr int kMaxDieDepth = 256;
inline constexpr size_t kMaxRangesPerDie = 1u << 16;

// LLVM's DWARFUnit::updateAddressDieMap over the subroutines of one unit, visited in preorder.
// Nodes are created only for subroutines with a range and their enclosing inlined ones.
class SubroutineMapBuilder {
  using Map = std::pmr::map<uint64_t, std::pair<uint64_t, uint32_t>>;

 public:
  SubroutineMapBuilder() : map_(*new (arena_.allocate(sizeof(Map), alignof(Map))) Map(&arena_)) {}
  SubroutineMapBuilder(const SubroutineMapBuilder&) = delete;
  SubroutineMapBuilder& operator=(const SubroutineMapBuilder&) = delete;

  void enter(uint64_t die_offset, bool is_subprogram) {
    stack_.push_back({die_offset, is_subprogram, kNoSubroutine});
  }
  void leave() { stack_.pop_back(); }

  // A range of the innermost entered subroutine.
  void add_range(uint64_t low, uint64_t high) {
    if (low < high) insert(low, high, materialize(stack_.size() - 1));
  }

  void finish(SubroutineMap& out);

 private:
  struct Open {
    uint64_t offset;
    bool is_subprogram;
    uint32_t node;
  };

  uint32_t materialize(size_t index);

  // The entry with the greatest key <= low, or end(). In preorder the answer is usually the
  // entry inserted last (a range nested in it) or the one after it (the rest of the enclosing
  // range, where a following sibling starts), so those two are tried before a tree search.
  Map::iterator predecessor(uint64_t low);

  void insert(uint64_t low, uint64_t high, uint32_t node);

  // Map nodes are never freed one by one: an arena spares malloc a call per range. The map itself
  // lives in the arena too and is never destroyed: its destructor would only walk every node to
  // hand it back to the arena, which frees them all at once (the entries are plain integers).
  std::pmr::monotonic_buffer_resource arena_;
  Map& map_;
  Map::iterator last_ = map_.end();  // the entry inserted or updated last
  std::vector<Open> stack_;
  std::vector<SubroutineNode> nodes_;
};

// Inline: called for every range of every subroutine.
inline SubroutineMapBuilder::Map::iterator SubroutineMapBuilder::predecessor(uint64_t low) {
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

inline void SubroutineMapBuilder::insert(uint64_t low, uint64_t high, uint32_t node) {
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
