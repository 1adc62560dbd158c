// Helpers for symbolizer tests: running tools, reading nm output and ELF layouts, temp dirs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hpd/symbolizer/symbolizer.h"
#include "subprocess.h"  // have_tool
#include "temp_dir.h"

namespace hpd::test {

// Runs a shell command; returns its stdout (empty when it could not run).
std::string run(const std::string& command);

struct NmSymbol {
  uint64_t address = 0;
  uint64_t size = 0;  // 0 when nm printed none
  char type = 0;
  std::string name;
};
// Function symbols (types T, t, W, w, i) of `path`, via `nm -S --defined-only [--demangle]`.
std::vector<NmSymbol> nm_functions(const std::string& path, bool demangled = false, bool dynamic = false);
std::optional<NmSymbol> nm_find(const std::vector<NmSymbol>& symbols, const std::string& name);

// PT_LOAD layout read independently of the symbolizer (libelf directly).
struct Segment {
  uint64_t offset, filesz, vaddr, memsz;
  bool exec;
};
std::vector<Segment> load_segments(const std::string& path);
// File offset that holds ELF virtual address `vaddr` (as a mapping would give it).
uint64_t file_offset_of(const std::vector<Segment>& segments, uint64_t vaddr);
// Address range [start, end) of a section, from `readelf -SW`-like data (libelf).
std::optional<std::pair<uint64_t, uint64_t>> section_range(const std::string& path, const std::string& name);

inline ModuleRef module_ref(const std::string& path, const std::string& build_id = {}) {
  ModuleRef ref;
  ref.path = path;
  ref.build_id = build_id;
  return ref;
}

// The scratch directory shared by all tests (tests/support/temp_dir.h), by its old name here.
using ::hpd::testing::TempDir;

void write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);

}  // namespace hpd::test
