// ELF files through libelf, opened one way and read one way: sections by name (header and data),
// loadable segments and file offset <-> address, dynamic dependencies, the GNU build-id note and
// where a build-id's separate debug file lives. Every layer reads ELF through this header.
#pragma once

#include <gelf.h>
#include <libelf.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/base/unique_fd.h"

namespace hpd {

// elf_version(EV_CURRENT), once per process: libelf refuses every other call until it is made.
void init_libelf();

// One section: its header and its name (nullptr when the section name table lacks it; it points
// into libelf's copy of the table and lives as long as the Elf).
struct ElfSection {
  Elf_Scn* scn = nullptr;
  GElf_Shdr header{};
  const char* name = nullptr;

  explicit operator bool() const { return scn != nullptr; }
  [[nodiscard]] bool named(std::string_view wanted) const { return name != nullptr && wanted == name; }
  // Whether the section has bytes in the file: not SHT_NOBITS (.bss, or the .text a separate debug
  // file keeps only as a header).
  [[nodiscard]] bool has_bytes() const { return scn != nullptr && header.sh_type != SHT_NOBITS; }
  // Its contents as libelf translates them to the host's byte order (elf_getdata); nullptr for a
  // NOBITS or damaged section. The bytes live as long as the Elf.
  [[nodiscard]] Elf_Data* data() const;
  // The same as bytes; empty when data() is nullptr.
  [[nodiscard]] std::span<const uint8_t> bytes() const;
};

// A loadable segment (PT_LOAD program header).
struct ElfSegment {
  uint64_t offset = 0;
  uint64_t filesz = 0;
  uint64_t vaddr = 0;
  uint64_t memsz = 0;
  bool executable = false;  // PF_X
};

// The ELF virtual address of a file offset: through the first segment whose file bytes hold it.
std::optional<uint64_t> vaddr_of_offset(std::span<const ElfSegment> segments, uint64_t offset);
// The file offset of an ELF virtual address: through the first segment whose file bytes hold it
// (an address in a segment's zero-filled tail has none).
std::optional<uint64_t> offset_of_vaddr(std::span<const ElfSegment> segments, uint64_t vaddr);

// The dynamic section's dependencies, each list in file order: DT_NEEDED names, and the
// directories of DT_RUNPATH and DT_RPATH entries as written (colon-separated, $ORIGIN unexpanded).
struct ElfDynamic {
  std::vector<std::string> needed;
  std::vector<std::string> search_paths;
};

// Reading an ELF file that libelf has open (not owned: the Elf must outlive the view and what it
// returns). Every call checks what it reads; on a damaged file it returns less, never throws.
class ElfView {
 public:
  explicit ElfView(Elf* elf) : elf_(elf) {}
  [[nodiscard]] Elf* get() const { return elf_; }
  [[nodiscard]] bool is_elf() const { return elf_ != nullptr && elf_kind(elf_) == ELF_K_ELF; }
  // The ELF header; nullopt when it cannot be read.
  [[nodiscard]] std::optional<GElf_Ehdr> header() const;

  // Whether the section name table can be read (else every section's name is nullptr).
  [[nodiscard]] bool has_section_names() const;
  // Every section with a readable header, in file order.
  [[nodiscard]] std::vector<ElfSection> sections() const;
  // The first section called `name`; empty when there is none.
  [[nodiscard]] ElfSection section(std::string_view name) const;

  // Whether a program header of this type (PT_INTERP, PT_DYNAMIC, ...) exists.
  [[nodiscard]] bool has_program_header(uint32_t type) const;
  // The PT_LOAD segments, in file order.
  [[nodiscard]] std::vector<ElfSegment> load_segments() const;
  // The program interpreter PT_INTERP names; "" when none.
  [[nodiscard]] std::string interpreter() const;
  // DT_NEEDED, DT_RUNPATH and DT_RPATH of the SHT_DYNAMIC sections.
  [[nodiscard]] ElfDynamic dynamic() const;
  // The file's bytes (elf_rawfile): the mapping of a handle opened with ELF_C_READ_MMAP, the image of
  // one opened over memory, else a read of the whole file; empty when libelf cannot give them.
  [[nodiscard]] std::span<const uint8_t> file_bytes() const;

 private:
  Elf* elf_ = nullptr;
};

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
  [[nodiscard]] ElfView view() const { return ElfView(elf_); }
  // Makes libelf read now all it will need of the file (elf_cntl ELF_C_FDREAD), so that the
  // descriptor may be closed while the handle lives on; false when it cannot.
  bool release_fd() { return elf_ != nullptr && elf_cntl(elf_, ELF_C_FDREAD) == 0; }

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
  [[nodiscard]] ElfView view() const { return ElfView(elf_.get()); }
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

// Where the separate debug file of `build_id` lies in the build-id tree under `root` (as in
// /usr/lib/debug): ROOT/.build-id/XX/REST`suffix` with XX the first two hex digits; "" when the
// build-id is too short to split.
std::string build_id_path(const std::string& root, const std::string& build_id,
                          std::string_view suffix = ".debug");

// The GNU build-id of an ELF image in memory (the vDSO as a process maps it), from its PT_NOTE
// segments; "" if it has none or is not ELF.
std::string build_id_of_image(std::span<const uint8_t> image);

}  // namespace hpd
