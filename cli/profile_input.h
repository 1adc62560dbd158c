// Opens any profile hpctl can read: a capture file (.hpr) or a perf.data file (both detected by their
// magic) is symbolized here and now; anything else is read as a Firefox profile written by hpctl.
#pragma once

#include <string>
#include <vector>

#include "hpd/capture/capture.h"
#include "hpd/collect/perf_data.h"
#include "hpd/model/profile.h"
#include "hpd/session/capture_symbolize.h"

namespace hpd::cli {

using session::ModuleSearch;

struct LoadedProfile {
  Profile profile;
  bool from_capture = false;
  // What the user should know, one line each: an interrupted recording, modules found elsewhere or
  // not at all, kernel symbols that cannot be used.
  std::vector<std::string> notes;
};

// session::symbolize_capture (hpd/session/capture_symbolize.h), as a LoadedProfile.
LoadedProfile symbolize_capture(CaptureContents capture, const ModuleSearch& args);

// Symbolizes what perf's own recording (perf.data) holds, as a capture is.
LoadedProfile symbolize_perf_data(PerfDataContents contents, const ModuleSearch& args);

// Reads `path` (capture, perf.data or Firefox JSON). Throws std::runtime_error / CaptureError with the
// reason.
LoadedProfile load_profile(const std::string& path, const ModuleSearch& args);

// Prints notes as "hpctl: note: ..." lines on stderr.
void print_notes(const std::vector<std::string>& notes);

}  // namespace hpd::cli
