// Synthetic chunks for the continuous store's unit tests: small RawProfiles written as chunk files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hpd/model/raw_profile.h"
#include "temp_dir.h"

namespace hpd::testing {

inline constexpr uint64_t kSec = 1'000'000'000ULL;

struct SyntheticProcess {
  int32_t pid = 100;
  std::string name = "worker";
  std::string exe = "/usr/bin/worker";
  uint64_t start_offset_ns = 0;  // after the chunk's start; 0 = existed before the chunk
  uint64_t end_offset_ns = 0;    // exit after the chunk's start; 0 = alive at the end
  uint64_t map_start = 0x400000;
  std::string module_build_id = "aabbccdd";
};

// A chunk of `seconds` starting at `start_unix_ns` (monotonic start `start_mono_ns`), with one sample
// per second per process at offsets 0.5 s, 1.5 s, ...; every sample's user stack is
// {map_start + 0x10, map_start + 0x20}.
RawProfile make_chunk(uint64_t start_unix_ns, uint64_t start_mono_ns, uint64_t seconds,
                      const std::vector<SyntheticProcess>& processes);

// Writes `profile` as DIR/chunk_file_name(start) and sets its modification time to the chunk's end.
std::filesystem::path write_chunk(const std::filesystem::path& dir, const RawProfile& profile);

void set_mtime(const std::filesystem::path& path, uint64_t unix_ns);
std::vector<std::string> file_names(const std::filesystem::path& dir);

}  // namespace hpd::testing
