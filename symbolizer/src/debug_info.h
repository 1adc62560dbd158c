// DebugInfo: the seam through which DWARF (file:line, inline chains) enters the symbolizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hpd/symbolizer/symbolizer.h"

namespace hpd {

// Where an address lies in a DebugInfo's own tables, opaque to callers: what locate_planned()
// found, for describe() to print without searching again.
struct DebugPlace {
  uint32_t part[5] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, 0, 0};
};

// Source-level view of one module's debug information. The ELF symbol table still supplies the
// outer symbol's name, address and size; a DebugInfo supplies Location::frames.
class DebugInfo {
 public:
  virtual ~DebugInfo() = default;
  // The inline chain at ELF virtual address `vaddr`, outermost (the real function) first, each
  // level with its own function name and the file:line executing in it; empty when not covered.
  // The views point into this DebugInfo's tables and stay valid as long as it.
  virtual void lookup(uint64_t vaddr, std::vector<SourceFrameView>& frames) = 0;
  // lookup() in two steps for a batch: every search in locate_planned(), the printing in
  // describe(). Searching the batch in plan()'s order and printing it later, in the order asked,
  // keeps the searches on the tables' memory one part at a time. A place stays valid as long as
  // this DebugInfo.
  // plan() announces the addresses (repeats included) that locate_planned() will then be asked
  // for, once each; the DebugInfo may free search tables it built for the batch as soon as their
  // last address is located (searching there again later costs a rebuild). It returns a key per
  // address (equal for equal addresses): asked for in the order of their keys, the batch is
  // searched fastest and in the least memory.
  virtual std::vector<uint64_t> plan(std::span<const uint64_t> vaddrs) = 0;
  virtual DebugPlace locate_planned(uint64_t vaddr) = 0;
  virtual void describe(const DebugPlace& place, std::vector<SourceFrameView>& frames) = 0;
  // Starts loading the memory describe() will read first: places prepared in address order are
  // described in another order, so a caller about to describe one soon may call this.
  // `step` 0 asks for what the place points at directly; step 1, issued later for the same place,
  // follows those pointers one level (they should have arrived by then).
  virtual void prefetch(const DebugPlace& place, int step) = 0;
  // The code ([low, high) ELF vaddrs) of the function the call returning to ELF vaddr
  // `return_vaddr` calls, as the caller's call-site information names it; empty when unknown
  // (DwarfIndex::call_site_callee).
  virtual std::vector<std::pair<uint64_t, uint64_t>> call_site_callee(uint64_t return_vaddr) = 0;
  // Estimated heap bytes held, for the module cache's memory cap.
  virtual size_t memory_bytes() const = 0;
};

// Opens the DWARF in `debug_path` (a file that has .debug_info). Returns nullptr, with a message
// in *error, when no DWARF reader is built in or the file's DWARF cannot be read; symbolization
// then falls back to ELF symbols alone.
// `rewrite_name`, when given, is applied once to each function name that holds a '$'.
std::unique_ptr<DebugInfo> open_debug_info(const std::string& debug_path, std::string* error,
                                           std::string (*rewrite_name)(const std::string&) = nullptr);

}  // namespace hpd
