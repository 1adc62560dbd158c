// SymbolTable: a module's function symbols, sorted once, looked up by binary search.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hpd {

class ElfFile;

class SymbolTable {
 public:
  struct Symbol {
    uint64_t address = 0;  // ELF vaddr
    uint64_t size = 0;     // as the symbol table says (0 = sizeless)
    uint64_t end = 0;      // effective end: address + size, or extended to the next symbol
    uint32_t name_offset = 0;
    uint32_t name_length = 0;
    uint32_t file = kNoFile;  // index into files(): the STT_FILE preceding a local symbol
    // Index of the display name once computed (in what was padding): no hash lookup per address.
    mutable uint32_t display = kNoDisplay;
  };
  static constexpr uint32_t kNoDisplay = UINT32_MAX;
  static_assert(sizeof(Symbol) == 40);
  static constexpr uint32_t kNoFile = UINT32_MAX;

  // Adds a symbol. `section_end` bounds a sizeless symbol that turns out to be the last one.
  void add(uint64_t address, uint64_t size, std::string_view name, uint64_t section_end,
           uint32_t file = kNoFile);
  // Interns a source file name (an STT_FILE symbol's); returns its index.
  uint32_t add_file(std::string_view name);
  // The source file of a symbol: for local symbols of .symtab, the name of the STT_FILE symbol
  // before it (what llvm-symbolizer prints when DWARF has no line for the address); else empty.
  std::string_view file(const Symbol& s) const {
    return s.file == kNoFile ? std::string_view() : std::string_view(files_[s.file]);
  }
  // Sorts and applies llvm-symbolizer's rules: a stable sort by (address, size); of several
  // symbols at one address the last one is kept (so the largest size, and among equal sizes the
  // one added last); sizeless symbols extend to the next symbol's address.
  void finalize();

  // The symbol containing `vaddr`, or nullptr. Only the nearest symbol at or below `vaddr` is
  // considered (as llvm does): an address past its end is not attributed to an enclosing one.
  const Symbol* find(uint64_t vaddr) const;
  std::string_view name(const Symbol& s) const { return {pool_.data() + s.name_offset, s.name_length}; }
  // The ELF symbol version the name carries ("@@GLIBC_2.17"), or empty.
  std::string_view version(const Symbol& s) const;
  // Demangled (when `demangle_names`) name without its ELF version, computed once per symbol; the
  // reference stays valid as long as the table.
  const std::string& display_name(const Symbol& s, bool demangle_names);
  // The display name if already computed, else nullptr (for prefetching).
  const std::string* display_name_if_known(const Symbol& s) const {
    return s.display != kNoDisplay ? &display_[s.display] : nullptr;
  }

  size_t size() const { return symbols_.size(); }
  const std::vector<Symbol>& symbols() const { return symbols_; }
  // Honest estimate of the heap bytes this table holds.
  size_t memory_bytes() const;

 private:
  std::vector<Symbol> symbols_;
  std::vector<uint64_t> section_ends_;  // parallel to symbols_ until finalize()
  std::string pool_;
  std::vector<std::string> files_;
  std::unordered_map<std::string, uint32_t> file_index_;
  std::deque<std::string> display_;  // by Symbol::display (a deque: references stay valid)
  size_t display_bytes_ = 0;
};

// Adds the STT_FUNC and STT_GNU_IFUNC symbols of `file`'s .dynsym and .symtab (in that order, so
// that at equal address and size the .symtab name wins).
void add_elf_symbols(const ElfFile& file, SymbolTable& table);
// Adds the STT_FUNC and STT_GNU_IFUNC symbols of `file`'s .dynsym alone: what a stripped binary
// keeps, the names it exports.
void add_dynamic_symbols(const ElfFile& file, SymbolTable& table);
// Adds synthetic "<func>@plt" symbols for the entries of .plt, .plt.sec and .plt.got, named from
// the relocations that fill their GOT slots; entries that cannot be named become "[plt]".
void add_plt_symbols(const ElfFile& file, SymbolTable& table);

}  // namespace hpd
