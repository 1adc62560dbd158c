// NameStore: demangled names interned by key in one arena (see name_store.h).
#include "name_store.h"

#include <algorithm>
#include <cstring>

namespace hpd {
namespace {

constexpr size_t kBlockBytes = size_t{64} << 10;
// A name longer than this gets a block of its own, so that the shared blocks waste little.
constexpr size_t kOwnBlockFrom = kBlockBytes / 8;

size_t hash_of(const char* key) {
  // Keys are section addresses: the low bits vary, the high ones barely do.
  const auto v = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(key));
  return static_cast<size_t>((v * 0x9E3779B97F4A7C15ull) >> 32);
}

}  // namespace

size_t NameStore::slot_of(const char* key) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash_of(key) & mask;; i = (i + 1) & mask) {
    const uint32_t s = slots_[i];
    if (s == 0 || keys_[s - 1] == key) return i;
  }
}

uint32_t NameStore::find(const char* key) const {
  if (slots_.empty()) return kNone;
  const uint32_t s = slots_[slot_of(key)];
  return s == 0 ? kNone : s - 1;
}

void NameStore::grow() {
  std::vector<uint32_t> old;
  old.swap(slots_);
  slots_.assign(std::max<size_t>(old.size() * 2, 1024), 0);
  for (uint32_t s : old) {
    if (s != 0) slots_[slot_of(keys_[s - 1])] = s;
  }
}

std::string_view NameStore::copy(std::string_view name) {
  const size_t need = name.size() + 1;
  char* at = nullptr;
  if (need >= kOwnBlockFrom) {
    blocks_.push_back(std::make_unique_for_overwrite<char[]>(need));
    block_bytes_ += need;
    at = blocks_.back().get();
  } else {
    if (need > free_bytes_) {
      blocks_.push_back(std::make_unique_for_overwrite<char[]>(kBlockBytes));
      block_bytes_ += kBlockBytes;
      free_ = blocks_.back().get();
      free_bytes_ = kBlockBytes;
    }
    at = free_;
    free_ += need;
    free_bytes_ -= need;
  }
  std::memcpy(at, name.data(), name.size());
  at[name.size()] = '\0';
  return {at, name.size()};
}

uint32_t NameStore::add(const char* key, std::string_view name) {
  if ((names_.size() + 1) * 2 > slots_.size()) grow();
  const auto index = static_cast<uint32_t>(names_.size());
  names_.push_back(copy(name));
  keys_.push_back(key);
  slots_[slot_of(key)] = index + 1;
  return index;
}

size_t NameStore::memory_bytes() const {
  const size_t total = names_.capacity() * sizeof(std::string_view) + keys_.capacity() * sizeof(const char*) +
                       slots_.capacity() * sizeof(uint32_t) + blocks_.capacity() * sizeof(blocks_[0]);
  return total + block_bytes_;
}

}  // namespace hpd
