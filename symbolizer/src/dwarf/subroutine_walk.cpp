// walk_subroutines: a unit's SubroutineMap from one abbreviation-driven pass over its DIEs
// (ranges read directly from .debug_addr/.debug_ranges/.debug_rnglists), without libdw.
#include <dwarf.h>

#include <vector>

#include "dwarf_unit_reader.h"
#include "inline_rules.h"
#include "subroutine_map.h"

namespace hpd {
namespace {

using dwarf_unit::Abbrev;
using dwarf_unit::AttrSpec;
using dwarf_unit::Cursor;
using dwarf_unit::kOther;
using dwarf_unit::kSubprogram;
using dwarf_unit::UnitLayout;

class DieWalker : UnitLayout {
 public:
  explicit DieWalker(const DebugInfoSections& s) : UnitLayout(s) {}

  // Throws nothing; returns the reason when the unit must go to libdw.
  const char* run(uint64_t unit_offset, SubroutineMapBuilder& builder);

 private:
  const char* read_unit_die(Cursor& c, const Abbrev& a);
  // Enters the subroutine in `builder` and adds its ranges; the caller leaves it.
  const char* read_subroutine(Cursor& c, const Abbrev& a, uint64_t die_offset, SubroutineMapBuilder& builder);
  // DW_FORM_addr and the addrx forms; false for any other form or an unresolvable index.
  bool read_address(Cursor& c, uint64_t form, uint64_t& out, bool& is_address) const;
  bool address_at_index(uint64_t index, uint64_t& out) const;
  const char* emit_ranges(uint64_t form, uint64_t value, SubroutineMapBuilder& builder) const;
  const char* emit_debug_ranges(uint64_t offset, SubroutineMapBuilder& builder) const;
  const char* emit_rnglist(uint64_t offset, SubroutineMapBuilder& builder) const;

