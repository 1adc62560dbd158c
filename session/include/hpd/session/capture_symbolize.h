// A capture (.hpr) symbolized on this machine, as hpctl's verbs (convert, report, push, export) and
// hpd's push of its continuous chunks read one.
#pragma once

#include <string>
#include <vector>

#include "hpd/capture/capture.h"
#include "hpd/model/profile.h"

namespace hpd::session {

struct ModuleSearch {
  // Searched for modules whose recorded path is missing or holds another build: DIR/.build-id/xx/rest,
  // DIR/.build-id/xx/rest.debug, DIR/<file name>, DIR/<recorded path>.
  std::vector<std::string> debug_dirs;
  bool debuginfod = true;  // ask the servers in $DEBUGINFOD_URLS for modules still missing
};

struct SymbolizedCapture {
  Profile profile;
  // What the user should know, one line each: an interrupted recording, modules found elsewhere or
  // not at all, kernel symbols that cannot be used.
  std::vector<std::string> notes;
};

// Symbolizes a capture's RawProfile on this machine. Modules are looked for at their recorded path,
// in `search.debug_dirs` and through debuginfod, matched by build-id; the kernel's symbols are used
// only when this is the boot the capture was recorded in (KASLR moves them at every boot).
SymbolizedCapture symbolize_capture(CaptureContents capture, const ModuleSearch& search);

// The same for a RawProfile read from another kind of file (perf.data): the kernel's symbols only when
// `same_kernel` says this boot's kallsyms holds the recording's kernel addresses; otherwise
// `other_kernel_note`, when not empty, is said.
SymbolizedCapture symbolize_recording(RawProfile& raw, std::vector<std::string> notes, bool same_kernel,
                                      const std::string& other_kernel_note, const ModuleSearch& search);

}  // namespace hpd::session
