// ELF build-id (NT_GNU_BUILD_ID) reading, for files mapped into live processes.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>

namespace hpd {

// Lower-case hex of the bytes.
std::string to_hex(std::span<const uint8_t> bytes);

// The build-id of the ELF file open on `fd` as lower-case hex; "" if it has none or is not ELF.
std::string read_elf_build_id(int fd);

// The GNU build-id in a raw block of ELF notes (such as /sys/kernel/notes); "" if absent or malformed.
std::string build_id_from_raw_notes(std::span<const uint8_t> notes);

// The running kernel's build-id, from /sys/kernel/notes.
std::string kernel_build_id();

// Reads build-ids of mapped files while their process is alive and remembers them per inode,
// so a library mapped into many processes is read once.
class BuildIdReader {
 public:
  // Tries /proc/PID/map_files/START-END (works for deleted files), then /proc/PID/root/PATH, then PATH.
  std::string for_mapping(int32_t pid, uint64_t start, uint64_t end, const std::string& path);
  // Reads PATH as seen from the process's root, then PATH itself.
  std::string for_path(int32_t pid, const std::string& path);

 private:
  std::string read_cached(int fd);
  std::map<std::tuple<uint64_t, uint64_t, int64_t, int64_t>, std::string> by_inode_;
};

}  // namespace hpd
