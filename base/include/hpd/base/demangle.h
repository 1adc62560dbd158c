// Demangling of C++ (Itanium) and Rust (legacy and v0) names through LLVM's demangler, for the
// symbolizer and the MIP reader alike (library hpd_demangle, apart from hpd_base: it links LLVM).
#pragma once

#include <string>
#include <string_view>

namespace hpd {

// Demangles C++ (Itanium) and Rust (legacy and v0) names; legacy Rust hashes are stripped.
// Returns the input unchanged when it is not a mangled name. A suffix after '@' (symbol
// versions, "@plt") is kept and appended to the demangled name. Names LLVM's demangler refuses
// go through libstdc++'s abi::__cxa_demangle (what c++filt reads) before staying mangled.
std::string demangle(const std::string& name);

// Where the ELF symbol version of a symbol-table name begins ("@GLIBC_2.2.5", "@@GLIBC_2.17": the
// '@' or "@@"), or npos when it has none. Names are shown without it: one function, one name,
// whichever version a caller linked against. "@plt" (a synthesized PLT stub name) is no version.
size_t symbol_version_start(std::string_view name);

// Decodes the $-escapes ($LT$, $u20$, "..", ...) of a legacy Rust path that was demangled as
// Itanium but not decoded, as DWARF-derived names can be. Returns `name` unchanged unless it holds
// such an escape and every component decodes.
std::string decode_rust_legacy_escapes(const std::string& name);

}  // namespace hpd
