// DieTextReader: a node's name and call site read straight from .debug_info and the string
// sections, following DW_AT_specification/abstract_origin as LLVM does, with the walker's unit code.
#include <dwarf.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dwarf_unit_reader.h"
#include "subroutine_map.h"

namespace hpd {
namespace {

using dwarf_unit::Abbrev;
using dwarf_unit::AttrSpec;
using dwarf_unit::Cursor;
using dwarf_unit::Skip;
using dwarf_unit::UnitLayout;

// Where the first occurrence of an attribute the text reader needs sits in a DIE (libdw's
// dwarf_attr also takes the first one).
struct AttrValue {
  const uint8_t* at = nullptr;  // nullptr: absent
  const uint8_t* end = nullptr;
  uint32_t form = 0;
  int64_t implicit = 0;
};

struct DieText {
  AttrValue linkage_name, mips_linkage_name, name, abstract_origin, specification;
  AttrValue call_file, call_line, call_column;
};

// A unit as the text reader needs it: the shared layout plus DW_AT_str_offsets_base.
struct TextUnit : UnitLayout {
  explicit TextUnit(const DebugInfoSections& s) : UnitLayout(s) {}
  uint64_t unit_offset = 0;
  bool has_str_offsets_base = false;
  uint64_t str_offsets_base = 0;
  // By abbreviation code: how many of its attributes to read, up to the last one the reader
  // wants (a concrete subprogram usually starts with DW_AT_abstract_origin and stops there).
  std::vector<uint32_t> wanted_count;
  const char* error = nullptr;  // set when the unit cannot be read: every DIE in it goes to libdw
};

bool is_text_attribute(uint64_t name) {
  switch (name) {
    case DW_AT_linkage_name:
    case DW_AT_MIPS_linkage_name:
    case DW_AT_name:
    case DW_AT_abstract_origin:
    case DW_AT_specification:
    case DW_AT_call_file:
    case DW_AT_call_line:
    case DW_AT_call_column: return true;
    default: return false;
  }
}

// A string section and whether its last byte is a NUL: then every string in it ends inside it,
// and a name needs no search for its end before it is handed out.
struct StringSection {
  std::span<const uint8_t> bytes;
  bool terminated = false;

  explicit StringSection(std::span<const uint8_t> section)
      : bytes(section), terminated(!section.empty() && section.back() == 0) {}

  // The NUL-terminated string at `offset`, or nullptr (libdw checks the offset only; a string
  // running off the section's end is left to it).
  const char* at(uint64_t offset) const {
    if (offset >= bytes.size()) return nullptr;
    const uint8_t* p = bytes.data() + offset;
    if (!terminated && std::memchr(p, 0, bytes.size() - offset) == nullptr) return nullptr;
    return reinterpret_cast<const char*>(p);
  }
};

}  // namespace

struct DieTextReader::Impl {
  explicit Impl(const DebugInfoSections& s) : sections(s), str(s.str), line_str(s.line_str) {}

  const char* unit_for(uint64_t die_offset, const TextUnit*& out);
  // Fills `out`, which must be freshly made (every attribute absent).
  const char* read_die(uint64_t die_offset, DieText& out, const TextUnit*& unit);
  const char* string_of(const TextUnit& unit, const AttrValue& v, const char*& out) const;
  const char* reference_of(const TextUnit& unit, const AttrValue& v, uint64_t& target) const;
  const char* constant_of(const TextUnit& unit, const AttrValue& v, uint64_t& out) const;
  void scan_units();

