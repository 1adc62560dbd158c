// ELF scan for mcount / __fentry__ instrumentation: NOP site tables, calls through the PLT or GOT,
// and the `call __mcount_internal` inside glibc's hooks.
#include "hpd/calls/discovery.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>

#include "hpd/base/elf.h"

namespace hpd::calls {

const char* const kBuildAdvice =
    "build with -pg -mfentry (gcc or clang), or with gcc -pg -mfentry -mnop-mcount -mrecord-mcount "
    "-fno-pie -no-pie for the cheapest probes; Rust: RUSTFLAGS=\"-Zinstrument-mcount=yes\" with a "
    "nightly toolchain (or RUSTC_BOOTSTRAP=1)";

const char* to_string(SiteKind kind) {
  switch (kind) {
    case SiteKind::kNop5: return "nop5";
    case SiteKind::kNop1: return "nop1";
    case SiteKind::kCall: return "call";
  }
  return "unknown";
}

namespace {

// An instrumentation call sits within the first bytes of a function: after endbr64 and the frame
// setup (gcc), or after a full prologue that pushes callee-saved registers (clang, rustc).
constexpr size_t kPrologueScanBytes = 64;
// glibc's _mcount / __fentry__ save seven registers before their call (about 40 bytes).
constexpr size_t kHookScanBytes = 128;

constexpr uint8_t kEndbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};

struct Section {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t type = 0;
  uint64_t flags = 0;
  Elf_Scn* scn = nullptr;
  std::string name;
};

class ElfImage {
 public:
  explicit ElfImage(Elf* elf) : elf_(elf) {}

  bool load(std::string& error) {
    const ElfView view(elf_);
    const std::optional<GElf_Ehdr> ehdr = view.header();
    if (!ehdr) {
      error = "not an ELF file";
      return false;
    }
    if (ehdr->e_ident[EI_CLASS] != ELFCLASS64 || ehdr->e_machine != EM_X86_64) {
      error = "not an x86-64 ELF file";
      return false;
    }
    segments_ = view.load_segments();
    has_interpreter_ = view.has_program_header(PT_INTERP);
    has_dynamic_ = view.has_program_header(PT_DYNAMIC);
    if (!view.has_section_names()) {
      error = "no section header string table";
      return false;
    }
    for (const ElfSection& s : view.sections()) {
      const GElf_Shdr& sh = s.header;
      sections_.push_back(
          Section{sh.sh_addr, sh.sh_size, sh.sh_type, sh.sh_flags, s.scn, s.name ? s.name : ""});
    }
    return true;
  }

  const Section* section(std::string_view name) const {
    for (const Section& s : sections_)
      if (s.name == name) return &s;
    return nullptr;
  }
  const std::vector<Section>& sections() const { return sections_; }

  std::span<const uint8_t> data(const Section& s) const {
    if (s.type == SHT_NOBITS) return {};
    Elf_Data* d = elf_getdata(s.scn, nullptr);
    if (d == nullptr || d->d_buf == nullptr) return {};
    return {static_cast<const uint8_t*>(d->d_buf), d->d_size};
  }

  // Up to `n` bytes of allocated file-backed contents at link-time address `vaddr`.
  std::span<const uint8_t> bytes_at(uint64_t vaddr, size_t n) const {
    for (const Section& s : sections_) {
      if ((s.flags & SHF_ALLOC) == 0 || vaddr < s.addr || vaddr >= s.addr + s.size) continue;
      const auto all = data(s);
      const uint64_t at = vaddr - s.addr;
      if (at >= all.size()) return {};
      return all.subspan(at, std::min<size_t>(n, all.size() - at));
    }
    return {};
  }

  bool executable(uint64_t vaddr) const {
    for (const Section& s : sections_) {
      if ((s.flags & SHF_EXECINSTR) != 0 && vaddr >= s.addr && vaddr < s.addr + s.size) return true;
    }
    return false;
  }

  std::optional<uint64_t> file_offset(uint64_t vaddr) const { return offset_of_vaddr(segments_, vaddr); }

