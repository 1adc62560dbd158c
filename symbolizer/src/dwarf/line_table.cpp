// LineTable: a bounds-checked decoder of DWARF line programs that reproduces libdw's row order and
// file names, without libdw's per-row allocations and full sort.
#include "line_table.h"

#include <dwarf.h>

#include <algorithm>
#include <cstring>

#include "hpd/base/dwarf_bytes.h"

namespace hpd {
namespace {

// Reads little-endian DWARF data; every read past the end sets `bad` and yields zero, so a
// malformed program ends the decode instead of reading out of bounds.
class Reader {
 public:
  Reader(const uint8_t* begin, const uint8_t* end) : p_(begin), end_(end) {}

  bool bad() const { return bad_; }
  bool at_end() const { return p_ >= end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* position() const { return p_; }

  uint64_t fixed(size_t bytes) {
    uint64_t v = 0;
    return dwarf_bytes::read_fixed(p_, end_, bytes, v) ? v : fail();
  }
  uint8_t u8() { return static_cast<uint8_t>(fixed(1)); }

  uint64_t uleb() {
    uint64_t v = 0;
    return dwarf_bytes::read_uleb(p_, end_, v) ? v : fail();
  }

  int64_t sleb() {
    int64_t v = 0;
    return dwarf_bytes::read_sleb(p_, end_, v) ? v : static_cast<int64_t>(fail());
  }

  const char* cstr() {
    const char* s = dwarf_bytes::read_cstr(p_, end_);
    if (s == nullptr) fail();
    return s;
  }

  void skip(size_t bytes) {
    if (left() < bytes) {
      fail();
      return;
    }
    p_ += bytes;
  }

 private:
  uint64_t fail() {
    bad_ = true;
    p_ = end_;
    return 0;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  bool bad_ = false;
};

const char* string_at(std::span<const uint8_t> section, uint64_t offset) {
  if (offset >= section.size()) return nullptr;
  const void* nul = std::memchr(section.data() + offset, 0, section.size() - offset);
  return nul == nullptr ? nullptr : reinterpret_cast<const char*>(section.data() + offset);
}

// One DWARF 5 entry-format field: a string (for DW_LNCT_path) or a number (directory index),
// or skipped. Returns false on a form this decoder does not know.
bool read_form(Reader& r, const LineSections& s, uint64_t form, unsigned offset_size, const char** text,
               uint64_t* number) {
  *text = nullptr;
  *number = 0;
  switch (form) {
    case DW_FORM_string: *text = r.cstr(); return *text != nullptr;
    case DW_FORM_line_strp: *text = string_at(s.line_str, r.fixed(offset_size)); return *text != nullptr;
    case DW_FORM_strp: *text = string_at(s.str, r.fixed(offset_size)); return *text != nullptr;
    case DW_FORM_udata: *number = r.uleb(); return true;
    case DW_FORM_data1: *number = r.fixed(1); return true;
    case DW_FORM_data2: *number = r.fixed(2); return true;
    case DW_FORM_data4: *number = r.fixed(4); return true;
    case DW_FORM_data8: *number = r.fixed(8); return true;
    case DW_FORM_data16: r.skip(16); return true;
    case DW_FORM_block: r.skip(r.uleb()); return true;
    case DW_FORM_block1: r.skip(r.fixed(1)); return true;
    case DW_FORM_block2: r.skip(r.fixed(2)); return true;
    case DW_FORM_block4: r.skip(r.fixed(4)); return true;
    default: return false;  // strx and friends need the unit's string offsets: leave them to libdw
  }
}

// libdw's naming: absolute names as they are, others prefixed with their directory and a '/'
// (no directory at all, i.e. no DW_AT_comp_dir for directory 0, leaves them relative).
std::string join_with_directory(const char* dir, const char* name) {
  if (name[0] == '/' || dir == nullptr) return name;
  std::string out = dir;
  out.push_back('/');
  out += name;
  return out;
}

struct Format {
  uint64_t content;
  uint64_t form;
};

// Reads a DWARF 5 directory or file entry list into (path, directory index) pairs.
bool read_entry_list(Reader& r, const LineSections& s, unsigned offset_size,
                     std::vector<std::pair<const char*, uint64_t>>& out) {
  const uint8_t format_count = r.u8();
  std::vector<Format> formats(format_count);
  for (Format& f : formats) {
    f.content = r.uleb();
    f.form = r.uleb();
  }
  const uint64_t count = r.uleb();
  if (r.bad() || (format_count == 0 && count != 0) || count > r.left()) return false;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const char* path = nullptr;
    uint64_t dir = 0;
    for (const Format& f : formats) {
      const char* text = nullptr;
      uint64_t number = 0;
      if (!read_form(r, s, f.form, offset_size, &text, &number) || r.bad()) return false;
      if (f.content == DW_LNCT_path) path = text;
      if (f.content == DW_LNCT_directory_index) dir = number;
    }
    if (path == nullptr) return false;
    out.emplace_back(path, dir);
  }
  return true;
}

// libdw's row order: by address, an end_sequence row first, else program order (a stable sort).
bool row_before(const LineRow& a, const LineRow& b) {
  if (a.address != b.address) return a.address < b.address;
  return a.end_sequence && !b.end_sequence;
}

// The stable sort of all rows, computed from whole sequences: a sequence's rows are normally in
// order already, so sequences are ordered by their lowest address and only clusters of sequences
// whose address intervals overlap or touch (e.g. discarded COMDAT code, all at address 0) are
// sorted row by row, in program order. Rows of different clusters never compare equal, so the
// result is exactly std::stable_sort of all rows. Sorting thousands of sequences instead of
// millions of rows was 15% of the start-up work on large C++ units.
void sort_rows(std::vector<LineRow>& rows) {
  struct Sequence {
    uint64_t low;
    uint64_t high;
    size_t begin;
    size_t end;
    bool sorted;
  };
  std::vector<Sequence> sequences;
  for (size_t begin = 0, i = 0; i < rows.size(); ++i) {
    if (!rows[i].end_sequence && i + 1 != rows.size()) continue;
    Sequence seq{UINT64_MAX, 0, begin, i + 1, true};
    for (size_t k = begin; k <= i; ++k) {
      seq.low = std::min(seq.low, rows[k].address);
      seq.high = std::max(seq.high, rows[k].address);
      if (k > begin && row_before(rows[k], rows[k - 1])) seq.sorted = false;
    }
    sequences.push_back(seq);
    begin = i + 1;
  }
  std::sort(sequences.begin(), sequences.end(), [](const Sequence& a, const Sequence& b) {
    return a.low != b.low ? a.low < b.low : a.begin < b.begin;
  });
  std::vector<LineRow> sorted;
  sorted.reserve(rows.size());
  std::vector<Sequence> cluster;
  for (size_t i = 0; i < sequences.size();) {
    cluster.assign(1, sequences[i]);
    uint64_t high = sequences[i].high;
    for (++i; i < sequences.size() && sequences[i].low <= high; ++i) {
      cluster.push_back(sequences[i]);
      high = std::max(high, sequences[i].high);
    }
    const size_t start = sorted.size();
    if (cluster.size() > 1) {
      std::sort(cluster.begin(), cluster.end(),
                [](const Sequence& a, const Sequence& b) { return a.begin < b.begin; });
    }
    for (const Sequence& seq : cluster) {
      sorted.insert(sorted.end(), rows.begin() + static_cast<std::ptrdiff_t>(seq.begin),
                    rows.begin() + static_cast<std::ptrdiff_t>(seq.end));
    }
    if (cluster.size() > 1 || !cluster[0].sorted) {
      std::stable_sort(sorted.begin() + static_cast<std::ptrdiff_t>(start), sorted.end(), row_before);
    }
  }
  rows = std::move(sorted);
}

}  // namespace

size_t LineTable::memory_bytes() const {
  size_t total = rows.capacity() * sizeof(LineRow) + packed.capacity() * sizeof(PackedRow) +
                 files.capacity() * sizeof(std::string);
  for (const std::string& f : files) total += f.capacity() > 15 ? f.capacity() + 1 : 0;
  return total;
}

std::optional<LineRow> LineTable::find(uint64_t address) const {
  if (!packed.empty()) {
    if (address < base) return std::nullopt;
    // Past 4 GiB from the base every row lies below, as UINT32_MAX has them.
    const auto offset = static_cast<uint32_t>(std::min<uint64_t>(address - base, UINT32_MAX));
    auto it = std::upper_bound(packed.begin(), packed.end(), offset,
                               [](uint32_t a, const PackedRow& row) { return a < row.offset; });
    if (it == packed.begin()) return std::nullopt;
    --it;
    if (it->file_and_end >> 31 != 0) return std::nullopt;
    return LineRow{base + it->offset, it->line, it->column, it->file_and_end, false};
  }
  auto it = std::upper_bound(rows.begin(), rows.end(), address,
                             [](uint64_t a, const LineRow& row) { return a < row.address; });
  if (it == rows.begin()) return std::nullopt;
  --it;
  if (it->end_sequence) return std::nullopt;
  return *it;
}

void LineTable::compact() {
  size_t kept = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const LineRow& row = rows[i];
    if (i + 1 < rows.size() && rows[i + 1].address == row.address) continue;  // shadowed
    if (kept > 0) {
      const LineRow& last = rows[kept - 1];
      if (!row.end_sequence && !last.end_sequence && row.line == last.line && row.column == last.column &&
          row.file == last.file)
        continue;
    }
    rows[kept++] = row;
  }
  rows.resize(kept);
  packed.clear();
  base = 0;
  const bool packable =
      !rows.empty() && rows.back().address - rows.front().address <= UINT32_MAX &&
      std::all_of(rows.begin(), rows.end(), [](const LineRow& r) { return r.file < (uint32_t{1} << 31); });
  if (!packable) {
    rows.shrink_to_fit();
    return;
  }
  base = rows.front().address;
  packed.reserve(rows.size());
  for (const LineRow& r : rows) {
    packed.push_back({static_cast<uint32_t>(r.address - base), r.line, r.column,
                      r.file | static_cast<uint32_t>(r.end_sequence) << 31});
  }
  std::vector<LineRow>().swap(rows);  // gives the memory back (assigning {} would keep it)
}

bool decode_line_table(const LineSections& s, uint64_t offset, const char* comp_dir, uint8_t address_size,
                       LineTable& out) {
  out.rows.clear();
  out.files.clear();
  if (offset >= s.line.size() || address_size == 0 || address_size > 8) return false;
  Reader header(s.line.data() + offset, s.line.data() + s.line.size());
  uint64_t unit_length = header.fixed(4);
  unsigned offset_size = 4;
  if (unit_length == 0xffffffffu) {
    unit_length = header.fixed(8);
    offset_size = 8;
  }
  if (header.bad() || unit_length > header.left()) return false;
  Reader r(header.position(), header.position() + unit_length);
  const uint64_t version = r.fixed(2);
  if (version < 2 || version > 5) return false;
  if (version >= 5 && (r.u8() != address_size || r.u8() != 0)) return false;
  const uint64_t header_length = r.fixed(offset_size);
  if (r.bad() || header_length > r.left()) return false;
  const uint8_t* program = r.position() + header_length;
  const uint8_t min_inst_length = r.u8();
  const uint8_t max_ops = version >= 4 ? r.u8() : 1;
  const bool default_is_stmt = r.u8() != 0;
  (void)default_is_stmt;  // is_stmt does not change which row answers an address
  const auto line_base = static_cast<int8_t>(r.u8());
  const uint8_t line_range = r.u8();
  const uint8_t opcode_base = r.u8();
  if (r.bad() || max_ops == 0 || opcode_base == 0) return false;
  uint8_t std_lengths[256] = {};
  for (unsigned i = 1; i < opcode_base; ++i) std_lengths[i] = r.u8();

  std::vector<std::pair<const char*, uint64_t>> dirs, files;
  if (version < 5) {
    dirs.emplace_back(comp_dir, 0);
    while (!r.bad() && !r.at_end() && *r.position() != 0) dirs.emplace_back(r.cstr(), 0);
    r.skip(1);
    files.emplace_back("???", 0);  // DWARF < 5 numbers files from 1
    while (!r.bad() && !r.at_end() && *r.position() != 0) {
      const char* name = r.cstr();
      const uint64_t dir = r.uleb();
      r.uleb();  // modification time
      r.uleb();  // length
      files.emplace_back(name, dir);
    }
    r.skip(1);
  } else if (!read_entry_list(r, s, offset_size, dirs) || !read_entry_list(r, s, offset_size, files)) {
    return false;
  }
  if (r.bad() || r.position() > program) return false;
  for (const auto& [name, dir] : files) {
    if (name != nullptr && name[0] != '/' && dir >= dirs.size()) return false;
  }
  const auto name_file = [&](const char* name, uint64_t dir) {
    out.files.push_back(name[0] == '/' ? std::string(name) : join_with_directory(dirs[dir].first, name));
  };
  out.files.reserve(files.size() + 1);
  for (size_t i = 0; i < files.size(); ++i) {
    if (version < 5 && i == 0) {
      out.files.emplace_back("???");
    } else {
      name_file(files[i].first, files[i].second);
    }
  }

  // The state machine (DWARF 5, 6.2.2). Rows are appended in program order; sequences usually
  // come in ascending address order, so the final sort is often skipped.
  Reader p(program, header.position() + unit_length);
  uint64_t address = 0, op_index = 0, file = 1, column = 0;
  int64_t line = 1;
  const auto advance = [&](uint64_t operation_advance) {
    address += min_inst_length * ((op_index + operation_advance) / max_ops);
    op_index = (op_index + operation_advance) % max_ops;
  };
  const auto emit = [&](bool end_sequence) {
    LineRow row;
    row.address = address;
    row.line = static_cast<uint32_t>(line);
    row.column = static_cast<uint32_t>(column);
    row.file = static_cast<uint32_t>(file);
    row.end_sequence = end_sequence;
    out.rows.push_back(row);
  };
  out.rows.reserve(unit_length / 3);
  while (!p.at_end()) {
    // The program is read once, front to back, from the mapped file: ask for the bytes further on
    // now (a hint; past the end it does nothing), as the DIE walk does.
    __builtin_prefetch(p.position() + 1024);
    const uint8_t opcode = p.u8();
    if (opcode >= opcode_base) {
      if (line_range == 0) return false;
      const unsigned adjusted = opcode - opcode_base;
      line += line_base + static_cast<int>(adjusted % line_range);
      advance(adjusted / line_range);
      emit(false);
      continue;
    }
    switch (opcode) {
      case 0: {  // extended opcode
        const uint64_t length = p.uleb();
        if (p.bad() || length == 0 || length > p.left()) return false;
        const uint8_t* next = p.position() + length;
        const uint8_t sub = p.u8();
        if (sub == DW_LNE_end_sequence) {
          emit(true);
          address = op_index = column = 0;
          file = line = 1;
        } else if (sub == DW_LNE_set_address) {
          if (length - 1 < address_size) return false;
          address = p.fixed(address_size);
          op_index = 0;
        } else if (sub == DW_LNE_define_file && version < 5) {
          const char* name = p.cstr();
          const uint64_t dir = p.uleb();
          if (p.bad() || dir >= dirs.size()) return false;
          name_file(name, dir);
        }
        // Other extended opcodes (set_discriminator, vendor ones) do not affect rows.
        if (p.bad() || p.position() > next) return false;
        p.skip(static_cast<size_t>(next - p.position()));
        break;
      }
      case DW_LNS_copy: emit(false); break;
      case DW_LNS_advance_pc: advance(p.uleb()); break;
      case DW_LNS_advance_line: line += p.sleb(); break;
      case DW_LNS_set_file: file = p.uleb(); break;
      case DW_LNS_set_column: column = p.uleb(); break;
      case DW_LNS_const_add_pc:
        if (line_range == 0) return false;
        advance((255 - opcode_base) / line_range);
        break;
      case DW_LNS_fixed_advance_pc:
        address += p.fixed(2);
        op_index = 0;
        break;
      case DW_LNS_negate_stmt:
      case DW_LNS_set_basic_block:
      case DW_LNS_set_prologue_end:
      case DW_LNS_set_epilogue_begin: break;
      default:  // set_isa and opcodes this decoder does not know: skip their ULEB arguments
        for (unsigned i = 0; i < std_lengths[opcode]; ++i) p.uleb();
        break;
    }
    if (p.bad()) return false;
  }

  if (!std::is_sorted(out.rows.begin(), out.rows.end(), row_before)) sort_rows(out.rows);
  if (!out.rows.empty()) out.rows.back().end_sequence = true;
  return true;
}

}  // namespace hpd
