// The part of a DWARF unit both DIE readers decode first: its header, its abbreviation table, and
// how to pass over each attribute value by its form (bounds-checked, little-endian, DWARF 2-5).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "hpd/base/dwarf_bytes.h"
#include "subroutine_map.h"

namespace hpd::dwarf_unit {

// Little-endian reads within [p, end); each throws nothing and reports failure instead.
struct Cursor {
  const uint8_t* p;
  const uint8_t* end;

  size_t left() const { return static_cast<size_t>(end - p); }
  bool uleb(uint64_t& v) { return dwarf_bytes::read_uleb(p, end, v); }
  bool sleb(int64_t& v) { return dwarf_bytes::read_sleb(p, end, v); }
  bool skip_leb() {
    while (p < end) {
      if ((*p++ & 0x80) == 0) return true;
    }
    return false;
  }
  bool fixed(size_t bytes, uint64_t& v) { return dwarf_bytes::read_fixed(p, end, bytes, v); }
  bool skip(uint64_t bytes) {
    if (left() < bytes) return false;
    p += bytes;
    return true;
  }
  bool skip_cstr() { return dwarf_bytes::read_cstr(p, end) != nullptr; }
};

// How an attribute value is passed over, decided once per abbreviation.
enum class Skip : uint8_t { fixed, leb, cstr, block1, block2, block4, block_leb, indirect, unknown };

// Six bytes: every unit's abbreviations stay decoded for the text reader, and large C++ units have
// tens of thousands of attribute specifications. Names and forms above 0xffff (none is defined)
// are kept as 0xffff, which matches no attribute and no form.
struct AttrSpec {
  uint16_t name;
  uint16_t form;
  Skip skip;
  uint8_t size;  // for Skip::fixed
};
static_assert(sizeof(AttrSpec) == 6);
constexpr uint16_t clamp16(uint64_t v) {
  return static_cast<uint16_t>(std::min<uint64_t>(v, 0xffff));
}

struct Abbrev {
  bool defined = false;
  bool has_children = false;
  uint8_t kind = 0;         // kOther, kSubprogram, kInlined
  int32_t fixed_size = -1;  // bytes of all values when every form has a fixed size
  uint32_t first_attr = 0;
  uint32_t attr_count = 0;
};
inline constexpr uint8_t kOther = 0, kSubprogram = 1, kInlined = 2;

// One unit's header and abbreviation table, decoded once: what the walker and the text reader share.
struct UnitLayout {
  explicit UnitLayout(const DebugInfoSections& s) : s_(s) {}

  // Reads the header at `unit_offset` and its abbreviations; `dies` then spans the unit's DIEs.
  const char* read_header(uint64_t unit_offset, Cursor& dies);
  const char* read_abbrevs(uint64_t offset);
  bool skip_value(Cursor& c, const AttrSpec& spec, int indirections = 0) const;
  bool form_size(uint64_t form, Skip& skip, uint8_t& size) const;

  const DebugInfoSections& s_;
  unsigned version_ = 0;
  unsigned address_size_ = 0;
  unsigned offset_size_ = 0;
  uint64_t dies_begin_ = 0;  // offsets in .debug_info of the first DIE and of the unit's end
  uint64_t unit_end_ = 0;
  std::vector<Abbrev> abbrevs_;  // by code
  std::vector<AttrSpec> specs_;
  // (spec index, value) of each DW_FORM_implicit_const spec, by spec index.
  std::vector<std::pair<uint32_t, int64_t>> implicit_;
  int64_t implicit_value(uint32_t spec_index) const {
    auto it = std::lower_bound(implicit_.begin(), implicit_.end(), spec_index,
                               [](const std::pair<uint32_t, int64_t>& e, uint32_t i) { return e.first < i; });
    return it != implicit_.end() && it->first == spec_index ? it->second : 0;
  }
};

}  // namespace hpd::dwarf_unit
