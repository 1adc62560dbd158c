// LineTable: the decoder's rows and file names equal libdw's (dwarf_getsrclines) on every compile
// unit of the fixtures, and malformed line programs are refused without reading out of bounds.
#include "line_table.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "libdw_file.h"

namespace hpd {
namespace {

std::string fixture(const std::string& name) {
  return std::string(HPD_DWARF_FIXTURE_DIR) + "/" + name;
}

// find()'s answer at `address` as text: the row's file, line and column, or "none".
std::string found_at(const LineTable& t, uint64_t address) {
  const std::optional<LineRow> row = t.find(address);
  if (!row) return "none";
  return std::to_string(row->file) + ":" + std::to_string(row->line) + ":" + std::to_string(row->column);
}

// LineTable::compact keeps every answer: find() can change only at a row's address, so comparing
// at each row address and the bytes around it covers all addresses.
void expect_compact_answers_as_full(const LineTable& full, size_t& rows_dropped, size_t& packed_tables) {
  LineTable compacted = full;
  compacted.compact();
  const size_t kept = compacted.rows.size() + compacted.packed.size();
  ASSERT_LE(kept, full.rows.size());
  EXPECT_TRUE(compacted.rows.empty() || compacted.packed.empty());
  packed_tables += !compacted.packed.empty();
  rows_dropped += full.rows.size() - kept;
  size_t differences = 0;
  for (const LineRow& row : full.rows) {
    for (uint64_t address : {row.address - 1, row.address, row.address + 1}) {
      if (found_at(compacted, address) != found_at(full, address) && differences++ < 3) {
        ADD_FAILURE() << "0x" << std::hex << address << ": compacted " << found_at(compacted, address)
                      << ", full " << found_at(full, address);
      }
    }
  }
  EXPECT_EQ(differences, 0u);
}

// Decodes every unit of `path` and compares rows and file names with libdw's; checks that the
// compacted table answers as the full one.
void compare_with_libdw(const std::string& path, size_t& units, size_t& rows_compared, size_t& rows_dropped,
                        size_t& packed_tables) {
  LibdwFile file(path);
  ASSERT_NE(file.dwarf(), nullptr) << dwarf_errmsg(-1);
  ASSERT_FALSE(file.line_sections().line.empty());
  Dwarf_CU* cu = nullptr;
  Dwarf_CU* next = nullptr;
  Dwarf_Half version = 0;
  uint8_t unit_type = 0;
  Dwarf_Die cudie, subdie;
  while (dwarf_get_units(file.dwarf(), cu, &next, &version, &unit_type, &cudie, &subdie) == 0) {
    cu = next;
    Dwarf_Attribute attr;
    Dwarf_Word offset = 0;
    if (dwarf_attr(&cudie, DW_AT_stmt_list, &attr) == nullptr || dwarf_formudata(&attr, &offset) != 0)
      continue;
    Dwarf_Lines* lines = nullptr;
    Dwarf_Files* files = nullptr;
    size_t count = 0, file_count = 0;
    ASSERT_EQ(dwarf_getsrclines(&cudie, &lines, &count), 0);
    ASSERT_EQ(dwarf_getsrcfiles(&cudie, &files, &file_count), 0);
    Dwarf_Attribute comp_dir_attr;
    const char* comp_dir = dwarf_attr(&cudie, DW_AT_comp_dir, &comp_dir_attr) != nullptr
                               ? dwarf_formstring(&comp_dir_attr)
                               : nullptr;
    Dwarf_Die unit_die;
    uint8_t address_size = 0, offset_size = 0;
    ASSERT_NE(dwarf_diecu(&cudie, &unit_die, &address_size, &offset_size), nullptr);

    LineTable table;
    ASSERT_TRUE(decode_line_table(file.line_sections(), offset, comp_dir, address_size, table))
        << path << ": unit at 0x" << std::hex << dwarf_dieoffset(&cudie);
    ++units;
    ASSERT_EQ(table.files.size(), file_count);
    for (size_t i = 0; i < file_count; ++i) {
      const char* want = dwarf_filesrc(files, i, nullptr, nullptr);
      EXPECT_EQ(table.files[i], want != nullptr ? want : "") << "file " << i;
    }
    ASSERT_EQ(table.rows.size(), count);
    for (size_t i = 0; i < count; ++i) {
      Dwarf_Line* line = dwarf_onesrcline(lines, i);
      Dwarf_Addr address = 0;
      int lineno = 0, column = 0;
      bool end_sequence = false;
      Dwarf_Files* row_files = nullptr;
      size_t file_index = 0;
      ASSERT_EQ(dwarf_lineaddr(line, &address), 0);
      dwarf_lineno(line, &lineno);
      dwarf_linecol(line, &column);
      dwarf_lineendsequence(line, &end_sequence);
      ASSERT_EQ(dwarf_line_file(line, &row_files, &file_index), 0);
      const LineRow& row = table.rows[i];
      ASSERT_EQ(row.address, address) << "row " << i;
      EXPECT_EQ(row.line, static_cast<uint32_t>(lineno)) << "row " << i;
      EXPECT_EQ(row.column, static_cast<uint32_t>(column)) << "row " << i;
      EXPECT_EQ(row.end_sequence, end_sequence) << "row " << i;
      EXPECT_EQ(row.file, file_index) << "row " << i;
      ++rows_compared;
    }
    expect_compact_answers_as_full(table, rows_dropped, packed_tables);
  }
}

class LineTableTest : public ::testing::TestWithParam<const char*> {};

TEST_P(LineTableTest, RowsAndFileNamesEqualLibdws) {
  size_t units = 0, rows_compared = 0, rows_dropped = 0, packed_tables = 0;
  compare_with_libdw(fixture(GetParam()), units, rows_compared, rows_dropped, packed_tables);
  EXPECT_GT(units, 0u);
  EXPECT_GT(rows_compared, 100u);
  // Optimized code repeats positions (is_stmt and view changes): compaction has work to do.
  EXPECT_GT(rows_dropped, 0u);
  EXPECT_GT(packed_tables, 0u) << "no table was packed: the packed lookups went untested";
}

// Linked C++ programs have overlapping sequences (discarded COMDAT code at address 0) that small
// fixtures lack: hpctl (66 units, 37 MB of DWARF), or the large binaries given in
// HPD_LINE_TABLE_COMPARE=ELF[:ELF...].
TEST(LineTableExtra, LinkedProgramOrFilesFromTheEnvironment) {
  const char* list = std::getenv("HPD_LINE_TABLE_COMPARE");
  std::string paths = list != nullptr && *list != 0 ? list : HPD_LINKED_PROGRAM;
  for (size_t start = 0; start <= paths.size();) {
    size_t end = paths.find(':', start);
    if (end == std::string::npos) end = paths.size();
    size_t units = 0, rows = 0, dropped = 0, packed = 0;
    compare_with_libdw(paths.substr(start, end - start), units, rows, dropped, packed);
    std::printf("%s: %zu units, %zu rows equal libdw's, %zu dropped by compact(), %zu tables packed\n",
                paths.substr(start, end - start).c_str(), units, rows, dropped, packed);
    EXPECT_GT(units, 0u);
    start = end + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LineTableTest,
                         ::testing::Values("c_gcc", "c_gcc_dwarf4", "c_clang_dwarf5", "cpp_gcc",
                                           "cpp_clang_dwarf5", "rust_moves", "rust_legacy", "c_gcc_zlib",
                                           "c_gcc_zlib_gnu"));

TEST(LineTableFind, LastRowAtOrBelowUnlessItEndsASequence) {
  LineTable t;
  t.files = {"???", "/src/a.c"};
  t.rows = {{0x10, 3, 1, 1, false},
            {0x18, 4, 2, 1, false},
            {0x20, 0, 0, 1, true},
            {0x40, 9, 0, 1, false},
            {0x48, 0, 0, 1, true}};
  // As decoded, and packed by compact() (which drops nothing here), the same answers.
  for (int packed = 0; packed < 2; ++packed) {
    SCOPED_TRACE(packed ? "packed" : "rows");
    if (packed) {
      t.compact();
      ASSERT_EQ(t.packed.size(), 5u);
      ASSERT_EQ(t.rows.capacity(), 0u);  // the wide rows' memory is given back
    }
    EXPECT_FALSE(t.find(0x0f));
    ASSERT_TRUE(t.find(0x10));
    EXPECT_EQ(t.find(0x10)->line, 3u);
    EXPECT_EQ(t.find(0x10)->column, 1u);
    EXPECT_EQ(t.find(0x10)->file, 1u);
    EXPECT_EQ(t.find(0x1f)->line, 4u);
    EXPECT_FALSE(t.find(0x20));  // between sequences
    EXPECT_FALSE(t.find(0x3f));
    EXPECT_EQ(t.find(0x47)->line, 9u);
    EXPECT_EQ(t.find(0x47)->address, 0x40u);
    EXPECT_FALSE(t.find(0x48));
    EXPECT_FALSE(t.find(UINT64_MAX));
  }
}

// Rows more than 4 GiB apart (a tombstone sequence at -1) stay unpacked and answer as before.
TEST(LineTableFind, TablesSpanningMoreThan4GiBStayUnpacked) {
  LineTable t;
  t.files = {"???", "/src/a.c"};
  t.rows = {{0x10, 3, 1, 1, false},
            {0x20, 0, 0, 1, true},
            {UINT64_MAX - 8, 7, 0, 1, false},
            {UINT64_MAX, 0, 0, 1, true}};
  t.compact();
  EXPECT_TRUE(t.packed.empty());
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.find(0x18)->line, 3u);
  EXPECT_FALSE(t.find(0x100));
  EXPECT_EQ(t.find(UINT64_MAX - 1)->line, 7u);
}

// Every truncation of a real line program, and random bytes, are refused or decoded within bounds
// (AddressSanitizer in the fuzz target checks the bounds; here: no crash and sane results).
TEST(LineTableBadInput, TruncatedAndRandomProgramsAreRefusedOrBounded) {
  LibdwFile file(fixture("c_clang_dwarf5"));
  ASSERT_NE(file.dwarf(), nullptr);
  const LineSections& real = file.line_sections();
  std::vector<uint8_t> bytes(real.line.begin(), real.line.end());
  size_t refused = 0;
  for (size_t len = 0; len < bytes.size(); len += bytes.size() / 211 + 1) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
    LineSections s = real;
    s.line = cut;
    LineTable t;
    if (!decode_line_table(s, 0, "/comp", 8, t)) ++refused;
  }
  EXPECT_GT(refused, 0u);
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<uint8_t> noise = bytes;
    for (int k = 0; k < 8; ++k) noise[rng() % noise.size()] = static_cast<uint8_t>(rng());
    LineSections s = real;
    s.line = noise;
    LineTable t;
    if (decode_line_table(s, 0, nullptr, 8, t) && !t.rows.empty()) {
      // Whatever was decoded keeps the invariants lookups rely on.
      EXPECT_TRUE(std::is_sorted(t.rows.begin(), t.rows.end(),
                                 [](const LineRow& a, const LineRow& b) { return a.address < b.address; }));
      EXPECT_TRUE(t.rows.back().end_sequence);
    }
  }
  LineTable t;
  EXPECT_FALSE(decode_line_table(real, real.line.size(), nullptr, 8, t));  // offset past the end
  EXPECT_FALSE(decode_line_table(real, 0, nullptr, 0, t));                 // no address size
}

}  // namespace
}  // namespace hpd
