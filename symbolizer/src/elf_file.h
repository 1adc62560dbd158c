// ElfFile: an open ELF file (fd + libelf handle) and the few facts the symbolizer reads from it.
#pragma once

#include <gelf.h>
#include <libelf.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hpd/base/elf.h"
#include "hpd/base/unique_fd.h"

namespace hpd {

// The program headers that turn file offsets into ELF virtual addresses.
class SegmentMap {
 public:
  SegmentMap() = default;
  explicit SegmentMap(std::vector<ElfSegment> loads);
  bool empty() const { return loads_.empty(); }
  // Lowest PT_LOAD p_vaddr rounded down to 4 KiB (see symbolizer.h).
  uint64_t image_base() const { return image_base_; }
  // ELF vaddr of a file offset: executable segments first, then any segment, then extrapolated
  // from the first executable (else first) segment. Never fails once segments exist.
  uint64_t vaddr_of(uint64_t file_offset) const;
  size_t memory_bytes() const { return loads_.capacity() * sizeof(ElfSegment); }
  // The same segments with file offsets assumed to be vaddr - image_base (GNU ld's layout). For
  // separate debug files: objcopy --only-keep-debug keeps the vaddrs but zeroes or shifts the
  // file offsets and sizes, so the original binary's offsets have to be guessed.
  SegmentMap with_linear_offsets() const;

 private:
  std::vector<ElfSegment> loads_;
  uint64_t image_base_ = 0;
};

class ElfFile {
 public:
  // Opens `path` as an ELF file; nullptr and a message in *error when it is missing, not ELF, or
  // too damaged to read its headers.
  static std::unique_ptr<ElfFile> open(const std::string& path, std::string* error);
  // The same for a file already open at `fd` (taken over); `path` names it.
  static std::unique_ptr<ElfFile> open_fd(UniqueFd fd, const std::string& path, std::string* error);
  // The same for an ELF image in memory (the vDSO as a process mapped it), copied; `name` stands
  // for the path in path() and messages.
  static std::unique_ptr<ElfFile> open_image(std::span<const uint8_t> image, const std::string& name,
                                             std::string* error);
  ~ElfFile();
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  Elf* elf() const { return elf_.get(); }
  ElfView view() const { return elf_.view(); }
  const std::string& path() const { return path_; }
  // A path that opens this very file again while it is open: /proc/self/fd/N for a file opened
  // from a descriptor (its path may name another file by now, or one this process should not
  // open), else path().
  std::string reopen_path() const;
  uint16_t machine() const { return machine_; }
  const SegmentMap& segments() const { return segments_; }
  // The GNU build-id note as lower-case hex; empty when there is none.
  const std::string& build_id() const { return build_id_; }
  // Whether the file carries DWARF (.debug_info with contents, not a NOBITS placeholder).
  bool has_debug_info() const;
  // The file name recorded in .gnu_debuglink, if any.
  std::optional<std::string> debuglink() const;

  // The first section named `name`; empty when there is none (ElfSection::data() has its bytes).
  ElfSection section(std::string_view name) const { return view().section(name); }

 private:
  ElfFile() = default;
  bool init(std::string* error);
  void read_build_id();

  UniqueFd fd_;              // declared before elf_: closed after it
  std::vector<char> image_;  // open_image's bytes (fd_ is empty then)
  ElfHandle elf_;
  std::string path_;
  uint16_t machine_ = 0;
  SegmentMap segments_;
  std::string build_id_;
  bool from_fd_ = false;
};

}  // namespace hpd
