// SubroutineMap: the one-pass DIE walker builds the same nodes and spans as libdw's walk on every
// fixture unit, and hand-made truncated, garbage or unusual DWARF is refused (fallback) or bounded.
#include "subroutine_map.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "libdw_file.h"

namespace hpd {
namespace {

// A span as (low, high, node), whatever its stored form.
using Span = std::tuple<uint64_t, uint64_t, uint32_t>;
std::vector<Span> spans_of(const SubroutineMap& map) {
  std::vector<Span> out;
  for (const SubroutineSpan& s : map.spans) out.emplace_back(s.low, map.high_of(s), s.node);
  return out;
}

std::string fixture(const std::string& name) {
  return std::string(HPD_DWARF_FIXTURE_DIR) + "/" + name;
}

struct Comparison {
  size_t units = 0, skeletons = 0, nodes = 0, spans = 0, fell_back = 0;
  std::string first_fallback;
  // Names and call sites of every node: read by DieTextReader, left to libdw, named at all.
  size_t texts = 0, texts_fell_back = 0, named = 0;
  std::string first_text_fallback;
};

std::string show(const NodeText& t) {
  std::ostringstream out;
  out << (t.name != nullptr ? t.name : "(null)") << " file "
      << (t.has_call_file ? std::to_string(t.call_file) : "-") << " line " << t.call_line << " column "
      << t.call_column;
  return out.str();
}

// DieTextReader against libdw on every node of `map`: the same string pointer (so the same bytes,
// and `names` demangles it once) and the same call site, or a refusal with a reason.
void compare_texts(const std::string& path, Dwarf* dwarf, DieTextReader& reader, const SubroutineMap& map,
                   Comparison& result) {
  size_t failures = 0;
  for (const SubroutineNode& node : map.nodes) {
    NodeText want, got;
    read_node_text_libdw(dwarf, node.die_offset, !node.is_subprogram, want);
    std::string why;
    ++result.texts;
    result.named += want.name != nullptr ? 1 : 0;
    if (!reader.read(node.die_offset, !node.is_subprogram, got, &why)) {
      if (result.texts_fell_back++ == 0) result.first_text_fallback = why;
      EXPECT_FALSE(why.empty());
      continue;
    }
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << path << " DIE 0x" << std::hex << node.die_offset << std::dec << ": reader "
                    << show(got) << ", libdw " << show(want);
    }
  }
}

// Both walks over every compile, partial and skeleton unit of `path`; gtest failures on the first
// differences. Units the walker refuses are counted (and must then be left to libdw).
Comparison compare_walks(const std::string& path) {
  Comparison result;
  LibdwFile file(path);
  EXPECT_NE(file.dwarf(), nullptr) << path << ": " << dwarf_errmsg(-1);
  if (file.dwarf() == nullptr) return result;
  Dwarf_CU* cu = nullptr;
  Dwarf_CU* next = nullptr;
  Dwarf_Half version = 0;
  uint8_t unit_type = 0;
  Dwarf_Die cudie, subdie;
  // One reader for the whole file, as DwarfIndex keeps it: units decoded by earlier nodes (and
  // references across units) are served from its cache.
  DieTextReader reader(file.info_sections());
  while (dwarf_get_units(file.dwarf(), cu, &next, &version, &unit_type, &cudie, &subdie) == 0) {
    cu = next;
    if (unit_type != DW_UT_compile && unit_type != DW_UT_partial && unit_type != DW_UT_skeleton) continue;
    const Dwarf_Off die_offset = dwarf_dieoffset(&cudie);
    SubroutineMap reference, walked;
    walk_subroutines_libdw(file.dwarf(), die_offset, reference);
    compare_texts(path, file.dwarf(), reader, reference, result);
    std::string why;
    ++result.units;
    result.skeletons += unit_type == DW_UT_skeleton ? 1 : 0;
    if (!walk_subroutines(file.info_sections(), die_offset - dwarf_cuoffset(&cudie), walked, &why)) {
      if (result.fell_back++ == 0) result.first_fallback = why;
      EXPECT_TRUE(walked.nodes.empty() && walked.spans.empty());
      continue;
    }
    result.nodes += walked.nodes.size();
    result.spans += walked.spans.size();
    EXPECT_EQ(walked.nodes.size(), reference.nodes.size()) << path << " unit 0x" << std::hex << die_offset;
    EXPECT_EQ(walked.spans.size(), reference.spans.size()) << path << " unit 0x" << std::hex << die_offset;
    if (walked.nodes != reference.nodes) {
      for (size_t i = 0; i < std::min(walked.nodes.size(), reference.nodes.size()); ++i) {
        if (walked.nodes[i] == reference.nodes[i]) continue;
        ADD_FAILURE() << path << " node " << i << ": walker DIE 0x" << std::hex << walked.nodes[i].die_offset
                      << " parent " << std::dec << walked.nodes[i].parent << ", libdw DIE 0x" << std::hex
                      << reference.nodes[i].die_offset << " parent " << std::dec << reference.nodes[i].parent;
        break;
      }
    }
    if (walked.spans != reference.spans || walked.long_span_ends != reference.long_span_ends) {
      for (size_t i = 0; i < std::min(walked.spans.size(), reference.spans.size()); ++i) {
        const SubroutineSpan& a = walked.spans[i];
        const SubroutineSpan& b = reference.spans[i];
        if (a == b) continue;
        ADD_FAILURE() << path << " span " << i << std::hex << ": walker [0x" << a.low << ", 0x"
                      << walked.high_of(a) << ") node " << std::dec << a.node << std::hex << ", libdw [0x"
                      << b.low << ", 0x" << reference.high_of(b) << ") node " << std::dec << b.node;
        break;
      }
    }
  }
  return result;
}

class WalkerEqualsLibdw : public ::testing::TestWithParam<const char*> {};

TEST_P(WalkerEqualsLibdw, SameNodesAndSpansOnEveryUnit) {
  Comparison c = compare_walks(fixture(GetParam()));
  EXPECT_GT(c.units, 0u);
  // Every fixture is in a layout the walker reads: none may quietly take the slow path.
  EXPECT_EQ(c.fell_back, 0u) << "first reason: " << c.first_fallback;
  EXPECT_EQ(c.texts_fell_back, 0u) << "first reason: " << c.first_text_fallback;
  EXPECT_EQ(c.texts, c.nodes);
  if (std::string(GetParam()).find("split") == std::string::npos) {
    EXPECT_GT(c.spans, 10u);
    EXPECT_GT(c.nodes, 10u);
    EXPECT_GT(c.named, c.texts / 2);  // the comparison saw real names, not just nulls
  } else {
    EXPECT_GT(c.skeletons, 0u);  // skeleton units: nothing below the unit DIE, in this file
  }
  RecordProperty("units", static_cast<int>(c.units));
  RecordProperty("spans", static_cast<int>(c.spans));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WalkerEqualsLibdw,
                         ::testing::Values("c_gcc", "c_gcc_dwarf4", "c_clang_dwarf5", "cpp_gcc",
                                           "cpp_clang_dwarf5", "rust_moves", "rust_legacy", "c_gcc_zlib",
                                           "c_gcc_zlib_gnu", "cpp_gcc.debug", "c_gcc_split",
                                           "c_gcc_split_dwarf4", "c_clang_split"));

// A linked C++ program: hpctl (66 units of g++ -O2 -g output, 37 MB of DWARF), or the large binaries given
// by hand in HPD_WALKER_COMPARE=ELF[:ELF...], e.g. hpctl itself or libpython.
TEST(WalkerEqualsLibdwExtra, LinkedProgramOrFilesFromTheEnvironment) {
  const char* list = std::getenv("HPD_WALKER_COMPARE");
  std::stringstream in(list != nullptr && *list != 0 ? list : HPD_LINKED_PROGRAM);
  std::string path;
  while (std::getline(in, path, ':')) {
    Comparison c = compare_walks(path);
    std::printf(
        "%s: %zu units (%zu by libdw only: %s), %zu nodes, %zu spans; %zu names (%zu by libdw only: %s)\n",
        path.c_str(), c.units, c.fell_back, c.first_fallback.c_str(), c.nodes, c.spans, c.texts,
        c.texts_fell_back, c.first_text_fallback.c_str());
    EXPECT_GT(c.units, 0u);
    if (list == nullptr || *list == 0) {
      EXPECT_EQ(c.fell_back, 0u) << c.first_fallback;  // gcc output: the walker reads all of it
      EXPECT_EQ(c.texts_fell_back, 0u) << c.first_text_fallback;
      EXPECT_GT(c.named, c.texts / 2);
    }
  }
}

// ---- hand-made DWARF ----

// Little-endian bytes, with the encodings DWARF uses.
class Bytes {
 public:
  Bytes& u8(uint64_t v) { return fixed(v, 1); }
  Bytes& u16(uint64_t v) { return fixed(v, 2); }
  Bytes& u32(uint64_t v) { return fixed(v, 4); }
  Bytes& u64(uint64_t v) { return fixed(v, 8); }
  Bytes& fixed(uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) data.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& uleb(uint64_t v) {
    do {
      uint8_t b = v & 0x7f;
      v >>= 7;
      data.push_back(static_cast<uint8_t>(b | (v != 0 ? 0x80 : 0)));
    } while (v != 0);
    return *this;
  }
  Bytes& str(const char* s) {
    data.insert(data.end(), s, s + std::strlen(s) + 1);
    return *this;
  }
  size_t size() const { return data.size(); }
  std::vector<uint8_t> data;
};

// One abbreviation: code, tag, children, (attribute, form) pairs.
void abbrev(Bytes& b, uint64_t code, uint64_t tag, bool children,
            std::initializer_list<std::pair<uint64_t, uint64_t>> attrs) {
  b.uleb(code).uleb(tag).u8(children ? 1 : 0);
  for (auto [name, form] : attrs) b.uleb(name).uleb(form);
  b.uleb(0).uleb(0);
}

// A DWARF 4 unit (32-bit) around `dies`, or DWARF 5 (unit type compile) when `version` is 5.
std::vector<uint8_t> unit(const Bytes& dies, unsigned version = 4, bool dwarf64 = false) {
  Bytes header;
  const size_t offset_size = dwarf64 ? 8 : 4;
  const size_t rest = 2 + (version >= 5 ? 2 : 1) + offset_size + dies.size();
  if (dwarf64) {
    header.u32(0xffffffff).u64(rest);
  } else {
    header.u32(rest);
  }
  header.u16(version);
  if (version >= 5)
    header.u8(DW_UT_compile).u8(8).fixed(0, offset_size);
  else
    header.fixed(0, offset_size).u8(8);
  header.data.insert(header.data.end(), dies.data.begin(), dies.data.end());
  return header.data;
}

// Abbreviations 1 = compile unit (children, low_pc, name string), 2 = subprogram (children,
// low_pc addr, high_pc data4, a block), 3 = inlined subroutine (no children, low_pc, high_pc
// udata), 4 = variable (fixed size), 5 = lexical block (children, ranges).
Bytes standard_abbrevs() {
  Bytes a;
  abbrev(a, 1, DW_TAG_compile_unit, true, {{DW_AT_low_pc, DW_FORM_addr}, {DW_AT_name, DW_FORM_string}});
  abbrev(a, 2, DW_TAG_subprogram, true,
         {{DW_AT_name, DW_FORM_string},
          {DW_AT_low_pc, DW_FORM_addr},
          {DW_AT_high_pc, DW_FORM_data4},
          {DW_AT_frame_base, DW_FORM_exprloc}});
  abbrev(a, 3, DW_TAG_inlined_subroutine, false,
         {{DW_AT_abstract_origin, DW_FORM_ref4},
          {DW_AT_low_pc, DW_FORM_addr},
          {DW_AT_high_pc, DW_FORM_udata},
          {DW_AT_call_line, DW_FORM_data1}});
  abbrev(a, 4, DW_TAG_variable, false, {{DW_AT_type, DW_FORM_ref4}, {DW_AT_external, DW_FORM_flag_present}});
  abbrev(a, 5, DW_TAG_lexical_block, true, {{DW_AT_ranges, DW_FORM_sec_offset}});
  a.uleb(0);
  return a;
}

// f at [0x1000, 0x1100) holding, inside a lexical block, an inlined g at [0x1040, 0x1060);
// then h at [0x2000, 0x2010) with no inline.
Bytes standard_dies(bool dwarf64 = false) {
  Bytes d;
  d.uleb(1).u64(0x1000).str("a.c");
  d.uleb(2).str("f").u64(0x1000).u32(0x100).uleb(1).u8(DW_OP_call_frame_cfa);
  d.uleb(4).u32(0x40);
  d.uleb(5).fixed(0, dwarf64 ? 8 : 4);  // ranges unused by the walker (lexical blocks are not subroutines)
  d.uleb(3).u32(0x50).u64(0x1040).uleb(0x20).u8(7);
  d.uleb(0);  // end of the lexical block
  d.uleb(0);  // end of f
  d.uleb(2).str("h").u64(0x2000).u32(0x10).uleb(0);
  d.uleb(0);  // end of h
  d.uleb(0);  // end of the unit
  return d;
}

DebugInfoSections sections_of(const std::vector<uint8_t>& info, const Bytes& abbrevs) {
  DebugInfoSections s;
  s.info = info;
  s.abbrev = abbrevs.data;
  return s;
}

TEST(SubroutineWalker, HandMadeUnitGivesNestedSpans) {
  const Bytes abbrevs = standard_abbrevs();
  for (bool dwarf64 : {false, true}) {
    const std::vector<uint8_t> info = unit(standard_dies(dwarf64), 4, dwarf64);
    SubroutineMap map;
    std::string why;
    ASSERT_TRUE(walk_subroutines(sections_of(info, abbrevs), 0, map, &why)) << why;
    ASSERT_EQ(map.nodes.size(), 3u);
    EXPECT_TRUE(map.nodes[0].is_subprogram);
    EXPECT_EQ(map.nodes[0].parent, kNoSubroutine);
    EXPECT_FALSE(map.nodes[1].is_subprogram);
    EXPECT_EQ(map.nodes[1].parent, 0u);  // the lexical block between them does not count
    const size_t header = dwarf64 ? 23 : 11;
    EXPECT_EQ(map.nodes[0].die_offset, header + 1 + 8 + 4);  // after the unit DIE
    // LLVM's rule: g splits f's range in three.
    const std::vector<Span> want = {
        {0x1000, 0x1040, 0}, {0x1040, 0x1060, 1}, {0x1060, 0x1100, 0}, {0x2000, 0x2010, 2}};
    EXPECT_EQ(spans_of(map), want);
  }
}

// A span of 4 GiB or more keeps its end beside the 16-byte spans. Here an inlined g claims 8 GiB
// from 0x1040: h splits it, and LLVM's rule leaves g the rest after h.
TEST(SubroutineWalker, SpansOf4GiBOrMoreKeepTheirEnd) {
  Bytes d;
  d.uleb(1).u64(0x1000).str("a.c");
  d.uleb(2).str("f").u64(0x1000).u32(0xffffffff).uleb(1).u8(DW_OP_call_frame_cfa);
  d.uleb(3).u32(0x50).u64(0x1040).uleb(uint64_t{1} << 33).u8(7);
  d.uleb(0);  // end of f
  d.uleb(2).str("h").u64(0x2000).u32(0x10).uleb(0);
  d.uleb(0);  // end of h
  d.uleb(0);  // end of the unit
  const std::vector<uint8_t> info = unit(d, 4);
  SubroutineMap map;
  std::string why;
  ASSERT_TRUE(walk_subroutines(sections_of(info, standard_abbrevs()), 0, map, &why)) << why;
  const std::vector<Span> want = {{0x1000, 0x1040, 0},
                                  {0x1040, 0x2000, 1},
                                  {0x2000, 0x2010, 2},
                                  {0x2010, 0x1040 + (uint64_t{1} << 33), 1}};
  EXPECT_EQ(spans_of(map), want);
  ASSERT_EQ(map.long_span_ends.size(), 1u);
  EXPECT_EQ(map.spans.back().size, SubroutineSpan::kLongSpan);
}

TEST(SubroutineWalker, Dwarf5AddrxAndRnglistx) {
  Bytes a;
  abbrev(a, 1, DW_TAG_compile_unit, true,
         {{DW_AT_low_pc, DW_FORM_addrx},
          {DW_AT_addr_base, DW_FORM_sec_offset},
          {DW_AT_rnglists_base, DW_FORM_sec_offset}});
  abbrev(a, 2, DW_TAG_subprogram, true, {{DW_AT_low_pc, DW_FORM_addrx1}, {DW_AT_high_pc, DW_FORM_data2}});
  abbrev(a, 3, DW_TAG_inlined_subroutine, false, {{DW_AT_ranges, DW_FORM_rnglistx}});
  a.uleb(0);
  Bytes addr;  // .debug_addr: header (8 bytes), then addresses
  addr.u32(4 + 8 * 3).u16(5).u8(8).u8(0).u64(0x4000).u64(0x5000).u64(0x5100);
  Bytes rng;  // .debug_rnglists: header, one offset, one list
  rng.u32(0).u16(5).u8(8).u8(0).u32(1);
  const size_t base = rng.size();
  rng.u32(4);  // list 0 starts right after the offset array
  rng.u8(DW_RLE_base_addressx).uleb(1);
  rng.u8(DW_RLE_offset_pair).uleb(0x10).uleb(0x20);
  rng.u8(DW_RLE_startx_length).uleb(2).uleb(0x8);
  rng.u8(DW_RLE_end_of_list);
  Bytes d;
  d.uleb(1).uleb(0).u32(8).u32(base);
  d.uleb(2).u8(1).u16(0x200);
  d.uleb(3).uleb(0);
  d.uleb(0).uleb(0);
  const std::vector<uint8_t> info = unit(d, 5);
  DebugInfoSections s = sections_of(info, a);
  s.addr = addr.data;
  s.rnglists = rng.data;
  SubroutineMap map;
  std::string why;
  ASSERT_TRUE(walk_subroutines(s, 0, map, &why)) << why;
  const std::vector<Span> want = {{0x5000, 0x5010, 0},
                                  {0x5010, 0x5020, 1},
                                  {0x5020, 0x5100, 0},
                                  {0x5100, 0x5108, 1},
                                  {0x5108, 0x5200, 0}};
  EXPECT_EQ(spans_of(map), want);

  // Without DW_AT_addr_base the index cannot be resolved the way libdw would: refused.
  Bytes no_base;
  abbrev(no_base, 1, DW_TAG_compile_unit, true, {{DW_AT_low_pc, DW_FORM_addrx}});
  no_base.uleb(0);
  Bytes d2;
  d2.uleb(1).uleb(0).uleb(0);
  const std::vector<uint8_t> info2 = unit(d2, 5);
  DebugInfoSections s2 = sections_of(info2, no_base);
  s2.addr = addr.data;
  EXPECT_FALSE(walk_subroutines(s2, 0, map, &why));
  EXPECT_TRUE(map.spans.empty() && map.nodes.empty());
}

// Refusals the caller turns into libdw's walk; each must come with a reason and an empty map.
TEST(SubroutineWalker, RefusesWhatItDoesNotRead) {
  const Bytes good_abbrevs = standard_abbrevs();
  const std::vector<uint8_t> good = unit(standard_dies());
  SubroutineMap map;
  std::string why;

  std::vector<uint8_t> v3 = good;
  v3[4] = 1;  // version 1
  EXPECT_FALSE(walk_subroutines(sections_of(v3, good_abbrevs), 0, map, &why));
  EXPECT_EQ(why, "unsupported DWARF version");

  std::vector<uint8_t> long_unit = good;
  long_unit[0] += 1;  // one byte longer than the section
  EXPECT_FALSE(walk_subroutines(sections_of(long_unit, good_abbrevs), 0, map, &why));

  EXPECT_FALSE(walk_subroutines(sections_of(good, good_abbrevs), good.size(), map, &why));

  Bytes unknown_form;  // form 0x7f used by the subprogram
  abbrev(unknown_form, 1, DW_TAG_compile_unit, true,
         {{DW_AT_low_pc, DW_FORM_addr}, {DW_AT_name, DW_FORM_string}});
  abbrev(unknown_form, 2, DW_TAG_subprogram, true, {{DW_AT_name, 0x7f}});
  unknown_form.uleb(0);
  EXPECT_FALSE(walk_subroutines(sections_of(good, unknown_form), 0, map, &why));

  Bytes twice = standard_abbrevs();
  twice.data.pop_back();
  abbrev(twice, 2, DW_TAG_variable, false, {});
  twice.uleb(0);
  EXPECT_FALSE(walk_subroutines(sections_of(good, twice), 0, map, &why));
  EXPECT_EQ(why, "abbreviation code defined twice");

  Bytes undefined;  // a DIE with code 9
  undefined.uleb(1).u64(0).str("x").uleb(9).uleb(0);
  EXPECT_FALSE(walk_subroutines(sections_of(unit(undefined), good_abbrevs), 0, map, &why));
  EXPECT_EQ(why, "undefined abbreviation code");

  Bytes deep;  // 300 nested lexical blocks
  deep.uleb(1).u64(0).str("x");
  for (int i = 0; i < 300; ++i) deep.uleb(5).u32(0);
  for (int i = 0; i < 301; ++i) deep.uleb(0);
  EXPECT_FALSE(walk_subroutines(sections_of(unit(deep), good_abbrevs), 0, map, &why));
  EXPECT_EQ(why, "DIEs nested too deep");

  Bytes indirect_abbrevs;  // DW_FORM_indirect naming a form it does not know
  abbrev(indirect_abbrevs, 1, DW_TAG_compile_unit, true, {{DW_AT_name, DW_FORM_indirect}});
  indirect_abbrevs.uleb(0);
  Bytes indirect;
  indirect.uleb(1).uleb(0x7e).uleb(0);
  EXPECT_FALSE(walk_subroutines(sections_of(unit(indirect), indirect_abbrevs), 0, map, &why));
  Bytes indirect_ok;  // ...and one naming DW_FORM_string
  indirect_ok.uleb(1).uleb(DW_FORM_string).str("a.c").uleb(0);
  EXPECT_TRUE(walk_subroutines(sections_of(unit(indirect_ok), indirect_abbrevs), 0, map, &why)) << why;
}

// Every truncation and random corruption of a valid unit: refused or walked, never out of bounds
// (the fuzz target checks the bounds with AddressSanitizer; here: no crash, sane results).
TEST(SubroutineWalker, TruncatedAndGarbageInputIsBounded) {
  const Bytes abbrevs = standard_abbrevs();
  const std::vector<uint8_t> good = unit(standard_dies());
  SubroutineMap map;
  size_t refused = 0;
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len));
    if (!walk_subroutines(sections_of(cut, abbrevs), 0, map)) ++refused;
  }
  EXPECT_EQ(refused, good.size());  // the unit length no longer fits: every cut is refused
  for (size_t len = 0; len < abbrevs.size(); ++len) {
    Bytes cut;
    cut.data.assign(abbrevs.data.begin(), abbrevs.data.begin() + static_cast<std::ptrdiff_t>(len));
    walk_subroutines(sections_of(good, cut), 0, map);
    for (const SubroutineSpan& s : map.spans) EXPECT_LT(s.node, map.nodes.size());
  }
  std::mt19937_64 rng(11);
  size_t walked = 0;
  for (int round = 0; round < 5000; ++round) {
    std::vector<uint8_t> info = good;
    Bytes abbrev_noise = abbrevs;
    for (int k = 0; k < 3; ++k) info[4 + rng() % (info.size() - 4)] = static_cast<uint8_t>(rng());
    if (round % 2 == 0) abbrev_noise.data[rng() % abbrev_noise.size()] = static_cast<uint8_t>(rng());
    if (walk_subroutines(sections_of(info, abbrev_noise), 0, map)) {
      ++walked;
      for (const SubroutineSpan& s : map.spans) {
        EXPECT_LT(s.low, map.high_of(s));
        EXPECT_LT(s.node, map.nodes.size());
      }
      for (const SubroutineNode& n : map.nodes)
        EXPECT_TRUE(n.parent == kNoSubroutine || n.parent < map.nodes.size());
    } else {
      EXPECT_TRUE(map.spans.empty() && map.nodes.empty());
    }
  }
  EXPECT_GT(walked, 0u);
  for (int round = 0; round < 2000; ++round) {
    std::vector<uint8_t> noise(1 + rng() % 200);
    for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
    walk_subroutines(sections_of(noise, abbrevs), 0, map);
    walk_subroutines(sections_of(good, Bytes{.data = noise}), 0, map);
  }
}

