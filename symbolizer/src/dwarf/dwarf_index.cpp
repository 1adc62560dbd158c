// DwarfIndex: LLVM-compatible compile-unit and subroutine range tables built over libdw.
#include "dwarf_index.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>

#include "call_sites.h"
#include "debug_sections.h"
#include "hpd/base/elf.h"
#include "hpd/base/unique_fd.h"
#include "line_table.h"
#include "name_store.h"
#include "subroutine_map.h"

#if __has_include(<llvm/Demangle/Demangle.h>)
#include <llvm/Demangle/Demangle.h>
#else
// Built without LLVM's include path (e.g. globbed into another target): LLVM 14's declaration.
namespace llvm {
bool nonMicrosoftDemangle(const char* MangledName, std::string& Result);
}
#endif

namespace hpd {
namespace {

constexpr uint32_t kNoNode = kNoSubroutine;
constexpr size_t kMaxRangesPerDie = 1u << 16;

struct DwarfDeleter {
  void operator()(Dwarf* dwarf) const { dwarf_end(dwarf); }
};

// A call_file that names no file: DWARF's index was absent or unreadable (a real index that large
// names no file either, so nothing else needs to tell them apart).
constexpr uint32_t kNoCallFile = UINT32_MAX;

// What a lookup prints of a SubroutineNode: its name and call site, read from the DIE on first use
// and kept, so that repeated lookups in one function touch no DIE and demangle nothing. The node's
// parent is here too, and until the text is read its DIE, so that the unit's SubroutineMap::nodes
// can be freed once these are built (a subprogram's parent is kNoSubroutine: the chain ends
// there). 16 bytes: a unit holds one per function and inlined instance, read or not.
struct SubroutineDetails {
  static constexpr uint32_t kUnread = 1u << 31;
  static constexpr uint32_t kNoName = kUnread - 1;
  // A DIE too far from its unit's header for 31 bits (a unit over 2 GiB): its unit keeps `nodes`.
  static constexpr uint32_t kFarDie = kUnread - 1;
  // call_file values: a file index above these, or a column of 0xffff or more, is in
  // UnitTables::wide_call_sites.
  static constexpr uint16_t kNoFile = 0xfffe;
  static constexpr uint16_t kWide = 0xffff;

  // Read: the demangled name's index in DwarfIndex::Impl::names, or kNoName. Not read yet:
  // kUnread | the DIE's offset from its unit's header (or kFarDie).
  uint32_t text = kUnread | kFarDie;
  uint32_t parent = kNoSubroutine;
  uint32_t call_line = 0;  // where this inlined instance is called (its caller's line)
  uint16_t call_file = kNoFile;
  uint16_t call_column = 0;

