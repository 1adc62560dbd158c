// ElfFile: opening ELF files with libelf, program headers, build-id notes and debug links.
#include "elf_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace hpd {
namespace {

constexpr uint64_t kPageSize = 4096;

std::string to_hex(const unsigned char* bytes, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xF];
  }
  return out;
}

// Finds NT_GNU_BUILD_ID in one note blob.
std::string build_id_in(Elf_Data* data) {
  if (data == nullptr) return {};
  GElf_Nhdr nhdr;
  size_t offset = 0, name_offset = 0, desc_offset = 0;
  while (offset < data->d_size) {
    const size_t next = gelf_getnote(data, offset, &nhdr, &name_offset, &desc_offset);
    if (next == 0 || next <= offset) break;
    if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == 4 &&
        std::memcmp(static_cast<const char*>(data->d_buf) + name_offset, "GNU", 4) == 0 &&
        nhdr.n_descsz > 0 && desc_offset + nhdr.n_descsz <= data->d_size) {
      return to_hex(static_cast<const unsigned char*>(data->d_buf) + desc_offset, nhdr.n_descsz);
    }
    offset = next;
  }
  return {};
}

}  // namespace

SegmentMap::SegmentMap(std::vector<LoadSegment> loads) : loads_(std::move(loads)) {
  if (loads_.empty()) return;
  uint64_t lowest = UINT64_MAX;
  for (const auto& s : loads_) lowest = std::min(lowest, s.vaddr);
  image_base_ = lowest & ~(kPageSize - 1);
}

uint64_t SegmentMap::vaddr_of(uint64_t file_offset) const {
  if (loads_.empty()) return file_offset;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& s : loads_) {
      if (pass == 0 && !s.executable) continue;
      if (file_offset >= s.offset && file_offset - s.offset < std::max(s.filesz, uint64_t{1})) {
        return file_offset - s.offset + s.vaddr;
      }
    }
  }
  // Outside every segment's file range (a stale mapping offset, a damaged header): extrapolate.
  const LoadSegment* base = &loads_.front();
  for (const auto& s : loads_) {
    if (s.executable) {
      base = &s;
      break;
    }
  }
  return file_offset - base->offset + base->vaddr;
}

SegmentMap SegmentMap::with_linear_offsets() const {
  std::vector<LoadSegment> loads = loads_;
  for (auto& s : loads) {
    s.offset = s.vaddr - image_base_;
    s.filesz = s.memsz;
  }
  return SegmentMap(std::move(loads));
}

std::unique_ptr<ElfFile> ElfFile::open(const std::string& path, std::string* error) {
  static std::once_flag version_once;
  std::call_once(version_once, [] { elf_version(EV_CURRENT); });
  std::unique_ptr<ElfFile> file(new ElfFile());
  file->path_ = path;
  file->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd_ < 0) {
    if (error) *error = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (!file->init(error)) return nullptr;
  return file;
}

std::unique_ptr<ElfFile> ElfFile::open_image(std::span<const uint8_t> image, const std::string& name,
                                             std::string* error) {
  static std::once_flag version_once;
  std::call_once(version_once, [] { elf_version(EV_CURRENT); });
  std::unique_ptr<ElfFile> file(new ElfFile());
  file->path_ = name;
  file->image_.assign(image.begin(), image.end());  // libelf reads it in place for the file's life
  if (!file->init(error)) return nullptr;
  return file;
}

bool ElfFile::init(std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = path_ + ": " + why;
    return false;
  };
  // READ (not READ_MMAP): libelf then reads into memory with bounds checks, so a file truncated or
  // rewritten underneath us gives an error rather than SIGBUS.
  elf_ = fd_ >= 0 ? elf_begin(fd_, ELF_C_READ, nullptr) : elf_memory(image_.data(), image_.size());
  if (elf_ == nullptr) return fail(std::string("not readable as ELF: ") + elf_errmsg(-1));
  if (elf_kind(elf_) != ELF_K_ELF) return fail("not an ELF file");
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf_, &ehdr) == nullptr) return fail(std::string("bad ELF header: ") + elf_errmsg(-1));
  machine_ = ehdr.e_machine;
  have_shstrndx_ = elf_getshdrstrndx(elf_, &shstrndx_) == 0;

  size_t phnum = 0;
  std::vector<LoadSegment> loads;
  if (elf_getphdrnum(elf_, &phnum) == 0) {
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr phdr;
      if (gelf_getphdr(elf_, static_cast<int>(i), &phdr) == nullptr) continue;
      if (phdr.p_type != PT_LOAD) continue;
      loads.push_back(
          LoadSegment{phdr.p_offset, phdr.p_filesz, phdr.p_vaddr, phdr.p_memsz, (phdr.p_flags & PF_X) != 0});
    }
  }
  segments_ = SegmentMap(std::move(loads));
  read_build_id();
  if (segments_.empty() && !have_shstrndx_) return fail("no program headers and no section headers");
  return true;
}

ElfFile::~ElfFile() {
  if (elf_ != nullptr) elf_end(elf_);
  if (fd_ >= 0) ::close(fd_);
}

void ElfFile::read_build_id() {
  // Section notes first (present in debug files, whose PT_NOTE may point at stripped bytes).
  for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn != nullptr; scn = elf_nextscn(elf_, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_NOTE) continue;
    build_id_ = build_id_in(data_of(scn));
    if (!build_id_.empty()) return;
  }
  size_t phnum = 0;
  if (elf_getphdrnum(elf_, &phnum) != 0) return;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf_, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_NOTE) continue;
    Elf_Data* data = elf_getdata_rawchunk(elf_, static_cast<int64_t>(phdr.p_offset), phdr.p_filesz,
                                          phdr.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
    build_id_ = build_id_in(data);
    if (!build_id_.empty()) return;
  }
}

Elf_Scn* ElfFile::section(const char* name) const {
  if (!have_shstrndx_) return nullptr;
  for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn != nullptr; scn = elf_nextscn(elf_, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    const char* n = elf_strptr(elf_, shstrndx_, shdr.sh_name);
    if (n != nullptr && std::strcmp(n, name) == 0) return scn;
  }
  return nullptr;
}

Elf_Data* ElfFile::data_of(Elf_Scn* scn) {
  if (scn == nullptr) return nullptr;
  GElf_Shdr shdr;
  if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS) return nullptr;
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr || data->d_buf == nullptr) return nullptr;
  return data;
}

bool ElfFile::has_debug_info() const {
  Elf_Scn* scn = section(".debug_info");
  if (scn == nullptr) scn = section(".zdebug_info");
  if (scn == nullptr) return false;
  GElf_Shdr shdr;
  return gelf_getshdr(scn, &shdr) != nullptr && shdr.sh_type != SHT_NOBITS && shdr.sh_size > 0;
}

std::optional<std::string> ElfFile::debuglink() const {
  Elf_Data* data = data_of(section(".gnu_debuglink"));
  if (data == nullptr || data->d_size == 0) return std::nullopt;
  const char* p = static_cast<const char*>(data->d_buf);
  const size_t len = strnlen(p, data->d_size);
  if (len == 0 || len == data->d_size) return std::nullopt;
  std::string name(p, len);
  if (name.find('/') != std::string::npos) return std::nullopt;  // a bare file name by definition
  return name;
}

}  // namespace hpd
