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

namespace hpd::dwarf_test {

// The answers hpctl symbolize must give, built from two llvm-symbolizer runs (text output, blank
// line after each answer, same addresses): `dwarf_names` on the binary without its .symtab (a
// stripped binary with its debug file, or copy_without_symbol_table), where llvm names the
// outermost function by an exported symbol or by DWARF; `symtab_names` on the binary with its
// .symtab. Each answer is `dwarf_names`' except where its outermost function is "??" (no DWARF
// function and no exported symbol there): that level is taken from `symtab_names`, which names
// it by the .symtab symbol (and its STT_FILE), as hpd does. Empty when the two do not line up.
std::string merge_llvm_names(const std::string& dwarf_names, const std::string& symtab_names);

}  // namespace hpd::dwarf_test

namespace hpd::dwarf_test {

// What `--no-inlines` must print, from `--inlining` answers (text): the outermost function at the
// innermost level's file:line:column, as llvm-symbolizer prints it given a .symtab. (Without one,
// llvm-symbolizer 14 --no-inlines names the innermost inline level: DWARFContext's line info takes
// the first function of the inline chain, which only the symbol-table override replaces.)
std::string no_inlines_of(const std::string& inlining);

}  // namespace hpd::dwarf_test
