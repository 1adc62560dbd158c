// ELF opening and reading through libelf: sections, segments, dynamic entries, build-id notes.
#include "hpd/base/elf.h"

#include <elf.h>
#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "hpd/base/hex.h"

namespace hpd {

void init_libelf() {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
}

Elf_Data* ElfSection::data() const {
  if (!has_bytes()) return nullptr;
  Elf_Data* data = elf_getdata(scn, nullptr);
  return data != nullptr && data->d_buf != nullptr ? data : nullptr;
}

std::span<const uint8_t> ElfSection::bytes() const {
  const Elf_Data* d = data();
  if (d == nullptr) return {};
  return {static_cast<const uint8_t*>(d->d_buf), d->d_size};
}

std::optional<uint64_t> vaddr_of_offset(std::span<const ElfSegment> segments, uint64_t offset) {
  for (const ElfSegment& s : segments) {
    if (offset >= s.offset && offset - s.offset < s.filesz) return offset - s.offset + s.vaddr;
  }
  return std::nullopt;
}

std::optional<uint64_t> offset_of_vaddr(std::span<const ElfSegment> segments, uint64_t vaddr) {
  for (const ElfSegment& s : segments) {
    if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz) return vaddr - s.vaddr + s.offset;
  }
  return std::nullopt;
}

std::optional<GElf_Ehdr> ElfView::header() const {
  GElf_Ehdr ehdr;
  if (!is_elf() || gelf_getehdr(elf_, &ehdr) == nullptr) return std::nullopt;
  return ehdr;
}

bool ElfView::has_section_names() const {
  size_t shstrndx = 0;
  return elf_ != nullptr && elf_getshdrstrndx(elf_, &shstrndx) == 0;
}

std::vector<ElfSection> ElfView::sections() const {
  std::vector<ElfSection> out;
  if (elf_ == nullptr) return out;
  size_t shstrndx = 0;
  const bool names = elf_getshdrstrndx(elf_, &shstrndx) == 0;
  for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn != nullptr; scn = elf_nextscn(elf_, scn)) {
    ElfSection s;
    s.scn = scn;
    if (gelf_getshdr(scn, &s.header) == nullptr) continue;
    if (names) s.name = elf_strptr(elf_, shstrndx, s.header.sh_name);
    out.push_back(s);
  }
  return out;
}

ElfSection ElfView::section(std::string_view name) const {
  for (const ElfSection& s : sections()) {
    if (s.named(name)) return s;
  }
  return {};
}

namespace {

// Calls `f(phdr)` for each readable program header.
template <typename F>
void for_each_program_header(Elf* elf, F&& f) {
  size_t phnum = 0;
  if (elf == nullptr || elf_getphdrnum(elf, &phnum) != 0) return;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) != nullptr) f(phdr);
  }
}

}  // namespace

bool ElfView::has_program_header(uint32_t type) const {
  bool found = false;
  for_each_program_header(elf_, [&](const GElf_Phdr& ph) { found = found || ph.p_type == type; });
  return found;
}

std::vector<ElfSegment> ElfView::load_segments() const {
  std::vector<ElfSegment> out;
  for_each_program_header(elf_, [&](const GElf_Phdr& ph) {
    if (ph.p_type == PT_LOAD)
      out.push_back(ElfSegment{ph.p_offset, ph.p_filesz, ph.p_vaddr, ph.p_memsz, (ph.p_flags & PF_X) != 0});
  });
  return out;
}

std::string ElfView::interpreter() const {
  std::string out;
  for_each_program_header(elf_, [&](const GElf_Phdr& ph) {
    if (ph.p_type != PT_INTERP) return;
    size_t size = 0;
    const char* raw = elf_rawfile(elf_, &size);
    if (raw != nullptr && ph.p_offset < size && ph.p_filesz > 1 && ph.p_filesz <= size - ph.p_offset)
      out.assign(raw + ph.p_offset, strnlen(raw + ph.p_offset, ph.p_filesz));
  });
  return out;
}

