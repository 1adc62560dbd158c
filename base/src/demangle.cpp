// Demangling of C++ (Itanium) and Rust (legacy and v0) symbol names through LLVM's demangler.
#include <cxxabi.h>
#include <llvm/Demangle/Demangle.h>

#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>

#include "hpd/base/demangle.h"

namespace hpd {
namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

std::optional<std::string> itanium(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, FreeDeleter> out(llvm::itaniumDemangle(mangled.c_str(), nullptr, nullptr, &status));
  if (status != 0 || !out) return std::nullopt;
  return std::string(out.get());
}

// libstdc++'s demangler, for the names LLVM 14's refuses (some template arguments of libstdc++'s
// own headers, e.g. "_ZSteqIcEN9__gnu_cxx11__enable_ifIX..." in hpctl's binary), which c++filt
// reads. The two format a few names differently, so it is only the fallback.
std::optional<std::string> itanium_gnu(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, FreeDeleter> out(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status));
  if (status != 0 || !out) return std::nullopt;
  return std::string(out.get());
}

std::optional<std::string> rust_v0(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, FreeDeleter> out(llvm::rustDemangle(mangled.c_str(), nullptr, nullptr, &status));
  if (status != 0 || !out) return std::nullopt;
  return std::string(out.get());
}

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

// Rust legacy paths escape punctuation as $XX$ sequences and "::" inside a component as "..".
// Returns nullopt on an escape this decoder does not know (then the caller keeps Itanium's text).
std::optional<std::string> unescape_rust_component(std::string_view in) {
  if (in.size() >= 2 && in[0] == '_' && in[1] == '$') in.remove_prefix(1);
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size();) {
    const char c = in[i];
    if (c == '.') {
      if (i + 1 < in.size() && in[i + 1] == '.') {
        out += "::";
        i += 2;
      } else {
        out += '.';
        ++i;
      }
      continue;
    }
    if (c != '$') {
      out += c;
      ++i;
      continue;
    }
    const size_t end = in.find('$', i + 1);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string_view esc = in.substr(i + 1, end - i - 1);
    if (esc == "SP")
      out += '@';
    else if (esc == "BP")
      out += '*';
    else if (esc == "RF")
      out += '&';
    else if (esc == "LT")
      out += '<';
    else if (esc == "GT")
      out += '>';
    else if (esc == "LP")
      out += '(';
    else if (esc == "RP")
      out += ')';
    else if (esc == "C")
      out += ',';
    else if (esc.size() > 1 && esc[0] == 'u' && is_hex(esc.substr(1)) && esc.size() <= 7) {
      const unsigned long cp = std::strtoul(std::string(esc.substr(1)).c_str(), nullptr, 16);
      if (cp == 0 || cp > 0x10FFFF) return std::nullopt;
      // UTF-8 encode the code point.
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      return std::nullopt;
    }
    i = end + 1;
  }
  return out;
}

// Decodes the escapes of an Itanium-demangled legacy Rust path component by component; nullopt
// if any component holds an escape this decoder does not know.
std::optional<std::string> decode_rust_path_strict(std::string_view path) {
  std::string out;
  while (true) {
    const size_t sep = path.find("::");
    auto part = unescape_rust_component(path.substr(0, sep));
    if (!part) return std::nullopt;
    out += *part;
    if (sep == std::string_view::npos) break;
    out += "::";
    path.remove_prefix(sep + 2);
  }
  return out;
}

std::string decode_rust_path(const std::string& path) {
  auto decoded = decode_rust_path_strict(path);
  return decoded ? *decoded : path;
}

// A legacy Rust symbol is an Itanium nested name whose last component is "h" + 16 hex digits,
// optionally followed by an LLVM ".llvm.NNNN" suffix. Itanium demangling gives "a::b::h0123...";
// rustc-demangle's alternate form ("{:#}") drops the hash and decodes the $-escapes.
std::optional<std::string> rust_legacy(const std::string& mangled) {
  std::string_view s = mangled;
  if (const size_t llvm_suffix = s.find(".llvm."); llvm_suffix != std::string_view::npos) {
    s = s.substr(0, llvm_suffix);
  }
  if (s.size() < 3 + 20 || s.substr(0, 3) != "_ZN" || s.back() != 'E') return std::nullopt;
  const std::string_view tail = s.substr(s.size() - 20);  // "17h" + 16 hex + "E"
  if (tail.substr(0, 3) != "17h" || !is_hex(tail.substr(3, 16))) return std::nullopt;
  auto demangled = itanium(std::string(s));
  if (!demangled) return std::nullopt;
  const std::string hash_suffix = "::h" + std::string(tail.substr(3, 16));
  if (demangled->size() <= hash_suffix.size() ||
      demangled->compare(demangled->size() - hash_suffix.size(), hash_suffix.size(), hash_suffix) != 0) {
    return std::nullopt;  // Itanium read it differently (e.g. with a type); not a Rust path
  }
  demangled->resize(demangled->size() - hash_suffix.size());
  return decode_rust_path(*demangled);
}

std::string demangle_core(const std::string& name) {
  if (name.size() > 2 && name[0] == '_' && name[1] == 'R') {
    if (auto r = rust_v0(name)) return *r;
    return name;
  }
  if (name.size() > 2 && name[0] == '_' && name[1] == 'Z') {
    if (auto r = rust_legacy(name)) return *r;
    if (auto r = itanium(name)) return *r;
    if (auto r = itanium_gnu(name)) return *r;
  }
  return name;
}

}  // namespace

size_t symbol_version_start(std::string_view name) {
  const size_t at = name.find('@');
  if (at == std::string_view::npos || at == 0) return std::string_view::npos;
  // "@plt" is hpd's own suffix for PLT stubs (not a version): it says what the code is.
  if (name.substr(at) == "@plt") return std::string_view::npos;
  return at;
}

std::string decode_rust_legacy_escapes(const std::string& name) {
  // Only names that carry a known $-escape: "(...)" in a C++ signature must stay as it is.
  static const char* const kEscapes[] = {"$LT$", "$GT$", "$RF$", "$BP$", "$SP$", "$LP$", "$RP$", "$C$", "$u"};
  bool escaped = false;
  for (const char* e : kEscapes) escaped = escaped || name.find(e) != std::string::npos;
  if (!escaped) return name;
  return decode_rust_path(name);
}

std::string demangle(const std::string& name) {
  // "sym@plt", "sym@@GLIBC_2.2.5": demangle the symbol, keep the suffix.
  const size_t at = name.find('@');
  if (at != std::string::npos && at > 0) {
    return demangle_core(name.substr(0, at)) + name.substr(at);
  }
  return demangle_core(name);
}

}  // namespace hpd