  bool read() const { return (text & kUnread) == 0; }
};
static_assert(sizeof(SubroutineDetails) == 16);

// What a compile unit contributes, built on its first lookup.
struct UnitTables {
  SubroutineMap map;  // its nodes freed once `details` hold their DIEs (kept for a unit over 2 GiB)
  std::vector<SubroutineDetails> details;  // by node
  // Call sites that do not fit SubroutineDetails' 16-bit fields, by node: (file, column).
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> wide_call_sites;
  // Rows and file names; each file name already joined with comp_dir as LLVM prints it.
  LineTable lines;
};

struct Unit {
  Dwarf_Off unit_offset;  // of the unit header in .debug_info
  Dwarf_Off die_offset;
  std::unique_ptr<UnitTables> tables;
  // The tables' search part (tables->map.spans, tables->lines' rows) is present. When a plan
  // (DwarfIndex::plan) built it, it is freed once the plan's last address in the unit is
  // located: describe() needs none of it.
  bool searchable = false;
  bool built_by_plan = false;
  // Searched again after a plan freed the search part: it is rebuilt and kept from then on.
  bool keep = false;
  uint32_t planned = 0;  // addresses of the current plan in this unit not located yet
  // Where the tables' details and file names are, for prefetch(): read from this array, which
  // stays in cache, rather than from each unit's UnitTables, which does not.
  const SubroutineDetails* details = nullptr;
  const std::string* files = nullptr;
  uint32_t detail_count = 0;
  uint32_t file_count = 0;
  // The unit's call sites, read on the first DwarfIndex::call_site_callee in it.
  std::unique_ptr<UnitCallSites> call_sites = nullptr;
};

struct UnitSpan {
  uint64_t low;
  uint64_t high;
  uint32_t unit;
};

template <class Fn>
void for_each_range(Dwarf_Die* die, Fn&& fn) {
  Dwarf_Addr base = 0, start = 0, end = 0;
  ptrdiff_t offset = 0;
  size_t count = 0;
  while ((offset = dwarf_ranges(die, offset, &base, &start, &end)) > 0 && count++ < kMaxRangesPerDie) {
    fn(start, end);
  }
}

const char* attr_string(Dwarf_Die* die, unsigned name) {
  Dwarf_Attribute attr;
  if (dwarf_attr(die, name, &attr) == nullptr) return nullptr;
  return dwarf_formstring(&attr);
}

// LLVM's sys::path::append of one component: exactly one separator between the parts.
std::string join_path(const std::string& dir, const char* name) {
  if (dir.empty()) return name;
  std::string out = dir;
  if (out.back() == '/') {
    while (*name == '/') ++name;
  } else if (*name != '/') {
    out.push_back('/');
  }
  out += name;
  return out;
}

// The compile-unit address table as LLVM's DWARFDebugAranges::construct builds it: where units
// overlap (COMDAT copies mapped onto the kept one), the unit already owning the preceding piece
// keeps extending; otherwise the lowest unit offset wins.
std::vector<UnitSpan> build_unit_spans(const std::vector<UnitSpan>& raw) {
  struct Endpoint {
    uint64_t address;
    uint32_t unit;
    bool is_start;
  };
  std::vector<Endpoint> endpoints;
  endpoints.reserve(raw.size() * 2);
  for (const UnitSpan& s : raw) {
    endpoints.push_back({s.low, s.unit, true});
    endpoints.push_back({s.high, s.unit, false});
  }
  std::stable_sort(endpoints.begin(), endpoints.end(),
                   [](const Endpoint& a, const Endpoint& b) { return a.address < b.address; });
  std::vector<UnitSpan> out;
  std::multiset<uint32_t> valid;
  uint64_t previous = UINT64_MAX;
  for (const Endpoint& e : endpoints) {
    if (previous < e.address && !valid.empty()) {
      if (!out.empty() && out.back().high == previous && valid.count(out.back().unit) != 0) {
        out.back().high = e.address;
      } else {
        out.push_back({previous, e.address, *valid.begin()});
      }
    }
    if (e.is_start) {
      valid.insert(e.unit);
    } else if (auto it = valid.find(e.unit); it != valid.end()) {
      valid.erase(it);
    }
    previous = e.address;
  }
  return out;
}

// Heap that libdw holds for decompressed sections: they are inflated into malloc'd buffers.
size_t decompressed_debug_bytes(Elf* elf) {
  size_t total = 0;
  for (const ElfSection& s : ElfView(elf).sections()) {
    if (s.name == nullptr) continue;
    if ((s.header.sh_flags & SHF_COMPRESSED) != 0) {
      GElf_Chdr chdr;
      if (gelf_getchdr(s.scn, &chdr) != nullptr) total += chdr.ch_size;
    } else if (std::strncmp(s.name, ".zdebug", 7) == 0) {
      total += s.header.sh_size * 4;  // the real size sits in the section data; a rough ratio is enough here
    }
  }
  return total;
}

}  // namespace

struct DwarfIndex::Impl {
  using Place = DwarfIndex::Place;
  UniqueFd fd;  // declared before elf and dwarf: closed after them
  ElfHandle elf;
  std::unique_ptr<Dwarf, DwarfDeleter> dwarf;
  std::vector<Unit> units;
  std::vector<UnitSpan> unit_spans;  // sorted, disjoint
  // Where each unit span starts when the covered bytes are laid out unit by unit (plan()'s order
  // keys), and the bytes covered in all.
  std::vector<uint64_t> unit_major_low;
  uint64_t covered_bytes = 0;
  size_t decompressed_bytes = 0;
  LineSections line_sections;
  DebugInfoSections info_sections;
  // Names and call sites straight from the sections; null when the walker is not usable.
  std::unique_ptr<DieTextReader> text_reader;
  // The own DIE walker reads little-endian, linked files only (ET_REL needs relocations).
  bool walker_usable = false;

