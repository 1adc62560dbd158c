// ELF files through libelf, opened one way, and the GNU build-id note read one way.
#pragma once

#include <gelf.h>
#include <libelf.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "hpd/base/unique_fd.h"

namespace hpd {

// elf_version(EV_CURRENT), once per process: libelf refuses every other call until it is made.
void init_libelf();

// Sole owner of a libelf descriptor (elf_end on destruction). Move-only.
class ElfHandle {
 public:
  ElfHandle() = default;
  explicit ElfHandle(Elf* elf) : elf_(elf) {}
  ElfHandle(const ElfHandle&) = delete;
  ElfHandle& operator=(const ElfHandle&) = delete;
  ElfHandle(ElfHandle&& other) noexcept;
  ElfHandle& operator=(ElfHandle&& other) noexcept;
  ~ElfHandle();

  // libelf over the file open on `fd`, which must stay open while the handle lives. ELF_C_READ
  // reads with bounds checks (a file truncated underneath gives errors rather than SIGBUS);
  // ELF_C_READ_MMAP maps the file, cheaper for a quick look at a few notes.
  static ElfHandle open_fd(int fd, Elf_Cmd cmd = ELF_C_READ);
  // libelf over bytes in memory, which must outlive the handle (libelf may convert them in place).
  static ElfHandle open_memory(char* image, size_t size);

  [[nodiscard]] Elf* get() const { return elf_; }
  explicit operator bool() const { return elf_ != nullptr; }
  // Whether libelf read an ELF file (not an archive or unknown bytes).
  [[nodiscard]] bool is_elf() const { return elf_ != nullptr && elf_kind(elf_) == ELF_K_ELF; }

 private:
  Elf* elf_ = nullptr;
};

// An ELF file opened by path: its descriptor and libelf handle, closed together (the handle first).
class OpenedElf {
 public:
  // Opens `path` read-only; on failure get() is null and error() says why (missing, not ELF).
  static OpenedElf open(const std::string& path, Elf_Cmd cmd = ELF_C_READ);
  [[nodiscard]] Elf* get() const { return elf_.get(); }
  [[nodiscard]] int fd() const { return fd_.get(); }
  explicit operator bool() const { return elf_.get() != nullptr; }
  [[nodiscard]] const std::string& error() const { return error_; }
  // The open(2) errno when the file itself could not be opened; 0 when it was (then error() is
  // about its contents), so that callers can word the message their own way.
  [[nodiscard]] int open_errno() const { return open_errno_; }

 private:
  UniqueFd fd_;  // declared before elf_: destroyed after it
  ElfHandle elf_;
  std::string error_;
  int open_errno_ = 0;
};

// The GNU build-id in one block of notes as libelf translates them (a SHT_NOTE section's data, or
// a PT_NOTE segment through elf_getdata_rawchunk), as lower-case hex; "" if absent or malformed.
std::string build_id_in_note_data(const Elf_Data* data);

// The same for raw note bytes in the host's byte order (/sys/kernel/notes, a PT_NOTE of an image).
std::string build_id_from_raw_notes(std::span<const uint8_t> notes);

// Where to look first. Both kinds are searched; the order matters only when they disagree.
enum class BuildIdSearch {
  // PT_NOTE segments: what the loader maps, and what survives a strip of the section headers.
  kSegmentsFirst,
  // SHT_NOTE sections: right in separate debug files, whose PT_NOTE may point at dropped bytes.
  kSectionsFirst,
};

// The GNU build-id of an open ELF file as lower-case hex; "" if it has none or is not ELF.
std::string elf_build_id(Elf* elf, BuildIdSearch order);

// The build-id of the ELF file open on `fd` (its offset is not used); "" if none or not ELF.
std::string read_elf_build_id(int fd, BuildIdSearch order = BuildIdSearch::kSegmentsFirst);

// The build-id of the file at `path`: nullopt when it cannot be opened or is not ELF, "" when it
// is ELF without a build-id.
std::optional<std::string> file_build_id(const std::string& path,
                                         BuildIdSearch order = BuildIdSearch::kSectionsFirst);

// The GNU build-id of an ELF image in memory (the vDSO as a process maps it), from its PT_NOTE
// segments; "" if it has none or is not ELF.
std::string build_id_of_image(std::span<const uint8_t> image);

}  // namespace hpd