  Elf* elf() const { return elf_; }
  bool has_interpreter() const { return has_interpreter_; }
  bool has_dynamic() const { return has_dynamic_; }

 private:
  bool has_interpreter_ = false;
  bool has_dynamic_ = false;
  Elf* elf_;
  std::vector<ElfSegment> segments_;
  std::vector<Section> sections_;
};

uint32_t read_u32(std::span<const uint8_t> b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint64_t read_u64(std::span<const uint8_t> b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
uint64_t rel32_target(uint64_t next_insn, uint32_t disp) {
  return next_insn + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(disp)));
}

enum class HookName { kNone, kMcount, kFentry };

HookName hook_name(std::string_view name) {
  if (name == "mcount" || name == "_mcount") return HookName::kMcount;
  if (name == "__fentry__") return HookName::kFentry;
  return HookName::kNone;
}

struct Symbols {
  std::vector<std::pair<uint64_t, uint64_t>> functions;  // (start, size), sorted, defined in this file
  std::unordered_map<std::string, uint64_t> defined;     // name -> start, for the hook lookup
};

void read_symbols(const ElfImage& img, Symbols& out, uint32_t table_type) {
  for (const Section& s : img.sections()) {
    if (s.type != table_type) continue;
    Elf_Data* d = elf_getdata(s.scn, nullptr);
    GElf_Shdr sh;
    if (d == nullptr || gelf_getshdr(s.scn, &sh) == nullptr || sh.sh_entsize == 0) continue;
    const size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(d, static_cast<int>(i), &sym) == nullptr) continue;
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC && GELF_ST_TYPE(sym.st_info) != STT_GNU_IFUNC) continue;
      if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
      out.functions.emplace_back(sym.st_value, sym.st_size);
      const char* name = elf_strptr(img.elf(), sh.sh_link, sym.st_name);
      if (name != nullptr) out.defined.emplace(name, sym.st_value);
    }
  }
}

// Relocations: the GOT slots bound to a hook, and R_X86_64_RELATIVE addends by offset (a PIE's
// __mcount_loc entries may hold zero, their value being the addend).
struct Relocations {
  std::unordered_map<uint64_t, HookName> hook_slots;  // GOT slot address -> hook
  std::unordered_map<uint64_t, uint64_t> relative;    // r_offset -> addend
};

void read_relocations(const ElfImage& img, Relocations& out) {
  for (const Section& s : img.sections()) {
    if (s.type != SHT_RELA) continue;
    Elf_Data* d = elf_getdata(s.scn, nullptr);
    GElf_Shdr sh;
    if (d == nullptr || gelf_getshdr(s.scn, &sh) == nullptr || sh.sh_entsize == 0) continue;
    // Only dynamic relocations: those of a relocatable object's sections are not at run time.
    if ((sh.sh_flags & SHF_ALLOC) == 0) continue;
    Elf_Scn* symtab = elf_getscn(img.elf(), sh.sh_link);
    GElf_Shdr symsh;
    Elf_Data* syms = symtab != nullptr ? elf_getdata(symtab, nullptr) : nullptr;
    const bool have_syms = syms != nullptr && gelf_getshdr(symtab, &symsh) != nullptr;
    const size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Rela r;
      if (gelf_getrela(d, static_cast<int>(i), &r) == nullptr) continue;
      const auto type = GELF_R_TYPE(r.r_info);
      if (type == R_X86_64_RELATIVE) {
        out.relative[r.r_offset] = static_cast<uint64_t>(r.r_addend);
        continue;
      }
      if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || !have_syms) continue;
      GElf_Sym sym;
      if (gelf_getsym(syms, static_cast<int>(GELF_R_SYM(r.r_info)), &sym) == nullptr) continue;
      const char* name = elf_strptr(img.elf(), symsh.sh_link, sym.st_name);
      if (name == nullptr) continue;
      if (const HookName h = hook_name(name); h != HookName::kNone) out.hook_slots[r.r_offset] = h;
    }
  }
}