  NameRewrite rewrite_name = nullptr;

  mutable std::mutex mutex;
  // Demangled names by the DWARF string they came from (strings live as long as `dwarf`).
  mutable NameStore names;
  // Heap held by unit tables and names, kept up to date as they are built so that measuring is
  // cheap enough for the module cache to do often.
  mutable size_t table_bytes = 0;
  mutable size_t line_rows_from_libdw = 0;
  // The unit's tables, built (or their search part rebuilt) if need be.
  UnitTables* tables_for(uint32_t unit_index, bool planned) const;
  // The unit's subroutine map: the own DIE walker's, or libdw's where it cannot read the unit.
  void walk_unit(const Unit& unit, SubroutineMap& map) const;
  void rebuild_search_part(Unit& unit) const;
  void release_search_part(Unit& unit) const;
  // The last address locate_planned() answered, for repeats (kNone unit: none yet).
  mutable uint64_t planned_vaddr = 0;
  mutable Place planned_place;
  // The unit covering vaddr, or unit_spans.end().
  std::vector<UnitSpan>::const_iterator unit_span_of(uint64_t vaddr) const;
  void load_lines(UnitTables& t, Dwarf_Die* cudie, const std::string& comp_dir) const;
  uint32_t demangled(const char* raw) const;
  void read_details(const Unit& unit, const UnitTables& t, uint32_t node) const;
  // DwarfIndex::lookup's and locate_planned's search, and describe, with `mutex` held.
  Place locate(uint64_t vaddr, bool planned) const;
  void describe(const Place& place, std::vector<SourceFrameView>& frames) const;
};

DwarfIndex::DwarfIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DwarfIndex::~DwarfIndex() = default;

std::unique_ptr<DwarfIndex> DwarfIndex::open(const std::string& path, std::string* error,
                                             NameRewrite rewrite_name) {
  auto fail = [&](std::string message) -> std::unique_ptr<DwarfIndex> {
    if (error != nullptr) *error = path + ": " + std::move(message);
    return nullptr;
  };
  auto impl = std::make_unique<Impl>();
  impl->rewrite_name = rewrite_name;
  impl->fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!impl->fd) return fail(std::string("cannot open: ") + std::strerror(errno));
  impl->elf = ElfHandle::open_fd(impl->fd.get(), ELF_C_READ_MMAP);
  if (!impl->elf.is_elf()) {
    return fail(std::string("not an ELF file: ") + elf_errmsg(-1));
  }
  impl->decompressed_bytes = decompressed_debug_bytes(impl->elf.get());
  // libdw inflates SHF_COMPRESSED and .zdebug sections itself while opening.
  impl->dwarf.reset(dwarf_begin_elf(impl->elf.get(), DWARF_C_READ, nullptr));
  if (!impl->dwarf) return fail(std::string("no usable DWARF: ") + dwarf_errmsg(-1));
  Elf* elf = impl->elf.get();
  DebugSections sections = read_debug_sections(elf);
  impl->line_sections = sections.lines;
  impl->info_sections = sections.info;
  GElf_Ehdr ehdr;
  impl->walker_usable =
      gelf_getehdr(elf, &ehdr) != nullptr && ehdr.e_ident[EI_DATA] == ELFDATA2LSB && ehdr.e_type != ET_REL;
  if (impl->walker_usable) impl->text_reader = std::make_unique<DieTextReader>(impl->info_sections);

