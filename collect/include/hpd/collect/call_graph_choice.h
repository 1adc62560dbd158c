// --call-graph auto: whether a target's executable was built with frame pointers, and the mode chosen
// (public: hpctl chooses for a command it starts through hpd).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "hpd/collect/recorder.h"

namespace hpd {

// What the first instructions of an executable's functions say about frame pointers.
struct FramePointerProbe {
  bool readable = false;
  std::string error;  // why the file could not be inspected, when !readable
  bool has_eh_frame = false;
  size_t functions_checked = 0;
  size_t with_frame_setup = 0;  // start with push %rbp; mov %rsp,%rbp (after an endbr64, call __fentry__)

  // Most functions set up a frame: the frame-pointer walk gives whole stacks through this code.
  [[nodiscard]] bool built_with_frame_pointers() const;
};

// Inspects up to `max_functions` functions of .text spread over the file: their starts come from
// .eh_frame_hdr's table (present in stripped binaries too) and the symbol tables; functions of Rust's
// precompiled standard library are left out.
FramePointerProbe probe_frame_pointers(const std::string& path, size_t max_functions = 256);

struct CallGraphChoice {
  CallGraph mode = CallGraph::kFp;
  std::string reason;  // for the user: what was inspected and what it showed
};

// dwarf when one of the executables has CFI but was built without frame pointers; fp otherwise (fp
// also has the frameless-leaf fix, so frameless libc routines do not hide their callers).
CallGraphChoice choose_call_graph(const std::vector<std::string>& executables);

}  // namespace hpd
