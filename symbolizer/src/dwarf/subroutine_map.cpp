// SubroutineMap builders: a one-pass abbreviation-driven walk of .debug_info, and libdw's DIE walk
// as the reference and fallback; both feed the same LLVM insertion rules.
#include "subroutine_map.h"

#include <dwarf.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory_resource>
#include <new>
#include <unordered_map>
#include <utility>

#include "dwarf_bytes.h"

namespace hpd {
namespace {

// Garbage DWARF can nest DIEs arbitrarily deep; real code stays far below.
constexpr int kMaxDieDepth = 256;
constexpr size_t kMaxRangesPerDie = 1u << 16;
// Compilers number abbreviations 1, 2, 3...; a sparse or huge code goes to libdw.
constexpr uint64_t kMaxAbbrevCode = 1u << 20;

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

  void finish(SubroutineMap& out) {
    out.nodes = std::move(nodes_);
    out.spans.clear();
    out.long_span_ends.clear();
    out.spans.reserve(map_.size());
    for (const auto& [low, entry] : map_) {
      const uint64_t size = entry.first - low;  // map entries never end below their start
      if (size >= SubroutineSpan::kLongSpan) out.long_span_ends.emplace_back(low, entry.first);
      out.spans.push_back(
          {low, static_cast<uint32_t>(std::min<uint64_t>(size, SubroutineSpan::kLongSpan)), entry.second});
    }
    // The nodes keep their spare capacity: DwarfIndex frees them once it has copied them.
  }

 private:
  struct Open {
    uint64_t offset;
    bool is_subprogram;
    uint32_t node;
  };

  uint32_t materialize(size_t index) {
    Open& a = stack_[index];
    if (a.node != kNoSubroutine) return a.node;
    const uint32_t parent = (!a.is_subprogram && index > 0) ? materialize(index - 1) : kNoSubroutine;
    a.node = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back({a.offset, parent, a.is_subprogram});
    return a.node;
  }

  // The entry with the greatest key <= low, or end(). In preorder the answer is usually the
  // entry inserted last (a range nested in it) or the one after it (the rest of the enclosing
  // range, where a following sibling starts), so those two are tried before a tree search.
  Map::iterator predecessor(uint64_t low) {
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

  void insert(uint64_t low, uint64_t high, uint32_t node) {
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

  // Map nodes are never freed one by one: an arena spares malloc a call per range. The map itself
  // lives in the arena too and is never destroyed: its destructor would only walk every node to
  // hand it back to the arena, which frees them all at once (the entries are plain integers).
  std::pmr::monotonic_buffer_resource arena_;
  Map& map_;
  Map::iterator last_ = map_.end();  // the entry inserted or updated last
  std::vector<Open> stack_;
  std::vector<SubroutineNode> nodes_;
};

// ---- libdw's walk ----

void libdw_ranges(Dwarf_Die* die, SubroutineMapBuilder& builder) {
  Dwarf_Addr base = 0, start = 0, end = 0;
  ptrdiff_t offset = 0;
  size_t count = 0;
  while ((offset = dwarf_ranges(die, offset, &base, &start, &end)) > 0 && count++ < kMaxRangesPerDie) {
    builder.add_range(start, end);
  }
}

void libdw_walk_children(Dwarf_Die* parent, int depth, SubroutineMapBuilder& builder) {
  Dwarf_Die child;
  if (depth >= kMaxDieDepth || dwarf_haschildren(parent) <= 0 || dwarf_child(parent, &child) != 0) return;
  for (;;) {
    const int tag = dwarf_tag(&child);
    const bool subroutine = tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine;
    if (subroutine) {
      builder.enter(dwarf_dieoffset(&child), tag == DW_TAG_subprogram);
      libdw_ranges(&child, builder);
    }
    libdw_walk_children(&child, depth + 1, builder);
    if (subroutine) builder.leave();
    Dwarf_Die next;
    if (dwarf_siblingof(&child, &next) != 0) break;
    child = next;
  }
}

// ---- the one-pass walk ----

// Why a unit goes to libdw; the message is for tests and diagnostics.
struct Unsupported {
  const char* why;
};

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
constexpr uint8_t kOther = 0, kSubprogram = 1, kInlined = 2;

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

// ---- names and call sites ----

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

void walk_subroutines_libdw(Dwarf* dwarf, uint64_t cu_die_offset, SubroutineMap& out) {
  SubroutineMapBuilder builder;
  Dwarf_Die cudie;
  if (dwarf_offdie(dwarf, cu_die_offset, &cudie) != nullptr) libdw_walk_children(&cudie, 0, builder);
  builder.finish(out);
}

// ---- names and call sites ----

namespace {

constexpr size_t kMaxReferenceHops = 16;

// libdw's answer for a DIE that carries the attribute; 0 when absent or not a constant.
uint64_t libdw_unsigned(Dwarf_Die* die, unsigned name) {
  Dwarf_Attribute attr;
  Dwarf_Word value = 0;
  if (dwarf_attr(die, name, &attr) == nullptr || dwarf_formudata(&attr, &value) != 0) return 0;
  return value;
}

// LLVM's DWARFDie::findRecursively: the DIE itself, then what DW_AT_specification and
// DW_AT_abstract_origin refer to (depth first, specification before abstract_origin).
// The first DIE holding one of the attributes decides, even if its form is not a string.
const char* libdw_find_string(Dwarf_Die* start, std::initializer_list<unsigned> names) {
  std::vector<Dwarf_Die> worklist{*start};
  std::vector<Dwarf_Off> seen{dwarf_dieoffset(start)};
  for (size_t hops = 0; !worklist.empty() && hops < kMaxReferenceHops; ++hops) {
    Dwarf_Die die = worklist.back();
    worklist.pop_back();
    for (unsigned name : names) {
      Dwarf_Attribute attr;
      if (dwarf_attr(&die, name, &attr) != nullptr) return dwarf_formstring(&attr);
    }
    for (unsigned ref : {DW_AT_abstract_origin, DW_AT_specification}) {
      Dwarf_Attribute attr;
      Dwarf_Die target;
      if (dwarf_attr(&die, ref, &attr) == nullptr || dwarf_formref_die(&attr, &target) == nullptr) continue;
      Dwarf_Off off = dwarf_dieoffset(&target);
      if (std::find(seen.begin(), seen.end(), off) != seen.end()) continue;
      seen.push_back(off);
      worklist.push_back(target);
    }
  }
  return nullptr;
}

}  // namespace

void read_node_text_libdw(Dwarf* dwarf, uint64_t die_offset, bool call_site, NodeText& out) {
  out = NodeText{};
  Dwarf_Die die;
  if (dwarf_offdie(dwarf, die_offset, &die) == nullptr) return;
  out.name = libdw_find_string(&die, {DW_AT_linkage_name, DW_AT_MIPS_linkage_name});
  if (out.name == nullptr) out.name = libdw_find_string(&die, {DW_AT_name});
  if (!call_site) return;
  out.call_line = static_cast<uint32_t>(libdw_unsigned(&die, DW_AT_call_line));
  out.call_column = static_cast<uint32_t>(libdw_unsigned(&die, DW_AT_call_column));
  Dwarf_Attribute attr;
  Dwarf_Word file_index = 0;
  if (dwarf_attr(&die, DW_AT_call_file, &attr) != nullptr && dwarf_formudata(&attr, &file_index) == 0 &&
      file_index <= UINT32_MAX) {
    out.has_call_file = true;
    out.call_file = static_cast<uint32_t>(file_index);
  }
}

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
