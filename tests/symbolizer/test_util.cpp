// Helpers for symbolizer tests: running tools, reading nm output and ELF layouts, temp dirs.
#include "test_util.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace hpd::test {

std::string run(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::vector<NmSymbol> nm_functions(const std::string& path, bool demangled, bool dynamic) {
  std::vector<NmSymbol> out;
  std::istringstream in(run(std::string("nm -S --defined-only ") + (demangled ? "--demangle " : "") +
                            (dynamic ? "-D " : "") + "'" + path + "' 2>/dev/null"));
  std::string line;
  while (std::getline(in, line)) {
    // "addr [size] type name"; the name may contain spaces when demangled.
    std::istringstream fields(line);
    std::string a, b, c;
    fields >> a >> b;
    NmSymbol s;
    s.address = std::stoull(a, nullptr, 16);
    if (b.size() == 1) {
      s.type = b[0];
    } else {
      s.size = std::stoull(b, nullptr, 16);
      fields >> c;
      if (c.size() != 1) continue;
      s.type = c[0];
    }
    std::getline(fields, s.name);
    if (!s.name.empty() && s.name[0] == ' ') s.name.erase(0, 1);
    if (std::strchr("TtWwi", s.type) == nullptr) continue;
    out.push_back(s);
  }
  return out;
}

std::optional<NmSymbol> nm_find(const std::vector<NmSymbol>& symbols, const std::string& name) {
  for (const auto& s : symbols) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

namespace {
struct ElfHandle {
  int fd = -1;
  Elf* elf = nullptr;
  explicit ElfHandle(const std::string& path) {
    elf_version(EV_CURRENT);
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) elf = elf_begin(fd, ELF_C_READ, nullptr);
  }
  ~ElfHandle() {
    if (elf) elf_end(elf);
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

std::vector<Segment> load_segments(const std::string& path) {
  std::vector<Segment> out;
  ElfHandle h(path);
  size_t n = 0;
  if (h.elf == nullptr || elf_getphdrnum(h.elf, &n) != 0) return out;
  for (size_t i = 0; i < n; ++i) {
    GElf_Phdr p;
    if (gelf_getphdr(h.elf, static_cast<int>(i), &p) && p.p_type == PT_LOAD) {
      out.push_back(Segment{p.p_offset, p.p_filesz, p.p_vaddr, p.p_memsz, (p.p_flags & PF_X) != 0});
    }
  }
  return out;
}

uint64_t file_offset_of(const std::vector<Segment>& segments, uint64_t vaddr) {
  for (const auto& s : segments) {
    if (vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz) return vaddr - s.vaddr + s.offset;
  }
  throw std::runtime_error("vaddr outside every PT_LOAD");
}

std::optional<std::pair<uint64_t, uint64_t>> section_range(const std::string& path, const std::string& name) {
  ElfHandle h(path);
  size_t shstrndx = 0;
  if (h.elf == nullptr || elf_getshdrstrndx(h.elf, &shstrndx) != 0) return std::nullopt;
  for (Elf_Scn* scn = elf_nextscn(h.elf, nullptr); scn; scn = elf_nextscn(h.elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    const char* n = elf_strptr(h.elf, shstrndx, sh.sh_name);
    if (n && name == n) return std::make_pair(sh.sh_addr, sh.sh_addr + sh.sh_size);
  }
  return std::nullopt;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace hpd::test
