// SubroutineMap: one compile unit's address -> innermost subprogram/inlined-subroutine table, and
// the name and call site of its nodes. Built by subroutine_walk.cpp (one pass, no libdw) or
// libdw_fallback.cpp, both through inline_rules.h; names read by die_text.cpp or libdw_fallback.cpp.
#pragma once

#include <elfutils/libdw.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hpd {

inline constexpr uint32_t kNoSubroutine = UINT32_MAX;

// A DW_TAG_subprogram or DW_TAG_inlined_subroutine that carries an address range or encloses one
// that does (only those become nodes, so a unit's many declarations cost nothing).
struct SubroutineNode {
  uint64_t die_offset;  // in .debug_info, as libdw's dwarf_offdie takes it
  uint32_t parent;      // nearest enclosing node; kNoSubroutine for subprograms (the chain stops there)
  bool is_subprogram;

  bool operator==(const SubroutineNode&) const = default;
};

// [low, low + size), 16 bytes: a span of 4 GiB - 1 or more has size kLongSpan and its end in
// SubroutineMap::long_span_ends (real code never has one; garbage DWARF may).
struct SubroutineSpan {
  static constexpr uint32_t kLongSpan = UINT32_MAX;
  uint64_t low;
  uint32_t size;
  uint32_t node;

  bool operator==(const SubroutineSpan&) const = default;
};

// LLVM's DWARFUnit::AddrDieMap flattened (updateAddressDieMap's rules, including the one for a
// range nested in an earlier one: the later, inner DIE wins inside its range and the outer one
// keeps both sides). Spans sorted by low, normally disjoint; nodes in the order first needed.
struct SubroutineMap {
  std::vector<SubroutineNode> nodes;
  std::vector<SubroutineSpan> spans;
  std::vector<std::pair<uint64_t, uint64_t>> long_span_ends;  // (low, high) of long spans, by low

  // The end of a span (exclusive).
  uint64_t high_of(const SubroutineSpan& s) const {
    if (s.size != SubroutineSpan::kLongSpan) return s.low + s.size;
    auto it =
        std::lower_bound(long_span_ends.begin(), long_span_ends.end(), s.low,
                         [](const std::pair<uint64_t, uint64_t>& e, uint64_t low) { return e.first < low; });
    return it != long_span_ends.end() && it->first == s.low ? it->second : s.low;
  }
};

// The (decompressed) sections the walker reads; empty spans for absent ones.
struct DebugInfoSections {
  std::span<const uint8_t> info;      // .debug_info
  std::span<const uint8_t> abbrev;    // .debug_abbrev
  std::span<const uint8_t> addr;      // .debug_addr (DW_FORM_addrx*)
  std::span<const uint8_t> ranges;    // .debug_ranges (DWARF 2-4)
  std::span<const uint8_t> rnglists;  // .debug_rnglists (DWARF 5)
  // Read only by DieTextReader (names).
  std::span<const uint8_t> str;          // .debug_str
  std::span<const uint8_t> line_str;     // .debug_line_str
  std::span<const uint8_t> str_offsets;  // .debug_str_offsets (DW_FORM_strx*)
};

// Builds the map of the unit whose header starts at `unit_offset` in .debug_info with one linear
// pass over its DIEs (abbreviations decoded once, every attribute skipped by its form, subtrees
// passed once). Reads little-endian DWARF 2-5, 32- and 64-bit, compile/partial/skeleton units.
// Returns false, with `out` emptied and *why (if given) saying what stopped it, on anything it
// does not read exactly as libdw would (unknown form, odd encoding, truncated or inconsistent
// data): the caller then uses walk_subroutines_libdw. Never reads outside the given sections.
bool walk_subroutines(const DebugInfoSections& sections, uint64_t unit_offset, SubroutineMap& out,
                      std::string* why = nullptr);

// The same map through libdw's DIE tree (dwarf_child/dwarf_siblingof/dwarf_ranges) for the unit
// whose DIE is at `cu_die_offset`: the reference and the fallback.
void walk_subroutines_libdw(Dwarf* dwarf, uint64_t cu_die_offset, SubroutineMap& out);

// How many DIEs both name readers visit for one node, following DW_AT_specification and
// DW_AT_abstract_origin (LLVM sets no limit; garbage DWARF can make the references loop).
inline constexpr size_t kMaxReferenceHops = 16;

// What a lookup prints of a node besides its ranges.
struct NodeText {
  // The raw (mangled) name: DW_AT_linkage_name or DW_AT_MIPS_linkage_name, else DW_AT_name, of
  // the DIE or of what it refers to, as LLVM's DWARFDie::findRecursively finds it. Points into a
  // section (the same bytes libdw hands out), nullptr when there is none.
  const char* name = nullptr;
  // DW_AT_call_file/line/column of an inlined subroutine (0 when absent or unreadable).
  bool has_call_file = false;
  uint32_t call_file = 0;
  uint32_t call_line = 0;
  uint32_t call_column = 0;

  bool operator==(const NodeText&) const = default;
};

// The node's text through libdw (dwarf_offdie, dwarf_attr, dwarf_formstring, dwarf_formref_die):
// the reference and the fallback. The call site is read only when `call_site` is set.
void read_node_text_libdw(Dwarf* dwarf, uint64_t die_offset, bool call_site, NodeText& out);

// The same read directly from the sections with the walker's abbreviation and form code: the
// name forms string/strp/line_strp/strx*/GNU_str_index (with DW_AT_str_offsets_base), references
// ref1/2/4/8/ref_udata within the unit and ref_addr across units. Unit headers and abbreviation
// tables are decoded once per unit touched and kept. Returns false, with *why (if given) saying
// what stopped it, on anything it does not read exactly as libdw would (dwz's alternate-file
// forms, indirect forms, missing bases, references or strings out of bounds): the caller then
// uses read_node_text_libdw for that node. Never reads outside the given sections. Not
// thread-safe: reads fill its caches (DwarfIndex calls it under its lock).
class DieTextReader {
 public:
  explicit DieTextReader(const DebugInfoSections& sections);
  ~DieTextReader();
  DieTextReader(const DieTextReader&) = delete;
  DieTextReader& operator=(const DieTextReader&) = delete;

  bool read(uint64_t die_offset, bool call_site, NodeText& out, std::string* why = nullptr);

  // Heap held by the decoded unit headers and abbreviation tables.
  size_t memory_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpd
