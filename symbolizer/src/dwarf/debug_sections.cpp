// read_debug_sections: the .debug_* section bytes the own decoders read, found by name.
#include "debug_sections.h"

#include <gelf.h>

#include <cstring>

namespace hpd {
namespace {

std::span<const uint8_t> section_bytes(Elf* elf, const char* wanted, const char* wanted_gnu_compressed) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return {};
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS) continue;
    const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
    if (name == nullptr || (std::strcmp(name, wanted) != 0 && std::strcmp(name, wanted_gnu_compressed) != 0))
      continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr) return {};
    return {static_cast<const uint8_t*>(data->d_buf), data->d_size};
  }
  return {};
}

}  // namespace

DebugSections read_debug_sections(Elf* elf) {
  DebugSections s;
  s.lines.line = section_bytes(elf, ".debug_line", ".zdebug_line");
  s.lines.line_str = section_bytes(elf, ".debug_line_str", ".zdebug_line_str");
  s.lines.str = section_bytes(elf, ".debug_str", ".zdebug_str");
  s.info.info = section_bytes(elf, ".debug_info", ".zdebug_info");
  s.info.abbrev = section_bytes(elf, ".debug_abbrev", ".zdebug_abbrev");
  s.info.addr = section_bytes(elf, ".debug_addr", ".zdebug_addr");
  s.info.ranges = section_bytes(elf, ".debug_ranges", ".zdebug_ranges");
  s.info.rnglists = section_bytes(elf, ".debug_rnglists", ".zdebug_rnglists");
  s.info.str = s.lines.str;
  s.info.line_str = s.lines.line_str;
  s.info.str_offsets = section_bytes(elf, ".debug_str_offsets", ".zdebug_str_offsets");
  return s;
}

}  // namespace hpd
