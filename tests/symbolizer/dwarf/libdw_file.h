// LibdwFile: one ELF file opened by libdw for the decoder tests, with the sections the own decoders
// read (decompressed by libdw), closed on destruction.
#pragma once

#include <elfutils/libdw.h>
#include <fcntl.h>
#include <libelf.h>
#include <unistd.h>

#include <string>

#include "debug_sections.h"

namespace hpd {

class LibdwFile {
 public:
  explicit LibdwFile(const std::string& path) {
    elf_version(EV_CURRENT);
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ >= 0) elf_ = elf_begin(fd_, ELF_C_READ_MMAP, nullptr);
    if (elf_ != nullptr) dwarf_ = dwarf_begin_elf(elf_, DWARF_C_READ, nullptr);
    if (dwarf_ != nullptr) sections_ = read_debug_sections(elf_);
  }
  ~LibdwFile() {
    if (dwarf_ != nullptr) dwarf_end(dwarf_);
    if (elf_ != nullptr) elf_end(elf_);
    if (fd_ >= 0) ::close(fd_);
  }
  LibdwFile(const LibdwFile&) = delete;
  LibdwFile& operator=(const LibdwFile&) = delete;

  // Null when the file cannot be opened or has no usable DWARF (dwarf_errmsg(-1) says why).
  Dwarf* dwarf() const { return dwarf_; }
  const LineSections& line_sections() const { return sections_.lines; }
  const DebugInfoSections& info_sections() const { return sections_.info; }

 private:
  int fd_ = -1;
  Elf* elf_ = nullptr;
  Dwarf* dwarf_ = nullptr;
  DebugSections sections_;
};

}  // namespace hpd
