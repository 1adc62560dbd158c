// --call-graph auto: whether a target's executable was built with frame pointers, and the mode chosen
// (public: hpctl chooses for a command it starts through hpd).
#pragma once

#include <cstddef>
#include <cstdint>
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

// One process to record: its executable and the libraries its code runs in.
struct CallGraphTarget {
  std::string executable;
  std::vector<std::string> libraries;
};

// A program not started yet: the libraries its ELF file names (interpreter, DT_NEEDED, recursively).
CallGraphTarget call_graph_target_of(const std::string& executable);
// A running process: /proc/PID/exe and the files of its executable mappings, through /proc/PID/root.
CallGraphTarget call_graph_target_of(int32_t pid);

// dwarf when a target's executable, or one of its libraries, has CFI but was built without frame
// pointers: the frame-pointer walk loses the callers of every function in it (glibc on Debian has none,
// so qsort's comparator and strtod lose the program's functions above them). fp otherwise (fp also
// has the frameless-leaf fix, so a frameless leaf does not hide its caller).
CallGraphChoice choose_call_graph(const std::vector<CallGraphTarget>& targets);
// The same for programs not started yet.
CallGraphChoice choose_call_graph(const std::vector<std::string>& executables);

}  // namespace hpd