// ---- names and call sites from hand-made DWARF ----

const char* name_of(DieTextReader& reader, uint64_t die, std::string* why = nullptr) {
  NodeText t;
  if (!reader.read(die, false, t, why)) return "(refused)";
  return t.name != nullptr ? t.name : "(null)";
}

// Every string form, DWARF 5, with DW_AT_str_offsets_base past the .debug_str_offsets header.
TEST(DieTextReader, StringFormsThroughStrOffsetsBase) {
  const std::pair<uint64_t, uint64_t> forms[] = {
      {DW_FORM_strx1, 2}, {DW_FORM_strx2, 3},     {DW_FORM_strx3, 4},
      {DW_FORM_strx4, 5}, {DW_FORM_strx, 6},      {DW_FORM_GNU_str_index, 7},
      {DW_FORM_strp, 8},  {DW_FORM_line_strp, 9}, {DW_FORM_string, 10}};
  Bytes a;
  abbrev(a, 1, DW_TAG_compile_unit, true,
         {{DW_AT_str_offsets_base, DW_FORM_sec_offset}, {DW_AT_name, DW_FORM_strx1}});
  for (auto [form, code] : forms) abbrev(a, code, DW_TAG_subprogram, false, {{DW_AT_name, form}});
  a.uleb(0);
  Bytes str;
  str.str("zero").str("one").str("two");  // at 0, 5, 9
  Bytes line_str;
  line_str.u8(0).str("lines");  // at 1
  Bytes offsets;
  offsets.u32(4 + 3 * 4).u16(5).u16(0).u32(0).u32(5).u32(9);  // entries from offset 8

  Bytes d;
  d.uleb(1).u32(8).u8(0);
  std::vector<size_t> at;
  auto die = [&](uint64_t code) -> Bytes& {
    at.push_back(12 + d.size());  // DWARF 5 header: 12 bytes
    return d.uleb(code);
  };
  die(2).u8(1);
  die(3).u16(2);
  die(4).fixed(0, 3);
  die(5).u32(1);
  die(6).uleb(2);
  die(7).uleb(0);
  die(8).u32(5);
  die(9).u32(1);
  die(10).str("inline");
  d.uleb(0);
  const std::vector<uint8_t> info = unit(d, 5);
  DebugInfoSections s = sections_of(info, a);
  s.str = str.data;
  s.line_str = line_str.data;
  s.str_offsets = offsets.data;
  DieTextReader reader(s);
  const char* want[] = {"one", "two", "zero", "one", "two", "zero", "one", "lines", "inline"};
  for (size_t i = 0; i < at.size(); ++i) {
    std::string why;
    EXPECT_STREQ(name_of(reader, at[i], &why), want[i])
        << "form 0x" << std::hex << forms[i].first << ": " << why;
  }
  // The pointers are into the sections themselves (what DwarfIndex keys its demangled names by).
  NodeText t;
  ASSERT_TRUE(reader.read(at[0], false, t));
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(t.name), str.data.data() + 5);
  ASSERT_TRUE(reader.read(at[8], false, t));
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(t.name), info.data() + at[8] + 1);

  // An index past .debug_str_offsets, and a string offset past .debug_str: refused.
  std::vector<uint8_t> bad_index = info;
  bad_index[at[0] + 1] = 3;
  std::string why;
  DebugInfoSections s1 = s;
  s1.info = bad_index;
  DieTextReader r1(s1);
  EXPECT_STREQ(name_of(r1, at[0], &why), "(refused)");
  EXPECT_EQ(why, "string index outside .debug_str_offsets");
  std::vector<uint8_t> bad_strp = info;
  bad_strp[at[6] + 1] = 200;  // .debug_str has 13 bytes
  DebugInfoSections s2 = s;
  s2.info = bad_strp;
  DieTextReader r2(s2);
  EXPECT_STREQ(name_of(r2, at[6], &why), "(refused)");
  // A string without its NUL inside the section: libdw would hand it out unterminated; refused.
  Bytes unterminated;
  unterminated.str("zero").str("one");
  unterminated.data.resize(7);  // "one" cut to "on"
  DebugInfoSections s3 = s;
  s3.str = unterminated.data;
  DieTextReader r3(s3);
  EXPECT_STREQ(name_of(r3, at[6], &why), "(refused)");
  // No DW_AT_str_offsets_base: libdw would guess a base; refused.
  Bytes no_base = a;
  no_base.data[3] = static_cast<uint8_t>(DW_AT_producer);  // the unit DIE's first attribute
  DebugInfoSections s4 = s;
  s4.abbrev = no_base.data;
  DieTextReader r4(s4);
  EXPECT_STREQ(name_of(r4, at[0], &why), "(refused)");
  EXPECT_EQ(why, "string index without DW_AT_str_offsets_base");
  EXPECT_STREQ(name_of(r4, at[8], &why), "inline");  // forms without an index still read
}

