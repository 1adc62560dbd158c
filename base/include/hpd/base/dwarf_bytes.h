// Bounds-checked reads of DWARF data in [p, end), shared by the symbolizer's line-program decoder and
// DIE walker and the unwinder's .eh_frame reader: little-endian integers, LEB128 numbers and
// NUL-terminated strings. Each advances `p` past
// what it read and returns false (nullptr for strings) when the data ends first; `p` never moves
// past `end`.
#ifndef HPD_BASE_DWARF_BYTES_H
#define HPD_BASE_DWARF_BYTES_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hpd::dwarf_bytes {

// An unsigned little-endian integer of `bytes` (at most 8) bytes.
inline bool read_fixed(const uint8_t*& p, const uint8_t* end, size_t bytes, uint64_t& out) {
  if (bytes > 8 || static_cast<size_t>(end - p) < bytes) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  p += bytes;
  out = v;
  return true;
}

// Bits beyond the 64th are dropped, as libdw does.
inline bool read_uleb(const uint8_t*& p, const uint8_t* end, uint64_t& out) {
  uint64_t v = 0;
  for (unsigned shift = 0; p < end; shift += 7) {
    const uint8_t b = *p++;
    if (shift < 64) v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      out = v;
      return true;
    }
  }
  return false;
}

inline bool read_sleb(const uint8_t*& p, const uint8_t* end, int64_t& out) {
  uint64_t v = 0;
  unsigned shift = 0;
  while (p < end) {
    const uint8_t b = *p++;
    if (shift < 64) v |= static_cast<uint64_t>(b & 0x7f) << shift;
    shift += 7;
    if ((b & 0x80) == 0) {
      if (shift < 64 && (b & 0x40) != 0) v |= ~uint64_t{0} << shift;
      out = static_cast<int64_t>(v);
      return true;
    }
  }
  return false;
}

// The string at `p`; `p` moves past its NUL.
inline const char* read_cstr(const uint8_t*& p, const uint8_t* end) {
  const void* nul = std::memchr(p, 0, static_cast<size_t>(end - p));
  if (nul == nullptr) return nullptr;
  const char* s = reinterpret_cast<const char*>(p);
  p = static_cast<const uint8_t*>(nul) + 1;
  return s;
}

}  // namespace hpd::dwarf_bytes

#endif
