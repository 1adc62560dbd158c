// Finding the mcount / __fentry__ instrumentation of an ELF file and the probe points to count it at.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hpd::calls {

// What the instruction at a probe site is; it decides what a uprobe there costs (docs/call-counts.md).
enum class SiteKind : uint8_t {
  kNop5 = 0,  // 0f 1f 44 00 xx: the kernel turns the uprobe into a call to a trampoline
  kNop1 = 1,  // 90 (gcc's -fpatchable-function-entry): a trap, the nop emulated
  kCall = 2,  // e8 rel32 (glibc's call __mcount_internal): a trap, the call emulated
};
inline constexpr size_t kSiteKindCount = 3;
const char* to_string(SiteKind kind);

// Where caller and callee are at the site; the values match enum hpd_calls_mode of calls_event.h.
enum class SiteMode : uint8_t {
  kAtEntry = 0,         // callee = the site, caller = [sp]
  kAfterPrologue = 1,   // callee = the site, caller = [rbp + 8]
  kMcountInternal = 2,  // caller = rdi (frompc), callee = rsi (selfpc)
};

struct ProbeSite {
  uint64_t vaddr = 0;        // link-time address
  uint64_t file_offset = 0;  // what a uprobe is attached at
  SiteKind kind = SiteKind::kNop5;
  SiteMode mode = SiteMode::kAtEntry;
};

// The instrumentation of one ELF file.
struct ModuleInstrumentation {
  std::string path;
  std::string error;     // the file could not be read as ELF; everything else is empty then
  std::string build_id;  // GNU build-id, lower-case hex; empty when the file has none
  // NOP sites listed in __mcount_loc or __patchable_function_entries: probed one by one.
  std::vector<ProbeSite> nop_sites;
  // Calls at function entries to mcount/_mcount (after the prologue) and to __fentry__ (first
  // instruction), direct through the PLT or indirect through the GOT: counted inside glibc.
  size_t mcount_calls = 0;
  size_t fentry_calls = 0;
  // The file has relocations against mcount, _mcount or __fentry__ (calls were found or not).
  bool imports_hook = false;
  // This file is a libc: the `call __mcount_internal` inside its _mcount and __fentry__, where
  // frompc and selfpc are in rdi and rsi. Empty when not found (not a glibc, or an unknown build).
  std::vector<ProbeSite> hook_internal_sites;
  // Program headers: PT_INTERP (an executable the dynamic loader starts, so LD_PRELOAD works) and
  // PT_DYNAMIC (linked dynamically). A static executable has neither.
  bool has_interpreter = false;
  bool has_dynamic = false;
  // The file defines mcount, _mcount or __fentry__ itself (a libc, or a program with its own hook,
  // whose calls then never reach a preloaded one).
  bool defines_hook = false;

  [[nodiscard]] bool instrumented() const {
    return !nop_sites.empty() || mcount_calls != 0 || fentry_calls != 0 || imports_hook;
  }
  // Counted at glibc's hook (no NOP sites to probe here).
  [[nodiscard]] bool counted_in_libc() const { return nop_sites.empty() && instrumented(); }
};

// Reads `path` (an ELF file). Never throws for bad input: `error` says what was wrong.
ModuleInstrumentation scan_module(const std::string& path);

// The advice for a target without instrumentation.
extern const char* const kBuildAdvice;

}  // namespace hpd::calls