// Two units: DWARF 4 with the declarations, DWARF 5 with an inlined instance referring to them
// by DW_FORM_ref_addr; precedence, cycles and the hop limit as libdw_find_string has them.
class TwoUnits : public ::testing::Test {
 protected:
  void SetUp() override {
    abbrev(a, 1, DW_TAG_compile_unit, true, {{DW_AT_name, DW_FORM_string}});
    abbrev(a, 2, DW_TAG_subprogram, false,
           {{DW_AT_name, DW_FORM_string}, {DW_AT_linkage_name, DW_FORM_string}});
    abbrev(a, 3, DW_TAG_inlined_subroutine, false,
           {{DW_AT_abstract_origin, DW_FORM_ref_addr},
            {DW_AT_call_file, DW_FORM_udata},
            {DW_AT_call_line, DW_FORM_data2},
            {DW_AT_call_column, DW_FORM_sdata}});
    abbrev(a, 4, DW_TAG_subprogram, false,
           {{DW_AT_abstract_origin, DW_FORM_ref_udata}, {DW_AT_specification, DW_FORM_ref4}});
    abbrev(a, 5, DW_TAG_subprogram, false, {{DW_AT_name, DW_FORM_string}});
    abbrev(a, 6, DW_TAG_subprogram, false, {{DW_AT_abstract_origin, DW_FORM_ref4}});
    abbrev(a, 7, DW_TAG_subprogram, false, {{DW_AT_specification, DW_FORM_ref4}});
    abbrev(a, 8, DW_TAG_subprogram, false,
           {{DW_AT_name, DW_FORM_string}, {DW_AT_abstract_origin, DW_FORM_ref4}});
    // An implicit_const carries its value in the abbreviation: -7, one sleb128 byte.
    a.uleb(9).uleb(DW_TAG_inlined_subroutine).u8(0);
    a.uleb(DW_AT_abstract_origin).uleb(DW_FORM_ref_addr);
    a.uleb(DW_AT_call_file).uleb(DW_FORM_implicit_const).u8(0x79);
    a.uleb(DW_AT_call_line).uleb(DW_FORM_udata);
    a.uleb(0).uleb(0);
    a.uleb(0);

    // Unit 1 (DWARF 4, header 11 bytes); offsets relative to the unit.
    Bytes d;
    d.uleb(1).str("u1");
    auto off = [&] { return 11 + d.size(); };
    s_die = off();
    d.uleb(2).str("f").str("_Z1fv");
    by_spec = off();
    d.uleb(5).str("by_spec");
    by_origin = off();
    d.uleb(5).str("by_origin");
    both = off();
    d.uleb(4).uleb(by_origin).u32(by_spec);
    self_named = off();
    d.uleb(8).str("self").u32(s_die);
    cycle_a = off();
    cycle_b = cycle_a + 5;
    d.uleb(6).u32(cycle_b);
    d.uleb(7).u32(cycle_a);
    chain = off();  // 17 DIEs, each referring to the next, then a named one
    for (size_t i = 0; i < 17; ++i) d.uleb(6).u32(chain + 5 * (i + 1));
    d.uleb(5).str("end");
    into_header = off();
    d.uleb(6).u32(2);
    outside = off();
    d.uleb(6).u32(0x10000);
    d.uleb(0).uleb(0).uleb(0);
    info = unit(d, 4);

    // Unit 2 (DWARF 5, header 12 bytes).
    const size_t base = info.size();
    Bytes e;
    e.uleb(1).str("u2");
    inlined = base + 12 + e.size();
    e.uleb(3).u32(s_die).uleb(3).u16(0x1234).uleb(0x7f);  // call column -1
    inlined_implicit = base + 12 + e.size();
    e.uleb(9).u32(by_spec).uleb(300);
    far_ref = base + 12 + e.size();
    e.uleb(3).u32(0x7fffffff).uleb(0).u16(0).uleb(0);
    e.uleb(0).uleb(0).uleb(0);
    const std::vector<uint8_t> second = unit(e, 5);
    info.insert(info.end(), second.begin(), second.end());
  }

