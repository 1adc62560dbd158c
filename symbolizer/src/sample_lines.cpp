// SampleLineReader: inline chains with linkage names, declaration lines and discriminators through
// libdw, for LLVM sample profiles (hpd/symbolizer/sample_lines.h).
#include "hpd/symbolizer/sample_lines.h"

#include <dwarf.h>
#include <elfutils/libdw.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "hpd/base/elf.h"

namespace hpd {
namespace {

// DW_AT_GNU_discriminator: the discriminator of an inlined subroutine's call site (LLVM, GCC).
constexpr unsigned kAtGnuDiscriminator = 0x2136;

const char* linkage_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (const unsigned name : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name}) {
    if (dwarf_attr_integrate(die, name, &attr) != nullptr) {
      if (const char* s = dwarf_formstring(&attr)) return s;
    }
  }
  return dwarf_diename(die);
}

uint32_t udata_of(Dwarf_Die* die, unsigned name) {
  Dwarf_Attribute attr;
  Dwarf_Word value = 0;
  if (dwarf_attr(die, name, &attr) == nullptr || dwarf_formudata(&attr, &value) != 0) return 0;
  return value <= UINT32_MAX ? static_cast<uint32_t>(value) : 0;
}

uint32_t decl_line_of(Dwarf_Die* die) {
  int line = 0;
  if (dwarf_decl_line(die, &line) != 0 || line < 0) return 0;
  return static_cast<uint32_t>(line);
}

bool lowest_address(Dwarf_Die* die, uint64_t& out) {
  Dwarf_Addr low = 0;
  if (dwarf_lowpc(die, &low) == 0) {
    out = low;
    return true;
  }
  Dwarf_Addr base = 0, start = 0, end = 0;
  bool any = false;
  for (ptrdiff_t off = 0; (off = dwarf_ranges(die, off, &base, &start, &end)) > 0;) {
    if (!any || start < out) out = start;
    any = true;
  }
  return any;
}