  DebugInfoSections sections;
  StringSection str, line_str;
  // [start, end) of every unit header chain in .debug_info, found once on first use.
  bool scanned = false;
  std::vector<std::pair<uint64_t, uint64_t>> units;
  std::unordered_map<uint64_t, std::unique_ptr<TextUnit>> decoded;  // by unit offset
  const TextUnit* last = nullptr;
  // The DIEs one read visits, kept to spare their allocation.
  struct Visit {
    DieText text;
    const TextUnit* unit = nullptr;
  };
  std::vector<Visit> visits;  // nodes come unit by unit: the last one usually answers
  size_t bytes = 0;
};

void DieTextReader::Impl::scan_units() {
  scanned = true;
  const uint64_t size = sections.info.size();
  for (uint64_t at = 0; at < size;) {
    Cursor c{sections.info.data() + at, sections.info.data() + size};
    uint64_t length = 0;
    // Whatever follows a unit this cannot read is not read at all: its DIEs go to libdw.
    if (!c.fixed(4, length)) break;
    if (length == 0xffffffff) {
      if (!c.fixed(8, length)) break;
    } else if (length >= 0xfffffff0) {
      break;
    }
    if (length > c.left()) break;
    const uint64_t end = static_cast<uint64_t>(c.p - sections.info.data()) + length;
    units.emplace_back(at, end);
    at = end;
  }
  bytes += units.capacity() * sizeof(units[0]);
}

const char* DieTextReader::Impl::unit_for(uint64_t die_offset, const TextUnit*& out) {
  if (last != nullptr && die_offset >= last->unit_offset && die_offset < last->unit_end_) {
    out = last;
    return last->error;
  }
  if (!scanned) scan_units();
  auto it =
      std::upper_bound(units.begin(), units.end(), die_offset,
                       [](uint64_t off, const std::pair<uint64_t, uint64_t>& u) { return off < u.first; });
  if (it == units.begin() || die_offset >= std::prev(it)->second) return "DIE offset outside every unit";
  const uint64_t unit_offset = std::prev(it)->first;
  std::unique_ptr<TextUnit>& slot = decoded[unit_offset];
  if (!slot) {
    slot = std::make_unique<TextUnit>(sections);
    TextUnit& u = *slot;
    u.unit_offset = unit_offset;
    Cursor c{nullptr, nullptr};
    u.error = u.read_header(unit_offset, c);
    uint64_t code = 0;
    if (u.error == nullptr &&
        (!c.uleb(code) || code == 0 || code >= u.abbrevs_.size() || !u.abbrevs_[code].defined))
      u.error = "bad unit DIE abbreviation";
    if (u.error == nullptr) {
      const Abbrev& a = u.abbrevs_[code];
      bool seen = false;
      for (uint32_t i = 0; i < a.attr_count && u.error == nullptr; ++i) {
        const AttrSpec& spec = u.specs_[a.first_attr + i];
        const uint8_t* at = c.p;
        if (!u.skip_value(c, spec)) {
          u.error = "malformed unit DIE";
        } else if (spec.name == DW_AT_str_offsets_base && !seen) {
          seen = true;
          // Other forms mean what libdw's dwarf_formudata makes of them; left to it.
          Cursor v{at, c.p};
          u.has_str_offsets_base =
              spec.form == DW_FORM_sec_offset && v.fixed(u.offset_size_, u.str_offsets_base);
        }
      }
    }
    if (u.error == nullptr && u.unit_end_ <= u.dies_begin_) u.error = "empty unit";
    u.wanted_count.assign(u.abbrevs_.size(), 0);
    for (size_t code = 0; code < u.abbrevs_.size(); ++code) {
      const Abbrev& a = u.abbrevs_[code];
      for (uint32_t i = 0; i < a.attr_count; ++i) {
        const AttrSpec& spec = u.specs_[a.first_attr + i];
        if (is_text_attribute(spec.name)) u.wanted_count[code] = i + 1;
      }
    }
    bytes += sizeof(TextUnit) + 64 + u.abbrevs_.capacity() * sizeof(Abbrev) + u.wanted_count.capacity() * 4 +
             u.specs_.capacity() * sizeof(AttrSpec) + u.implicit_.capacity() * sizeof(u.implicit_[0]);
  }
  last = slot.get();
  out = last;
  return last->error;
}

const char* DieTextReader::Impl::read_die(uint64_t die_offset, DieText& out, const TextUnit*& unit) {
  if (const char* why = unit_for(die_offset, unit)) return why;
  const TextUnit& u = *unit;
  // A reference into the unit header would make libdw decode header bytes as a DIE.
  if (die_offset < u.dies_begin_) return "DIE offset inside a unit header";
  Cursor c{sections.info.data() + die_offset, sections.info.data() + u.unit_end_};
  uint64_t code = 0;
  if (!c.uleb(code) || code == 0 || code >= u.abbrevs_.size() || !u.abbrevs_[code].defined)
    return "null entry or undefined abbreviation code";
  const Abbrev& a = u.abbrevs_[code];
  // Attributes after the last wanted one are not looked at: libdw's dwarf_attr stops at the
  // attribute it looks for too.
  const uint32_t count = u.wanted_count[code];
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t index = a.first_attr + i;
    const AttrSpec& spec = u.specs_[index];
    // libdw resolves an indirect form per DIE; not worth reproducing for names.
    if (spec.skip == Skip::indirect) return "indirect form in a named DIE";
    const uint8_t* at = c.p;
    if (spec.skip == Skip::fixed) {
      if (!c.skip(spec.size)) return "truncated DIE";
    } else if (!u.skip_value(c, spec)) {
      return "truncated DIE or unknown form";
    }
    AttrValue* slot = nullptr;
    switch (spec.name) {
      case DW_AT_linkage_name: slot = &out.linkage_name; break;
      case DW_AT_MIPS_linkage_name: slot = &out.mips_linkage_name; break;
      case DW_AT_name: slot = &out.name; break;
      case DW_AT_abstract_origin: slot = &out.abstract_origin; break;
      case DW_AT_specification: slot = &out.specification; break;
      case DW_AT_call_file: slot = &out.call_file; break;
      case DW_AT_call_line: slot = &out.call_line; break;
      case DW_AT_call_column: slot = &out.call_column; break;
      default: break;
    }
    if (slot != nullptr && slot->at == nullptr) {
      *slot = {at, c.p, spec.form, spec.form == DW_FORM_implicit_const ? u.implicit_value(index) : 0};
    }
  }
  return nullptr;
}