  Bytes a;
  std::vector<uint8_t> info;
  uint64_t s_die = 0, by_spec = 0, by_origin = 0, both = 0, self_named = 0, cycle_a = 0, cycle_b = 0,
           chain = 0;
  uint64_t into_header = 0, outside = 0, inlined = 0, inlined_implicit = 0, far_ref = 0;
};

TEST_F(TwoUnits, RefAddrAcrossUnitsWithCallSite) {
  DieTextReader reader(sections_of(info, a));
  NodeText t;
  std::string why;
  ASSERT_TRUE(reader.read(inlined, true, t, &why)) << why;
  EXPECT_STREQ(t.name, "_Z1fv");  // the linkage name of the DIE in the other unit
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(t.name), info.data() + s_die + 3);
  EXPECT_TRUE(t.has_call_file);
  EXPECT_EQ(t.call_file, 3u);
  EXPECT_EQ(t.call_line, 0x1234u);
  EXPECT_EQ(t.call_column, 0xffffffffu);  // sdata -1, truncated as dwarf_formudata's value is
  ASSERT_TRUE(reader.read(inlined_implicit, true, t, &why)) << why;
  EXPECT_STREQ(t.name, "by_spec");
  EXPECT_FALSE(t.has_call_file);  // implicit_const -7 is no file index (above UINT32_MAX as unsigned)
  EXPECT_EQ(t.call_line, 300u);
  // Without `call_site` the call attributes are not read.
  ASSERT_TRUE(reader.read(inlined, false, t, &why)) << why;
  EXPECT_EQ(t.call_line, 0u);
  EXPECT_FALSE(t.has_call_file);
  // ref_addr past every unit: refused.
  EXPECT_FALSE(reader.read(far_ref, true, t, &why));
  EXPECT_EQ(why, "DIE offset outside every unit");
  EXPECT_TRUE(t == NodeText{});
}

