// Capstone decodes x86-64 (Intel syntax) and ARM64.
#include "disassembler.h"

#include <capstone/capstone.h>

namespace hpd::cli {

std::optional<std::vector<DecodedInstruction>> disassemble(const std::string& arch, std::string_view code,
                                                           uint64_t address, std::string& syntax,
                                                           std::string& error) {
  cs_arch cs_a;
  cs_mode cs_m;
  if (arch == "x86_64") {
    cs_a = CS_ARCH_X86;
    cs_m = CS_MODE_64;
    syntax = "Intel";
  } else if (arch == "aarch64") {
    cs_a = CS_ARCH_ARM64;
    cs_m = CS_MODE_ARM;
    syntax = "ARM";
  } else {
    error = "no disassembler for architecture " + arch;
    return std::nullopt;
  }
  csh handle;
  if (cs_open(cs_a, cs_m, &handle) != CS_ERR_OK) {
    error = "cannot start the disassembler";
    return std::nullopt;
  }
  std::vector<DecodedInstruction> out;
  cs_insn* insn = cs_malloc(handle);
  const auto* base = reinterpret_cast<const uint8_t*>(code.data());
  size_t offset = 0;
  while (offset < code.size()) {
    const uint8_t* p = base + offset;
    size_t left = code.size() - offset;
    uint64_t at = address + offset;
    if (cs_disasm_iter(handle, &p, &left, &at, insn)) {
      std::string text = insn->mnemonic;
      if (insn->op_str[0] != '\0') text += std::string(" ") + insn->op_str;
      const size_t next = code.size() - left;
      out.push_back({offset, next - offset, std::move(text)});
      offset = next;
    } else {
      out.push_back({offset, 1, "(bad)"});
      ++offset;
    }
  }
  cs_free(insn, 1);
  cs_close(&handle);
  return out;
}

}  // namespace hpd::cli