  // From the unit DIE.
  uint64_t base_address_ = 0;
  bool has_addr_base_ = false;
  uint64_t addr_base_ = 0;
  uint64_t rnglists_base_ = 0;
};

bool DieWalker::address_at_index(uint64_t index, uint64_t& out) const {
  if (!has_addr_base_) return false;  // libdw would then assume base 0; not worth reproducing
  const uint64_t size = s_.addr.size();
  if (addr_base_ > size || index > (size - addr_base_) / address_size_) return false;
  const uint64_t at = addr_base_ + index * address_size_;
  if (size - at < address_size_) return false;
  Cursor c{s_.addr.data() + at, s_.addr.data() + size};
  return c.fixed(address_size_, out);
}

bool DieWalker::read_address(Cursor& c, uint64_t form, uint64_t& out, bool& is_address) const {
  uint64_t index = 0;
  is_address = true;
  switch (form) {
    case DW_FORM_addr: return c.fixed(address_size_, out);
    case DW_FORM_addrx:
    case DW_FORM_GNU_addr_index:
      if (!c.uleb(index)) return false;
      break;
    case DW_FORM_addrx1:
      if (!c.fixed(1, index)) return false;
      break;
    case DW_FORM_addrx2:
      if (!c.fixed(2, index)) return false;
      break;
    case DW_FORM_addrx3:
      if (!c.fixed(3, index)) return false;
      break;
    case DW_FORM_addrx4:
      if (!c.fixed(4, index)) return false;
      break;
    default: is_address = false; return false;
  }
  return address_at_index(index, out);
}

const char* DieWalker::read_unit_die(Cursor& c, const Abbrev& a) {
  bool has_low = false, has_entry = false;
  uint64_t low = 0, entry = 0;
  // Index forms are resolved after the walk over the attributes, once DW_AT_addr_base is known.
  uint64_t low_form = 0, entry_form = 0;
  const uint8_t* low_at = nullptr;
  const uint8_t* entry_at = nullptr;
  bool seen_low = false, seen_entry = false, seen_addr_base = false, seen_rnglists_base = false;
  bool seen_gnu_addr_base = false;
  uint64_t gnu_addr_base = 0, addr_base = 0;
  for (uint32_t i = 0; i < a.attr_count; ++i) {
    const AttrSpec& spec = specs_[a.first_attr + i];
    const uint8_t* at = c.p;
    if (!skip_value(c, spec)) return "malformed unit DIE";
    uint64_t value = 0;
    Cursor v{at, c.p};
    const bool offset_form =
        spec.form == DW_FORM_sec_offset || spec.form == DW_FORM_data4 || spec.form == DW_FORM_data8;
    if (spec.name == DW_AT_low_pc && !seen_low) {
      seen_low = true;
      low_form = spec.form;
      low_at = at;
    } else if (spec.name == DW_AT_entry_pc && !seen_entry) {
      seen_entry = true;
      entry_form = spec.form;
      entry_at = at;
    } else if ((spec.name == DW_AT_addr_base || spec.name == DW_AT_GNU_addr_base) &&
               !(spec.name == DW_AT_addr_base ? seen_addr_base : seen_gnu_addr_base)) {
      if (!offset_form) return "unusual form of DW_AT_addr_base";
      v.fixed(static_cast<size_t>(v.left()), value);
      (spec.name == DW_AT_addr_base ? seen_addr_base : seen_gnu_addr_base) = true;
      (spec.name == DW_AT_addr_base ? addr_base : gnu_addr_base) = value;
    } else if (spec.name == DW_AT_rnglists_base && !seen_rnglists_base) {
      if (!offset_form) return "unusual form of DW_AT_rnglists_base";
      v.fixed(static_cast<size_t>(v.left()), value);
      seen_rnglists_base = true;
      rnglists_base_ = value;
    }
  }
  // libdw looks for DW_AT_GNU_addr_base first.
  has_addr_base_ = seen_gnu_addr_base || seen_addr_base;
  addr_base_ = seen_gnu_addr_base ? gnu_addr_base : addr_base;
  // libdw's CU base address: DW_AT_low_pc, else DW_AT_entry_pc, else 0.
  bool is_address = false;
  if (seen_low) {
    Cursor v{low_at, c.p};
    has_low = read_address(v, low_form, low, is_address);
    if (is_address && !has_low) return "unresolvable DW_AT_low_pc of the unit";
  }
  if (!has_low && seen_entry) {
    Cursor v{entry_at, c.p};
    has_entry = read_address(v, entry_form, entry, is_address);
    if (is_address && !has_entry) return "unresolvable DW_AT_entry_pc of the unit";
  }
  base_address_ = has_low ? low : has_entry ? entry : 0;
  return nullptr;
}

const char* DieWalker::read_subroutine(Cursor& c, const Abbrev& a, uint64_t die_offset,
                                       SubroutineMapBuilder& builder) {
  bool seen_low = false, seen_high = false, seen_ranges = false;
  bool high_is_offset = false;
  uint64_t low = 0, high = 0, ranges_form = 0, ranges_value = 0;
  for (uint32_t i = 0; i < a.attr_count; ++i) {
    const AttrSpec& spec = specs_[a.first_attr + i];
    const uint8_t* at = c.p;
    if (!skip_value(c, spec)) return "malformed subroutine DIE";
    if (spec.name == DW_AT_low_pc && !seen_low) {
      Cursor v{at, c.p};
      bool is_address = false;
      if (!read_address(v, spec.form, low, is_address)) return "unusual or unresolvable DW_AT_low_pc";
      seen_low = true;
    } else if (spec.name == DW_AT_high_pc && !seen_high) {
      Cursor v{at, c.p};
      bool is_address = false;
      if (read_address(v, spec.form, high, is_address)) {
        high_is_offset = false;
      } else if (is_address) {
        return "unresolvable DW_AT_high_pc";
      } else {
        switch (spec.form) {
          case DW_FORM_data1:
          case DW_FORM_data2:
          case DW_FORM_data4:
          case DW_FORM_data8: v.fixed(v.left(), high); break;
          case DW_FORM_udata: v.uleb(high); break;
          default: return "unusual form of DW_AT_high_pc";
        }
        high_is_offset = true;
      }
      seen_high = true;
    } else if (spec.name == DW_AT_ranges && !seen_ranges) {
      Cursor v{at, c.p};
      switch (spec.form) {
        case DW_FORM_sec_offset:
        case DW_FORM_data4:
        case DW_FORM_data8: v.fixed(v.left(), ranges_value); break;
        case DW_FORM_rnglistx: v.uleb(ranges_value); break;
        default: return "unusual form of DW_AT_ranges";
      }
      ranges_form = spec.form;
      seen_ranges = true;
    }
  }
  builder.enter(die_offset, a.kind == kSubprogram);
  // As dwarf_ranges: one contiguous range when low and high pc are both readable, else DW_AT_ranges.
  if (seen_low && seen_high) {
    builder.add_range(low, high_is_offset ? low + high : high);
    return nullptr;
  }
  if (!seen_ranges) return nullptr;
  return emit_ranges(ranges_form, ranges_value, builder);
}

const char* DieWalker::emit_ranges(uint64_t form, uint64_t value, SubroutineMapBuilder& builder) const {
  if (version_ < 5) {
    if (form == DW_FORM_rnglistx) return "DW_FORM_rnglistx before DWARF 5";
    if (form != DW_FORM_sec_offset && version_ > 3) return "DW_AT_ranges as a constant";
    return emit_debug_ranges(value, builder);
  }
  if (form == DW_FORM_sec_offset) return emit_rnglist(value, builder);
  if (form != DW_FORM_rnglistx) return "DW_AT_ranges as a constant";
  // libdw derives a missing (or zero) base from the section's first header; left to it.
  if (rnglists_base_ == 0) return "DW_FORM_rnglistx without DW_AT_rnglists_base";
  const uint64_t size = s_.rnglists.size();
  if (offset_size_ > size || rnglists_base_ > size - offset_size_ ||
      value > (size - offset_size_ - rnglists_base_) / offset_size_)
    return "range list index out of bounds";
  Cursor c{s_.rnglists.data() + rnglists_base_ + value * offset_size_, s_.rnglists.data() + size};
  uint64_t offset = 0;
  if (!c.fixed(offset_size_, offset)) return "range list index out of bounds";
  if (offset > UINT64_MAX - rnglists_base_) return "range list offset out of bounds";
  return emit_rnglist(offset + rnglists_base_, builder);
}

const char* DieWalker::emit_debug_ranges(uint64_t offset, SubroutineMapBuilder& builder) const {
  if (offset >= s_.ranges.size()) return "range list outside .debug_ranges";
  Cursor c{s_.ranges.data() + offset, s_.ranges.data() + s_.ranges.size()};
  const uint64_t escape = address_size_ == 8 ? UINT64_MAX : UINT32_MAX;
  uint64_t base = base_address_;
  for (size_t count = 0;;) {
    uint64_t begin = 0, end = 0;
    if (!c.fixed(address_size_, begin) || !c.fixed(address_size_, end)) return "truncated range list";
    if (begin == escape) {
      if (end == escape) return "invalid base address selection";
      base = end;
      continue;
    }
    if (begin == 0 && end == 0) return nullptr;
    if (count++ >= kMaxRangesPerDie) return "too many ranges";
    builder.add_range(begin + base, end + base);
  }
}

const char* DieWalker::emit_rnglist(uint64_t offset, SubroutineMapBuilder& builder) const {
  if (offset >= s_.rnglists.size()) return "range list outside .debug_rnglists";
  Cursor c{s_.rnglists.data() + offset, s_.rnglists.data() + s_.rnglists.size()};
  uint64_t base = base_address_;
  for (size_t count = 0;;) {
    uint64_t kind = 0, a = 0, b = 0, begin = 0, end = 0;
    if (!c.fixed(1, kind)) return "truncated range list";
    switch (kind) {
      case DW_RLE_end_of_list: return nullptr;
      case DW_RLE_base_addressx:
        if (!c.uleb(a) || !address_at_index(a, base)) return "unresolvable range list entry";
        continue;
      case DW_RLE_base_address:
        if (!c.fixed(address_size_, base)) return "truncated range list";
        continue;
      case DW_RLE_startx_endx:
        if (!c.uleb(a) || !c.uleb(b) || !address_at_index(a, begin) || !address_at_index(b, end))
          return "unresolvable range list entry";
        break;
      case DW_RLE_startx_length:
        if (!c.uleb(a) || !c.uleb(b) || !address_at_index(a, begin)) return "unresolvable range list entry";
        end = begin + b;
        break;
      case DW_RLE_offset_pair:
        if (!c.uleb(a) || !c.uleb(b)) return "truncated range list";
        begin = a + base;
        end = b + base;
        break;
      case DW_RLE_start_end:
        if (!c.fixed(address_size_, begin) || !c.fixed(address_size_, end)) return "truncated range list";
        break;
      case DW_RLE_start_length:
        if (!c.fixed(address_size_, begin) || !c.uleb(b)) return "truncated range list";
        end = begin + b;
        break;
      default: return "unknown range list entry";
    }
    if (count++ >= kMaxRangesPerDie) return "too many ranges";
    builder.add_range(begin, end);
  }
}

const char* DieWalker::run(uint64_t unit_offset, SubroutineMapBuilder& builder) {
  Cursor c{nullptr, nullptr};
  if (const char* why = read_header(unit_offset, c)) return why;
  const uint8_t* const info = s_.info.data();

  // The unit DIE.
  uint64_t code = 0;
  if (!c.uleb(code) || code == 0 || code >= abbrevs_.size() || !abbrevs_[code].defined)
    return "bad unit DIE abbreviation";
  const Abbrev& unit = abbrevs_[code];
  if (const char* why = read_unit_die(c, unit)) return why;
  if (!unit.has_children) return nullptr;

  // Depth of the DIEs being read (the unit DIE's children are at 1), and for each open
  // subroutine with children the depth of its children.
  int depth = 1;
  std::vector<int> subroutine_child_depth;
  while (depth > 0) {
    if (c.p >= c.end) return nullptr;  // libdw stops at the unit's end too
    const uint8_t* const die = c.p;
    // The DIEs are read once, front to back, from the mapped file: ask for the bytes a few DIEs
    // on now (a hint; past the end it does nothing), since every DIE's first load waits otherwise.
    __builtin_prefetch(die + 1024);
    if (!c.uleb(code)) return "truncated DIE";
    if (code == 0) {
      --depth;
      while (!subroutine_child_depth.empty() && subroutine_child_depth.back() > depth) {
        subroutine_child_depth.pop_back();
        builder.leave();
      }
      continue;
    }
    if (code >= abbrevs_.size() || !abbrevs_[code].defined) return "undefined abbreviation code";
    const Abbrev& a = abbrevs_[code];
    if (depth > kMaxDieDepth) return "DIEs nested too deep";
    if (a.kind != kOther) {
      if (const char* why = read_subroutine(c, a, static_cast<uint64_t>(die - info), builder)) return why;
      if (a.has_children) {
        subroutine_child_depth.push_back(depth + 1);
      } else {
        builder.leave();
      }
    } else if (a.fixed_size >= 0) {
      if (!c.skip(static_cast<uint64_t>(a.fixed_size))) return "truncated DIE";
    } else {
      for (uint32_t i = 0; i < a.attr_count; ++i) {
        if (!skip_value(c, specs_[a.first_attr + i])) return "truncated DIE or unknown form";
      }
    }
    if (a.has_children) ++depth;
  }
  return nullptr;
}

}  // namespace

bool walk_subroutines(const DebugInfoSections& sections, uint64_t unit_offset, SubroutineMap& out,
                      std::string* why) {
  SubroutineMapBuilder builder;
  DieWalker walker(sections);
  if (const char* reason = walker.run(unit_offset, builder)) {
    out = SubroutineMap{};
    if (why != nullptr) *why = reason;
    return false;
  }
  builder.finish(out);
  return true;
}

}  // namespace hpd
