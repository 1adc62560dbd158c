// module_allocators: the allocator entry points of one ELF file, from its symbol tables.
#include "hpd/calls/allocator_symbols.h"

#include <cstring>
#include <map>
#include <set>
#include <string_view>

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

struct Family {
  const char* family;
  const char* prefix;
  const OtherName* names;
  size_t count;
};

const Family kFamilies[] = {
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

// The defined functions of one symbol table that are looked for, name -> virtual address.
void read_functions(Elf* elf, ElfSection section, std::map<std::string, uint64_t>& out) {
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
      out.emplace(name, sym.st_value);
  }
}

ElfSection section_of_type(Elf* elf, uint32_t type) {
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) != nullptr && sh.sh_type == type) return ElfSection{scn, sh, nullptr};
  }
  return {};
}

// The file offset of a function's address: in an executable PT_LOAD segment.
bool code_offset(Elf* elf, uint64_t vaddr, uint64_t& offset) {
  size_t n = 0;
  if (elf_getphdrnum(elf, &n) != 0) return false;
  for (size_t i = 0; i < n; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD ||
        !(ph.p_flags & PF_X))
      continue;
    if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
      offset = vaddr - ph.p_vaddr + ph.p_offset;
      return true;
    }
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
  std::map<std::string, uint64_t> dynamic, all;
  read_functions(elf, section_of_type(elf, SHT_DYNSYM), dynamic);
  all = dynamic;
  read_functions(elf, section_of_type(elf, SHT_SYMTAB), all);
  std::map<uint64_t, std::string> offsets;  // of `standard`
  for (size_t f = 0; f < kAllocatorFunctionCount; ++f) {
    auto it = dynamic.find(kAllocatorFunctions[f]);
    uint64_t offset = 0;
    if (it == dynamic.end() || !code_offset(elf, it->second, offset) ||
        !offsets.emplace(offset, it->first).second)
      continue;
    const Call call = f == 7 || f == 8 ? Call::kMalloc : f == 6 ? Call::kAlignedAlloc : static_cast<Call>(f);
    out.standard.push_back(AllocatorFunction{it->first, offset, call, static_cast<uint32_t>(f), {}});
  }
  std::set<uint64_t> other_offsets;
  for (const Family& family : kFamilies) {
    OtherAllocator other{family.family, {}};
    for (size_t i = 0; i < family.count; ++i) {
      const std::string name = std::string(family.prefix) + family.names[i].name;
      auto it = all.find(name);
      uint64_t offset = 0;
      if (it == all.end() || !code_offset(elf, it->second, offset) || !other_offsets.insert(offset).second)
        continue;
      AllocatorFunction function{
          name, offset, family.names[i].call, static_cast<uint32_t>(family.names[i].call), {}};
      if (auto standard = offsets.find(offset); standard != offsets.end())
        function.alias_of = standard->second;
      other.functions.push_back(std::move(function));
    }
    if (!other.functions.empty()) out.others.push_back(std::move(other));
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
    // With --pid, an allocator under other names is probed where the module does not replace malloc.
    const std::string pid_words =
        allocators.standard.empty() ? " (recording the running process by its pid probes them)" : "";
    for (const OtherAllocator& other : allocators.others)
      out.push_back("allocations not seen: " + module.path + " defines the entry points of " + other.family +
                    " (" + function_names(other.functions) +
                    "), which hpd's runtime does not interpose; allocations made through them were not "
                    "counted" +
                    pid_words);
  }
  return out;
}

std::string function_names(const std::vector<AllocatorFunction>& functions) {
  std::string out;
  for (const AllocatorFunction& f : functions) out += (out.empty() ? "" : ", ") + f.name;
  return out;
}

}  // namespace hpd::calls
