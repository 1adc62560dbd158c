// /source/v1 and /asm/v1 of the Firefox Profiler's symbol-server API for `hpctl open`: sources read
// from the paths the debug information recorded, machine code read from the library's ELF file and
// decoded by disassembler.h.
#include "symbol_api.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "disassembler.h"
#include "hpd/base/elf.h"
#include "hpd/export/firefox.h"
#include "hpd/symbolizer/symbolizer.h"

namespace hpd::cli {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxAsmBytes = 1 << 20;         // a function larger than this is cut
constexpr uint64_t kMaxSourceBytes = 64ull << 20;  // a "source file" larger than this is refused

std::string error_json(const std::string& message) {
  return json{{"error", message}}.dump();
}

std::string hex(uint64_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

// "0x1a2b" (the API's hex strings) -> value; nullopt when malformed.
std::optional<uint64_t> parse_hex(const json& request, const char* key) {
  const auto it = request.find(key);
  if (it == request.end() || !it->is_string()) return std::nullopt;
  const std::string s = it->get<std::string>();
  if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str() + 2, &end, 16);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

std::string string_member(const json& request, const char* key) {
  const auto it = request.find(key);
  return it != request.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The library of the profile a request names: by debugId (breakpad id) and debugName, or by codeId.
// Libraries without a build-id carry the nil debug id, so debugName has to match too.
const Lib* find_lib(const Profile& profile, const json& request) {
  const std::string debug_id = string_member(request, "debugId");
  const std::string debug_name = string_member(request, "debugName");
  const std::string code_id = string_member(request, "codeId");
  for (const Lib& lib : profile.libs) {
    if (lib.is_kernel) continue;  // no file of the kernel's code to read
    const std::string breakpad = breakpad_id_from_build_id(lib.build_id);
    const std::string name = lib.debug_name.empty() ? lib.name : lib.debug_name;
    const bool id_matches =
        !debug_id.empty() && (breakpad.empty() ? debug_id == std::string(33, '0') : debug_id == breakpad);
    if (id_matches && (debug_name.empty() || debug_name == name)) return &lib;
    if (!code_id.empty() && !lib.build_id.empty() && code_id == code_id_from_build_id(lib.build_id))
      return &lib;
  }
  return nullptr;
}

// Bytes of the file's allocated, executable section that holds ELF vaddr [start, start + size),
// cut at the section's end. Empty with `error` set when no such section has bytes in the file
// (a separate debug file keeps .text as SHT_NOBITS).
std::string read_code(const std::string& path, uint64_t start, uint64_t size, std::string& error) {
  const OpenedElf file = OpenedElf::open(path);
  if (file.open_errno() != 0) {
    error = file.error();
    return {};
  }
  std::string bytes;
  error = "no machine code at " + hex(start) + " in " + path;
  if (file) {
    for (const ElfSection& section : file.view().sections()) {
      const GElf_Shdr& shdr = section.header;
      if (shdr.sh_type != SHT_PROGBITS || (shdr.sh_flags & SHF_EXECINSTR) == 0) continue;
      if (start < shdr.sh_addr || start >= shdr.sh_addr + shdr.sh_size) continue;
      const uint64_t n = std::min(size, shdr.sh_addr + shdr.sh_size - start);
      bytes.resize(n);
      const ssize_t got =
          ::pread(file.fd(), bytes.data(), n, static_cast<off_t>(shdr.sh_offset + (start - shdr.sh_addr)));
      if (got != static_cast<ssize_t>(n)) {
        error = "cannot read " + path + ": " + (got < 0 ? std::strerror(errno) : "short read");
        bytes.clear();
      } else {
        error.clear();
      }
      break;
    }
  } else {
    error = path + " is not an ELF file";
  }
  return bytes;
}

// [offset, text] pairs of `code`; branch targets are printed relative to its first byte.
std::optional<json> disassemble_bytes(const std::string& arch, const std::string& code, std::string& syntax,
                                      std::string& error) {
  const std::optional<std::vector<DecodedInstruction>> decoded = disassemble(arch, code, 0, syntax, error);
  if (!decoded) return std::nullopt;
  json instructions = json::array();
  for (const DecodedInstruction& insn : *decoded)
    instructions.push_back(json::array({insn.offset, insn.text}));
  return instructions;
}

}  // namespace

SymbolApi::SymbolApi(const Profile& profile)
    : profile_(profile), symbolizer_(std::make_unique<Symbolizer>()) {
  for (const Func& f : profile.funcs) {
    if (f.file != kNoIndex) source_files_.insert(profile.strings[f.file]);
  }
}

SymbolApi::~SymbolApi() = default;

std::string SymbolApi::source_v1(const std::string& request_json) {
  const json request = json::parse(request_json, nullptr, false);
  if (!request.is_object()) return error_json("the request is not a JSON object");
  const std::string file = string_member(request, "file");
  if (file.empty()) return error_json("the request names no file");
  if (find_lib(profile_, request) == nullptr) {
    return error_json("no library with debugName " + string_member(request, "debugName") + " and debugId " +
                      string_member(request, "debugId") + " in this profile");
  }
  if (source_files_.count(file) == 0) return error_json(file + " is not a source file of this profile");
  std::ifstream in(file, std::ios::binary);
  if (!in) return error_json("cannot read " + file + ": " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > kMaxSourceBytes) return error_json(file + " is too large");
  in.seekg(0);
  std::string source(static_cast<size_t>(size), '\0');
  in.read(source.data(), size);
  json response{
      {"symbolsLastModified", nullptr}, {"sourceLastModified", nullptr}, {"file", file}, {"source", source}};
  return response.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string SymbolApi::asm_v1(const std::string& request_json) {
  const json request = json::parse(request_json, nullptr, false);
  if (!request.is_object()) return error_json("the request is not a JSON object");
  const std::optional<uint64_t> start = parse_hex(request, "startAddress");
  std::optional<uint64_t> size = parse_hex(request, "size");
  if (!start || !size) return error_json("startAddress and size must be 0x-prefixed hex strings");
  const Lib* lib = find_lib(profile_, request);
  if (lib == nullptr) return error_json("no library with this debugId or codeId in this profile");
  std::string error;
  const auto flag = request.find("continueUntilFunctionEnd");
  const bool to_end = flag != request.end() && flag->is_boolean() && flag->get<bool>();
  std::string code = read_lib_code(*lib, *start, *size, to_end, error);
  if (code.empty()) return error_json(error);
  std::string syntax;
  std::optional<json> instructions = disassemble_bytes(lib->arch, code, syntax, error);
  if (!instructions) return error_json(error);
  json response{{"startAddress", hex(*start)},
                {"size", hex(code.size())},
                {"arch", lib->arch},
                {"syntax", json::array({syntax})},
                {"instructions", std::move(*instructions)}};
  return response.dump();
}

std::string SymbolApi::read_lib_code(const Lib& lib, uint64_t start, uint64_t size, bool to_function_end,
                                     std::string& error) {
  ModuleRef ref;
  ref.path = lib.path;
  ref.build_id = lib.build_id;
  const ModuleInfo& info = symbolizer_->module_info(ref);
  if (!info.readable) {
    error = "cannot read " + lib.path + ": " + info.error;
    return {};
  }
  if (info.build_id_mismatch) {
    error = info.opened_path + " is not the file that was recorded (" + info.error + ")";
    return {};
  }
  if (to_function_end) {
    // The profiler knew no size: take the function's end from the symbol table.
    const std::vector<uint64_t> vaddr{info.image_base + start};
    const std::vector<Location> loc = symbolizer_->resolve_vaddrs(ref, vaddr);
    if (!loc.empty() && loc[0].found && loc[0].symbol_size > 0) {
      size = std::max(size, loc[0].symbol_address + loc[0].symbol_size - start);
    }
  }
  size = std::min(size, kMaxAsmBytes);
  return read_code(info.opened_path, info.image_base + start, size, error);
}

std::map<uint64_t, std::string> SymbolApi::disassemble(const Lib& lib, uint64_t start, uint64_t size,
                                                       std::string& error) {
  std::map<uint64_t, std::string> out;
  const std::string code = read_lib_code(lib, start, size, false, error);
  if (code.empty()) return out;
  std::string syntax;
  const std::optional<json> instructions = disassemble_bytes(lib.arch, code, syntax, error);
  if (!instructions) return out;
  for (const json& insn : *instructions) out[start + insn[0].get<uint64_t>()] = insn[1].get<std::string>();
  return out;
}

}  // namespace hpd::cli
