// Opens any profile hpctl can read: a capture file (.hpr) or a perf.data file (both detected by their
// magic) is symbolized here and now; anything else is read as a Firefox profile written by hpctl.
#pragma once

#include <string>
#include <vector>

#include "hpd/capture/capture.h"
#include "hpd/collect/perf_data.h"
#include "hpd/model/profile.h"

namespace hpd::cli {

struct ModuleSearch {
  // Searched for modules whose recorded path is missing or holds another build: DIR/.build-id/xx/rest,
  // DIR/.build-id/xx/rest.debug, DIR/<file name>, DIR/<recorded path>.
  std::vector<std::string> debug_dirs;
  bool debuginfod = true;  // ask the servers in $DEBUGINFOD_URLS for modules still missing
};

struct LoadedProfile {
  Profile profile;
  bool from_capture = false;
  // What the user should know, one line each: an interrupted recording, modules found elsewhere or
  // not at all, kernel symbols that cannot be used.
  std::vector<std::string> notes;
};

// Symbolizes a capture's RawProfile on this machine. Modules are looked for at their recorded path,
// in `args.debug_dirs` and through debuginfod, matched by build-id; the kernel's symbols are used
// only when this is the boot the capture was recorded in (KASLR moves them at every boot).
LoadedProfile symbolize_capture(CaptureContents capture, const ModuleSearch& args);

// Symbolizes what perf's own recording (perf.data) holds, as a capture is.
LoadedProfile symbolize_perf_data(PerfDataContents contents, const ModuleSearch& args);

// Reads `path` (capture, perf.data or Firefox JSON). Throws std::runtime_error / CaptureError with the
// reason.
LoadedProfile load_profile(const std::string& path, const ModuleSearch& args);

// Prints notes as "hpctl: note: ..." lines on stderr.
void print_notes(const std::vector<std::string>& notes);

}  // namespace hpd::cli
