// SymbolTable: reading ELF function symbols and PLT stubs into one sorted table.
#include "symbol_table.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "elf_file.h"
#include "hpd/base/demangle.h"
#include "hpd/symbolizer/symbolizer.h"

namespace hpd {

void SymbolTable::add(uint64_t address, uint64_t size, std::string_view name, uint64_t section_end,
                      uint32_t file) {
  if (name.empty() || pool_.size() + name.size() > UINT32_MAX) return;
  Symbol s;
  s.file = file < files_.size() ? file : kNoFile;
  s.address = address;
  s.size = size;
  s.end = address + size;
  s.name_offset = static_cast<uint32_t>(pool_.size());
  s.name_length = static_cast<uint32_t>(name.size());
  pool_.append(name);
  symbols_.push_back(s);
  section_ends_.push_back(section_end);
}

uint32_t SymbolTable::add_file(std::string_view name) {
  auto [it, inserted] = file_index_.try_emplace(std::string(name), static_cast<uint32_t>(files_.size()));
  if (inserted) files_.emplace_back(name);
  return it->second;
}

void SymbolTable::finalize() {
  // Sort an index permutation so the section ends follow their symbols.
  std::vector<uint32_t> order(symbols_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [this](uint32_t a, uint32_t b) {
    const Symbol& x = symbols_[a];
    const Symbol& y = symbols_[b];
    return x.address != y.address ? x.address < y.address : x.size < y.size;
  });
  std::vector<Symbol> sorted;
  std::vector<uint64_t> ends;
  sorted.reserve(order.size());
  ends.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    // Of a run at one address keep the last.
    if (i + 1 < order.size() && symbols_[order[i + 1]].address == symbols_[order[i]].address) continue;
    sorted.push_back(symbols_[order[i]]);
    ends.push_back(section_ends_[order[i]]);
  }
  for (size_t i = 0; i < sorted.size(); ++i) {
    Symbol& s = sorted[i];
    if (s.size != 0) continue;
    if (i + 1 < sorted.size()) {
      s.end = sorted[i + 1].address;
      if (ends[i] > s.address) s.end = std::min(s.end, ends[i]);
    } else {
      s.end = ends[i] > s.address ? ends[i] : s.address + 1;
    }
  }
  symbols_ = std::move(sorted);
  symbols_.shrink_to_fit();
  section_ends_.clear();
  section_ends_.shrink_to_fit();
  pool_.shrink_to_fit();
}

const SymbolTable::Symbol* SymbolTable::find(uint64_t vaddr) const {
  auto it = std::upper_bound(symbols_.begin(), symbols_.end(), vaddr,
                             [](uint64_t a, const Symbol& s) { return a < s.address; });
  if (it == symbols_.begin()) return nullptr;
  --it;
  return vaddr < it->end ? &*it : nullptr;
}

std::string_view SymbolTable::version(const Symbol& s) const {
  const std::string_view raw = name(s);
  const size_t at = symbol_version_start(raw);
  return at == std::string_view::npos ? std::string_view() : raw.substr(at);
}

const std::string& SymbolTable::display_name(const Symbol& s, bool demangle_names) {
  if (s.display != kNoDisplay) return display_[s.display];
  std::string_view raw = name(s);
  // Shown without its ELF version ("clock_nanosleep@@GLIBC_2.17" is clock_nanosleep); version()
  // still has it for the native symbol.
  if (const size_t at = symbol_version_start(raw); at != std::string_view::npos) raw = raw.substr(0, at);
  std::string shown = demangle_names ? demangle(std::string(raw)) : std::string(raw);
  display_bytes_ += shown.capacity() + sizeof(std::string);
  // At most one name per symbol; past UINT32_MAX - 1 of them (never in practice) the index is not
  // kept and a later call adds the name again.
  if (display_.size() < kNoDisplay) s.display = static_cast<uint32_t>(display_.size());
  return display_.emplace_back(std::move(shown));
}