  std::vector<UnitSpan> raw;
  Dwarf_CU* cu = nullptr;
  Dwarf_CU* next = nullptr;
  Dwarf_Half version = 0;
  uint8_t unit_type = 0;
  Dwarf_Die cudie, subdie;
  while (dwarf_get_units(impl->dwarf.get(), cu, &next, &version, &unit_type, &cudie, &subdie) == 0) {
    cu = next;
    // Type units carry no code; skeleton units keep their line table in this file.
    if (unit_type != DW_UT_compile && unit_type != DW_UT_partial && unit_type != DW_UT_skeleton) continue;
    auto index = static_cast<uint32_t>(impl->units.size());
    bool any = false;
    for_each_range(&cudie, [&](uint64_t low, uint64_t high) {
      if (low < high) {
        raw.push_back({low, high, index});
        any = true;
      }
    });
    if (any) {
      const Dwarf_Off die_offset = dwarf_dieoffset(&cudie);
      impl->units.push_back({die_offset - dwarf_cuoffset(&cudie), die_offset, nullptr});
    }
  }
  if (impl->units.empty()) return fail("DWARF has no compile unit with address ranges");
  impl->unit_spans = build_unit_spans(raw);
  impl->units.shrink_to_fit();
  impl->unit_spans.shrink_to_fit();
  {
    // Spans ordered by unit, then address (stable: unit_spans is in address order).
    std::vector<uint32_t> by_unit(impl->unit_spans.size());
    for (size_t i = 0; i < by_unit.size(); ++i) by_unit[i] = static_cast<uint32_t>(i);
    std::stable_sort(by_unit.begin(), by_unit.end(), [&](uint32_t a, uint32_t b) {
      return impl->unit_spans[a].unit < impl->unit_spans[b].unit;
    });
    impl->unit_major_low.resize(by_unit.size());
    for (uint32_t i : by_unit) {
      impl->unit_major_low[i] = impl->covered_bytes;
      impl->covered_bytes += impl->unit_spans[i].high - impl->unit_spans[i].low;
    }
  }
  return std::unique_ptr<DwarfIndex>(new DwarfIndex(std::move(impl)));
}

// Heap held by the search part of a unit's tables.
size_t search_part_bytes(const UnitTables& t) {
  return t.map.spans.capacity() * sizeof(SubroutineSpan) +
         t.map.long_span_ends.capacity() * sizeof(t.map.long_span_ends[0]) +
         t.lines.rows.capacity() * sizeof(LineRow) + t.lines.packed.capacity() * sizeof(LineTable::PackedRow);
}

UnitTables* DwarfIndex::Impl::tables_for(uint32_t unit_index, bool planned) const {
  // The cache is logically const: it only memoizes what the file already says.
  Unit& unit = const_cast<Unit&>(units[unit_index]);
  if (unit.tables) {
    if (!unit.searchable) rebuild_search_part(unit);
    return unit.tables.get();
  }
  unit.tables = std::make_unique<UnitTables>();
  unit.searchable = true;
  unit.built_by_plan = planned;
  UnitTables& t = *unit.tables;
  Dwarf_Die cudie;
  if (dwarf_offdie(dwarf.get(), unit.die_offset, &cudie) == nullptr) return &t;
  const char* dir = attr_string(&cudie, DW_AT_comp_dir);
  walk_unit(unit, t.map);
  // The details take over the nodes' parents and DIEs; the nodes go unless a DIE lies too far
  // from the unit's header for the details' 31 bits.
  t.details.resize(t.map.nodes.size());
  bool all_near = true;
  for (size_t i = 0; i < t.details.size(); ++i) {
    const SubroutineNode& node = t.map.nodes[i];
    const uint64_t distance = node.die_offset - unit.unit_offset;
    const bool near = node.die_offset >= unit.unit_offset && distance < SubroutineDetails::kFarDie;
    all_near = all_near && near;
    t.details[i].text =
        SubroutineDetails::kUnread | (near ? static_cast<uint32_t>(distance) : SubroutineDetails::kFarDie);
    t.details[i].parent = node.parent;
  }
  if (all_near) std::vector<SubroutineNode>().swap(t.map.nodes);
  load_lines(t, &cudie, dir != nullptr ? dir : "");
  unit.details = t.details.data();
  unit.files = t.lines.files.data();
  unit.detail_count = static_cast<uint32_t>(std::min<size_t>(t.details.size(), UINT32_MAX));
  unit.file_count = static_cast<uint32_t>(std::min<size_t>(t.lines.files.size(), UINT32_MAX));
  constexpr size_t kLibdwPerUnitTouched = 2048;  // its abbreviation table, kept by libdw
  table_bytes += kLibdwPerUnitTouched + sizeof(UnitTables) + t.map.nodes.capacity() * sizeof(SubroutineNode) +
                 t.details.capacity() * sizeof(SubroutineDetails) +
                 t.map.spans.capacity() * sizeof(SubroutineSpan) + t.lines.memory_bytes();
  return &t;
}

