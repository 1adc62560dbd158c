// libdw's side of SubroutineMap and NodeText: the DIE tree walk and attribute reads through libdw,
// the reference the one-pass readers are tested against and their fallback for what they refuse.
#include <dwarf.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "inline_rules.h"
#include "subroutine_map.h"

namespace hpd {
namespace {

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

void walk_subroutines_libdw(Dwarf* dwarf, uint64_t cu_die_offset, SubroutineMap& out) {
  SubroutineMapBuilder builder;
  Dwarf_Die cudie;
  if (dwarf_offdie(dwarf, cu_die_offset, &cudie) != nullptr) libdw_walk_children(&cudie, 0, builder);
  builder.finish(out);
}

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

}  // namespace hpd
