// LoadedModule: the tables of one module (segment map, symbol table, DWARF index, the last prepared
// batch), built from the files DebugFileFinder found; what the module cache keeps and drops.
#pragma once

#include <cstddef>
#include <memory>

#include "debug_file_finder.h"
#include "debug_info.h"
#include "elf_file.h"
#include "hpd/symbolizer/symbolizer.h"
#include "prepared_addresses.h"
#include "symbol_table.h"

namespace hpd {

// The tables of one loaded module; everything the LRU cache can drop and rebuild.
struct LoadedModule {
  SegmentMap segments;
  SymbolTable symbols;
  // The binary's exported functions (.dynsym): they name the functions they cover before DWARF
  // does, as llvm-symbolizer names them from a stripped binary's symbol table.
  SymbolTable exported;
  std::unique_ptr<DebugInfo> debug;
  PreparedAddresses prepared;  // the last Symbolizer::prepare's addresses

  size_t memory_bytes() const {
    return sizeof(*this) + segments.memory_bytes() + symbols.memory_bytes() + exported.memory_bytes() +
           (debug ? debug->memory_bytes() : 0) + prepared.memory_bytes();
  }
};

// Resets `info`, finds the module's files through `finder` and builds their tables, filling `info`
// with what was found; nullptr (info.error saying why) when the module cannot be read or has no
// program headers. `demangle`: DWARF names are then decoded to read like the symbol table's.
std::unique_ptr<LoadedModule> load_module(DebugFileFinder& finder, const ModuleRef& ref, bool demangle,
                                          ModuleInfo& info);

}  // namespace hpd
