// PreparedAddresses: what Symbolizer::prepare found for a batch of addresses, taken by the lookups
// that follow in the caller's order, with the memory of later ones prefetched.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "debug_info.h"
#include "symbol_table.h"

namespace hpd {

// What Symbolizer::prepare found for each address, in the order the addresses were given: the
// lookups that follow ask for them in that order, so each finds its entry at the cursor (or a few
// entries on, when the caller answered some addresses itself) and reads memory in sequence.
class PreparedAddresses {
 public:
  static constexpr uint32_t kNoSymbol = UINT32_MAX;
  static constexpr uint32_t kFindSymbol = UINT32_MAX - 1;  // an index too large to keep: look it up
  struct Entry {
    uint64_t vaddr;
    DebugPlace place;
    uint32_t symbol;  // index in the module's SymbolTable (its display name already computed)
  };
  static_assert(sizeof(Entry) == 32);

  void assign(std::vector<Entry> entries) {
    entries_ = std::move(entries);
    next_ = 0;
  }
  // The entry for `vaddr` at the cursor or up to kLookAhead entries after it, moving the cursor
  // past it; nullptr (cursor unmoved) when the caller has left the prepared order.
  const Entry* take(uint64_t vaddr, DebugInfo* debug, const SymbolTable& symbols) {
    const size_t end = std::min(entries_.size(), next_ + kLookAhead);
    for (size_t i = next_; i < end; ++i) {
      if (entries_[i].vaddr == vaddr) {
        next_ = i + 1;
        // The entries are in the caller's order, their tables' memory in address order: start
        // loading what a later lookup will read, so that its cache misses overlap this one's work.
        // Pointers are followed only once what they point to had time to arrive: the symbol is
        // asked for 8 entries ahead, its name's string object 4 ahead, the characters 2 ahead.
        if (const Entry* ahead = at(i + kPrefetchDistance)) {
          if (debug != nullptr) debug->prefetch(ahead->place, 0);
          if (const SymbolTable::Symbol* s = symbol_of(*ahead, symbols)) __builtin_prefetch(s);
        }
        if (const Entry* ahead = at(i + kPrefetchDistance / 2)) {
          if (debug != nullptr) debug->prefetch(ahead->place, 1);
          if (const SymbolTable::Symbol* s = symbol_of(*ahead, symbols))
            __builtin_prefetch(symbols.display_name_if_known(*s));
        }
        if (const Entry* ahead = at(i + kPrefetchDistance / 4)) {
          const SymbolTable::Symbol* s = symbol_of(*ahead, symbols);
          if (const std::string* name = s != nullptr ? symbols.display_name_if_known(*s) : nullptr)
            __builtin_prefetch(name->data());
        }
        return &entries_[i];
      }
    }
    return nullptr;
  }
  size_t memory_bytes() const { return entries_.capacity() * sizeof(Entry); }

  // The entry's symbol when it holds one (nullptr for kNoSymbol and kFindSymbol).
  static const SymbolTable::Symbol* symbol_of(const Entry& e, const SymbolTable& symbols) {
    return e.symbol < kFindSymbol ? &symbols.symbols()[e.symbol] : nullptr;
  }

 private:
  static constexpr size_t kLookAhead = 64;
  static constexpr size_t kPrefetchDistance = 8;
  const Entry* at(size_t k) const { return k < entries_.size() ? &entries_[k] : nullptr; }
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

}  // namespace hpd