// PLT entries that jump through a hook's GOT slot: `ff 25 disp32` (jmp *slot(%rip)), possibly
// after endbr64 and a bnd prefix (.plt.sec of IBT builds).
std::unordered_map<uint64_t, HookName> hook_plt_entries(const ElfImage& img, const Relocations& rel) {
  std::unordered_map<uint64_t, HookName> out;
  if (rel.hook_slots.empty()) return out;
  for (const Section& s : img.sections()) {
    if (s.name != ".plt" && s.name != ".plt.sec" && s.name != ".plt.got") continue;
    const auto bytes = img.data(s);
    const size_t entry = s.name == ".plt.got" ? 8 : 16;
    for (size_t e = 0; e + 6 <= bytes.size(); e += entry) {
      for (size_t at = e; at + 6 <= bytes.size() && at < e + entry; ++at) {
        if (bytes[at] != 0xff || bytes[at + 1] != 0x25) continue;
        const uint64_t slot = rel32_target(s.addr + at + 6, read_u32(bytes, at + 2));
        if (auto it = rel.hook_slots.find(slot); it != rel.hook_slots.end()) out[s.addr + e] = it->second;
        break;
      }
    }
  }
  return out;
}

// The hook an instruction at `code` (a function's first bytes) calls, if it is such a call.
HookName hook_call_at(std::span<const uint8_t> code, size_t at, uint64_t vaddr,
                      const std::unordered_map<uint64_t, HookName>& plt, const Relocations& rel) {
  if (at + 5 <= code.size() && code[at] == 0xe8) {
    const uint64_t target = rel32_target(vaddr + at + 5, read_u32(code, at + 1));
    if (auto it = plt.find(target); it != plt.end()) return it->second;
  }
  if (at + 6 <= code.size() && code[at] == 0xff && code[at + 1] == 0x15) {
    const uint64_t slot = rel32_target(vaddr + at + 6, read_u32(code, at + 2));
    if (auto it = rel.hook_slots.find(slot); it != rel.hook_slots.end()) return it->second;
  }
  return HookName::kNone;
}

bool is_function_entry(const Symbols& syms, uint64_t vaddr) {
  const auto it =
      std::lower_bound(syms.functions.begin(), syms.functions.end(), std::make_pair(vaddr, uint64_t{0}));
  return it != syms.functions.end() && it->first == vaddr;
}

// Sites listed in a table section (8-byte absolute addresses) whose bytes are NOPs.
void add_nop_sites(const ElfImage& img, const Section& table, const Relocations& rel, const Symbols& syms,
                   std::set<uint64_t>& seen, std::vector<ProbeSite>& out) {
  const auto bytes = img.data(table);
  for (size_t at = 0; at + 8 <= bytes.size(); at += 8) {
    uint64_t vaddr = read_u64(bytes, at);
    if (vaddr == 0) {
      auto it = rel.relative.find(table.addr + at);
      if (it == rel.relative.end()) continue;
      vaddr = it->second;
    }
    if (!img.executable(vaddr) || !seen.insert(vaddr).second) continue;
    const auto code = img.bytes_at(vaddr, 5);
    ProbeSite site;
    site.vaddr = vaddr;
    if (code.size() == 5 && code[0] == 0x0f && code[1] == 0x1f && code[2] == 0x44 && code[3] == 0x00) {
      site.kind = SiteKind::kNop5;
    } else if (!code.empty() && code[0] == 0x90) {
      site.kind = SiteKind::kNop1;
    } else {
      continue;  // a call left in place (-mrecord-mcount without -mnop-mcount): counted in libc
    }
    // At the entry (or right after endbr64) the return address is on top of the stack; later, the
    // frame is set up and it is above the saved frame pointer.
    const bool entry = is_function_entry(syms, vaddr) ||
                       (vaddr >= 4 && is_function_entry(syms, vaddr - 4) &&
                        std::ranges::equal(img.bytes_at(vaddr - 4, 4), std::span(kEndbr64)));
    site.mode = entry ? SiteMode::kAtEntry : SiteMode::kAfterPrologue;
    const auto off = img.file_offset(vaddr);
    if (!off) continue;
    site.file_offset = *off;
    out.push_back(site);
  }
}