size_t SymbolTable::memory_bytes() const {
  size_t files = file_index_.bucket_count() * sizeof(void*);
  for (const std::string& f : files_) files += 2 * (f.capacity() + 48);  // the vector's copy and the key
  return symbols_.capacity() * sizeof(Symbol) + section_ends_.capacity() * sizeof(uint64_t) +
         pool_.capacity() + display_bytes_ + files;
}

namespace {

// End address of every section, by section index (0 when unknown or not allocated).
std::vector<uint64_t> section_ends(Elf* elf) {
  std::vector<uint64_t> ends;
  size_t count = 0;
  if (elf_getshdrnum(elf, &count) != 0) return ends;
  ends.resize(count, 0);
  for (size_t i = 0; i < count; ++i) {
    GElf_Shdr shdr;
    Elf_Scn* scn = elf_getscn(elf, i);
    if (scn != nullptr && gelf_getshdr(scn, &shdr) != nullptr && (shdr.sh_flags & SHF_ALLOC)) {
      ends[i] = shdr.sh_addr + shdr.sh_size;
    }
  }
  return ends;
}

void add_symbols_of_type(Elf* elf, uint32_t section_type, const std::vector<uint64_t>& ends,
                         SymbolTable& table) {
  for (const ElfSection& section : ElfView(elf).sections()) {
    const GElf_Shdr& shdr = section.header;
    if (shdr.sh_type != section_type) continue;
    Elf_Data* data = section.data();
    if (data == nullptr || shdr.sh_entsize == 0) continue;
    const size_t count = data->d_size / shdr.sh_entsize;
    uint32_t file = SymbolTable::kNoFile;  // the latest STT_FILE: local symbols after it are its
    for (size_t i = 1; i < count; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
      const int type = GELF_ST_TYPE(sym.st_info);
      if (type == STT_FILE) {
        const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
        file = name != nullptr && *name != '\0' ? table.add_file(name) : SymbolTable::kNoFile;
        continue;
      }
      if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
      if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
      const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
      if (name == nullptr || *name == '\0') continue;
      const uint64_t end = sym.st_shndx < ends.size() ? ends[sym.st_shndx] : 0;
      table.add(sym.st_value, sym.st_size, name, end,
                GELF_ST_BIND(sym.st_info) == STB_LOCAL ? file : SymbolTable::kNoFile);
    }
  }
}

struct PltRelocations {
  std::unordered_map<uint64_t, std::string> by_got_slot;  // GOT address -> symbol name
  std::vector<std::string> plt_order;                     // .rela.plt / .rel.plt names in order
};

PltRelocations read_plt_relocations(const ElfFile& file) {
  PltRelocations out;
  Elf* elf = file.elf();
  if (!file.view().has_section_names()) return out;
  for (const ElfSection& section : file.view().sections()) {
    const GElf_Shdr& shdr = section.header;
    if (shdr.sh_type != SHT_RELA && shdr.sh_type != SHT_REL) continue;
    ElfSection symbols{elf_getscn(elf, shdr.sh_link)};
    const GElf_Shdr& symshdr = symbols.header;
    if (!symbols || gelf_getshdr(symbols.scn, &symbols.header) == nullptr || symshdr.sh_type != SHT_DYNSYM)
      continue;
    Elf_Data* rel_data = section.data();
    Elf_Data* sym_data = symbols.data();
    if (rel_data == nullptr || sym_data == nullptr || shdr.sh_entsize == 0) continue;
    const bool is_plt = section.named(".rela.plt") || section.named(".rel.plt");
    const size_t count = rel_data->d_size / shdr.sh_entsize;
    for (size_t i = 0; i < count; ++i) {
      uint64_t offset = 0, info = 0;
      if (shdr.sh_type == SHT_RELA) {
        GElf_Rela r;
        if (gelf_getrela(rel_data, static_cast<int>(i), &r) == nullptr) continue;
        offset = r.r_offset;
        info = r.r_info;
      } else {
        GElf_Rel r;
        if (gelf_getrel(rel_data, static_cast<int>(i), &r) == nullptr) continue;
        offset = r.r_offset;
        info = r.r_info;
      }
      std::string name;
      GElf_Sym sym;
      const auto sym_index = static_cast<int>(GELF_R_SYM(info));
      if (sym_index != 0 && gelf_getsym(sym_data, sym_index, &sym) != nullptr) {
        if (const char* n = elf_strptr(elf, symshdr.sh_link, sym.st_name)) name = n;
      }
      if (is_plt) out.plt_order.push_back(name);
      if (!name.empty()) out.by_got_slot.emplace(offset, std::move(name));
    }
  }
  return out;
}

std::string plt_name(const std::string& func) {
  return func.empty() ? "[plt]" : func + "@plt";
}

}  // namespace

