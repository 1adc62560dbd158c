// DwarfIndex: address -> inline chain (names, file:line:column) from one module's DWARF, via libdw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hpd/symbolizer/symbolizer.h"

namespace hpd {

// Answers are meant to equal `llvm-symbolizer --inlining --demangle` (LLVM 14) level by level,
// with two deliberate differences: the outermost level's name is the DWARF name (llvm takes it
// from the binary's ELF symbol table where one covers the address; the symbolizer gives an
// exported symbol's name precedence), and legacy Rust hashes (::h<16 hex>) are stripped. The global index
// (compile-unit ranges) is built by open(); each compile unit's function/inline table and line table are
// built on its first lookup and kept, so a few lookups in a large binary decode only the units they fall in.
// Thread-safe: lookups are serialized internally.
class DwarfIndex {
 public:
  // Opens an ELF file holding DWARF (the binary itself or a separate debug file). Returns nullptr
  // and sets *error (when error != nullptr) if the file cannot be read or has no usable DWARF.
  // `rewrite_name`, when given, is applied once to every demangled name that holds a '$' (the
  // symbolizer decodes legacy Rust escapes with it).
  using NameRewrite = std::string (*)(const std::string&);
  static std::unique_ptr<DwarfIndex> open(const std::string& debug_file_path, std::string* error,
                                          NameRewrite rewrite_name = nullptr);

  ~DwarfIndex();
  DwarfIndex(const DwarfIndex&) = delete;
  DwarfIndex& operator=(const DwarfIndex&) = delete;

  // Inline chain at an ELF virtual address (unbiased, as in the file), outermost first. Each
  // level holds the function name and the file:line:column executing in that level: for the
  // innermost the line-table row, for outer ones the call site of the next-inner level.
  // Empty when no compile unit covers the address. When a compile unit covers it but no
  // function DIE does, one level with an empty function name and the line-table position.
  std::vector<SourceFrame> lookup(uint64_t vaddr) const;
  // The same with the names and files as views into this index's tables (valid as long as it):
  // a caller that prints them at once copies nothing.
  void lookup(uint64_t vaddr, std::vector<SourceFrameView>& frames) const;

  // lookup() in two steps, for callers that search a batch of addresses in plan()'s order (each
  // unit's tables are then built once and walked front to back, instead of once per address in
  // random order) and print them later in another order. locate_planned() does every search,
  // building the unit's tables and reading the chain's names; describe() prints what it found
  // without searching. A Place stays valid as long as this index.
  struct Place {
    static constexpr uint32_t kNone = UINT32_MAX;
    uint32_t unit = kNone;  // index of the compile unit; kNone when none covers the address
    uint32_t node = kNone;  // innermost subprogram or inlined subroutine in it, or kNone
    uint32_t file = kNone;  // the line-table row's file, line and column; file kNone: no row
    uint32_t line = 0;
    uint32_t column = 0;
  };
  // plan() announces the addresses (repeats included) that locate_planned() will
  // then be asked for, once each. When the last of them in a compile unit has been located, the
  // search part of the unit's tables (function ranges and line rows, most of its memory) is freed
  // if this plan built it: describe() needs none of it. A unit searched again afterwards rebuilds
  // that part once and keeps it from then on. A new plan replaces the previous one.
  // Returns a key per address: asked for in the order of their keys (equal keys in any order),
  // the addresses are searched unit by unit, each unit's in address order, so that one unit's
  // tables are alive at a time. (In plain address order, code a linker gathers from every unit,
  // like .text.startup, would build them all at once.) Equal addresses have equal keys.
  std::vector<uint64_t> plan(std::span<const uint64_t> vaddrs) const;
  Place locate_planned(uint64_t vaddr) const;
  void describe(const Place& place, std::vector<SourceFrameView>& frames) const;
  // Starts loading what describe() reads and is least likely to find in cache, for callers
  // describing many places, a few ahead. Step 0: the innermost node's details and the file name's
  // string. Step 1, a few places later: what those point at (the next node out, the name's
  // string, the file name's characters).
  void prefetch(const Place& place, int step) const;

  // The code of the function that the call returning to `return_vaddr` calls, as the caller's
  // DWARF call-site information (DW_TAG_call_site, DWARF 5; DW_TAG_GNU_call_site) names it:
  // [low, high) vaddr ranges. Empty when unknown: no call site there (no call-site information, as
  // at -O0), an indirect call, or a callee whose code the caller's compile unit does not describe
  // (a function of another unit or module). Each unit's call sites are read on first use and kept.
  std::vector<std::pair<uint64_t, uint64_t>> call_site_callee(uint64_t return_vaddr) const;

  // Estimate of the heap this index holds, including what libdw caches on its behalf.
  size_t memory_bytes() const;

  // Number of compile units with address ranges (for diagnostics and tests).
  size_t unit_count() const;

 private:
  struct Impl;
  explicit DwarfIndex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Demangles the way llvm-symbolizer 14 does (Itanium, Rust v0, Rust legacy via Itanium), except
// that the legacy Rust hash suffix is removed. Returns the input when it is not a mangled name.
std::string demangle_llvm_style(const char* name);

}  // namespace hpd
