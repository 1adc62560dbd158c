// module_allocators: the allocator entry points of one ELF file, from its symbol tables.
#include "hpd/calls/allocator_symbols.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include "hpd/base/elf.h"
#include "hpd/model/raw_profile.h"

namespace hpd::calls {

const char* const kAllocatorFunctions[] = {"malloc",        "calloc",   "realloc", "free",   "posix_memalign",
                                           "aligned_alloc", "memalign", "valloc",  "pvalloc"};
const size_t kAllocatorFunctionCount = sizeof kAllocatorFunctions / sizeof kAllocatorFunctions[0];

namespace {

using Call = AllocatorCall;

struct OtherName {
  const char* name;
  Call call;
};

// The entry points a program calls, and only those that call none of the others (each call is then
// counted once): mimalloc's mi_posix_memalign, mi_memalign, mi_aligned_alloc and mi_valloc call
// mi_malloc_aligned, as mi_new_aligned does (mi_new_nothrow calls mi_malloc), its mi_free_size and
// mi_free_aligned call mi_free: these are left out (checked in Debian's libmimalloc 2.0.9). Calls the
// allocator makes inside a realloc are not looked at (bpf/alloc.bpf.c).
const OtherName kMimalloc[] = {
    {"mi_malloc", Call::kMalloc},
    {"mi_zalloc", Call::kMalloc},
    {"mi_calloc", Call::kCalloc},
    {"mi_mallocn", Call::kCalloc},
    {"mi_realloc", Call::kRealloc},
    {"mi_free", Call::kFree},
    {"mi_malloc_aligned", Call::kMalloc},
    {"mi_zalloc_aligned", Call::kMalloc},
    {"mi_calloc_aligned", Call::kCalloc},
    {"mi_realloc_aligned", Call::kRealloc},
    {"mi_new", Call::kMalloc},
    {"mi_new_n", Call::kCalloc},
};
// jemalloc's public names, built with a prefix (--with-jemalloc-prefix): none calls another.
const OtherName kJemalloc[] = {
    {"malloc", Call::kMalloc},
    {"calloc", Call::kCalloc},
    {"realloc", Call::kRealloc},
    {"free", Call::kFree},
    {"mallocx", Call::kMalloc},
    {"rallocx", Call::kRealloc},
    {"dallocx", Call::kFree},
    {"sdallocx", Call::kFree},
    {"posix_memalign", Call::kPosixMemalign},
    {"aligned_alloc", Call::kAlignedAlloc},
    {"memalign", Call::kAlignedAlloc},
    {"valloc", Call::kMalloc},
};
// gperftools' tcmalloc (its malloc and free are aliases of tc_malloc and tc_free; tc_valloc may call
// tc_memalign and is left out).
const OtherName kTcmalloc[] = {
    {"tc_malloc", Call::kMalloc},
    {"tc_calloc", Call::kCalloc},
    {"tc_realloc", Call::kRealloc},
    {"tc_free", Call::kFree},
    {"tc_memalign", Call::kAlignedAlloc},
    {"tc_posix_memalign", Call::kPosixMemalign},
    {"tc_new", Call::kMalloc},
    {"tc_newarray", Call::kMalloc},
    {"tc_delete", Call::kFree},
    {"tc_deletearray", Call::kFree},
};

// C++'s operator new and delete, as an allocator that replaces malloc defines them too (Debian's
// jemalloc, tcmalloc and mimalloc do): they do not go through its malloc and free. Looked for only in
// a module that defines malloc (libstdc++'s call malloc and free). Those that call another probed
// function (jemalloc's operator new[] jumps to its operator new, its aligned one calls aligned_alloc,
// its operator delete jumps to free) are found so by their bytes (`wraps`).
const OtherName kCxx[] = {
    {"_Znwm", Call::kMalloc},
    {"_Znam", Call::kMalloc},
    {"_ZnwmRKSt9nothrow_t", Call::kMalloc},
    {"_ZnamRKSt9nothrow_t", Call::kMalloc},
    {"_ZnwmSt11align_val_t", Call::kMalloc},
    {"_ZnamSt11align_val_t", Call::kMalloc},
    {"_ZnwmSt11align_val_tRKSt9nothrow_t", Call::kMalloc},
    {"_ZnamSt11align_val_tRKSt9nothrow_t", Call::kMalloc},
    {"_ZdlPv", Call::kFree},
    {"_ZdaPv", Call::kFree},
    {"_ZdlPvm", Call::kFree},
    {"_ZdaPvm", Call::kFree},
    {"_ZdlPvRKSt9nothrow_t", Call::kFree},
    {"_ZdaPvRKSt9nothrow_t", Call::kFree},
    {"_ZdlPvSt11align_val_t", Call::kFree},
    {"_ZdaPvSt11align_val_t", Call::kFree},
    {"_ZdlPvmSt11align_val_t", Call::kFree},
    {"_ZdaPvmSt11align_val_t", Call::kFree},
    {"_ZdlPvSt11align_val_tRKSt9nothrow_t", Call::kFree},
    {"_ZdaPvSt11align_val_tRKSt9nothrow_t", Call::kFree},
};
// jemalloc's own API without a prefix, as Debian builds it (libjemalloc.so.2 defines malloc too): none
// of mallocx, rallocx, dallocx and sdallocx calls another entry point (objdump of 5.3.0).
const OtherName kJemallocOwn[] = {
    {"mallocx", Call::kMalloc},
    {"rallocx", Call::kRealloc},
    {"dallocx", Call::kFree},
    {"sdallocx", Call::kFree},
};

struct Family {
  const char* family;
  const char* prefix;
  const OtherName* names;
  size_t count;
  // Looked for only where the module defines malloc, and probed there beside it.
  bool beside_malloc = false;
};

constexpr std::string_view kCxxFamily = "C++ operator new and delete";

const Family kFamilies[] = {
    {kCxxFamily.data(), "", kCxx, std::size(kCxx), true},
    {"jemalloc", "", kJemallocOwn, std::size(kJemallocOwn), true},
    {"mimalloc", "", kMimalloc, std::size(kMimalloc)},
    {"jemalloc built with the prefix je_", "je_", kJemalloc, std::size(kJemalloc)},
    {"jemalloc with tikv-jemallocator's prefix _rjem_", "_rjem_", kJemalloc, std::size(kJemalloc)},
    {"tcmalloc", "", kTcmalloc, std::size(kTcmalloc)},
};

// Every name looked for: a large program's .symtab holds a million functions, of which only these
// are kept.
const std::set<std::string, std::less<>>& wanted_names() {
  static const std::set<std::string, std::less<>> names = [] {
    std::set<std::string, std::less<>> out(kAllocatorFunctions,
                                           kAllocatorFunctions + kAllocatorFunctionCount);
    for (const Family& family : kFamilies)
      for (size_t i = 0; i < family.count; ++i) out.insert(std::string(family.prefix) + family.names[i].name);
    return out;
  }();
  return names;
}

struct Symbol {
  uint64_t vaddr = 0;
  uint64_t size = 0;
};

// The defined functions of one symbol table that are looked for, name -> address and size.
void read_functions(Elf* elf, ElfSection section, std::map<std::string, Symbol>& out) {
  const std::set<std::string, std::less<>>& wanted = wanted_names();
  if (!section || section.header.sh_entsize == 0) return;
  Elf_Data* d = section.data();
  if (d == nullptr) return;
  const size_t count = section.header.sh_size / section.header.sh_entsize;
  for (size_t i = 0; i < count; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(d, static_cast<int>(i), &sym) == nullptr || sym.st_shndx == SHN_UNDEF ||
        sym.st_value == 0)
      continue;
    if (GELF_ST_TYPE(sym.st_info) != STT_FUNC) continue;  // an IFUNC resolver is not the function
    const char* name = elf_strptr(elf, section.header.sh_link, sym.st_name);
    if (name != nullptr && wanted.find(std::string_view(name)) != wanted.end())
      out.emplace(name, Symbol{sym.st_value, sym.st_size});
  }
}

ElfSection section_of_type(Elf* elf, uint32_t type) {
  for (const ElfSection& section : ElfView(elf).sections()) {
    if (section.header.sh_type == type) return section;
  }
  return {};
}

// The file offset of a function's address: in an executable PT_LOAD segment.
bool code_offset(Elf* elf, uint64_t vaddr, uint64_t& offset) {
  std::vector<ElfSegment> code = ElfView(elf).load_segments();
  std::erase_if(code, [](const ElfSegment& s) { return !s.executable; });
  const std::optional<uint64_t> at = offset_of_vaddr(code, vaddr);
  if (at) offset = *at;
  return at.has_value();
}

// x86-64: the PLT entries of the module, entry address -> the name of the symbol whose GOT slot it
// jumps through (`[endbr64] [bnd] jmp *slot(%rip)`, in .plt and .plt.sec; slots from .rela.plt).
std::map<uint64_t, std::string> plt_entries(Elf* elf) {
  std::map<uint64_t, std::string> slot_names, out;
  const ElfSection dynsym = section_of_type(elf, SHT_DYNSYM);
  Elf_Data* syms = dynsym ? dynsym.data() : nullptr;
  for (const ElfSection& rela_section : ElfView(elf).sections()) {
    if (syms == nullptr) break;
    const GElf_Shdr& sh = rela_section.header;
    if (sh.sh_type != SHT_RELA || sh.sh_entsize == 0) continue;
    Elf_Data* d = rela_section.data();
    if (d == nullptr) continue;
    for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; ++i) {
      GElf_Rela rela;
      GElf_Sym sym;
      if (gelf_getrela(d, static_cast<int>(i), &rela) == nullptr ||
          GELF_R_TYPE(rela.r_info) != R_X86_64_JUMP_SLOT ||
          gelf_getsym(syms, static_cast<int>(GELF_R_SYM(rela.r_info)), &sym) == nullptr)
        continue;
      if (const char* name = elf_strptr(elf, dynsym.header.sh_link, sym.st_name); name != nullptr)
        slot_names.emplace(rela.r_offset, name);
    }
  }
  if (slot_names.empty()) return out;
  for (const ElfSection& section : ElfView(elf).sections()) {
    if (!section.named(".plt") && !section.named(".plt.sec")) continue;
    const std::span<const uint8_t> bytes = section.bytes();
    for (size_t at = 0; at + 16 <= bytes.size(); at += 16) {
      size_t i = at;
      if (bytes[i] == 0xf3 && bytes[i + 1] == 0x0f && bytes[i + 2] == 0x1e && bytes[i + 3] == 0xfa) i += 4;
      if (bytes[i] == 0xf2) ++i;
      if (i + 6 > bytes.size() || bytes[i] != 0xff || bytes[i + 1] != 0x25) continue;
      int32_t disp = 0;
      std::memcpy(&disp, &bytes[i + 2], sizeof disp);
      const uint64_t slot = section.header.sh_addr + i + 6 + static_cast<int64_t>(disp);
      if (auto it = slot_names.find(slot); it != slot_names.end())
        out.emplace(section.header.sh_addr + at, it->second);
    }
  }
  return out;
}