const char* DieTextReader::Impl::string_of(const TextUnit& u, const AttrValue& v, const char*& out) const {
  Cursor c{v.at, v.end};
  uint64_t value = 0;
  switch (v.form) {
    case DW_FORM_string:
      out = reinterpret_cast<const char*>(v.at);
      return nullptr;  // skip_cstr found its NUL
    case DW_FORM_strp:
      c.fixed(u.offset_size_, value);
      out = str.at(value);
      return out != nullptr ? nullptr : "string outside .debug_str";
    case DW_FORM_line_strp:
      c.fixed(u.offset_size_, value);
      out = line_str.at(value);
      return out != nullptr ? nullptr : "string outside .debug_line_str";
    case DW_FORM_strx:
    case DW_FORM_GNU_str_index: c.uleb(value); break;
    case DW_FORM_strx1: c.fixed(1, value); break;
    case DW_FORM_strx2: c.fixed(2, value); break;
    case DW_FORM_strx3: c.fixed(3, value); break;
    case DW_FORM_strx4: c.fixed(4, value); break;
    default: return "name in a form other than a plain string";  // dwz's strp_alt among them
  }
  // libdw refuses an index form whose bytes end near the unit's end (a quirk of its bounds
  // checks); real units end with null entries, so such a DIE is left to it.
  if (u.unit_end_ - static_cast<uint64_t>(v.end - sections.info.data()) < 4)
    return "string index at the unit's end";
  if (!u.has_str_offsets_base) return "string index without DW_AT_str_offsets_base";
  const uint64_t size = sections.str_offsets.size();
  if (u.str_offsets_base > size || value > (size - u.str_offsets_base) / u.offset_size_ ||
      size - u.str_offsets_base - value * u.offset_size_ < u.offset_size_)
    return "string index outside .debug_str_offsets";
  Cursor entry{sections.str_offsets.data() + u.str_offsets_base + value * u.offset_size_,
               sections.str_offsets.data() + size};
  uint64_t offset = 0;
  entry.fixed(u.offset_size_, offset);
  out = str.at(offset);
  return out != nullptr ? nullptr : "string outside .debug_str";
}

const char* DieTextReader::Impl::reference_of(const TextUnit& u, const AttrValue& v, uint64_t& target) const {
  Cursor c{v.at, v.end};
  uint64_t value = 0;
  switch (v.form) {
    case DW_FORM_ref1:
    case DW_FORM_ref2:
    case DW_FORM_ref4:
    case DW_FORM_ref8:
    case DW_FORM_ref_udata:
      if (v.form == DW_FORM_ref_udata) {
        c.uleb(value);
      } else {
        c.fixed(c.left(), value);
      }
      if (value >= u.unit_end_ - u.unit_offset) return "reference outside its unit";
      target = u.unit_offset + value;
      return nullptr;
    case DW_FORM_ref_addr:
      c.fixed(c.left(), value);  // address or offset size, as skip_value read it
      target = value;
      return nullptr;                             // checked against the units when read
    default: return "reference in another form";  // dwz's ref_alt, ref_sig8, ref_sup among them
  }
}

