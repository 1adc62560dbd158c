// read_debug_sections: the .debug_* section bytes the own decoders read, found by name.
#include "debug_sections.h"

#include <string_view>
#include <vector>

#include "hpd/base/elf.h"

namespace hpd {
namespace {

// The bytes of the first section with contents called `wanted` or `wanted_gnu_compressed`.
std::span<const uint8_t> section_bytes(const std::vector<ElfSection>& sections, std::string_view wanted,
                                       std::string_view wanted_gnu_compressed) {
  for (const ElfSection& s : sections) {
    if (s.has_bytes() && (s.named(wanted) || s.named(wanted_gnu_compressed))) return s.bytes();
  }
  return {};
}

}  // namespace

DebugSections read_debug_sections(Elf* elf) {
  const std::vector<ElfSection> sections = ElfView(elf).sections();
  DebugSections s;
  s.lines.line = section_bytes(sections, ".debug_line", ".zdebug_line");
  s.lines.line_str = section_bytes(sections, ".debug_line_str", ".zdebug_line_str");
  s.lines.str = section_bytes(sections, ".debug_str", ".zdebug_str");
  s.info.info = section_bytes(sections, ".debug_info", ".zdebug_info");
  s.info.abbrev = section_bytes(sections, ".debug_abbrev", ".zdebug_abbrev");
  s.info.addr = section_bytes(sections, ".debug_addr", ".zdebug_addr");
  s.info.ranges = section_bytes(sections, ".debug_ranges", ".zdebug_ranges");
  s.info.rnglists = section_bytes(sections, ".debug_rnglists", ".zdebug_rnglists");
  s.info.str = s.lines.str;
  s.info.line_str = s.lines.line_str;
  s.info.str_offsets = section_bytes(sections, ".debug_str_offsets", ".zdebug_str_offsets");
  return s;
}

}  // namespace hpd
