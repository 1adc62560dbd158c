// ElfFile: opening ELF files with libelf, program headers, build-id notes and debug links.
#include "elf_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hpd/base/elf.h"

namespace hpd {
namespace {

constexpr uint64_t kPageSize = 4096;

}  // namespace

SegmentMap::SegmentMap(std::vector<ElfSegment> loads) : loads_(std::move(loads)) {
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
  const ElfSegment* base = &loads_.front();
  for (const auto& s : loads_) {
    if (s.executable) {
      base = &s;
      break;
    }
  }
  return file_offset - base->offset + base->vaddr;
}

SegmentMap SegmentMap::with_linear_offsets() const {
  std::vector<ElfSegment> loads = loads_;
  for (auto& s : loads) {
    s.offset = s.vaddr - image_base_;
    s.filesz = s.memsz;
  }
  return SegmentMap(std::move(loads));
}

std::unique_ptr<ElfFile> ElfFile::open(const std::string& path, std::string* error) {
  std::unique_ptr<ElfFile> file(new ElfFile());
  file->path_ = path;
  file->fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file->fd_) {
    if (error) *error = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (!file->init(error)) return nullptr;
  return file;
}

std::unique_ptr<ElfFile> ElfFile::open_fd(UniqueFd fd, const std::string& path, std::string* error) {
  std::unique_ptr<ElfFile> file(new ElfFile());
  file->path_ = path;
  file->fd_ = std::move(fd);
  file->from_fd_ = true;
  if (!file->init(error)) return nullptr;
  return file;
}

std::string ElfFile::reopen_path() const {
  return from_fd_ && fd_ ? "/proc/self/fd/" + std::to_string(fd_.get()) : path_;
}

std::unique_ptr<ElfFile> ElfFile::open_image(std::span<const uint8_t> image, const std::string& name,
                                             std::string* error) {
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
  elf_ =
      fd_ ? ElfHandle::open_fd(fd_.get(), ELF_C_READ) : ElfHandle::open_memory(image_.data(), image_.size());
  if (!elf_) return fail(std::string("not readable as ELF: ") + elf_errmsg(-1));
  if (!elf_.is_elf()) return fail("not an ELF file");
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf_.get(), &ehdr) == nullptr)
    return fail(std::string("bad ELF header: ") + elf_errmsg(-1));
  machine_ = ehdr.e_machine;
  segments_ = SegmentMap(view().load_segments());
  read_build_id();
  if (segments_.empty() && !view().has_section_names())
    return fail("no program headers and no section headers");
  return true;
}

ElfFile::~ElfFile() = default;

void ElfFile::read_build_id() {
  // Section notes first (present in debug files, whose PT_NOTE may point at stripped bytes).
  build_id_ = elf_build_id(elf_.get(), BuildIdSearch::kSectionsFirst);
}

bool ElfFile::has_debug_info() const {
  ElfSection s = section(".debug_info");
  if (!s) s = section(".zdebug_info");
  return s.has_bytes() && s.header.sh_size > 0;
}

std::optional<std::string> ElfFile::debuglink() const {
  Elf_Data* data = section(".gnu_debuglink").data();
  if (data == nullptr || data->d_size == 0) return std::nullopt;
  const char* p = static_cast<const char*>(data->d_buf);
  const size_t len = strnlen(p, data->d_size);
  if (len == 0 || len == data->d_size) return std::nullopt;
  std::string name(p, len);
  if (name.find('/') != std::string::npos) return std::nullopt;  // a bare file name by definition
  return name;
}

}  // namespace hpd
