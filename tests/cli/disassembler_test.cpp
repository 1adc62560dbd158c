// hpctl's disassembler (cli/disassembler.h) against objdump on the whole .text of the system's
// libc.so.6, whose glibc carries EVEX (AVX-512) string functions such as __memcmp_evex_movbe: every
// instruction must start where objdump's does, have objdump's mnemonic, and decode.
#include "disassembler.h"

#include <gelf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "hpd/base/elf.h"
#include "subprocess.h"

namespace hpd::cli {
namespace {

constexpr const char* kLibc = "/lib/x86_64-linux-gnu/libc.so.6";

// The mnemonic of an Intel-syntax line, with the spelling differences between objdump and hpctl's
// decoder (Zydis) taken out:
// - prefixes (segment overrides, data16, rep, lock, bnd, notrack, ...) are dropped;
// - condition codes take objdump's names: jz/jnz/jnb/jnbe/jnl/jnle (and set*, cmov*) are
//   je/jne/jae/ja/jge/jg;
// - objdump's movabs (mov of a 64-bit immediate or absolute address) is mov;
// - objdump's "xchg ax,ax" (66 90) is nop;
// - string instructions without operands (movsb, stosq, ...) lose the size suffix (objdump's movs,
//   stos carry operands instead);
// - vpcmp[u]{b,w,d,q} with a predicate immediate takes objdump's name with the predicate folded in
//   (vpcmpb ..., 0x0 is vpcmpeqb; vpcmpub ..., 0x1 is vpcmpltub).
std::string mnemonic(const std::string& text) {
  static const std::set<std::string> kPrefixes = {
      "cs",   "ds",   "es",    "fs",    "gs",   "ss",  "data16",  "data32",   "addr32",   "rep",
      "repe", "repz", "repne", "repnz", "lock", "bnd", "notrack", "xacquire", "xrelease", "rex"};
  static const std::map<std::string, std::string> kConditions = {{"z", "e"},   {"nz", "ne"}, {"nb", "ae"},
                                                                 {"nbe", "a"}, {"nl", "ge"}, {"nle", "g"}};
  static const std::regex kStringOp(R"(^(movs|stos|lods|scas|cmps)[bwdq]$)");
  static const std::regex kCompare(R"(^vpcmp(u?[bwdq])$)");
  static const char* kPredicates[] = {"eq", "lt", "le", "false", "neq", "nlt", "nle", "true"};
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    if (kPrefixes.count(word) != 0 || word.rfind("rex.", 0) == 0) continue;
    std::string rest;
    std::getline(words, rest);
    if (word == "movabs") return "mov";
    if (word == "xchg" && rest.find_first_not_of(' ') != std::string::npos &&
        rest.substr(rest.find_first_not_of(' ')) == "ax,ax") {
      return "nop";
    }
    for (const char* jump : {"j", "set", "cmov"}) {
      if (word.rfind(jump, 0) != 0) continue;
      const auto it = kConditions.find(word.substr(std::strlen(jump)));
      if (it != kConditions.end()) return jump + it->second;
    }
    std::smatch m;
    if (rest.find_first_not_of(' ') == std::string::npos && std::regex_match(word, m, kStringOp)) return m[1];
    if (std::regex_match(word, m, kCompare)) {
      const size_t comma = rest.rfind(',');
      if (comma != std::string::npos) {
        const std::string imm = rest.substr(comma + 1);
        const size_t start = imm.find_first_not_of(' ');
        if (start != std::string::npos && imm.compare(start, 2, "0x") == 0) {
          const unsigned long predicate = std::stoul(imm.substr(start + 2), nullptr, 16);
          if (predicate < 8) return "vpcmp" + std::string(kPredicates[predicate]) + m[1].str();
        }
      }
    }
    return word;
  }
  return text;
}

struct Text {
  uint64_t address = 0;
  std::string bytes;
};

Text read_text(const std::string& path) {
  Text text;
  const OpenedElf file = OpenedElf::open(path);
  if (!file) return text;
  const ElfSection section = file.view().section(".text");
  if (!section) return text;
  text.address = section.header.sh_addr;
  text.bytes.resize(section.header.sh_size);
  if (::pread(file.fd(), text.bytes.data(), text.bytes.size(),
              static_cast<off_t>(section.header.sh_offset)) != static_cast<ssize_t>(text.bytes.size())) {
    text.bytes.clear();
  }
  return text;
}

// objdump's listing of .text: address -> mnemonic.
std::map<uint64_t, std::string> objdump_mnemonics(const std::string& path) {
  const test::RunResult r =
      test::run({"objdump", "-d", "-M", "intel", "--no-show-raw-insn", "-j", ".text", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<uint64_t, std::string> out;
  std::istringstream lines(r.out);
  std::string line;
  static const std::regex kInsn(R"(^\s+([0-9a-f]+):\t(.*)$)");
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, m, kInsn)) out[std::stoull(m[1], nullptr, 16)] = mnemonic(m[2]);
  }
  return out;
}

// [address, address + size) of a local symbol, from libc's separate debug file (libc6-dbg).
std::pair<uint64_t, uint64_t> debug_symbol(const std::string& path, const std::string& name) {
  const std::optional<std::string> id = file_build_id(path);
  if (!id || id->empty()) return {0, 0};
  const std::string debug = build_id_path("/usr/lib/debug", *id, ".debug");
  const test::RunResult r = test::run({"nm", "-S", "--defined-only", debug});
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string address, size, type, symbol;
    if ((fields >> address >> size >> type >> symbol) && symbol == name) {
      const uint64_t a = std::stoull(address, nullptr, 16);
      return {a, a + std::stoull(size, nullptr, 16)};
    }
  }
  return {0, 0};
}

