// Machine code to text for `hpctl annotate` and the assembly view of `hpctl open` (symbol_api.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpd::cli {

struct DecodedInstruction {
  uint64_t offset = 0;  // from the start of the decoded bytes
  uint64_t length = 0;  // bytes; 1 for "(bad)"
  std::string text;     // "mnemonic operands", or "(bad)"
};

// Decodes `code` ("x86_64": Intel syntax; "aarch64") instruction by instruction; bytes that do not
// decode become "(bad)" one byte at a time so that the listing keeps going, as objdump's does.
// `address` is the virtual address of code[0] (relative branch targets are printed against it).
// `syntax` is set to the name of the syntax ("Intel", "ARM"); nullopt with `error` set when there is
// no decoder for `arch`.
std::optional<std::vector<DecodedInstruction>> disassemble(const std::string& arch, std::string_view code,
                                                           uint64_t address, std::string& syntax,
                                                           std::string& error);

}  // namespace hpd::cli
