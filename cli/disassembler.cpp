// Zydis 4 decodes x86-64 (all of today's encodings, EVEX/AVX-512 included; Intel syntax); Capstone,
// which Zydis does not replace there, decodes ARM64. Capstone is loaded with dlopen when ARM64 code is
// first decoded: linked, its 77,000 relocations were applied at every start of hpctl (about 3 ms of
// CPU and 1.8 MB of relocation records read), for a decoder most runs never use.
#include "disassembler.h"

#include <Zydis/Zydis.h>
#include <capstone/capstone.h>

#include "hpd/base/shared_library.h"

namespace hpd::cli {
namespace {

// The Capstone functions used, with the header's own signatures (the library is never unloaded).
struct Capstone {
  decltype(&cs_open) open = nullptr;
  decltype(&cs_malloc) malloc = nullptr;
  decltype(&cs_disasm_iter) disasm_iter = nullptr;
  decltype(&cs_free) free = nullptr;
  decltype(&cs_close) close = nullptr;
  std::string error;  // why the library could not be used
};

const Capstone& capstone() {
  static const Capstone loaded = [] {
    Capstone c;
    SharedLibrary lib("libcapstone.so.4", "libcapstone4");
    lib.get(c.open, "cs_open");
    lib.get(c.malloc, "cs_malloc");
    lib.get(c.disasm_iter, "cs_disasm_iter");
    lib.get(c.free, "cs_free");
    lib.get(c.close, "cs_close");
    c.error = lib.error();
    return c;
  }();
  return loaded;
}

std::vector<DecodedInstruction> disassemble_x86_64(std::string_view code, uint64_t address) {
  ZydisDecoder decoder;
  ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  ZydisFormatter formatter;
  ZydisFormatterInit(&formatter, ZYDIS_FORMATTER_STYLE_INTEL);
  // Lower-case hex without leading zeros, as objdump (and Capstone before) print numbers.
  ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_HEX_UPPERCASE, ZYAN_FALSE);
  ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_ADDR_PADDING_ABSOLUTE, ZYDIS_PADDING_DISABLED);
  ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_ADDR_PADDING_RELATIVE, ZYDIS_PADDING_DISABLED);
  ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_DISP_PADDING, ZYDIS_PADDING_DISABLED);
  ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_IMM_PADDING, ZYDIS_PADDING_DISABLED);
  // As objdump and Capstone: every memory operand with its size, RIP-relative ones as [rip+disp].
  ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_FORCE_SIZE, ZYAN_TRUE);
  ZydisFormatterSetProperty(&formatter, ZYDIS_FORMATTER_PROP_FORCE_RELATIVE_RIPREL, ZYAN_TRUE);
  std::vector<DecodedInstruction> out;
  ZydisDecodedInstruction insn;
  ZydisDecodedOperand operands[ZYDIS_MAX_OPERAND_COUNT];
  char text[256];
  size_t offset = 0;
  while (offset < code.size()) {
    const bool decoded =
        ZYAN_SUCCESS(
            ZydisDecoderDecodeFull(&decoder, code.data() + offset, code.size() - offset, &insn, operands)) &&
        ZYAN_SUCCESS(ZydisFormatterFormatInstruction(&formatter, &insn, operands, insn.operand_count_visible,
                                                     text, sizeof(text), address + offset, ZYAN_NULL));
    if (decoded) {
      out.push_back({offset, insn.length, text});
      offset += insn.length;
    } else {
      out.push_back({offset, 1, "(bad)"});
      ++offset;
    }
  }
  return out;
}

std::optional<std::vector<DecodedInstruction>> disassemble_arm64(std::string_view code, uint64_t address,
                                                                 std::string& error) {
  const Capstone& cs = capstone();
  if (!cs.error.empty()) {
    error = cs.error;
    return std::nullopt;
  }
  csh handle;
  if (cs.open(CS_ARCH_ARM64, CS_MODE_ARM, &handle) != CS_ERR_OK) {
    error = "cannot start the disassembler";
    return std::nullopt;
  }
  std::vector<DecodedInstruction> out;
  cs_insn* insn = cs.malloc(handle);
  const auto* base = reinterpret_cast<const uint8_t*>(code.data());
  size_t offset = 0;
  while (offset < code.size()) {
    const uint8_t* p = base + offset;
    size_t left = code.size() - offset;
    uint64_t at = address + offset;
    if (cs.disasm_iter(handle, &p, &left, &at, insn)) {
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
  cs.free(insn, 1);
  cs.close(&handle);
  return out;
}

}  // namespace

std::optional<std::vector<DecodedInstruction>> disassemble(const std::string& arch, std::string_view code,
                                                           uint64_t address, std::string& syntax,
                                                           std::string& error) {
  if (arch == "x86_64") {
    syntax = "Intel";
    return disassemble_x86_64(code, address);
  }
  if (arch == "aarch64") {
    syntax = "ARM";
    return disassemble_arm64(code, address, error);
  }
  error = "no disassembler for architecture " + arch;
  return std::nullopt;
}

}  // namespace hpd::cli
