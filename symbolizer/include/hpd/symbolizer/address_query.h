// AddressQuery: addresses typed by a person or a script (hpctl symbolize), resolved in one ELF file
// or in the modules of a live process.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/symbolizer/symbolizer.h"

namespace hpd {

// A hexadecimal address with or without "0x"/"0X"; blanks around it are ignored. nullopt for
// anything else: empty text, a non-hex digit, more than 64 bits.
std::optional<uint64_t> parse_hex_address(std::string_view text);

// One executable-or-not mapping of /proc/PID/maps.
struct ProcessMapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;  // file offset of `start`
  bool executable = false;
  std::string path;      // "" for anonymous memory; "[vdso]", "[heap]" etc. as the kernel names them
  bool deleted = false;  // the kernel appended " (deleted)" (that suffix is removed from path)
};

// Parses the text of /proc/PID/maps; lines that do not parse are skipped.
std::vector<ProcessMapping> parse_proc_maps(std::string_view text);

struct AddressAnswer {
  std::string input;         // the text as given, blanks trimmed
  bool parsed = false;       // input was an address
  std::string error;         // why nothing could be looked up (not an address, not in a file mapping)
  uint64_t address = 0;      // the parsed input: an ELF vaddr (file mode) or a runtime address (process)
  std::string module;        // the file the address lies in ("" when none)
  bool in_module = false;    // module is a file the symbolizer was asked about
  uint64_t file_offset = 0;  // process mode: offset of the address in `module`
  uint64_t vaddr = 0;        // the ELF vaddr looked up in `module`
  Location location;         // frames outermost first; location.found = false when unknown
};

class AddressQuery {
 public:
  // File mode: inputs are ELF virtual addresses of `path`, as llvm-symbolizer --obj takes them.
  // Throws std::runtime_error with the reason when `path` cannot be read as a loadable ELF file.
  static AddressQuery for_file(Symbolizer& symbolizer, const std::string& path);
  // Process mode: inputs are runtime addresses of process `pid`, mapped through its
  // /proc/PID/maps (read once, here) to a module and file offset; modules are read through
  // /proc/PID/map_files where permitted, so replaced or deleted binaries still resolve.
  // Throws std::runtime_error when the process's maps cannot be read.
  static AddressQuery for_process(Symbolizer& symbolizer, int32_t pid);

  // Looks one input up. Never throws for bad input: AddressAnswer::error says what was wrong.
  AddressAnswer lookup(std::string_view text);
  // The same into `out`, reusing its strings' storage (for loops over many inputs).
  void lookup(std::string_view text, AddressAnswer& out);
  // The same without copying the answer's names: `out.location` is left empty and `where` holds
  // the answer, valid until the next call on this query or its symbolizer (see LocationView).
  void lookup(std::string_view text, AddressAnswer& out, LocationView& where);

  // Searches the addresses among `inputs` ahead of their lookup() calls, module by module
  // (Symbolizer::prepare, which searches each module unit by unit in address order): for a batch
  // of inputs that is then looked up in its own order. Inputs that are not addresses, or in no
  // file mapping, are left to lookup().
  void prepare(std::span<const std::string> inputs);
  // The same for the lines of `lines` (each '\n'-terminated or the last), one input per line.
  void prepare_lines(std::string_view lines);

  // Warnings about the modules looked up so far (no debug information, build-id mismatch), one
  // per module, each returned once.
  std::vector<std::string> take_warnings();

 private:
  AddressQuery(Symbolizer& symbolizer) : symbolizer_(&symbolizer) {}
  // lookup() up to the search: fills `out` but its location. Returns the mapping to resolve the
  // address in (process mode); nullptr in file mode and for inputs that cannot be resolved.
  const ProcessMapping* start_lookup(std::string_view text, AddressAnswer& out);
  void finish_in_process(const ProcessMapping& m, AddressAnswer& out);
  void note_module(const ModuleRef& ref);
  const ProcessMapping* mapping_of(uint64_t address) const;  // process mode; nullptr when none
  // A mapping of a file by its path (not anonymous memory, [heap], [vdso] and the like).
  static bool is_file_mapping(const ProcessMapping& m);
  // prepare() over the inputs that for_each_input(fn) passes to fn.
  template <class ForEachInput>
  void prepare_inputs(ForEachInput for_each_input);
  ModuleRef module_of(const ProcessMapping& m) const;

  Symbolizer* symbolizer_;
  int32_t pid_ = 0;
  std::string file_;                      // file mode
  ModuleRef file_ref_;                    // file mode: the module, built by for_file
  std::vector<ProcessMapping> mappings_;  // process mode, sorted by start
  std::vector<std::string> noted_;        // modules whose warnings were queued
  std::vector<std::string> warnings_;
};

}  // namespace hpd