const char* DieTextReader::Impl::constant_of(const TextUnit& u, const AttrValue& v, uint64_t& out) const {
  Cursor c{v.at, v.end};
  int64_t sdata = 0;
  switch (v.form) {
    case DW_FORM_data1:
    case DW_FORM_data2: c.fixed(c.left(), out); return nullptr;
    case DW_FORM_data4:
    case DW_FORM_data8:
      // Before DWARF 4 libdw may take these as section offsets; left to it.
      if (u.version_ < 4) return "data4/data8 constant before DWARF 4";
      c.fixed(c.left(), out);
      return nullptr;
    case DW_FORM_udata: c.uleb(out); return nullptr;
    case DW_FORM_sdata:
      c.sleb(sdata);
      out = static_cast<uint64_t>(sdata);
      return nullptr;
    case DW_FORM_implicit_const: out = static_cast<uint64_t>(v.implicit); return nullptr;
    default: return "call site in an unusual form";
  }
}

DieTextReader::DieTextReader(const DebugInfoSections& sections) : impl_(std::make_unique<Impl>(sections)) {}
DieTextReader::~DieTextReader() = default;

size_t DieTextReader::memory_bytes() const {
  return sizeof(Impl) + impl_->bytes + impl_->decoded.bucket_count() * sizeof(void*);
}

bool DieTextReader::read(uint64_t die_offset, bool call_site, NodeText& out, std::string* why) {
  out = NodeText{};
  Impl& d = *impl_;
  auto fail = [&](const char* reason) {
    out = NodeText{};
    if (why != nullptr) *why = reason;
    return false;
  };
  // libdw_find_string's search, once for both attribute groups: the DIEs it visits do not depend
  // on the attributes looked for (only where it stops), so the first DIE of this sequence with a
  // linkage name decides, else the first with DW_AT_name; read each DIE once.
  std::vector<Impl::Visit>& visits = d.visits;
  visits.clear();
  uint64_t worklist[2 * kMaxReferenceHops + 1];
  size_t pending = 0;
  uint64_t seen[2 * kMaxReferenceHops + 1];
  size_t seen_count = 0;
  worklist[pending++] = die_offset;
  seen[seen_count++] = die_offset;
  while (pending > 0 && visits.size() < kMaxReferenceHops) {
    const uint64_t offset = worklist[--pending];
    Impl::Visit& v = visits.emplace_back();
    if (const char* reason = d.read_die(offset, v.text, v.unit)) return fail(reason);
    for (const AttrValue* ref : {&v.text.abstract_origin, &v.text.specification}) {
      if (ref->at == nullptr) continue;
      uint64_t target = 0;
      if (const char* reason = d.reference_of(*v.unit, *ref, target)) return fail(reason);
      if (std::find(seen, seen + seen_count, target) != seen + seen_count) continue;
      seen[seen_count++] = target;
      worklist[pending++] = target;
    }
  }
  const char* reason = nullptr;
  auto pick = [&](std::initializer_list<AttrValue DieText::*> names) -> bool {
    for (size_t i = 0; i < visits.size(); ++i) {
      for (AttrValue DieText::*name : names) {
        const AttrValue& value = visits[i].text.*name;
        if (value.at == nullptr) continue;
        reason = d.string_of(*visits[i].unit, value, out.name);
        return true;
      }
    }
    return false;
  };
  if (!pick({&DieText::linkage_name, &DieText::mips_linkage_name})) pick({&DieText::name});
  if (reason != nullptr) return fail(reason);
  if (!call_site) return true;
  const DieText& self = visits[0].text;
  const TextUnit& unit = *visits[0].unit;
  uint64_t value = 0;
  if (self.call_line.at != nullptr) {
    if ((reason = d.constant_of(unit, self.call_line, value)) != nullptr) return fail(reason);
    out.call_line = static_cast<uint32_t>(value);
  }
  if (self.call_column.at != nullptr) {
    if ((reason = d.constant_of(unit, self.call_column, value)) != nullptr) return fail(reason);
    out.call_column = static_cast<uint32_t>(value);
  }
  if (self.call_file.at != nullptr) {
    if ((reason = d.constant_of(unit, self.call_file, value)) != nullptr) return fail(reason);
    out.has_call_file = value <= UINT32_MAX;
    out.call_file = out.has_call_file ? static_cast<uint32_t>(value) : 0;
  }
  return true;
}

}  // namespace hpd
