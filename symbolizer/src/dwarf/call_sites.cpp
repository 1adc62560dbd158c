// UnitCallSites through libdw: the unit's top-level subprograms once, then the call sites of each
// function asked about.
#include "call_sites.h"

#include <dwarf.h>

#include <algorithm>

#include "inline_rules.h"

namespace hpd {
namespace {

// The DIE a reference attribute of `die` points at, by offset; 0 when absent or unreadable.
uint64_t referenced(Dwarf_Die* die, unsigned name) {
  Dwarf_Attribute attr;
  Dwarf_Die target;
  if (dwarf_attr(die, name, &attr) == nullptr || dwarf_formref_die(&attr, &target) == nullptr) return 0;
  return dwarf_dieoffset(&target);
}

std::vector<CodeRange> code_ranges(Dwarf_Die* die) {
  std::vector<CodeRange> code;
  Dwarf_Addr base = 0, start = 0, end = 0;
  ptrdiff_t offset = 0;
  size_t count = 0;
  while ((offset = dwarf_ranges(die, offset, &base, &start, &end)) > 0 && count++ < kMaxRangesPerDie) {
    if (start < end) code.emplace_back(start, end);
  }
  return code;
}

// Calls fn(return_pc, callee DIE offset or 0) for each call site under `parent`.
template <class Fn>
void for_each_call_site(Dwarf_Die* parent, int depth, Fn& fn) {
  Dwarf_Die child;
  if (depth >= kMaxDieDepth || dwarf_haschildren(parent) <= 0 || dwarf_child(parent, &child) != 0) return;
  for (;;) {
    const int tag = dwarf_tag(&child);
    if (tag == DW_TAG_call_site || tag == DW_TAG_GNU_call_site) {
      const bool gnu = tag == DW_TAG_GNU_call_site;
      Dwarf_Attribute attr;
      Dwarf_Addr return_pc = 0;
      if (dwarf_attr(&child, gnu ? DW_AT_low_pc : DW_AT_call_return_pc, &attr) != nullptr &&
          dwarf_formaddr(&attr, &return_pc) == 0) {
        // An indirect call names a location (DW_AT_call_target), not a function: nothing is known.
        const bool indirect =
            dwarf_attr(&child, gnu ? DW_AT_GNU_call_site_target : DW_AT_call_target, &attr) != nullptr;
        fn(return_pc, indirect ? 0 : referenced(&child, gnu ? DW_AT_abstract_origin : DW_AT_call_origin));
      }
    } else if (tag != DW_TAG_subprogram) {  // a nested subprogram is not this function's code
      for_each_call_site(&child, depth + 1, fn);
    }
    Dwarf_Die next;
    if (dwarf_siblingof(&child, &next) != 0) break;
    child = next;
  }
}

}  // namespace

UnitCallSites::UnitCallSites(Dwarf* dwarf, uint64_t cu_die_offset) : dwarf_(dwarf) {
  Dwarf_Die cudie, child;
  if (dwarf_offdie(dwarf, cu_die_offset, &cudie) == nullptr || dwarf_haschildren(&cudie) <= 0 ||
      dwarf_child(&cudie, &child) != 0)
    return;
  for (;;) {
    if (dwarf_tag(&child) == DW_TAG_subprogram) {
      const std::vector<CodeRange> code = code_ranges(&child);
      const uint64_t die = dwarf_dieoffset(&child);
      for (const CodeRange& r : code) functions_.push_back({r.first, r.second, die});
      // The code is the DIE's, and that of the abstract or declared function it is an instance of
      // (which a call site names instead), following the references a few steps.
      uint64_t key = die;
      Dwarf_Die at = child;
      for (int hop = 0; hop < 4 && !code.empty(); ++hop) {
        std::vector<CodeRange>& to = code_of_[key];
        to.insert(to.end(), code.begin(), code.end());
        uint64_t next = referenced(&at, DW_AT_abstract_origin);
        if (next == 0) next = referenced(&at, DW_AT_specification);
        if (next == 0 || next == key || dwarf_offdie(dwarf, next, &at) == nullptr) break;
        key = next;
      }
    }
    Dwarf_Die next;
    if (dwarf_siblingof(&child, &next) != 0) break;
    child = next;
  }
  std::sort(functions_.begin(), functions_.end(),
            [](const Function& a, const Function& b) { return a.low < b.low; });
}

void UnitCallSites::read_call_sites(uint64_t function_die) {
  Dwarf_Die die;
  if (dwarf_offdie(dwarf_, function_die, &die) == nullptr) return;
  auto add = [&](uint64_t return_pc, uint64_t callee) {
    // Two call sites returning to one address (garbage DWARF) would make the answer a guess.
    auto [it, inserted] = callee_of_.emplace(return_pc, callee);
    if (!inserted && it->second != callee) it->second = 0;
  };
  for_each_call_site(&die, 0, add);
}

std::vector<CodeRange> UnitCallSites::callee_code(uint64_t return_pc) {
  if (return_pc == 0) return {};
  // The function whose code holds the call (its last byte, just before the return address).
  auto it = std::upper_bound(functions_.begin(), functions_.end(), return_pc - 1,
                             [](uint64_t pc, const Function& f) { return pc < f.low; });
  if (it == functions_.begin()) return {};
  --it;
  if (return_pc - 1 >= it->high) return {};
  if (read_.emplace(it->die_offset, true).second) read_call_sites(it->die_offset);
  auto site = callee_of_.find(return_pc);
  if (site == callee_of_.end() || site->second == 0) return {};
  auto code = code_of_.find(site->second);
  return code != code_of_.end() ? code->second : std::vector<CodeRange>{};
}

size_t UnitCallSites::memory_bytes() const {
  size_t bytes = sizeof(*this) + functions_.capacity() * sizeof(Function);
  for (const auto& [die, code] : code_of_) bytes += 64 + code.capacity() * sizeof(CodeRange);
  bytes += (read_.size() + callee_of_.size()) * 48;
  return bytes;
}

}  // namespace hpd
