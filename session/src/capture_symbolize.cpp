// Symbolizing a capture on this machine: its modules located (recorded path, debug directories,
// debuginfod, matched by build-id), the kernel's symbols only in the boot it was recorded in.
#include "hpd/session/capture_symbolize.h"

#include <filesystem>
#include <optional>

#include "hpd/base/elf.h"
#include "hpd/base/hex.h"
#include "hpd/base/process.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/debuginfod_client.h"
#include "hpd/symbolizer/symbolizer.h"

namespace hpd::session {
namespace {

namespace fs = std::filesystem;

// Whether `path` is an ELF file that carries `build_id` (any ELF file when build_id is empty).
bool matches(const std::string& path, const std::string& build_id) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const auto id = file_build_id(path);
  return id && (build_id.empty() || *id == build_id);
}

std::optional<std::string> find_in_dirs(const RawModule& m, const std::vector<std::string>& dirs) {
  const std::string name = fs::path(m.path).filename().string();
  for (const std::string& dir : dirs) {
    std::vector<std::string> candidates;
    if (is_lower_hex(m.build_id) && m.build_id.size() > 2) {
      const std::string id = build_id_path(dir, m.build_id, "");
      candidates.push_back(id);
      candidates.push_back(id + ".debug");
    }
    if (!name.empty()) candidates.push_back(dir + "/" + name);
    if (!m.path.empty() && m.path[0] == '/') candidates.push_back(dir + m.path);
    for (const std::string& c : candidates) {
      if (matches(c, m.build_id)) return c;
    }
  }
  return std::nullopt;
}

// Points modules whose recorded file is gone or rebuilt at a matching file found elsewhere.
void locate_modules(RawProfile& raw, const ModuleSearch& args, std::vector<std::string>& notes) {
  DebuginfodClient debuginfod;
  const bool ask_debuginfod = args.debuginfod && DebuginfodClient::configured();
  for (RawModule& m : raw.modules) {
    if (m.is_kernel || m.path.empty() || m.path[0] != '/') continue;  // [vdso] and friends
    if (matches(m.path, m.build_id)) continue;
    std::optional<std::string> found = find_in_dirs(m, args.debug_dirs);
    if (!found && ask_debuginfod && is_lower_hex(m.build_id)) {
      std::string error;
      found = debuginfod.find_executable(m.build_id, &error);
      if (!found) notes.push_back(m.path + " (build-id " + m.build_id + ") not found: " + error);
    }
    if (found) {
      notes.push_back("using " + *found + " for " + m.path + " (build-id " + m.build_id + ")");
      m.path = *found;
    }
  }
}

bool has_kernel_addresses(const RawProfile& raw) {
  for (size_t i = 0; i < raw.stacks.size(); ++i) {
    if (raw.stacks[static_cast<uint32_t>(i)].kernel_depth != 0) return true;
  }
  return false;
}

}  // namespace

SymbolizedCapture symbolize_recording(RawProfile& raw, std::vector<std::string> notes, bool same_kernel,
                                      const std::string& other_kernel_note, const ModuleSearch& args) {
  SymbolizedCapture out;
  out.notes = std::move(notes);
  locate_modules(raw, args, out.notes);

  ConvertOptions options;
  options.kernel_frames = raw.info.kernel_frames;
  if (options.kernel_frames && has_kernel_addresses(raw) && !same_kernel && raw.kernel_symbols.empty()) {
    // Another boot (or machine) has other kernel addresses: symbols from this kallsyms would be wrong,
    // and the recording kept none of its own (an older capture, or a recording that could not read them).
    options.kallsyms_path = "";
    if (!other_kernel_note.empty()) out.notes.push_back(other_kernel_note);
  }
  Symbolizer symbolizer;
  out.profile = symbolize_profile(raw, symbolizer, options);
  if (!out.profile.meta.missing_modules.empty()) {
    std::string list;
    for (const std::string& m : out.profile.meta.missing_modules) list += (list.empty() ? "" : ", ") + m;
    out.notes.push_back(std::to_string(out.profile.meta.missing_modules.size()) +
                        " modules not found (their frames show module+offset): " + list +
                        "; give --debug-dir DIR or set DEBUGINFOD_URLS");
  }
  return out;
}

SymbolizedCapture symbolize_capture(CaptureContents capture, const ModuleSearch& args) {
  const bool same_boot = !capture.info.boot_id.empty() && capture.info.boot_id == current_boot_id();
  return symbolize_recording(capture.profile, std::move(capture.info.notes), same_boot,
                             "kernel frames stay as addresses: the capture was recorded in another boot, "
                             "whose kernel symbol addresses are not known here",
                             args);
}

}  // namespace hpd::session