// The DIEs from `parent` down whose ranges hold `pc` (subprograms, inlined subroutines, lexical
// blocks), outermost first; namespaces and types, which have no ranges, are searched through.
// dwarf_getscopes follows an inlined instance to its abstract origin, losing the caller.
void find_scopes(Dwarf_Die& parent, uint64_t pc, std::vector<Dwarf_Die>& out, int depth) {
  if (depth > 64) return;
  Dwarf_Die child;
  if (dwarf_child(&parent, &child) != 0) return;
  do {
    switch (dwarf_tag(&child)) {
      case DW_TAG_subprogram:
      case DW_TAG_inlined_subroutine:
      case DW_TAG_lexical_block:
        if (dwarf_haspc(&child, pc) == 1) {
          out.push_back(child);
          find_scopes(child, pc, out, depth + 1);
          return;
        }
        break;
      case DW_TAG_namespace:
      case DW_TAG_class_type:
      case DW_TAG_structure_type:
      case DW_TAG_union_type: {
        const size_t before = out.size();
        find_scopes(child, pc, out, depth + 1);
        if (out.size() != before) return;
        break;
      }
      default: break;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

}  // namespace

uint32_t base_discriminator(uint32_t encoded) {
  // DILocation::getUnsignedFromPrefixEncoding: a component is 1 when zero, else its value shifted
  // left by one; a value above 0x1f is split around a flag bit (0x20).
  if ((encoded & 1) != 0) return 0;
  encoded >>= 1;
  if ((encoded & 0x20) != 0) return ((encoded >> 1) & 0xfe0) | (encoded & 0x1f);
  return encoded & 0x1f;
}

namespace {

// Calls f on each DW_TAG_subprogram under `parent`, inside namespaces and types too.
template <typename F>
void for_each_subprogram(Dwarf_Die& parent, const F& f, int depth = 0) {
  if (depth > 16) return;
  Dwarf_Die child;
  if (dwarf_child(&parent, &child) != 0) return;
  do {
    switch (dwarf_tag(&child)) {
      case DW_TAG_subprogram: f(child); break;
      case DW_TAG_namespace:
      case DW_TAG_class_type:
      case DW_TAG_structure_type:
      case DW_TAG_union_type: for_each_subprogram(child, f, depth + 1); break;
      default: break;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

}  // namespace

struct SampleLineReader::Impl {
  OpenedElf elf;
  Dwarf* dwarf = nullptr;
  // Every compile unit's address ranges, by low address: (low, high, the unit DIE's offset).
  // dwarf_addrdie needs .debug_aranges, which clang does not write.
  struct UnitRange {
    uint64_t low, high;
    Dwarf_Off die;
  };
  std::vector<UnitRange> units;

  void index_units() {
    Dwarf_Off offset = 0, next = 0;
    size_t header = 0;
    while (dwarf_nextcu(dwarf, offset, &next, &header, nullptr, nullptr, nullptr) == 0) {
      Dwarf_Die cu;
      if (dwarf_offdie(dwarf, offset + header, &cu) != nullptr) {
        Dwarf_Addr base = 0, start = 0, end = 0;
        for (ptrdiff_t off = 0; (off = dwarf_ranges(&cu, off, &base, &start, &end)) > 0;) {
          if (start < end) units.push_back({start, end, offset + header});
        }
      }
      offset = next;
    }
    std::sort(units.begin(), units.end(),
              [](const UnitRange& a, const UnitRange& b) { return a.low < b.low; });
  }

  // Per unit (by its DIE's offset), the address ranges of its subprograms, by low address, built on
  // the unit's first lookup: a lookup then reads one function's DIEs, not the unit's top level.
  std::unordered_map<Dwarf_Off, std::vector<UnitRange>> subprograms;

  static void collect_subprograms(Dwarf_Die& unit, std::vector<UnitRange>& out) {
    for_each_subprogram(unit, [&](Dwarf_Die& subprogram) {
      Dwarf_Addr base = 0, start = 0, end = 0;
      for (ptrdiff_t off = 0; (off = dwarf_ranges(&subprogram, off, &base, &start, &end)) > 0;) {
        if (start < end) out.push_back({start, end, dwarf_dieoffset(&subprogram)});
      }
    });
  }

  // The subprogram of `cu` whose ranges hold `vaddr`.
  bool subprogram_of(Dwarf_Die& cu, uint64_t vaddr, Dwarf_Die& out) {
    const Dwarf_Off key = dwarf_dieoffset(&cu);
    auto [it, inserted] = subprograms.try_emplace(key);
    std::vector<UnitRange>& ranges = it->second;
    if (inserted) {
      collect_subprograms(cu, ranges);
      std::sort(ranges.begin(), ranges.end(),
                [](const UnitRange& a, const UnitRange& b) { return a.low < b.low; });
    }
    auto at = std::upper_bound(ranges.begin(), ranges.end(), vaddr,
                               [](uint64_t a, const UnitRange& u) { return a < u.low; });
    for (int i = 0; i < 4 && at != ranges.begin(); ++i) {
      --at;
      if (vaddr < at->high) return dwarf_offdie(dwarf, at->die, &out) != nullptr;
    }
    return false;
  }

  bool unit_of(uint64_t vaddr, Dwarf_Die& cu) {
    auto it = std::upper_bound(units.begin(), units.end(), vaddr,
                               [](uint64_t a, const UnitRange& u) { return a < u.low; });
    // Ranges of different units do not overlap in real code; look back over a few in case.
    for (int i = 0; i < 4 && it != units.begin(); ++i) {
      --it;
      if (vaddr < it->high) return dwarf_offdie(dwarf, it->die, &cu) != nullptr;
    }
    return false;
  }
  ~Impl() {
    if (dwarf != nullptr) dwarf_end(dwarf);
  }
};

SampleLineReader::SampleLineReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SampleLineReader::~SampleLineReader() = default;

std::unique_ptr<SampleLineReader> SampleLineReader::open(const std::string& path, std::string* error) {
  auto impl = std::make_unique<Impl>();
  impl->elf = OpenedElf::open(path);
  if (!impl->elf) {
    if (error != nullptr) *error = "cannot read '" + path + "': " + impl->elf.error();
    return nullptr;
  }
  if (!impl->elf.view().section(".debug_info").has_bytes() &&
      !impl->elf.view().section(".zdebug_info").has_bytes()) {
    if (error != nullptr) {
      *error = "'" + path +
               "' has no debug information (.debug_info): build it with -gline-tables-only (and "
               "-fdebug-info-for-profiling), or give its separate debug file";
    }
    return nullptr;
  }
  impl->dwarf = dwarf_begin_elf(impl->elf.get(), DWARF_C_READ, nullptr);
  if (impl->dwarf == nullptr) {
    if (error != nullptr) *error = "cannot read the DWARF of '" + path + "': " + dwarf_errmsg(-1);
    return nullptr;
  }
  impl->index_units();
  return std::unique_ptr<SampleLineReader>(new SampleLineReader(std::move(impl)));
}

SampleLineAnswer SampleLineReader::locate(uint64_t vaddr) {
  SampleLineAnswer answer;
  Dwarf_Die cu;
  if (!impl_->unit_of(vaddr, cu)) return answer;
  // Innermost first: the inlined subroutines, then the subprogram that holds them.
  std::vector<Dwarf_Die> scopes;
  Dwarf_Die subprogram;
  if (impl_->subprogram_of(cu, vaddr, subprogram)) {
    scopes.push_back(subprogram);
    find_scopes(subprogram, vaddr, scopes, 1);
  } else {
    find_scopes(cu, vaddr, scopes, 0);
  }
  std::vector<Dwarf_Die*> chain;
  for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
    const int tag = dwarf_tag(&*it);
    if (tag == DW_TAG_inlined_subroutine) chain.push_back(&*it);
    if (tag == DW_TAG_subprogram) {
      chain.push_back(&*it);
      break;
    }
  }
  if (chain.empty() || dwarf_tag(chain.back()) != DW_TAG_subprogram) return answer;
  answer.found = lowest_address(chain.back(), answer.function_entry);
  answer.levels.resize(chain.size());
  for (size_t i = 0; i < chain.size(); ++i) {
    SampleLineLevel& level = answer.levels[chain.size() - 1 - i];
    const char* name = linkage_name(chain[i]);
    level.name = name != nullptr ? name : "";
    level.decl_line = decl_line_of(chain[i]);
    if (i == 0) {
      if (Dwarf_Line* row = dwarf_getsrc_die(&cu, vaddr)) {
        int line = 0;
        unsigned discriminator = 0;
        if (dwarf_lineno(row, &line) == 0 && line > 0) level.line = static_cast<uint32_t>(line);
        if (dwarf_linediscriminator(row, &discriminator) == 0)
          level.discriminator = base_discriminator(discriminator);
      }
    }
    // This level is inlined: the level outside it executes its call site.
    if (i + 1 < chain.size()) {
      SampleLineLevel& caller = answer.levels[chain.size() - 2 - i];
      caller.line = udata_of(chain[i], DW_AT_call_line);
      caller.discriminator = base_discriminator(udata_of(chain[i], kAtGnuDiscriminator));
    }
  }
  return answer;
}

std::map<std::string, uint32_t> SampleLineReader::declaration_lines() {
  std::map<std::string, uint32_t> out;
  std::map<std::string, bool> defined;  // the line in `out` is a definition's
  const auto add = [&](Dwarf_Die& subprogram) {
    const char* name = linkage_name(&subprogram);
    const uint32_t line = decl_line_of(&subprogram);
    if (name == nullptr || line == 0) return;
    const bool definition = !dwarf_hasattr(&subprogram, DW_AT_declaration);
    auto [it, inserted] = defined.try_emplace(name, definition);
    if (inserted || (definition && !it->second)) {
      out[name] = line;
      it->second = definition;
    }
  };
  Dwarf_Off offset = 0, next = 0;
  size_t header = 0;
  while (dwarf_nextcu(impl_->dwarf, offset, &next, &header, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die cu;
    if (dwarf_offdie(impl_->dwarf, offset + header, &cu) != nullptr) for_each_subprogram(cu, add);
    offset = next;
  }
  return out;
}

}  // namespace hpd