// Whether the function at `vaddr` (`size` bytes) calls or jumps to one of `targets` (addresses of
// the module's probed entry points), directly or through its PLT entry (`plt`, resolved with `named`:
// the module's own definition of a name): libtcmalloc's posix_memalign, valloc and pvalloc call
// tc_memalign@plt, which is its memalign. x86-64 only (call/jmp rel32); an unrelated byte that reads
// as such a branch only makes hpd watch the function's return too.
bool calls_one_of(Elf* elf, uint64_t vaddr, uint64_t size, const std::set<uint64_t>& targets,
                  const std::map<uint64_t, std::string>& plt, const std::map<std::string, Symbol>& named) {
  for (const ElfSection& section : ElfView(elf).sections()) {
    if (!(section.header.sh_flags & SHF_EXECINSTR) || !section.has_bytes() ||
        vaddr < section.header.sh_addr || vaddr - section.header.sh_addr >= section.header.sh_size)
      continue;
    const std::span<const uint8_t> bytes = section.bytes();
    const uint64_t start = vaddr - section.header.sh_addr;
    const uint64_t end = std::min<uint64_t>(bytes.size(), start + size);
    for (uint64_t i = start; i + 5 <= end; ++i) {
      if (bytes[i] != 0xe8 && bytes[i] != 0xe9) continue;
      int32_t rel = 0;
      std::memcpy(&rel, &bytes[i + 1], sizeof rel);
      const uint64_t target = section.header.sh_addr + i + 5 + static_cast<int64_t>(rel);
      if (target != vaddr && targets.count(target) != 0) return true;
      if (auto entry = plt.find(target); entry != plt.end())
        if (auto it = named.find(entry->second); it != named.end() && targets.count(it->second.vaddr) != 0)
          return true;
    }
    return false;
  }
  return false;
}

}  // namespace

