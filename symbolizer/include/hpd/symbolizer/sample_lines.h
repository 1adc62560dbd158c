// SampleLineReader: an address of a binary as LLVM's sample profiles key code (for
// `hpctl convert --format llvm-sample`): per inline level the function's linkage name and
// declaration line, the line executing there and its base discriminator.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hpd {

// One level of an inline chain.
struct SampleLineLevel {
  // The name clang gives the function in its IR: DW_AT_linkage_name (else DW_AT_MIPS_linkage_name,
  // else DW_AT_name), of the DIE or of its abstract origin or specification.
  std::string name;
  uint32_t decl_line = 0;  // DW_AT_decl_line of the function: the DISubprogram's line
  // The line executing at this level: the line-table row's for the innermost level, the call site
  // (DW_AT_call_line) of the next-inner level for the others. 0 = unknown.
  uint32_t line = 0;
  // The base discriminator (LLVM's prefix-encoded components decoded) of that row or call site
  // (DW_AT_GNU_discriminator); 0 without -fdebug-info-for-profiling.
  uint32_t discriminator = 0;
};

struct SampleLineAnswer {
  bool found = false;  // a subprogram covers the address
  // The real (outermost) function's entry (DW_AT_low_pc, or the lowest of its ranges): an ELF
  // virtual address.
  uint64_t function_entry = 0;
  std::vector<SampleLineLevel> levels;  // outermost (the real function) first
};

// Reads one ELF file that holds DWARF (a binary built with -g or -gline-tables-only, or its
// separate debug file) through libdw. Not thread-safe.
class SampleLineReader {
 public:
  // nullptr and *error set when the file cannot be read or has no DWARF.
  static std::unique_ptr<SampleLineReader> open(const std::string& path, std::string* error);
  ~SampleLineReader();
  SampleLineReader(const SampleLineReader&) = delete;
  SampleLineReader& operator=(const SampleLineReader&) = delete;

  // The chain at an ELF virtual address (unbiased, as nm prints it).
  SampleLineAnswer locate(uint64_t vaddr);

  // Every function the DWARF describes (by the name `locate` gives it) and its declaration line:
  // where `hpctl pgo-check` looks for a profile's functions and their start lines. A definition's
  // line wins over a mere declaration's.
  std::map<std::string, uint32_t> declaration_lines();

 private:
  struct Impl;
  explicit SampleLineReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// LLVM's base discriminator of an encoded DWARF discriminator (DILocation's prefix encoding:
// the base component first; a set low bit means the component is 0).
uint32_t base_discriminator(uint32_t encoded);

}  // namespace hpd
