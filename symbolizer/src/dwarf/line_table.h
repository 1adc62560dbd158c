// LineTable: one compile unit's DWARF line program (versions 2-5), decoded into a flat sorted array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hpd {

struct LineRow {
  uint64_t address = 0;
  uint32_t line = 0;
  uint32_t column = 0;
  uint32_t file = 0;  // index into LineTable::files, as the DWARF numbers files
  bool end_sequence = false;
};

struct LineTable {
  // Sorted the way libdw sorts (by address, an end_sequence row before others at the same
  // address, else program order), with the last row marked end_sequence as libdw forces it.
  // compact() moves them into `packed` when they fit there.
  std::vector<LineRow> rows;
  // The rows after compact(), 16 bytes each instead of 24: the address as an offset from `base`
  // and the end_sequence flag in the file index's top bit. Used when every row lies within 4 GiB
  // of the first and every file index is below 2^31 (a table with a tombstone sequence at address
  // -1 keeps `rows`).
  struct PackedRow {
    uint32_t offset;
    uint32_t line;
    uint32_t column;
    uint32_t file_and_end;  // file | end_sequence << 31
  };
  std::vector<PackedRow> packed;
  uint64_t base = 0;
  // By DWARF file index (index 0 is a placeholder "???" before DWARF 5); each name joined with its
  // include directory exactly as libdw's dwarf_filesrc gives it.
  std::vector<std::string> files;

  size_t memory_bytes() const;
  // The last row at or below `address`, unless that row ends a sequence (LLVM's rule); nullopt
  // when no row covers it.
  std::optional<LineRow> find(uint64_t address) const;
  // Drops the rows that find() never returns or that tell it nothing new: every row but the last
  // at one address, and a row with the file, line and column of the row kept before it (neither
  // ending a sequence). find() then answers every address with the same file, line and column as
  // before. Optimized code repeats positions (is_stmt, discriminator and view changes): in
  // libpython and hpctl, a third of the rows remain. Then packs them (see `packed`).
  void compact();
};

// The sections a line program refers to; empty spans for absent sections.
struct LineSections {
  std::span<const uint8_t> line;      // .debug_line
  std::span<const uint8_t> line_str;  // .debug_line_str (DW_FORM_line_strp)
  std::span<const uint8_t> str;       // .debug_str (DW_FORM_strp)
};

// Decodes the line program at `offset` in .debug_line. `comp_dir` (may be null) is directory 0
// before DWARF 5. Returns false, leaving `out` unspecified, on anything malformed or on a form it
// does not read (the caller then asks libdw); never reads outside the given sections. The rows
// keep the spare capacity of their first estimate: compact() gives it back with the dropped rows.
bool decode_line_table(const LineSections& sections, uint64_t offset, const char* comp_dir,
                       uint8_t address_size, LineTable& out);

}  // namespace hpd