ModuleAllocators module_allocators(const std::string& file) {
  ModuleAllocators out;
  init_libelf();
  const OpenedElf opened = OpenedElf::open(file, ELF_C_READ);
  if (!opened || !opened.view().is_elf()) return out;
  Elf* elf = opened.get();
  std::map<std::string, Symbol> dynamic, all;
  read_functions(elf, section_of_type(elf, SHT_DYNSYM), dynamic);
  all = dynamic;
  read_functions(elf, section_of_type(elf, SHT_SYMTAB), all);
  std::map<uint64_t, std::string> offsets;  // of `standard`
  for (size_t f = 0; f < kAllocatorFunctionCount; ++f) {
    auto it = dynamic.find(kAllocatorFunctions[f]);
    uint64_t offset = 0;
    if (it == dynamic.end() || !code_offset(elf, it->second.vaddr, offset) ||
        !offsets.emplace(offset, it->first).second)
      continue;
    const Call call = f == 7 || f == 8 ? Call::kMalloc : f == 6 ? Call::kAlignedAlloc : static_cast<Call>(f);
    out.standard.push_back(AllocatorFunction{it->first, offset, call, static_cast<uint32_t>(f), {}, false});
  }
  const bool defines_malloc = std::any_of(out.standard.begin(), out.standard.end(),
                                          [](const AllocatorFunction& f) { return f.name == "malloc"; });
  std::map<uint64_t, std::string> other_offsets;  // of the families before, the first name
  for (const Family& family : kFamilies) {
    if (family.beside_malloc && !defines_malloc) continue;
    OtherAllocator other{family.family, {}, family.beside_malloc};
    std::set<uint64_t> family_offsets;
    for (size_t i = 0; i < family.count; ++i) {
      const std::string name = std::string(family.prefix) + family.names[i].name;
      auto it = all.find(name);
      uint64_t offset = 0;
      if (it == all.end() || !code_offset(elf, it->second.vaddr, offset) ||
          !family_offsets.insert(offset).second)
        continue;
      AllocatorFunction function{
          name, offset, family.names[i].call, static_cast<uint32_t>(family.names[i].call), {}, false};
      // One probe per address: an alias of the C library's name or of an earlier family's (mimalloc's
      // mi_new is libmimalloc's operator new) is seen through it.
      if (auto standard = offsets.find(offset); standard != offsets.end())
        function.alias_of = standard->second;
      else if (auto earlier = other_offsets.find(offset); earlier != other_offsets.end())
        function.alias_of = earlier->second;
      else
        other_offsets.emplace(offset, name);
      other.functions.push_back(std::move(function));
    }
    if (!other.functions.empty()) out.others.push_back(std::move(other));
  }
  // Which of the entry points `--pid` probes (alloc_probes.cpp: the C library's names where the
  // module defines them, else the other names) call another of them.
  std::vector<AllocatorFunction*> probed;
  for (AllocatorFunction& f : out.standard) probed.push_back(&f);
  for (OtherAllocator& other : out.others)
    if (out.standard.empty() || other.beside_malloc)
      for (AllocatorFunction& f : other.functions)
        if (f.alias_of.empty()) probed.push_back(&f);
  const auto symbol_of = [&](const AllocatorFunction& f) { return all.at(f.name); };
  std::set<uint64_t> targets;
  for (const AllocatorFunction* f : probed) targets.insert(symbol_of(*f).vaddr);
  const std::map<uint64_t, std::string> plt = plt_entries(elf);
  for (AllocatorFunction* f : probed) {
    // Inside realloc the probes look at nothing already (glibc's calls its malloc and free).
    if (f->call == Call::kRealloc) continue;
    const Symbol symbol = symbol_of(*f);
    f->wraps = calls_one_of(elf, symbol.vaddr, symbol.size, targets, plt, all);
  }
  return out;
}

