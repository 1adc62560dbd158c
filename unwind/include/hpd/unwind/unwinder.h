// Unwinder: turns a sample's user registers and a copy of the top of its user stack into a call
// chain, from DWARF CFI (.eh_frame, .debug_frame) with a frame-pointer fallback (x86-64 only).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hpd/model/raw_profile.h"

namespace hpd {

// x86-64 DWARF register numbers (System V psABI, figure 3.36). 16 is the return address column.
enum class DwarfReg : uint8_t {
  kRax = 0,
  kRdx = 1,
  kRcx = 2,
  kRbx = 3,
  kRsi = 4,
  kRdi = 5,
  kRbp = 6,
  kRsp = 7,
  kR8 = 8,
  kR9 = 9,
  kR10 = 10,
  kR11 = 11,
  kR12 = 12,
  kR13 = 13,
  kR14 = 14,
  kR15 = 15,
  kRip = 16,
};
inline constexpr size_t kDwarfRegCount = 17;

// Bits of perf_event_attr.sample_regs_user (enum perf_event_x86_regs in <asm/perf_regs.h>).
// kPerfRegsUnwind is what dwarf mode should capture: every general-purpose register and ip
// (17 x 8 = 136 bytes per sample). CFI on real code restores only rbx, rbp, r12-r15 and computes
// the CFA from rsp or rbp, but signal frames and hand-written assembly may name any register;
// kPerfRegsMinimal (ip, sp, bp, bx, r12-r15: 64 bytes) is enough for compiler-generated code.
inline constexpr uint64_t kPerfRegsUnwind = 0xff01ffULL;   // AX..IP (bits 0-8), R8..R15 (16-23)
inline constexpr uint64_t kPerfRegsMinimal = 0xf001c2ULL;  // BX, BP, SP, IP, R12..R15

// A thread's user registers at the sample, by DWARF number; `valid` has bit N set for register N.
struct UserRegs {
  std::array<uint64_t, kDwarfRegCount> value{};
  uint32_t valid = 0;

  uint64_t ip() const { return value[16]; }
  uint64_t sp() const { return value[7]; }
  uint64_t bp() const { return value[6]; }
  bool has(DwarfReg r) const { return (valid >> static_cast<unsigned>(r)) & 1; }
  void set(DwarfReg r, uint64_t v) {
    value[static_cast<size_t>(r)] = v;
    valid |= 1u << static_cast<unsigned>(r);
  }
  // From a PERF_SAMPLE_REGS_USER block: `regs` holds one u64 per set bit of `mask`, lowest bit first.
  // Registers beyond the block (a short block) stay invalid.
  static UserRegs from_perf(uint64_t mask, std::span<const uint64_t> regs);
};

// The copied top of the user stack: bytes[i] was at address sp + i when the sample was taken
// (PERF_SAMPLE_STACK_USER data, cut to its dyn_size).
struct StackCopy {
  uint64_t sp = 0;
  std::span<const uint8_t> bytes;
  // The size that was asked for (perf_event_attr.sample_stack_user), 0 = unknown. When `bytes` is
  // shorter, the kernel's copy stopped at the end of mapped stack memory, so a read past it is a
  // failed walk, not a truncated one. When unknown, reads up to 64 MiB past the copy count as
  // truncation (the copy was too small) and farther ones as failures.
  uint64_t requested_size = 0;
};

// What one sample's walk needs to know besides the registers and the stack.
struct UnwindContext {
  const RawProcess* process = nullptr;              // mappings (pid is used to open /proc/PID/... paths)
  const std::vector<RawModule>* modules = nullptr;  // RawProfile::modules, indexed by RawMapping::module
  uint64_t time_ns = 0;                             // sample time, for RawProcess::find_mapping
};

struct UnwinderOptions {
  size_t max_frames = 256;                // deeper stacks end as kTruncated
  size_t max_modules = 512;               // open module files kept (LRU beyond that)
  size_t max_rules_per_module = 1 << 16;  // cached per-pc rules; the cache is cleared when full
  bool use_debug_frame = true;            // fall back to .debug_frame (file or its build-id debug file)
  std::string debug_root = "/usr/lib/debug";
};

// Counters since construction, for the report and the recorder's statistics.
struct UnwindStats {
  uint64_t samples = 0;
  uint64_t complete = 0;
  uint64_t truncated = 0;
  uint64_t failed = 0;
  uint64_t frames = 0;     // addresses written, leaf included
  uint64_t cfi_steps = 0;  // frames stepped with a CFI rule
  uint64_t fp_steps = 0;   // frames stepped with the frame-pointer fallback
  uint64_t sp_steps = 0;   // sampled frames without CFI whose return address was at [sp] (JIT leaves)
  uint64_t rule_cache_hits = 0;
  uint64_t rule_cache_misses = 0;  // rules computed with libdw
  uint64_t modules_opened = 0;
  uint64_t modules_without_cfi = 0;
  uint64_t outside_mappings = 0;  // walks that met a pc no known mapping covers (see last_unmapped_pc)
};

// What is known about one module's unwind information (for the report and for an "auto" mode).
struct ModuleUnwindInfo {
  bool opened = false;
  std::string error;        // why the file could not be read, when !opened
  std::string opened_path;  // the file actually read
  bool has_eh_frame = false;
  bool has_debug_frame = false;  // in the file itself or in its debug file
};

// Not thread-safe: one Unwinder per recording thread. Caches CFI per module file (path + build-id)
// and the computed rule per pc; memory is bounded by UnwinderOptions.
class Unwinder {
 public:
  explicit Unwinder(UnwinderOptions options = {});
  ~Unwinder();
  Unwinder(const Unwinder&) = delete;
  Unwinder& operator=(const Unwinder&) = delete;