void DwarfIndex::Impl::walk_unit(const Unit& unit, SubroutineMap& map) const {
  if (!walker_usable || !walk_subroutines(info_sections, unit.unit_offset, map)) {
    walk_subroutines_libdw(dwarf.get(), unit.die_offset, map);
  }
}

void DwarfIndex::Impl::rebuild_search_part(Unit& unit) const {
  UnitTables& t = *unit.tables;
  unit.searchable = true;
  unit.keep = true;
  Dwarf_Die cudie;
  if (dwarf_offdie(dwarf.get(), unit.die_offset, &cudie) == nullptr) return;
  const char* dir = attr_string(&cudie, DW_AT_comp_dir);
  SubroutineMap map;
  walk_unit(unit, map);
  // The same DIEs give the same nodes in the same order, which the details still describe.
  if (map.nodes.size() == t.details.size()) {
    t.map.spans = std::move(map.spans);
    t.map.long_span_ends = std::move(map.long_span_ends);
  }
  UnitTables fresh;
  load_lines(fresh, &cudie, dir != nullptr ? dir : "");
  t.lines.rows = std::move(fresh.lines.rows);
  t.lines.packed = std::move(fresh.lines.packed);
  t.lines.base = fresh.lines.base;
  table_bytes += search_part_bytes(t);
}

void DwarfIndex::Impl::release_search_part(Unit& unit) const {
  if (!unit.tables || !unit.searchable || !unit.built_by_plan || unit.keep) return;
  UnitTables& t = *unit.tables;
  table_bytes -= std::min(table_bytes, search_part_bytes(t));
  std::vector<SubroutineSpan>().swap(t.map.spans);
  std::vector<std::pair<uint64_t, uint64_t>>().swap(t.map.long_span_ends);
  std::vector<LineRow>().swap(t.lines.rows);
  std::vector<LineTable::PackedRow>().swap(t.lines.packed);
  unit.searchable = false;
}

void DwarfIndex::Impl::load_lines(UnitTables& t, Dwarf_Die* cudie, const std::string& comp_dir) const {
  Dwarf_Attribute attr;
  Dwarf_Word offset = 0;
  uint8_t address_size = 0, offset_size = 0;
  Dwarf_Die unit_die;
  const bool decoded = dwarf_attr(cudie, DW_AT_stmt_list, &attr) != nullptr &&
                       dwarf_formudata(&attr, &offset) == 0 &&
                       dwarf_diecu(cudie, &unit_die, &address_size, &offset_size) != nullptr &&
                       decode_line_table(line_sections, offset, comp_dir.empty() ? nullptr : comp_dir.c_str(),
                                         address_size, t.lines);
  if (!decoded) {
    // A form or layout the decoder does not read (or no line table): libdw's answer, copied.
    t.lines = LineTable{};
    Dwarf_Lines* lines = nullptr;
    Dwarf_Files* files = nullptr;
    size_t count = 0, file_count = 0;
    if (dwarf_getsrclines(cudie, &lines, &count) != 0) count = 0;
    if (dwarf_getsrcfiles(cudie, &files, &file_count) != 0) file_count = 0;
    line_rows_from_libdw += count;
    t.lines.rows.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      Dwarf_Line* line = dwarf_onesrcline(lines, i);
      LineRow row;
      Dwarf_Addr address = 0;
      int lineno = 0, column = 0;
      bool end_sequence = false;
      size_t file = 0;
      Dwarf_Files* row_files = nullptr;
      if (line == nullptr || dwarf_lineaddr(line, &address) != 0) continue;
      dwarf_lineno(line, &lineno);
      dwarf_linecol(line, &column);
      dwarf_lineendsequence(line, &end_sequence);
      if (dwarf_line_file(line, &row_files, &file) != 0) file = 0;
      row.address = address;
      row.line = static_cast<uint32_t>(std::max(lineno, 0));
      row.column = static_cast<uint32_t>(std::max(column, 0));
      row.file = static_cast<uint32_t>(file);
      row.end_sequence = end_sequence;
      t.lines.rows.push_back(row);
    }
    for (size_t i = 0; i < file_count; ++i) {
      const char* name = dwarf_filesrc(files, i, nullptr, nullptr);
      t.lines.files.emplace_back(name != nullptr ? name : "");
    }
  }
  t.lines.compact();
  // libdw (and so the decoder) prefixed each file's directory; a relative result still lacks
  // comp_dir (DWARF 5 directory entries are relative to it).
  for (std::string& name : t.lines.files) {
    if (!name.empty() && name[0] != '/') name = join_path(comp_dir, name.c_str());
  }
}

