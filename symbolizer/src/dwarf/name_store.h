// NameStore: demangled names interned by the DWARF string they came from, packed in one arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace hpd {

// Each distinct key (a pointer to a mangled name in a section, which stays put as long as the
// file is open) is demangled once by the caller and stored here; a name is then a 32-bit index.
// Per name this holds the characters (with a NUL after them) plus 28 to 36 bytes, where a
// std::unordered_map<const char*, std::string> held about 100 more (a hash node, a string object
// and a separately allocated buffer for every name over 15 characters).
class NameStore {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // The index of the name stored for `key`, or kNone.
  uint32_t find(const char* key) const;
  // Stores `name` for `key` (not stored yet) and returns its index. Views handed out earlier stay
  // valid. Indices run 0, 1, 2...; fewer than kNone names can be stored (the caller checks size()).
  uint32_t add(const char* key, std::string_view name);

  // Valid as long as the store; empty for kNone.
  std::string_view view(uint32_t index) const {
    return index < names_.size() ? names_[index] : std::string_view();
  }
  size_t size() const { return names_.size(); }
  // Starts loading where view(index) looks (not the characters: finding them would wait).
  void prefetch(uint32_t index) const {
    if (index < names_.size()) __builtin_prefetch(names_.data() + index);
  }
  // Heap held (the arena's blocks, the index arrays and the hash slots, by capacity).
  size_t memory_bytes() const;

 private:
  size_t slot_of(const char* key) const;  // the slot holding key, or the empty one where it goes
  void grow();
  std::string_view copy(std::string_view name);

  std::vector<std::string_view> names_;          // by index
  std::vector<const char*> keys_;                // by index
  std::vector<uint32_t> slots_;                  // open addressing: 0 empty, else index + 1
  std::vector<std::unique_ptr<char[]>> blocks_;  // shared ones, and one per long name
  size_t block_bytes_ = 0;
  char* free_ = nullptr;  // the unused end of the shared block being filled
  size_t free_bytes_ = 0;
};

}  // namespace hpd
