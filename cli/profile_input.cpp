// Loading .hpr captures (locating their modules, symbolizing) and Firefox profiles for hpctl's verbs.
#include "profile_input.h"

#include <cstdio>

#include "hpd/export/firefox_reader.h"

namespace hpd::cli {

LoadedProfile symbolize_capture(CaptureContents capture, const ModuleSearch& args) {
  session::SymbolizedCapture symbolized = session::symbolize_capture(std::move(capture), args);
  LoadedProfile out;
  out.profile = std::move(symbolized.profile);
  out.from_capture = true;
  out.notes = std::move(symbolized.notes);
  return out;
}

LoadedProfile load_profile(const std::string& path, const ModuleSearch& args) {
  if (is_capture_file(path)) return cli::symbolize_capture(read_capture_file(path), args);
  LoadedProfile out;
  out.profile = read_firefox_file(path);
  return out;
}

void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) std::fprintf(stderr, "hpctl: note: %s\n", n.c_str());
}

}  // namespace hpd::cli
