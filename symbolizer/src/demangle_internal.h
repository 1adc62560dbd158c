// Demangling helpers shared inside the symbolizer (not part of the public API).
#pragma once

#include <string>

namespace hpd {

// Decodes the $-escapes ($LT$, $u20$, "..", ...) of a legacy Rust path that was demangled as
// Itanium but not decoded, as DWARF-derived names can be. Returns `name` unchanged unless it holds
// such an escape and every component decodes.
std::string decode_rust_legacy_escapes(const std::string& name);

}  // namespace hpd
