// UnitLayout: reads a unit header and its abbreviation table, and passes over attribute values by
// their forms, exactly where libdw would (anything else is reported for the caller to leave to libdw).
#include "dwarf_unit_reader.h"

#include <dwarf.h>

namespace hpd::dwarf_unit {
namespace {

// Compilers number abbreviations 1, 2, 3...; a sparse or huge code goes to libdw.
constexpr uint64_t kMaxAbbrevCode = 1u << 20;

}  // namespace

bool UnitLayout::form_size(uint64_t form, Skip& skip, uint8_t& size) const {
  skip = Skip::fixed;
  switch (form) {
    case DW_FORM_flag_present:
    case DW_FORM_implicit_const: size = 0; return true;
    case DW_FORM_data1:
    case DW_FORM_ref1:
    case DW_FORM_flag:
    case DW_FORM_strx1:
    case DW_FORM_addrx1: size = 1; return true;
    case DW_FORM_data2:
    case DW_FORM_ref2:
    case DW_FORM_strx2:
    case DW_FORM_addrx2: size = 2; return true;
    case DW_FORM_strx3:
    case DW_FORM_addrx3: size = 3; return true;
    case DW_FORM_data4:
    case DW_FORM_ref4:
    case DW_FORM_ref_sup4:
    case DW_FORM_strx4:
    case DW_FORM_addrx4: size = 4; return true;
    case DW_FORM_data8:
    case DW_FORM_ref8:
    case DW_FORM_ref_sig8:
    case DW_FORM_ref_sup8: size = 8; return true;
    case DW_FORM_data16: size = 16; return true;
    case DW_FORM_addr: size = static_cast<uint8_t>(address_size_); return true;
    case DW_FORM_strp:
    case DW_FORM_sec_offset:
    case DW_FORM_line_strp:
    case DW_FORM_strp_sup:
    case DW_FORM_GNU_ref_alt:
    case DW_FORM_GNU_strp_alt: size = static_cast<uint8_t>(offset_size_); return true;
    case DW_FORM_ref_addr:
      size = static_cast<uint8_t>(version_ == 2 ? address_size_ : offset_size_);
      return true;
    default: break;
  }
  size = 0;
  switch (form) {
    case DW_FORM_sdata:
    case DW_FORM_udata:
    case DW_FORM_ref_udata:
    case DW_FORM_strx:
    case DW_FORM_addrx:
    case DW_FORM_loclistx:
    case DW_FORM_rnglistx:
    case DW_FORM_GNU_addr_index:
    case DW_FORM_GNU_str_index: skip = Skip::leb; return true;
    case DW_FORM_string: skip = Skip::cstr; return true;
    case DW_FORM_block1: skip = Skip::block1; return true;
    case DW_FORM_block2: skip = Skip::block2; return true;
    case DW_FORM_block4: skip = Skip::block4; return true;
    case DW_FORM_block:
    case DW_FORM_exprloc: skip = Skip::block_leb; return true;
    case DW_FORM_indirect: skip = Skip::indirect; return true;
    default: skip = Skip::unknown; return false;
  }
}

bool UnitLayout::skip_value(Cursor& c, const AttrSpec& spec, int indirections) const {
  uint64_t n = 0;
  switch (spec.skip) {
    case Skip::fixed: return c.skip(spec.size);
    case Skip::leb: return c.skip_leb();
    case Skip::cstr: return c.skip_cstr();
    case Skip::block1: return c.fixed(1, n) && c.skip(n);
    case Skip::block2: return c.fixed(2, n) && c.skip(n);
    case Skip::block4: return c.fixed(4, n) && c.skip(n);
    case Skip::block_leb: return c.uleb(n) && c.skip(n);
    case Skip::indirect: {
      // The form is in the data; an indirect form naming implicit_const has no value to read.
      uint64_t form = 0;
      AttrSpec inner{spec.name, 0, Skip::unknown, 0};
      if (indirections > 0 || !c.uleb(form) || form == DW_FORM_implicit_const || form > UINT32_MAX)
        return false;
      inner.form = clamp16(form);
      return form_size(form, inner.skip, inner.size) && skip_value(c, inner, indirections + 1);
    }
    case Skip::unknown: return false;
  }
  return false;
}

const char* UnitLayout::read_header(uint64_t unit_offset, Cursor& dies) {
  if (unit_offset >= s_.info.size()) return "unit offset outside .debug_info";
  Cursor c{s_.info.data() + unit_offset, s_.info.data() + s_.info.size()};
  uint64_t length = 0, value = 0;
  if (!c.fixed(4, length)) return "truncated unit header";
  offset_size_ = 4;
  if (length == 0xffffffff) {
    if (!c.fixed(8, length)) return "truncated unit header";
    offset_size_ = 8;
  } else if (length >= 0xfffffff0) {
    return "reserved unit length";
  }
  if (length > c.left()) return "unit extends past .debug_info";
  c.end = c.p + length;
  uint64_t abbrev_offset = 0;
  if (!c.fixed(2, value)) return "truncated unit header";
  version_ = static_cast<unsigned>(value);
  if (version_ < 2 || version_ > 5) return "unsupported DWARF version";
  if (version_ >= 5) {
    uint64_t unit_type = 0;
    if (!c.fixed(1, unit_type) || !c.fixed(1, value) || !c.fixed(offset_size_, abbrev_offset))
      return "truncated unit header";
    address_size_ = static_cast<unsigned>(value);
    if (unit_type == DW_UT_skeleton || unit_type == DW_UT_split_compile) {
      if (!c.skip(8)) return "truncated unit header";  // dwo_id
    } else if (unit_type != DW_UT_compile && unit_type != DW_UT_partial) {
      return "not a compile, partial or skeleton unit";
    }
  } else {
    if (!c.fixed(offset_size_, abbrev_offset) || !c.fixed(1, value)) return "truncated unit header";
    address_size_ = static_cast<unsigned>(value);
  }
  if (address_size_ != 4 && address_size_ != 8) return "unsupported address size";
  dies = c;
  dies_begin_ = static_cast<uint64_t>(c.p - s_.info.data());
  unit_end_ = static_cast<uint64_t>(c.end - s_.info.data());
  return read_abbrevs(abbrev_offset);
}

const char* UnitLayout::read_abbrevs(uint64_t offset) {
  if (offset >= s_.abbrev.size()) return "abbreviation offset outside .debug_abbrev";
  Cursor c{s_.abbrev.data() + offset, s_.abbrev.data() + s_.abbrev.size()};
  abbrevs_.clear();
  specs_.clear();
  implicit_.clear();
  for (;;) {
    uint64_t code = 0, tag = 0, children = 0;
    if (!c.uleb(code)) return "truncated abbreviation table";
    if (code == 0) return nullptr;
    if (code > kMaxAbbrevCode) return "sparse abbreviation codes";
    if (!c.uleb(tag) || !c.fixed(1, children)) return "truncated abbreviation table";
    if (code >= abbrevs_.size()) abbrevs_.resize(code + 1);
    Abbrev& a = abbrevs_[code];
    // libdw would keep one of two definitions of a code; which one is not worth reproducing.
    if (a.defined) return "abbreviation code defined twice";
    a.defined = true;
    a.has_children = children != 0;
    a.kind = tag == DW_TAG_subprogram ? kSubprogram : tag == DW_TAG_inlined_subroutine ? kInlined : kOther;
    a.first_attr = static_cast<uint32_t>(specs_.size());
    int64_t fixed_size = 0;
    for (;;) {
      uint64_t name = 0, form = 0;
      if (!c.uleb(name) || !c.uleb(form)) return "truncated abbreviation table";
      if (name == 0 && form == 0) break;
      int64_t implicit = 0;
      if (form == DW_FORM_implicit_const && !c.sleb(implicit)) return "truncated abbreviation table";
      AttrSpec spec{clamp16(name), clamp16(form), Skip::unknown, 0};
      // An unknown form fails only a DIE that uses this abbreviation.
      if (form_size(form, spec.skip, spec.size) && spec.skip == Skip::fixed && fixed_size >= 0) {
        fixed_size += spec.size;
      } else {
        fixed_size = -1;
      }
      if (form == DW_FORM_implicit_const)
        implicit_.emplace_back(static_cast<uint32_t>(specs_.size()), implicit);
      specs_.push_back(spec);
    }
    a.attr_count = static_cast<uint32_t>(specs_.size() - a.first_attr);
    a.fixed_size = fixed_size >= 0 && fixed_size < INT32_MAX ? static_cast<int32_t>(fixed_size) : -1;
  }
}

}  // namespace hpd::dwarf_unit
