// Writes a Profile in the Firefox Profiler's processed format (version 66), plain or gzip-compressed.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "hpd/export/error.h"
#include "hpd/model/profile.h"
#include "hpd/model/validate.h"

namespace hpd {

// The processed-profile version written; see docs in firefox_writer.cpp for why 66.
inline constexpr int kFirefoxProfileVersion = 66;

// Writes the profile as JSON to `out`. Throws InvalidProfileError (hpd/model/validate.h) when the
// profile is inconsistent (an index out of range), ExportError when the stream fails.
void write_firefox_json(const Profile& profile, std::ostream& out);

// Writes the profile to `path`, gzip-compressed when the path ends in ".gz". The data goes to a
// temporary file in the same directory that is renamed over `path` only once complete, so a failure
// never leaves a partial file behind. Throws ExportError naming the path and the OS error.
void write_firefox_file(const Profile& profile, const std::string& path);

// Writes the profile to an open descriptor, gzip-compressed when `gzip`, at its current offset; the
// descriptor stays open. For a file opened by someone else (hpd writes into the descriptor a client
// passed it). Throws ExportError with the OS error.
void write_firefox_fd(const Profile& profile, int fd, bool gzip);

// Which threads the Firefox Profiler shows and selects when it opens the profile
// (meta.initialVisibleThreads / initialSelectedThreads): without them it picks by its own activity
// rules, which with --all hide most of the threads that matter (it showed 12 of 113 tracks).
// Targets are the recorded processes unless the recording was system-wide (--all) or a cgroup; then
// the process of a command launched with it ("all processes while running CMD") is the target.
// Visible: the targets' threads (the kMaxTargetThreads busiest when there are more), the
// kMaxBusiestThreads busiest threads of the whole profile that used at least 5% of the busiest one's
// CPU time, and the main thread of each process with a visible thread, so that its track shows.
// Selected: the busiest target thread, else the busiest thread. Busy = CPU time of on-CPU samples
// (their count when the profile has no CPU times). Indices into Profile::threads, ascending.
struct InitialThreads {
  std::vector<uint32_t> visible;
  std::vector<uint32_t> selected;
};
inline constexpr size_t kMaxTargetThreads = 32;
inline constexpr size_t kMaxBusiestThreads = 8;
InitialThreads choose_initial_threads(const Profile& profile);

// The Breakpad debug id of an ELF file from its GNU build-id (hex): the first 16 bytes read as a
// little-endian GUID, upper-case hex, followed by the age "0" (33 characters). Build-ids shorter than
// 16 bytes are zero-padded. Returns "" when `build_id_hex` is empty or not valid hex.
std::string breakpad_id_from_build_id(std::string_view build_id_hex);

// The code id (the full build-id as lower-case hex), or "" when `build_id_hex` is empty or not hex.
std::string code_id_from_build_id(std::string_view build_id_hex);

}  // namespace hpd