std::span<const uint8_t> ElfView::file_bytes() const {
  size_t size = 0;
  const char* raw = elf_ != nullptr ? elf_rawfile(elf_, &size) : nullptr;
  if (raw == nullptr) return {};
  return {reinterpret_cast<const uint8_t*>(raw), size};
}

ElfDynamic ElfView::dynamic() const {
  ElfDynamic out;
  for (const ElfSection& s : sections()) {
    if (s.header.sh_type != SHT_DYNAMIC) continue;
    Elf_Data* data = elf_getdata(s.scn, nullptr);
    if (data == nullptr || s.header.sh_entsize == 0) continue;
    for (size_t i = 0; i < s.header.sh_size / s.header.sh_entsize; ++i) {
      GElf_Dyn dyn;
      if (gelf_getdyn(data, static_cast<int>(i), &dyn) == nullptr) break;
      if (dyn.d_tag != DT_NEEDED && dyn.d_tag != DT_RUNPATH && dyn.d_tag != DT_RPATH) continue;
      const char* text = elf_strptr(elf_, s.header.sh_link, dyn.d_un.d_val);
      if (text == nullptr) continue;
      (dyn.d_tag == DT_NEEDED ? out.needed : out.search_paths).emplace_back(text);
    }
  }
  return out;
}

ElfHandle::ElfHandle(ElfHandle&& other) noexcept : elf_(std::exchange(other.elf_, nullptr)) {}

ElfHandle& ElfHandle::operator=(ElfHandle&& other) noexcept {
  if (this != &other) {
    if (elf_ != nullptr) elf_end(elf_);
    elf_ = std::exchange(other.elf_, nullptr);
  }
  return *this;
}

ElfHandle::~ElfHandle() {
  if (elf_ != nullptr) elf_end(elf_);
}

ElfHandle ElfHandle::open_fd(int fd, Elf_Cmd cmd) {
  init_libelf();
  return ElfHandle(elf_begin(fd, cmd, nullptr));
}

ElfHandle ElfHandle::open_memory(char* image, size_t size) {
  init_libelf();
  return ElfHandle(elf_memory(image, size));
}

OpenedElf OpenedElf::open(const std::string& path, Elf_Cmd cmd) {
  OpenedElf out;
  out.fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!out.fd_) {
    out.open_errno_ = errno;
    out.error_ = "cannot open " + path + ": " + std::strerror(out.open_errno_);
    return out;
  }
  out.elf_ = ElfHandle::open_fd(out.fd_.get(), cmd);
  if (!out.elf_) {
    out.error_ = path + ": not readable as ELF: " + elf_errmsg(-1);
  } else if (!out.elf_.is_elf()) {
    out.elf_ = ElfHandle();
    out.error_ = path + ": not an ELF file";
  }
  return out;
}

std::string build_id_in_note_data(const Elf_Data* data) {
  if (data == nullptr || data->d_buf == nullptr) return "";
  const auto* bytes = static_cast<const uint8_t*>(data->d_buf);
  GElf_Nhdr nhdr;
  size_t offset = 0, name_offset = 0, desc_offset = 0;
  while (offset < data->d_size) {
    // gelf_getnote takes a non-const Elf_Data but only reads it.
    const size_t next = gelf_getnote(const_cast<Elf_Data*>(data), offset, &nhdr, &name_offset, &desc_offset);
    if (next == 0 || next <= offset) break;
    if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == 4 &&
        std::memcmp(bytes + name_offset, "GNU", 4) == 0 && nhdr.n_descsz > 0 &&
        desc_offset + nhdr.n_descsz <= data->d_size) {
      return to_hex({bytes + desc_offset, nhdr.n_descsz});
    }
    offset = next;
  }
  return "";
}