std::vector<std::string> allocators_not_seen(const RawProfile& profile) {
  std::vector<std::string> out;
  std::set<std::string> programs;
  for (const RawProcess& process : profile.processes) programs.insert(process.exe);
  for (const RawModule& module : profile.modules) {
    if (module.is_kernel || !module.image.empty()) continue;
    // The file the process mapped, held open while recording (another mount namespace, deleted).
    const std::string file =
        module.file != nullptr ? "/proc/self/fd/" + std::to_string(module.file->fd()) : module.path;
    const ModuleAllocators allocators = module_allocators(file);
    // A program that defines malloc itself (an allocator linked in statically: the linker exports
    // its names) comes first in the loader's search, before the preloaded runtime: every call of
    // malloc, the C library's too, goes to the program's own.
    if (programs.count(module.path) != 0 && !allocators.standard.empty())
      out.push_back(
          "allocations not seen: " + module.path + " defines " + function_names(allocators.standard) +
          " itself (an allocator linked in statically), which the loader finds before hpd's "
          "runtime; its allocations were not counted (recording the running process by its pid probes them)");
    // With --pid, an allocator under other names is probed where the module does not replace malloc,
    // and the names looked for only beside malloc are probed there.
    for (const OtherAllocator& other : allocators.others) {
      // The runtime interposes C++'s operator new and delete (alloc.c), unless the program defines
      // them itself (the loader finds those first).
      if (other.family == kCxxFamily && programs.count(module.path) == 0) continue;
      const bool pid_probes = allocators.standard.empty() || other.beside_malloc;
      out.push_back("allocations not seen: " + module.path + " defines the entry points of " + other.family +
                    " (" + function_names(other.functions) +
                    "), which hpd's runtime does not interpose; allocations made through them were not "
                    "counted" +
                    (pid_probes ? " (recording the running process by its pid probes them)" : ""));
    }
  }
  return out;
}

std::string function_names(const std::vector<AllocatorFunction>& functions) {
  std::string out;
  for (const AllocatorFunction& f : functions) out += (out.empty() ? "" : ", ") + f.name;
  return out;
}

}  // namespace hpd::calls
