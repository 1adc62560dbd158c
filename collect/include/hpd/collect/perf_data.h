// Reading perf's own recordings (`perf record`'s perf.data, file and pipe mode) into a RawProfile, for
// hpctl report and convert to symbolize as they do hpd's captures. The records are decoded by the perf
// backend's decoder (perf_records, perf_event_decoder) and built by the one RawProfileBuilder; modules
// are matched by the build-ids of the file's BUILD_ID section. See docs/perf-data.md.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hpd/model/raw_profile.h"

namespace hpd {

// A perf.data file that cannot be read: truncated, corrupt, of another byte order, compressed, or
// without any sample hpd can use. what() names the file and the reason.
class PerfDataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PerfDataContents {
  RawProfile profile;
  // For the user, one line each: what the file is (command, event, rate, call graph), what was
  // skipped (events hpd cannot map, records not read) and what hpd cannot know from such a file.
  std::vector<std::string> notes;
  // The file's kernel (its build-id and the address of _text) is the running one, as this boot placed
  // it: only then can this machine's /proc/kallsyms name its kernel addresses.
  bool kernel_is_running_one = false;
};

// Whether the file starts with perf.data's magic ("PERFILE2", either byte order).
bool is_perf_data_file(const std::string& path);

// Reads the file (throws PerfDataError). `running_kernel_build_id` and `running_kernel_text` (the
// running kernel's _text address) decide kernel_is_running_one; read_perf_data_file reads them from
// the system.
PerfDataContents read_perf_data(std::span<const uint8_t> bytes, const std::string& name,
                                const std::string& running_kernel_build_id = "",
                                uint64_t running_kernel_text = 0);
PerfDataContents read_perf_data_file(const std::string& path);

}  // namespace hpd