std::string build_id_from_raw_notes(std::span<const uint8_t> notes) {
  // Each note: u32 namesz, u32 descsz, u32 type, then name and desc, each padded to 4 bytes.
  auto align4 = [](size_t n) { return (n + 3) & ~size_t{3}; };
  size_t pos = 0;
  while (notes.size() - pos >= 12) {
    uint32_t namesz = 0, descsz = 0, type = 0;
    std::memcpy(&namesz, notes.data() + pos, 4);
    std::memcpy(&descsz, notes.data() + pos + 4, 4);
    std::memcpy(&type, notes.data() + pos + 8, 4);
    pos += 12;
    const size_t name_pos = pos;
    if (namesz > notes.size() - pos) break;
    pos += align4(namesz);
    if (pos > notes.size() || descsz > notes.size() - pos) break;
    const size_t desc_pos = pos;
    pos += align4(descsz);
    if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(notes.data() + name_pos, "GNU", 4) == 0 &&
        descsz > 0) {
      return to_hex(notes.subspan(desc_pos, descsz));
    }
    if (pos > notes.size()) break;
  }
  return "";
}

namespace {

std::string build_id_in_segments(Elf* elf) {
  std::string id;
  for_each_program_header(elf, [&](const GElf_Phdr& phdr) {
    if (!id.empty() || phdr.p_type != PT_NOTE) return;
    // 8-byte aligned note segments (PT_NOTE of .note.gnu.property) use the 8-byte note layout.
    const Elf_Data* data = elf_getdata_rawchunk(elf, static_cast<int64_t>(phdr.p_offset), phdr.p_filesz,
                                                phdr.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
    id = build_id_in_note_data(data);
  });
  return id;
}

std::string build_id_in_sections(Elf* elf) {
  for (const ElfSection& s : ElfView(elf).sections()) {
    if (s.header.sh_type != SHT_NOTE) continue;
    std::string id = build_id_in_note_data(elf_getdata(s.scn, nullptr));
    if (!id.empty()) return id;
  }
  return "";
}

}  // namespace

std::string elf_build_id(Elf* elf, BuildIdSearch order) {
  if (elf == nullptr || elf_kind(elf) != ELF_K_ELF) return "";
  std::string id =
      order == BuildIdSearch::kSegmentsFirst ? build_id_in_segments(elf) : build_id_in_sections(elf);
  if (id.empty())
    id = order == BuildIdSearch::kSegmentsFirst ? build_id_in_sections(elf) : build_id_in_segments(elf);
  return id;
}

std::string read_elf_build_id(int fd, BuildIdSearch order) {
  // Mapped, not read: only the note pages are touched, and files here may be large libraries.
  const ElfHandle elf = ElfHandle::open_fd(fd, ELF_C_READ_MMAP);
  return elf_build_id(elf.get(), order);
}

std::optional<std::string> file_build_id(const std::string& path, BuildIdSearch order) {
  const OpenedElf file = OpenedElf::open(path);
  if (!file) return std::nullopt;
  return elf_build_id(file.get(), order);
}

std::string build_id_path(const std::string& root, const std::string& build_id, std::string_view suffix) {
  if (build_id.size() < 3) return "";
  return root + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + std::string(suffix);
}

std::string build_id_of_image(std::span<const uint8_t> image) {
  // libelf reads (and may convert) the buffer in place: give it a copy.
  std::vector<char> copy(image.begin(), image.end());
  const ElfHandle elf = ElfHandle::open_memory(copy.data(), copy.size());
  if (!elf.is_elf()) return "";
  std::string id;
  for_each_program_header(elf.get(), [&](const GElf_Phdr& phdr) {
    if (!id.empty() || phdr.p_type != PT_NOTE) return;
    if (phdr.p_offset > image.size() || phdr.p_filesz > image.size() - phdr.p_offset) return;
    id = build_id_from_raw_notes(image.subspan(phdr.p_offset, phdr.p_filesz));
  });
  return id;
}

}  // namespace hpd
