// MIP input from files: ELF section lookup (libelf), .mipmap/.mipraw files, offline decode and merge.
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hpd/base/demangle.h"
#include "hpd/base/elf.h"
#include "hpd/base/unique_fd.h"
#include "mip_internal.h"

namespace hpd::mip {
namespace {

void apply_demangling(Module& m) {
  for (Function& f : m.functions) f.demangled = hpd::demangle(f.name);
}

}  // namespace

ElfInfo read_elf_info(int fd, const std::string& name, bool want_map) {
  const ElfHandle elf = ElfHandle::open_fd(fd, ELF_C_READ_MMAP);
  if (!elf.get() || elf_kind(elf.get()) != ELF_K_ELF) {
    throw MipError(ErrorCode::kNotElf, name + " is not an ELF file");
  }
  ElfInfo info;
  for (const ElfSegment& s : elf.view().load_segments()) info.loads.push_back({s.vaddr, s.offset, s.filesz});
  if (!elf.view().has_section_names()) {
    throw MipError(ErrorCode::kNotElf, name + ": unreadable ELF section headers: " + elf_errmsg(-1));
  }
  for (const ElfSection& section : elf.view().sections()) {
    Elf_Scn* scn = section.scn;
    const GElf_Shdr& sh = section.header;
    const char* sname = section.name;
    if (!sname) continue;
    if (std::strcmp(sname, kRawSectionName) == 0 && !info.has_raw) {
      info.has_raw = true;
      info.raw_address = sh.sh_addr;
      info.raw_size = sh.sh_size;
    } else if (want_map && std::strcmp(sname, kMapSectionName) == 0 && !info.has_map) {
      // Raw bytes: the section may be SHT_NOTE (layout A), which libelf would otherwise translate.
      Elf_Data* d = elf_rawdata(scn, nullptr);
      if (d && d->d_buf && sh.sh_type != SHT_NOBITS) {
        const auto* p = static_cast<const uint8_t*>(d->d_buf);
        info.map_bytes.assign(p, p + d->d_size);
        info.has_map = true;
      }
    }
  }
  info.build_id = elf_build_id(elf.get(), BuildIdSearch::kSectionsFirst);
  return info;
}

bool load_bias_for(const std::vector<LoadSegment>& loads, uint64_t map_start, uint64_t map_offset,
                   uint64_t* bias) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (const LoadSegment& s : loads) {
    // The kernel maps a segment from its page-aligned offset at its page-aligned address.
    if ((s.offset & ~(page - 1)) == map_offset) {
      *bias = map_start - (s.vaddr & ~(page - 1));
      return true;
    }
  }
  return false;
}

std::vector<uint8_t> read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw MipError(ErrorCode::kIo, "cannot open " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> data;
  struct stat st {};
  if (fstat(fd.get(), &st) == 0 && st.st_size > 0) data.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw MipError(ErrorCode::kIo, "cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    data.insert(data.end(), buf, buf + n);
  }
  return data;
}

Map load_map(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw MipError(ErrorCode::kIo, "cannot open " + path + ": " + std::strerror(errno));
  char magic[4] = {};
  if (::pread(fd.get(), magic, 4, 0) == 4 && std::memcmp(magic, ELFMAG, SELFMAG) == 0) {
    const ElfInfo info = read_elf_info(fd.get(), path, true);
    if (!info.has_map) {
      throw MipError(ErrorCode::kNoSection, path + " has no " + kMapSectionName +
                                                " section (not built with MIP, or the map was stripped: "
                                                "give the .mipmap file instead)");
    }
    Map map = parse_map(info.map_bytes);
    if (info.has_raw) {
      map.raw_section_address_known = true;
      map.raw_section_address = info.raw_address;
      map.raw_section_size = info.raw_size;
    }
    map.source = path;
    map.build_id = info.build_id;
    return map;
  }
  try {
    Map map = parse_map(read_file(path));
    map.source = path;
    return map;
  } catch (const MipError& e) {
    throw MipError(e.code(), path + ": " + e.what());
  }
}

Module decode(std::span<const uint8_t> raw, const Map& map, bool demangle) {
  Module m = decode_records(raw, map);
  if (demangle) apply_demangling(m);
  return m;
}

Module decode_file(const std::string& raw_path, const std::string& map_path, bool demangle) {
  const Map map = load_map(map_path);
  const std::vector<uint8_t> raw = read_file(raw_path);
  try {
    Module m = decode(raw, map, demangle);
    m.path = map_path;
    return m;
  } catch (const MipError& e) {
    throw MipError(e.code(), raw_path + ": " + e.what());
  }
}

Module merge_files(std::span<const std::string> raw_paths, const std::string& map_path, bool demangle) {
  if (raw_paths.empty()) throw MipError(ErrorCode::kIncompatible, "no raw files to merge");
  const Map map = load_map(map_path);
  std::vector<Module> modules;
  modules.reserve(raw_paths.size());
  for (const std::string& path : raw_paths) {
    try {
      modules.push_back(decode_records(read_file(path), map));
    } catch (const MipError& e) {
      throw MipError(e.code(), path + ": " + e.what());
    }
  }
  Module m = merge(modules);
  m.path = map_path;
  if (demangle) apply_demangling(m);
  return m;
}

}  // namespace hpd::mip
