// DebugFileFinder: finds the files a module's symbols come from: its binary (or in-memory image)
// and a separate debug file (build-id tree, .gnu_debuglink, debuginfod), build-ids checked.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "elf_file.h"
#include "hpd/symbolizer/debuginfod_client.h"
#include "hpd/symbolizer/symbolizer.h"

namespace hpd {

// The files of one module, as ModuleInfo's comment orders the choice. At least one is set, or
// neither when nothing readable was found (ModuleInfo::error then says why).
struct ModuleFiles {
  // The image, a file with the expected build-id, or else one with another build-id
  // (ModuleInfo::build_id_mismatch). Null when only a debug file stands in for a missing binary.
  std::unique_ptr<ElfFile> binary;
  // A separate debug file: for a binary without .debug_info, or in place of a missing binary.
  std::unique_ptr<ElfFile> debug;
};

class DebugFileFinder {
 public:
  // `debug_root`: the separate debug-file tree (/usr/lib/debug). `use_debuginfod`: whether to ask
  // the DEBUGINFOD_URLS servers when no local debug file matches.
  // `open_file`: SymbolizerOptions::open_file (unset: open(2)).
  DebugFileFinder(std::string debug_root, bool use_debuginfod,
                  std::function<int(const std::string&, int)> open_file = {});

  // Sets info.error (why nothing was found, or a warning), build_id_mismatch, from_debuginfod
  // debuginfod_error and denied; leaves the rest of `info` alone.
  ModuleFiles find(const ModuleRef& ref, ModuleInfo& info);

 private:
  // Opens the first candidate whose build-id matches; remembers the first mismatching one.
  std::unique_ptr<ElfFile> open_binary(const ModuleRef& ref, std::vector<std::string>& errors,
                                       std::unique_ptr<ElfFile>& mismatched, bool& denied);
  // Opens `path` as ELF through open_file_ (or open(2)); *denied says whether open_file_ refused it
  // (EACCES, EPERM).
  std::unique_ptr<ElfFile> open_elf(const std::string& path, std::string* error, bool* denied);
  // A separate debug file candidate: only a regular file; a refused one is added to `denied`.
  std::unique_ptr<ElfFile> open_debug_candidate(const std::string& path, std::vector<std::string>& denied);
  std::string build_id_path(const std::string& build_id) const;
  // A debug file from the debuginfod servers (DEBUGINFOD_URLS), checked against the build-id, opened
  // with the symbolizer's own rights (a file of libdebuginfod's cache).
  std::unique_ptr<ElfFile> fetch_debug_file(const std::string& build_id, ModuleInfo& info);
  // A separate debug file for `binary`: by build-id, then by .gnu_debuglink, then from debuginfod.
  // Its build-id must match the binary's when both have one (a stale debug file gives confidently
  // wrong lines).
  std::unique_ptr<ElfFile> find_debug_file(const ElfFile& binary, const ModuleRef& ref, ModuleInfo& info,
                                           std::vector<std::string>& denied);

  std::string debug_root_;
  bool use_debuginfod_;
  std::function<int(const std::string&, int)> open_file_;
  DebuginfodClient debuginfod_;
};

}  // namespace hpd