TEST(Disassembler, DecodesAllOfLibcTextAsObjdumpDoes) {
  ASSERT_TRUE(test::have_tool("objdump")) << "objdump (binutils) is needed";
  const Text text = read_text(kLibc);
  ASSERT_FALSE(text.bytes.empty()) << "cannot read .text of " << kLibc;
  const std::map<uint64_t, std::string> expected = objdump_mnemonics(kLibc);
  ASSERT_GT(expected.size(), 100000u);

  std::string syntax, error;
  const auto decoded = disassemble("x86_64", text.bytes, text.address, syntax, error);
  ASSERT_TRUE(decoded) << error;
  EXPECT_EQ(syntax, "Intel");

  const auto [memcmp_start, memcmp_end] = debug_symbol(kLibc, "__memcmp_evex_movbe");
  ASSERT_NE(memcmp_start, 0u) << "__memcmp_evex_movbe not found: is libc6-dbg installed?";

  size_t bad = 0, missing = 0, different = 0, in_memcmp = 0, memcmp_ok = 0, evex = 0;
  std::ostringstream examples;
  size_t shown = 0;
  auto show = [&](const std::string& what) {
    if (shown++ < 20) examples << what << "\n";
  };
  std::set<uint64_t> starts;
  std::map<std::string, size_t> pairs;
  for (const DecodedInstruction& insn : *decoded) {
    const uint64_t address = text.address + insn.offset;
    starts.insert(address);
    const bool memcmp = address >= memcmp_start && address < memcmp_end;
    in_memcmp += memcmp ? 1 : 0;
    std::ostringstream where;
    where << std::hex << "0x" << address << std::dec << " " << insn.text;
    if (insn.text == "(bad)") {
      ++bad;
      show(where.str() + " (undecodable)");
    }
    const auto it = expected.find(address);
    if (it == expected.end()) {
      ++missing;
      show(where.str() + " (objdump has no instruction here)");
      continue;
    }
    if (mnemonic(insn.text) != it->second) {
      ++different;
      ++pairs[mnemonic(insn.text) + " -> " + it->second];
      show(where.str() + " (objdump: " + it->second + ")");
      continue;
    }
    if (memcmp) {
      ++memcmp_ok;
      if (insn.text.find("ymm16") != std::string::npos || insn.text.find("ymm17") != std::string::npos ||
          insn.text.find(" k") != std::string::npos) {
        ++evex;  // only EVEX encodes ymm16-31 and the mask registers k0-k7
      }
    }
  }
  size_t not_decoded = 0;
  for (const auto& [address, m] : expected) {
    if (starts.count(address) == 0) {
      ++not_decoded;
      std::ostringstream where;
      where << std::hex << "0x" << address << std::dec << " " << m
            << " (objdump's, not an instruction start here)";
      show(where.str());
    }
  }
  EXPECT_EQ(bad, 0u) << examples.str();
  EXPECT_EQ(missing, 0u) << examples.str();
  EXPECT_EQ(not_decoded, 0u) << examples.str();
  std::ostringstream pair_list;
  for (const auto& [pair, n] : pairs) pair_list << pair << " x" << n << "\n";
  EXPECT_EQ(different, 0u) << pair_list.str();
  EXPECT_EQ(decoded->size(), expected.size());
  EXPECT_GT(in_memcmp, 50u);
  EXPECT_EQ(memcmp_ok, in_memcmp) << examples.str();
  EXPECT_GT(evex, 10u) << "__memcmp_evex_movbe should use ymm16+ and mask registers";
}

// The text of each instruction: Intel syntax, sizes on memory operands, RIP-relative operands as
// [rip+disp], branch targets against `address`; a cut-off instruction is "(bad)" byte by byte.
TEST(Disassembler, PrintsIntelSyntaxAndMarksUndecodableBytes) {
  static const char kCode[] =
      "\x48\x8b\x05\x10\x00\x00\x00"  // mov rax, [rip+0x10]
      "\x62\xe1\xfe\x28\x6f\x06"      // EVEX: vmovdqu64 ymm16, [rsi]
      "\x74\x05"                      // je +5
      "\xc3"                          // ret
      "\x48\x8b";                     // a mov cut off
  std::string syntax, error;
  const auto decoded =
      disassemble("x86_64", std::string_view(kCode, sizeof(kCode) - 1), 0x1000, syntax, error);
  ASSERT_TRUE(decoded) << error;
  std::vector<std::pair<uint64_t, std::string>> got;
  for (const DecodedInstruction& insn : *decoded) got.emplace_back(insn.offset, insn.text);
  const std::vector<std::pair<uint64_t, std::string>> want = {{0, "mov rax, qword ptr [rip+0x10]"},
                                                              {7, "vmovdqu64 ymm16, ymmword ptr [rsi]"},
                                                              {13, "jz 0x1014"},
                                                              {15, "ret"},
                                                              {16, "(bad)"},
                                                              {17, "(bad)"}};
  EXPECT_EQ(got, want);

  // ARM64 (Capstone): ret.
  const auto arm = disassemble("aarch64", std::string_view("\xc0\x03\x5f\xd6", 4), 0, syntax, error);
  ASSERT_TRUE(arm) << error;
  ASSERT_EQ(arm->size(), 1u);
  EXPECT_EQ(arm->at(0).text, "ret");
  EXPECT_EQ(syntax, "ARM");

  EXPECT_FALSE(disassemble("riscv64", "\x13\x00\x00\x00", 0, syntax, error));
  EXPECT_EQ(error, "no disassembler for architecture riscv64");
}

}  // namespace
}  // namespace hpd::cli