void add_elf_symbols(const ElfFile& file, SymbolTable& table) {
  const std::vector<uint64_t> ends = section_ends(file.elf());
  add_symbols_of_type(file.elf(), SHT_DYNSYM, ends, table);
  add_symbols_of_type(file.elf(), SHT_SYMTAB, ends, table);
}

void add_dynamic_symbols(const ElfFile& file, SymbolTable& table) {
  add_symbols_of_type(file.elf(), SHT_DYNSYM, section_ends(file.elf()), table);
}

void add_plt_symbols(const ElfFile& file, SymbolTable& table) {
  const char* kPltSections[] = {".plt", ".plt.sec", ".plt.got"};
  ElfSection scns[3];
  bool any = false;
  for (int i = 0; i < 3; ++i) {
    scns[i] = file.section(kPltSections[i]);
    any = any || scns[i].data() != nullptr;
  }
  if (!any) return;
  const PltRelocations relocs = read_plt_relocations(file);
  const bool x86_64 = file.machine() == EM_X86_64;
  const bool have_plt_sec = scns[1].data() != nullptr;

  for (int which = 0; which < 3; ++which) {
    Elf_Data* data = scns[which].data();
    const GElf_Shdr& shdr = scns[which].header;
    if (data == nullptr) continue;
    const uint64_t size = std::min<uint64_t>(shdr.sh_size, data->d_size);
    uint64_t entsize = shdr.sh_entsize;
    if (entsize == 0 || entsize > 64) entsize = which == 2 ? 8 : 16;
    const auto* bytes = static_cast<const unsigned char*>(data->d_buf);
    const uint64_t end = shdr.sh_addr + size;

    // Index rule for non-x86-64 lazy PLTs: a header, then entry i jumps through .rela.plt[i].
    uint64_t header = 0;
    if (!x86_64 && which == 0) header = file.machine() == EM_AARCH64 ? 32 : 16;
    if (header > 0) table.add(shdr.sh_addr, std::min(header, size), "[plt]", end);

    for (uint64_t off = header; off + entsize <= size; off += entsize) {
      const uint64_t entry = shdr.sh_addr + off;
      std::string func;
      if (x86_64) {
        // Each stub jumps through its GOT slot: "ff 25 disp32" (jmp *disp32(%rip)), possibly after
        // endbr64 and a bnd prefix. The slot's relocation names the function.
        for (uint64_t p = 0; p + 6 <= entsize; ++p) {
          if (bytes[off + p] != 0xff || bytes[off + p + 1] != 0x25) continue;
          int32_t disp;
          std::memcpy(&disp, bytes + off + p + 2, sizeof(disp));
          const uint64_t slot = entry + p + 6 + static_cast<int64_t>(disp);
          if (auto it = relocs.by_got_slot.find(slot); it != relocs.by_got_slot.end()) func = it->second;
          break;
        }
      } else if (which == 0 && !have_plt_sec) {
        const uint64_t index = (off - header) / entsize;
        if (index < relocs.plt_order.size()) func = relocs.plt_order[index];
      }
      table.add(entry, entsize, plt_name(func), end);
    }
  }
}

}  // namespace hpd
