// Helpers shared by the DwarfIndex tests and benchmark: address sampling and llvm-symbolizer runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpd/symbolizer/symbolizer.h"
#include "temp_dir.h"

namespace hpd::dwarf_test {

// Addresses inside the sized STT_FUNC symbols of `elf_path`: each function's first and last byte
// and every `stride`-th byte between. Sorted, unique. Empty when the file has no symbol table.
std::vector<uint64_t> function_addresses(const std::string& elf_path, uint64_t stride);

// Copies a 64-bit ELF file with its SHT_SYMTAB section retyped as SHT_PROGBITS, so that tools
// stop seeing a symbol table (objcopy refuses to drop .symtab from an executable). False on error.
bool copy_without_symbol_table(const std::string& from, const std::string& to);

// Runs `command` through the shell; returns its stdout, sets *status to its exit status.
std::string run_command(const std::string& command, int* status);

// `llvm-symbolizer --inlining --demangle` on `obj` for `addresses` (one batch, JSON output),
// each chain converted to DwarfIndex's order (outermost first) with "??" turned into "".
// Throws std::runtime_error when the tool fails or its output does not parse.
std::vector<std::vector<SourceFrame>> llvm_symbolize(const std::string& tool, const std::string& obj,
                                                     const std::vector<uint64_t>& addresses);

// The scratch directory shared by all tests (tests/support/temp_dir.h), by its old name here.
using ::hpd::testing::TempDir;

}  // namespace hpd::dwarf_test
