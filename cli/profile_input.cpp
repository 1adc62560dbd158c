// Loading .hpr captures and perf.data files (locating their modules, symbolizing: session's
// symbolize_recording) and Firefox profiles for hpctl's verbs.
#include "profile_input.h"

#include <cstdio>
#include <filesystem>

#include "hpd/export/firefox_reader.h"

namespace hpd::cli {
namespace {

namespace fs = std::filesystem;

LoadedProfile loaded(session::SymbolizedCapture symbolized) {
  LoadedProfile out;
  out.profile = std::move(symbolized.profile);
  out.from_capture = true;
  out.notes = std::move(symbolized.notes);
  return out;
}

}  // namespace

LoadedProfile symbolize_capture(CaptureContents capture, const ModuleSearch& args) {
  return loaded(session::symbolize_capture(std::move(capture), args));
}

LoadedProfile symbolize_perf_data(PerfDataContents contents, const ModuleSearch& args) {
  // The reader's notes already say when the file's kernel is not this boot's.
  return loaded(session::symbolize_recording(contents.profile, std::move(contents.notes),
                                             contents.kernel_is_running_one, "", args));
}

LoadedProfile load_profile(const std::string& path, const ModuleSearch& args) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == 0 && !ec)
    throw std::runtime_error(path + ": the file is empty (no profile, capture or perf.data)");
  if (is_capture_file(path)) return cli::symbolize_capture(read_capture_file(path), args);
  if (is_perf_data_file(path)) return symbolize_perf_data(read_perf_data_file(path), args);
  LoadedProfile out;
  out.profile = read_firefox_file(path);
  return out;
}

void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) std::fprintf(stderr, "hpctl: note: %s\n", n.c_str());
}

}  // namespace hpd::cli