// glibc's _mcount and __fentry__ (sysdeps/x86_64/_mcount.S) save the argument registers, load
// frompc/selfpc into rdi/rsi and call __mcount_internal: the first e8 in each, with the same target.
std::vector<ProbeSite> find_hook_internal_calls(const ElfImage& img, const Symbols& syms) {
  std::vector<ProbeSite> out;
  std::optional<uint64_t> common_target;
  for (const char* name : {"_mcount", "__fentry__"}) {
    const auto it = syms.defined.find(name);
    if (it == syms.defined.end()) continue;
    const uint64_t start = it->second;
    const auto code = img.bytes_at(start, kHookScanBytes);
    for (size_t at = 0; at + 5 <= code.size(); ++at) {
      if (code[at] != 0xe8) continue;
      const uint64_t target = rel32_target(start + at + 5, read_u32(code, at + 1));
      if (!img.executable(target)) continue;
      if (common_target && *common_target != target) return {};  // not the layout we know
      common_target = target;
      const auto off = img.file_offset(start + at);
      if (!off) return {};
      out.push_back(ProbeSite{start + at, *off, SiteKind::kCall, SiteMode::kMcountInternal});
      break;
    }
  }
  return out;
}

}  // namespace

ModuleInstrumentation scan_module(const std::string& path) {
  ModuleInstrumentation out;
  out.path = path;
  const OpenedElf elf = OpenedElf::open(path, ELF_C_READ_MMAP);
  if (!elf) {
    out.error = elf.error();
    return out;
  }
  ElfImage img(elf.get());
  if (!img.load(out.error)) {
    out.error = path + ": " + out.error;
    return out;
  }
  out.build_id = elf_build_id(elf.get(), BuildIdSearch::kSectionsFirst);
  Symbols syms;
  read_symbols(img, syms, SHT_SYMTAB);
  read_symbols(img, syms, SHT_DYNSYM);
  std::sort(syms.functions.begin(), syms.functions.end());
  syms.functions.erase(std::unique(syms.functions.begin(), syms.functions.end(),
                                   [](const auto& a, const auto& b) { return a.first == b.first; }),
                       syms.functions.end());
  Relocations rel;
  read_relocations(img, rel);
  out.imports_hook = !rel.hook_slots.empty();
  out.has_interpreter = img.has_interpreter();
  out.has_dynamic = img.has_dynamic();
  for (const char* hook : {"mcount", "_mcount", "__fentry__"})
    if (syms.defined.count(hook) != 0) out.defines_hook = true;

  std::set<uint64_t> seen;
  for (const char* table : {"__mcount_loc", "__patchable_function_entries"}) {
    if (const Section* s = img.section(table)) add_nop_sites(img, *s, rel, syms, seen, out.nop_sites);
  }
  std::sort(out.nop_sites.begin(), out.nop_sites.end(),
            [](const ProbeSite& a, const ProbeSite& b) { return a.vaddr < b.vaddr; });

  if (out.imports_hook) {
    const auto plt = hook_plt_entries(img, rel);
    for (size_t i = 0; i < syms.functions.size(); ++i) {
      const auto [start, size] = syms.functions[i];
      if (!img.executable(start)) continue;
      // Never into the next function: a symbol without size (_init) must not claim its neighbour's call.
      size_t len = size != 0 ? std::min<size_t>(size, kPrologueScanBytes) : kPrologueScanBytes;
      if (i + 1 < syms.functions.size()) len = std::min<size_t>(len, syms.functions[i + 1].first - start);
      const auto code = img.bytes_at(start, len);
      for (size_t at = 0; at < code.size(); ++at) {
        const HookName h = hook_call_at(code, at, start, plt, rel);
        if (h == HookName::kNone) continue;
        (h == HookName::kFentry ? out.fentry_calls : out.mcount_calls) += 1;
        break;
      }
    }
  }
  out.hook_internal_sites = find_hook_internal_calls(img, syms);
  return out;
}

}  // namespace hpd::calls