uint32_t DwarfIndex::Impl::demangled(const char* raw) const {
  if (raw == nullptr) return SubroutineDetails::kNoName;
  if (const uint32_t index = names.find(raw); index != NameStore::kNone) return index;
  // More names than a 31-bit index holds would take far more memory than any machine has.
  if (names.size() >= SubroutineDetails::kNoName) return SubroutineDetails::kNoName;
  std::string demangled = demangle_llvm_style(raw);
  if (rewrite_name != nullptr && demangled.find('$') != std::string::npos)
    demangled = rewrite_name(demangled);
  return names.add(raw, demangled);
}

void DwarfIndex::Impl::read_details(const Unit& unit, const UnitTables& t, uint32_t node) const {
  SubroutineDetails& details = const_cast<SubroutineDetails&>(t.details[node]);
  const uint32_t distance = details.text & ~SubroutineDetails::kUnread;
  const uint64_t die_offset =
      distance != SubroutineDetails::kFarDie ? unit.unit_offset + distance : t.map.nodes[node].die_offset;
  // Only inlined instances have a call site. Both readers hand out pointers into the same
  // section bytes, so `names` demangles each string once whichever read it.
  NodeText text;
  const bool call_site = details.parent != kNoNode;
  if (!text_reader || !text_reader->read(die_offset, call_site, text)) {
    read_node_text_libdw(dwarf.get(), die_offset, call_site, text);
  }
  details.text = demangled(text.name);
  details.call_line = text.call_line;
  const uint32_t file = text.has_call_file ? text.call_file : kNoCallFile;
  if (file < SubroutineDetails::kNoFile && text.call_column < SubroutineDetails::kWide) {
    details.call_file = static_cast<uint16_t>(file);
    details.call_column = static_cast<uint16_t>(text.call_column);
  } else if (file == kNoCallFile && text.call_column < SubroutineDetails::kWide) {
    details.call_file = SubroutineDetails::kNoFile;
    details.call_column = static_cast<uint16_t>(text.call_column);
  } else {
    details.call_file = SubroutineDetails::kWide;
    details.call_column = 0;
    const_cast<UnitTables&>(t).wide_call_sites[node] = {file, text.call_column};
    table_bytes += 48;  // a hash node
  }
}

std::vector<SourceFrame> DwarfIndex::lookup(uint64_t vaddr) const {
  std::vector<SourceFrameView> views;
  lookup(vaddr, views);
  std::vector<SourceFrame> frames(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    frames[i] = {std::string(views[i].function), std::string(views[i].file), views[i].line, views[i].column};
  }
  return frames;
}

void DwarfIndex::lookup(uint64_t vaddr, std::vector<SourceFrameView>& frames) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->describe(impl_->locate(vaddr, false), frames);
}

std::vector<uint64_t> DwarfIndex::plan(std::span<const uint64_t> vaddrs) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& d = *impl_;
  d.planned_place = Place{};
  for (Unit& u : d.units) u.planned = 0;
  std::vector<uint64_t> keys(vaddrs.size());
  for (size_t i = 0; i < vaddrs.size(); ++i) {
    auto it = d.unit_span_of(vaddrs[i]);
    if (it == d.unit_spans.end()) {
      keys[i] = d.covered_bytes;  // after every unit's addresses
      continue;
    }
    keys[i] = d.unit_major_low[static_cast<size_t>(it - d.unit_spans.begin())] + (vaddrs[i] - it->low);
    Unit& u = d.units[it->unit];
    u.planned += u.planned != UINT32_MAX ? 1 : 0;  // a unit asked 2^32 - 1 times is kept
  }
  return keys;
}

