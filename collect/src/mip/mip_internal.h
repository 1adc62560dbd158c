// Internal pieces of hpd_mip shared by its .cpp files, the unit tests and the fuzzer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpd/mip/mip.h"

namespace hpd::mip {

// decode() without demangling (demangled = name): the part with no dependency outside this library's
// decoder, so the fuzzer can build it alone.
Module decode_records(std::span<const uint8_t> raw, const Map& map);

struct LoadSegment {
  uint64_t vaddr = 0;
  uint64_t offset = 0;
  uint64_t filesz = 0;
};

// What the readers need from a module's ELF file.
struct ElfInfo {
  bool has_raw = false;
  uint64_t raw_address = 0;  // sh_addr of __llvm_mipraw
  uint64_t raw_size = 0;
  bool has_map = false;
  std::vector<uint8_t> map_bytes;  // contents of __llvm_mipmap
  std::string build_id;            // lower-case hex
  std::vector<LoadSegment> loads;  // PT_LOAD program headers
};

// Reads the section and program headers of the ELF file open on `fd` (the map only when `want_map`).
// Throws MipError(kNotElf) when it is not ELF. `name` is for messages.
ElfInfo read_elf_info(int fd, const std::string& name, bool want_map);

// The bias that maps link-time addresses of a module to runtime ones, from one of its mappings
// (runtime start, file offset); nullopt-like false when no PT_LOAD segment maps that offset.
bool load_bias_for(const std::vector<LoadSegment>& loads, uint64_t map_start, uint64_t map_offset,
                   uint64_t* bias);

}  // namespace hpd::mip
