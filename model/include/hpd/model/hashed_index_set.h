// HashedIndexSet: finds an element of a vector its owner keeps by a hash and an equality test, holding
// only the element's index and 32 bits of its hash (8 bytes a slot, open addressing, at most half
// full). It stands where an unordered_map from a key to the element's index would copy the key into a
// node of its own: a recording interns every sample's stack and sum through one, so a lookup costs one
// cache line where the map's cost three (bucket, node, element) and a node's allocation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hpd {

class HashedIndexSet {
 public:
  // The index of an element `is_it(index)` says is the one sought, among those added with `hash`;
  // kNone if there is none.
  template <class IsIt>
  uint32_t find(uint64_t hash, IsIt&& is_it) const {
    if (slots_.empty()) return kNone;
    const uint32_t tag = tag_of(hash);
    for (size_t i = home(tag);; i = (i + 1) & mask()) {
      const Slot& s = slots_[i];
      if (s.index == kNone) return kNone;
      if (s.tag == tag && is_it(s.index)) return s.index;
    }
  }

  // Adds `index` under `hash` (the caller found no equal element first).
  void insert(uint64_t hash, uint32_t index) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    place({tag_of(hash), index});
    ++count_;
  }

  size_t size() const { return count_; }
  // Drops every index and gives the slots' memory back.
  void clear() {
    std::vector<Slot>().swap(slots_);  // `slots_ = {}` would keep the capacity
    count_ = 0;
  }
  // Drops every index and keeps the slots for the next ones: a table filled again to about its last
  // size neither grows nor faults its memory in again.
  void reset() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    count_ = 0;
  }
  // The heap the slots hold.
  size_t bytes() const { return slots_.capacity() * sizeof(Slot); }
  // The slots the indices held need, the table being at most half full.
  size_t used_bytes() const { return 2 * count_ * sizeof(Slot); }

  static constexpr uint32_t kNone = UINT32_MAX;

 private:
  struct Slot {
    uint32_t tag = 0;
    uint32_t index = kNone;
  };

  static uint32_t tag_of(uint64_t hash) { return static_cast<uint32_t>(hash ^ (hash >> 32)); }
  size_t mask() const { return slots_.size() - 1; }
  // Fibonacci hashing of the tag: the slot depends on all of its bits, whatever the table's size.
  size_t home(uint32_t tag) const { return static_cast<size_t>((tag * 0x9E3779B97F4A7C15ULL) >> shift_); }

  void place(Slot slot) {
    size_t i = home(slot.tag);
    while (slots_[i].index != kNone) i = (i + 1) & mask();
    slots_[i] = slot;
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const size_t size = old.empty() ? 16 : old.size() * 2;
    slots_.assign(size, Slot{});
    shift_ = 64;
    for (size_t n = size; n > 1; n >>= 1) --shift_;
    for (const Slot& s : old)
      if (s.index != kNone) place(s);
  }

  std::vector<Slot> slots_;  // a power of two in size
  size_t count_ = 0;
  unsigned shift_ = 64;  // 64 - log2(slots_.size())
};

}  // namespace hpd