TEST_F(TwoUnits, PrecedenceCyclesAndHopLimit) {
  DieTextReader reader(sections_of(info, a));
  std::string why;
  EXPECT_STREQ(name_of(reader, s_die), "_Z1fv");                  // linkage name before name
  EXPECT_STREQ(name_of(reader, both), "by_spec");                 // specification before abstract_origin
  EXPECT_STREQ(name_of(reader, self_named), "_Z1fv");             // a linkage name anywhere before a name
  EXPECT_STREQ(name_of(reader, cycle_a, &why), "(null)") << why;  // a cycle ends, unnamed
  EXPECT_STREQ(name_of(reader, cycle_b, &why), "(null)") << why;
  // 16 DIEs at most: from the third link the named DIE is the 16th, from the second the 17th.
  EXPECT_STREQ(name_of(reader, chain + 2 * 5, &why), "end") << why;
  EXPECT_STREQ(name_of(reader, chain + 1 * 5, &why), "(null)") << why;
  EXPECT_STREQ(name_of(reader, chain, &why), "(null)") << why;
  // References into the unit header or past the unit: refused, never followed.
  EXPECT_STREQ(name_of(reader, into_header, &why), "(refused)");
  EXPECT_EQ(why, "DIE offset inside a unit header");
  EXPECT_STREQ(name_of(reader, outside, &why), "(refused)");
  EXPECT_EQ(why, "reference outside its unit");
  // A reference into a supplementary file (dwz's DWARF 5 form) goes to libdw.
  Bytes alt = a;
  for (size_t i = 0; i + 1 < alt.size(); ++i) {
    if (alt.data[i] == DW_AT_specification && alt.data[i + 1] == DW_FORM_ref4) {
      alt.data[i + 1] = static_cast<uint8_t>(DW_FORM_ref_sup4);  // the same size as ref4
      break;
    }
  }
  DieTextReader alt_reader(sections_of(info, alt));
  EXPECT_STREQ(name_of(alt_reader, both, &why), "(refused)");
  EXPECT_EQ(why, "reference in another form");
}

