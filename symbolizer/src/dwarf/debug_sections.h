// The DWARF sections hpd's own decoders read, taken from an ELF file that libdw has opened.
#pragma once

#include <libelf.h>

#include "line_table.h"
#include "subroutine_map.h"

namespace hpd {

struct DebugSections {
  LineSections lines;      // for decode_line_table
  DebugInfoSections info;  // for walk_subroutines and DieTextReader
};

// The sections of `elf` (or their .zdebug_ twins) as libdw sees them: dwarf_begin_elf inflates
// compressed sections in place, so call it first to get decompressed bytes. Absent ones are empty.
DebugSections read_debug_sections(Elf* elf);

}  // namespace hpd
