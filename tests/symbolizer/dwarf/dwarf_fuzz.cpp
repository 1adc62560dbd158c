// libFuzzer target: DwarfIndex::open() and lookup() on arbitrary bytes, and the DIE walker on raw
// section bytes, must never crash, read out of bounds or leak.
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dwarf_index.h"
#include "subroutine_map.h"

namespace {

// Most mutations of an ELF file break the ELF before its DWARF is read; the walker also gets the
// bytes as sections directly: two 16-bit lengths, then .debug_info, .debug_abbrev, and the rest
// serving as .debug_addr, .debug_ranges and .debug_rnglists (and as the name reader's string sections).
void walk_raw_sections(const uint8_t* data, size_t size) {
  if (size < 4) return;
  const size_t info_size = std::min<size_t>(data[0] | (data[1] << 8), size - 4);
  const size_t abbrev_size = std::min<size_t>(data[2] | (data[3] << 8), size - 4 - info_size);
  hpd::DebugInfoSections s;
  s.info = {data + 4, info_size};
  s.abbrev = {data + 4 + info_size, abbrev_size};
  s.addr = s.ranges = s.rnglists = {data + 4 + info_size + abbrev_size, size - 4 - info_size - abbrev_size};
  hpd::SubroutineMap map;
  for (uint64_t offset : {uint64_t{0}, uint64_t{1}, uint64_t{11}}) hpd::walk_subroutines(s, offset, map);
  // The name reader over the same bytes, the rest also serving as the string sections; the
  // DIE offsets are arbitrary on purpose (references and nodes point anywhere in garbage).
  s.str = s.line_str = s.str_offsets = s.addr;
  hpd::DieTextReader reader(s);
  hpd::NodeText text;
  for (uint64_t offset : {uint64_t{11}, uint64_t{12}, uint64_t{16}, uint64_t{23}, info_size / 2})
    reader.read(offset, true, text);
}

// Raw-section seeds from an ELF file's (uncompressed) sections, in walk_raw_sections' layout.
std::vector<uint8_t> raw_seed(const std::string& path) {
  std::vector<uint8_t> info, abbrev, rest;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  size_t shstrndx = 0;
  if (elf != nullptr && elf_getshdrstrndx(elf, &shstrndx) == 0) {
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      Elf_Data* data = nullptr;
      if (gelf_getshdr(scn, &shdr) == nullptr || (data = elf_getdata(scn, nullptr)) == nullptr ||
          data->d_buf == nullptr)
        continue;
      const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
      const auto* bytes = static_cast<const uint8_t*>(data->d_buf);
      const size_t size = std::min<size_t>(data->d_size, 0xffff);
      if (name == nullptr) continue;
      if (std::strcmp(name, ".debug_info") == 0) info.assign(bytes, bytes + size);
      if (std::strcmp(name, ".debug_abbrev") == 0) abbrev.assign(bytes, bytes + size);
      if (std::strcmp(name, ".debug_rnglists") == 0 || std::strcmp(name, ".debug_ranges") == 0)
        rest.assign(bytes, bytes + size);
    }
  }
  if (elf != nullptr) elf_end(elf);
  ::close(fd);
  std::vector<uint8_t> seed = {static_cast<uint8_t>(info.size()), static_cast<uint8_t>(info.size() >> 8),
                               static_cast<uint8_t>(abbrev.size()), static_cast<uint8_t>(abbrev.size() >> 8)};
  seed.insert(seed.end(), info.begin(), info.end());
  seed.insert(seed.end(), abbrev.begin(), abbrev.end());
  seed.insert(seed.end(), rest.begin(), rest.end());
  return seed;
}

}  // namespace

// HPD_FUZZ_RAW_SEEDS_FROM=ELF[:ELF...] with HPD_FUZZ_RAW_SEEDS_TO=DIR writes one raw-section seed
// per file into DIR before fuzzing starts (the ELF seeds alone rarely reach the raw layout).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* from = std::getenv("HPD_FUZZ_RAW_SEEDS_FROM");
  const char* to = std::getenv("HPD_FUZZ_RAW_SEEDS_TO");
  if (from == nullptr || to == nullptr) return 0;
  std::stringstream list(from);
  std::string path;
  for (int i = 0; std::getline(list, path, ':'); ++i) {
    std::vector<uint8_t> seed = raw_seed(path);
    std::ofstream(std::string(to) + "/raw-seed-" + std::to_string(i), std::ios::binary)
        .write(reinterpret_cast<const char*>(seed.data()), static_cast<std::streamsize>(seed.size()));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  walk_raw_sections(data, size);
  int fd = memfd_create("hpd-dwarf-fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  std::string error;
  auto index = hpd::DwarfIndex::open("/proc/self/fd/" + std::to_string(fd), &error);
  if (index) {
    // Addresses where small test binaries keep their code, and the edges.
    for (uint64_t a = 0x1000; a < 0x2000; a += 0x1f) index->lookup(a);
    for (uint64_t a : {uint64_t{0}, uint64_t{1}, UINT64_MAX, UINT64_MAX - 1}) index->lookup(a);
    index->memory_bytes();
  }
  close(fd);
  return 0;
}