// Every truncation and random corruption: refused or read, never out of bounds; what is read
// points into the given sections.
TEST_F(TwoUnits, TruncatedAndGarbageInputIsBounded) {
  const std::vector<uint64_t> dies = {s_die, both, self_named, cycle_a, chain, inlined, inlined_implicit};
  auto inside = [](const char* p, const std::vector<uint8_t>& v) {
    const auto* b = reinterpret_cast<const uint8_t*>(p);
    return b >= v.data() && b < v.data() + v.size();
  };
  size_t read = 0;
  for (size_t len = 0; len <= info.size(); ++len) {
    std::vector<uint8_t> cut(info.begin(), info.begin() + static_cast<std::ptrdiff_t>(len));
    DieTextReader reader(sections_of(cut, a));
    for (uint64_t die : dies) {
      NodeText t;
      if (reader.read(die, true, t)) {
        ++read;
        if (t.name != nullptr) {
          EXPECT_TRUE(inside(t.name, cut));
        }
      }
    }
  }
  EXPECT_GE(read, dies.size());  // at least the whole section reads
  std::mt19937_64 rng(5);
  size_t accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<uint8_t> noisy = info;
    Bytes noisy_abbrev = a;
    for (int k = 0; k < 3; ++k) noisy[rng() % noisy.size()] = static_cast<uint8_t>(rng());
    if (round % 3 == 0) noisy_abbrev.data[rng() % noisy_abbrev.size()] = static_cast<uint8_t>(rng());
    DieTextReader reader(sections_of(noisy, noisy_abbrev));
    for (uint64_t die : dies) {
      NodeText t;
      if (reader.read(die, true, t)) {
        ++accepted;
        if (t.name != nullptr) {
          EXPECT_TRUE(inside(t.name, noisy));
        }
      } else {
        EXPECT_TRUE(t == NodeText{});
      }
    }
  }
  EXPECT_GT(accepted, 0u);
}

}  // namespace
}  // namespace hpd