DwarfIndex::Place DwarfIndex::locate_planned(uint64_t vaddr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& d = *impl_;
  if (d.planned_place.unit != Place::kNone && d.planned_vaddr == vaddr) {
    // A repeat: counted against the plan, answered without searching (and so without the
    // search part, which the previous call may have freed).
    Unit& unit = d.units[d.planned_place.unit];
    if (unit.planned > 0 && unit.planned != UINT32_MAX && --unit.planned == 0) d.release_search_part(unit);
    return d.planned_place;
  }
  d.planned_vaddr = vaddr;
  d.planned_place = d.locate(vaddr, true);
  return d.planned_place;
}

std::vector<UnitSpan>::const_iterator DwarfIndex::Impl::unit_span_of(uint64_t vaddr) const {
  auto it = std::partition_point(unit_spans.begin(), unit_spans.end(),
                                 [&](const UnitSpan& s) { return s.high <= vaddr; });
  return it != unit_spans.end() && it->low <= vaddr ? it : unit_spans.end();
}

void DwarfIndex::describe(const Place& place, std::vector<SourceFrameView>& frames) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->describe(place, frames);
}

DwarfIndex::Place DwarfIndex::Impl::locate(uint64_t vaddr, bool planned) const {
  Place place;
  auto cu_it = unit_span_of(vaddr);
  if (cu_it == unit_spans.end()) return place;
  place.unit = cu_it->unit;
  Unit& unit = const_cast<Unit&>(units[cu_it->unit]);
  UnitTables& t = *tables_for(cu_it->unit, planned);
  if (const std::optional<LineRow> row = t.lines.find(vaddr)) {
    place.file = row->file;
    place.line = row->line;
    place.column = row->column;
  }

  // Innermost subroutine, as LLVM's DWARFUnit::getSubroutineForAddress finds it.
  const std::vector<SubroutineSpan>& spans = t.map.spans;
  auto span_it = std::upper_bound(spans.begin(), spans.end(), vaddr,
                                  [](uint64_t a, const SubroutineSpan& s) { return a < s.low; });
  if (span_it != spans.begin() && vaddr < t.map.high_of(*std::prev(span_it)))
    place.node = std::prev(span_it)->node;
  // The chain's names and call sites are read now, while this unit's DIEs are at hand.
  const std::vector<SubroutineDetails>& details = t.details;
  size_t depth = 0;
  for (uint32_t n = place.node; n != kNoNode && depth < details.size(); n = details[n].parent, ++depth) {
    if (!details[n].read()) read_details(unit, t, n);
  }
  // The plan's last address in this unit: its search part has done its work.
  if (planned && unit.planned > 0 && unit.planned != UINT32_MAX && --unit.planned == 0)
    release_search_part(unit);
  return place;
}

void DwarfIndex::Impl::describe(const Place& place, std::vector<SourceFrameView>& frames) const {
  frames.clear();
  if (place.unit >= units.size() || !units[place.unit].tables) return;
  const Unit& unit = units[place.unit];
  const UnitTables& t = *unit.tables;
  const std::vector<SubroutineDetails>& details = t.details;
  const uint32_t leaf = place.node < details.size() ? place.node : kNoNode;
  const auto file_name = [&](uint32_t file) {
    return file < t.lines.files.size() ? std::string_view(t.lines.files[file]) : std::string_view();
  };

  // Chain length first, so that the levels can be written outermost first.
  size_t depth = 0;
  for (uint32_t n = leaf; n != kNoNode && depth < details.size(); n = details[n].parent) ++depth;
  frames.resize(std::max<size_t>(depth, 1));
  SourceFrameView& innermost = frames.back();
  innermost.line = place.line;
  innermost.column = place.column;
  innermost.file = file_name(place.file);
  if (depth == 0) return;
  // Walk outwards: level i (from the innermost) is named by its node; the level outside it
  // executes the node's call site.
  uint32_t n = leaf;
  for (size_t i = 0; i < depth; ++i, n = details[n].parent) {
    if (!details[n].read()) read_details(unit, t, n);
    const SubroutineDetails& node = details[n];
    SourceFrameView& f = frames[depth - 1 - i];
    f.function = names.view(node.text);
    if (i + 1 == depth) break;
    SourceFrameView& caller = frames[depth - 2 - i];
    caller.line = node.call_line;
    if (node.call_file < SubroutineDetails::kNoFile) {
      caller.column = node.call_column;
      caller.file = file_name(node.call_file);
    } else if (node.call_file == SubroutineDetails::kNoFile) {
      caller.column = node.call_column;
      caller.file = {};
    } else {
      const auto wide = t.wide_call_sites.find(n);
      caller.column = wide != t.wide_call_sites.end() ? wide->second.second : 0;
      caller.file = wide != t.wide_call_sites.end() ? file_name(wide->second.first) : std::string_view();
    }
  }
}