  // Unwinds one sample. Writes the user call chain leaf first into `out` (cleared first):
  // out[0] = ip, then return addresses (the interrupted pc after a signal frame), as RawStackTable
  // expects. Returns how the walk ended:
  //   kComplete  the outermost frame was reached: a CFI rule leaves the return address undefined
  //              (glibc's _start, clone/clone3 thread starts) or a return address of 0;
  //   kTruncated a read fell beyond the end of the stack copy, or max_frames was reached;
  //   kFailed    no rule applied, a pc fell outside every mapping, the stack did not grow, or a read
  //              fell below the copy. Whatever was unwound before the failure stays in `out`.
  // Never throws and never reads outside `stack.bytes`, whatever the input.
  StackEnd unwind(const UnwindContext& context, const UserRegs& regs, const StackCopy& stack,
                  std::vector<uint64_t>& out);

  // For frame-pointer call chains: when the leaf function has not set up a frame at ip (its CFA
  // is still rsp-based: frameless functions such as glibc's memmove, or a prologue not yet past
  // `mov %rsp,%rbp`), the kernel's frame-pointer walk skips the leaf's caller. This returns that
  // caller's return address, read from the stack slot CFI gives (needs only the first few dozen
  // bytes of the stack: 256 are plenty). nullopt when ip's function has a frame (rbp-based CFA),
  // or when the slot lies outside the copy. Where no CFI covers ip (JIT code), [sp] when it points
  // into a module with CFI right after a call instruction (hpd/base/x86_call.h), as unwind() does for
  // such a frame. Insert the result after the leaf unless the kernel's chain already holds it there.
  std::optional<uint64_t> frameless_leaf_return(const UnwindContext& context, const UserRegs& regs,
                                                const StackCopy& stack);

  // For frame-pointer call chains, which end without saying why: whether the frame of `pc` is its
  // thread's first, so that a chain ending there is whole. True when the CFI that covers pc leaves
  // the return address undefined (glibc's _start, the child side of clone/clone3). `return_address`:
  // pc is a return address, looked up one byte back (it may follow a noreturn call).
  bool is_outermost_frame(const UnwindContext& context, uint64_t pc, bool return_address);

  // The first pc of the last unwind() that no mapping of the context's process covered, or 0.
  // Such a pc means the caller's maps are out of date rather than the stack broken: a process
  // sampled while the dynamic loader is still mapping its libraries runs code (a libc leaf, a return
  // address in __libc_start_call_main) in mappings read too early to be listed. The caller can read
  // the maps again and unwind the same sample again.
  uint64_t last_unmapped_pc() const;

  // Unwind information of the module mapped at `address` (opening it if needed).
  ModuleUnwindInfo module_info(const UnwindContext& context, uint64_t address);

  const UnwindStats& stats() const;
  // Estimated bytes held by caches (rules, expression pools, module bookkeeping; not the mmap'd files).
  uint64_t memory_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpd
