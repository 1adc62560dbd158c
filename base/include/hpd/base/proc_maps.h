// Parser for /proc/PID/maps, kept free of I/O so it can be tested on strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpd {

struct MapsEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  bool readable = false;
  bool writable = false;
  bool executable = false;
  bool shared = false;
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  uint64_t inode = 0;
  std::string path;      // without the " (deleted)" suffix; empty for anonymous memory
  bool deleted = false;  // the file was unlinked after it was mapped

  // "[vdso]", "[stack]", "[heap]" and similar kernel-provided regions.
  [[nodiscard]] bool is_pseudo() const {
    return path.size() >= 2 && path.front() == '[' && path.back() == ']';
  }
  [[nodiscard]] bool is_file() const { return !path.empty() && !is_pseudo(); }
};

// One line (without the newline); nullopt when it is not a maps line.
std::optional<MapsEntry> parse_maps_line(std::string_view line);

// Every well-formed line of a maps file; malformed lines are skipped.
std::vector<MapsEntry> parse_maps(std::string_view text);

// Reads and parses /proc/PID/maps; an empty vector when the process is gone or unreadable.
std::vector<MapsEntry> read_proc_maps(int32_t pid);

}  // namespace hpd