void DwarfIndex::prefetch(const Place& place, int step) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (place.unit >= impl_->units.size()) return;
  const Unit& u = impl_->units[place.unit];
  // Addresses only: loading the file name's string object here to find its characters would
  // wait for the very cache miss this is meant to hide.
  if (step == 0) {
    if (place.node < u.detail_count) __builtin_prefetch(u.details + place.node);
    if (place.file < u.file_count) __builtin_prefetch(u.files + place.file);
    return;
  }
  if (place.node < u.detail_count) {
    const SubroutineDetails& leaf = u.details[place.node];
    if (leaf.parent < u.detail_count) __builtin_prefetch(u.details + leaf.parent);
    if (leaf.read()) impl_->names.prefetch(leaf.text);
  }
  if (place.file < u.file_count) __builtin_prefetch(u.files[place.file].data());
}

size_t DwarfIndex::memory_bytes() const {
  const Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  size_t total =
      sizeof(Impl) + d.units.capacity() * sizeof(Unit) + d.unit_spans.capacity() * sizeof(UnitSpan);
  total += d.decompressed_bytes + d.table_bytes + d.names.memory_bytes();
  if (d.text_reader) total += d.text_reader->memory_bytes();
  // libdw keeps, per compile unit, its CU record and unit search tree entry (and per unit touched
  // its abbreviation table); per line row it decoded itself a Dwarf_Line.
  constexpr size_t kLibdwPerUnit = 256;
  constexpr size_t kLibdwPerLineRow = 48;
  total += d.units.size() * kLibdwPerUnit + d.line_rows_from_libdw * kLibdwPerLineRow;
  return total;
}

std::vector<CodeRange> DwarfIndex::call_site_callee(uint64_t return_vaddr) const {
  if (return_vaddr == 0) return {};
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& d = *impl_;
  // The call instruction ends at the return address: its last byte is in the caller's unit.
  auto it = d.unit_span_of(return_vaddr - 1);
  if (it == d.unit_spans.end()) return {};
  Unit& unit = d.units[it->unit];
  size_t before = 0;
  if (!unit.call_sites) {
    unit.call_sites = std::make_unique<UnitCallSites>(d.dwarf.get(), unit.die_offset);
  } else {
    before = unit.call_sites->memory_bytes();
  }
  std::vector<CodeRange> code = unit.call_sites->callee_code(return_vaddr);
  d.table_bytes += unit.call_sites->memory_bytes() - before;
  return code;
}

size_t DwarfIndex::unit_count() const {
  return impl_->units.size();
}

std::string demangle_llvm_style(const char* name) {
  if (name == nullptr) return {};
  std::string out;
  if (!llvm::nonMicrosoftDemangle(name, out)) {
    // LLVM 14 refuses some libstdc++ template names that libstdc++'s own demangler (c++filt's)
    // reads; those are better shown demangled than mangled.
    if (std::strncmp(name, "_Z", 2) != 0) return name;
    int status = 0;
    char* gnu = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    if (status != 0 || gnu == nullptr) {
      std::free(gnu);
      return name;
    }
    out = gnu;
    std::free(gnu);
    return out;
  }
  // Legacy Rust symbols are Itanium names ending in a 17h<16 hex>E hash component.
  size_t len = std::strlen(name);
  if (len > 20 && std::strncmp(name, "_ZN", 3) == 0 && name[len - 1] == 'E' &&
      std::strncmp(name + len - 20, "17h", 3) == 0 &&
      std::all_of(name + len - 17, name + len - 1,
                  [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
    constexpr size_t kSuffix = 19;  // "::h" + 16 hex digits
    if (out.size() > kSuffix && out.compare(out.size() - kSuffix, 3, "::h") == 0)
      out.resize(out.size() - kSuffix);
  }
  return out;
}

}  // namespace hpd
