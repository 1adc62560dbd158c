// Helpers shared by the DwarfIndex tests and benchmark: address sampling and llvm-symbolizer runs.
#include "dwarf_test_support.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <sys/wait.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace hpd::dwarf_test {

std::vector<uint64_t> function_addresses(const std::string& elf_path, uint64_t stride) {
  std::vector<uint64_t> out;
  int fd = ::open(elf_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  for (Elf_Scn* scn = elf ? elf_nextscn(elf, nullptr) : nullptr; scn != nullptr;
       scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_SYMTAB || shdr.sh_entsize == 0) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    size_t count = shdr.sh_size / shdr.sh_entsize;
    for (size_t i = 0; data != nullptr && i < count; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_size == 0 || sym.st_shndx == SHN_UNDEF) continue;
      for (uint64_t a = sym.st_value; a < sym.st_value + sym.st_size; a += stride) out.push_back(a);
      out.push_back(sym.st_value + sym.st_size - 1);
    }
  }
  if (elf != nullptr) elf_end(elf);
  ::close(fd);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool copy_without_symbol_table(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return false;
  std::fstream f(to, std::ios::in | std::ios::out | std::ios::binary);
  Elf64_Ehdr ehdr;
  if (!f.read(reinterpret_cast<char*>(&ehdr), sizeof ehdr) || ehdr.e_ident[EI_CLASS] != ELFCLASS64)
    return false;
  for (unsigned i = 0; i < ehdr.e_shnum; ++i) {
    Elf64_Shdr shdr;
    const auto at = static_cast<std::streamoff>(ehdr.e_shoff + uint64_t{i} * ehdr.e_shentsize);
    f.seekg(at);
    if (!f.read(reinterpret_cast<char*>(&shdr), sizeof shdr)) return false;
    if (shdr.sh_type != SHT_SYMTAB) continue;
    shdr.sh_type = SHT_PROGBITS;
    f.seekp(at);
    f.write(reinterpret_cast<const char*>(&shdr), sizeof shdr);
  }
  return static_cast<bool>(f.flush());
}

std::string run_command(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    if (status != nullptr) *status = -1;
    return out;
  }
  char buffer[65536];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int rc = ::pclose(pipe);
  if (status != nullptr) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

std::vector<std::vector<SourceFrame>> llvm_symbolize(const std::string& tool, const std::string& obj,
                                                     const std::vector<uint64_t>& addresses) {
  TempDir dir;
  std::string list = dir.path() + "/addresses";
  {
    std::ofstream f(list);
    for (uint64_t a : addresses) f << "0x" << std::hex << a << '\n';
  }
  int status = 0;
  std::string output = run_command(
      tool + " --inlining --demangle --output-style=JSON --obj='" + obj + "' < '" + list + "'", &status);
  if (status != 0) throw std::runtime_error(tool + " failed with status " + std::to_string(status));
  std::vector<std::vector<SourceFrame>> result;
  std::istringstream lines(output);
  std::string line;
  auto unknown = [](std::string s) { return s == "??" || s == "<invalid>" ? std::string() : s; };
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    auto json = nlohmann::json::parse(line);
    std::vector<SourceFrame> frames;
    for (const auto& sym : json.at("Symbol")) {
      SourceFrame f;
      f.function = unknown(sym.at("FunctionName").get<std::string>());
      f.file = unknown(sym.at("FileName").get<std::string>());
      f.line = sym.at("Line").get<uint32_t>();
      f.column = sym.at("Column").get<uint32_t>();
      frames.push_back(std::move(f));
    }
    std::reverse(frames.begin(), frames.end());
    result.push_back(std::move(frames));
  }
  if (result.size() != addresses.size()) {
    throw std::runtime_error(tool + " answered " + std::to_string(result.size()) + " of " +
                             std::to_string(addresses.size()) + " addresses");
  }
  return result;
}

}  // namespace hpd::dwarf_test

namespace hpd::dwarf_test {

namespace {

// Text answers split at their blank lines, each a list of lines.
std::vector<std::vector<std::string>> answers_of(const std::string& text) {
  std::vector<std::vector<std::string>> out(1);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      out.emplace_back();
    } else {
      out.back().push_back(line);
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

}  // namespace

std::string merge_llvm_names(const std::string& dwarf_names, const std::string& symtab_names) {
  const auto dwarf = answers_of(dwarf_names);
  const auto symtab = answers_of(symtab_names);
  if (dwarf.size() != symtab.size()) return {};
  std::string out;
  for (size_t i = 0; i < dwarf.size(); ++i) {
    std::vector<std::string> answer = dwarf[i];
    // Levels are (function, file:line:column) pairs, the outermost last.
    if (answer.size() >= 2 && answer.size() % 2 == 0 && answer[answer.size() - 2] == "??" &&
        symtab[i].size() >= 2) {
      answer[answer.size() - 2] = symtab[i][symtab[i].size() - 2];
      answer[answer.size() - 1] = symtab[i][symtab[i].size() - 1];
    } else if (answer.size() >= 2 && answer.size() % 2 == 0 && answer.back().rfind("??:", 0) == 0 &&
               symtab[i].size() == answer.size() && symtab[i].back().rfind("??:", 0) != 0) {
      // The function without a file from DWARF (a gcc .cold part: `main` by DWARF, no line row):
      // given the .symtab, llvm-symbolizer names the file by the symbol's STT_FILE (line 0), as hpd
      // does from the binary's or the debug file's .symtab; without it, "??". Seen in the ASan
      // build's fixture (main.cold).
      answer.back() = symtab[i].back();
    }
    for (const std::string& line : answer) out += line + "\n";
    out += "\n";
  }
  return out;
}

}  // namespace hpd::dwarf_test

namespace hpd::dwarf_test {

std::string no_inlines_of(const std::string& inlining) {
  std::string out;
  for (const std::vector<std::string>& answer : answers_of(inlining)) {
    if (answer.size() >= 2) out += answer[answer.size() - 2] + "\n" + answer[1] + "\n";
    out += "\n";
  }
  return out;
}

}  // namespace hpd::dwarf_test
