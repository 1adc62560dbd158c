// CfiModule: one module file's call frame information (.eh_frame, then .debug_frame) read through
// libdw, turned into compact per-pc rules that the unwinder evaluates without calling libdw again.
#pragma once

#include <elfutils/libdw.h>
#include <libelf.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "dwarf_expr.h"
#include "hpd/base/elf.h"

namespace hpd::unwind_detail {

inline constexpr unsigned kRegCount = 17;
inline constexpr unsigned kRaReg = 16;
inline constexpr unsigned kSpReg = 7;
inline constexpr unsigned kBpReg = 6;
inline constexpr unsigned kRdiReg = 5;

enum class RuleKind : uint8_t {
  kUndefined,      // not recoverable (for the return address: the outermost frame)
  kSameValue,      // unchanged by this frame
  kOffset,         // saved at CFA + offset
  kValOffset,      // the value is CFA + offset
  kRegister,       // the value is register `reg` + offset
  kExpression,     // saved at the address the expression computes
  kValExpression,  // the value is what the expression computes
};

struct RegRule {
  RuleKind kind = RuleKind::kUndefined;
  uint8_t reg = 0;
  uint16_t expr_len = 0;
  uint32_t expr_begin = 0;  // into CfiModule::ops()
  int64_t offset = 0;
};

struct CfaRule {
  bool is_expr = false;
  uint8_t reg = 0;  // CFA = reg + offset when !is_expr
  uint16_t expr_len = 0;
  uint32_t expr_begin = 0;
  int64_t offset = 0;
};

// The unwind rule of one CFI row.
struct FrameRule {
  CfaRule cfa;
  std::array<RegRule, kRegCount> regs{};
  bool signal_frame = false;  // the CIE has 'S': the caller is an interrupted context, not a call
  uint64_t row_start = 0;     // the pc range [row_start, row_end) this row covers
  uint64_t row_end = 0;
};

// Where a file came from and what it holds.
struct ModuleSummary {
  bool opened = false;
  std::string error;
  std::string opened_path;
  bool has_eh_frame = false;
  bool has_debug_frame = false;
};

class CfiModule {
 public:
  // Opens the first candidate path that is a readable ELF file whose build-id equals
  // `expected_build_id` (when not empty). Never returns nullptr: a module that could not be opened
  // answers every lookup with "no rule" and says why in summary().error.
  static std::unique_ptr<CfiModule> open_file(const std::vector<std::string>& candidates,
                                              const std::string& expected_build_id,
                                              const std::string& debug_root, bool use_debug_frame,
                                              size_t max_rules);
  // An ELF image already in memory that outlives the module (the vDSO).
  static std::unique_ptr<CfiModule> open_image(std::span<const uint8_t> image, const std::string& name,
                                               size_t max_rules);
  ~CfiModule();
  CfiModule(const CfiModule&) = delete;
  CfiModule& operator=(const CfiModule&) = delete;

  const ModuleSummary& summary() const { return summary_; }
  using Segment = ElfSegment;
  const std::vector<Segment>& segments() const { return segments_; }
  const std::string& build_id() const { return build_id_; }
  // The ELF entry point (e_entry; 0 when it has none or the module could not be opened).
  uint64_t entry() const;
  // The code from the entry point up to the first pc an FDE covers (at most kEntryGapMaxBytes), when
  // no FDE covers the entry point itself; empty (start == end) otherwise, and when the module has no
  // .eh_frame to read. The kernel starts it at the exec, on the process's first stack, and nothing
  // called it: it is the outermost frame, and rule_at and the compiled tables say so (ld.so's _start
  // and _dl_start_user, which calls the libraries' constructors through _dl_init, have no CFI; 64
  // bytes in Debian 12's).
  struct PcRange {
    uint64_t start = 0, end = 0;
  };
  static constexpr uint64_t kEntryGapMaxBytes = 256;
  PcRange entry_without_cfi();
  // Looks for .debug_frame now rather than on the first .eh_frame miss.
  void probe_debug_frame() {
    if (!debug_tried_) open_debug_frame();
  }

  // ELF virtual address of a file offset (through the PT_LOAD headers); false when no segment holds it.
  bool vaddr_of(uint64_t file_offset, uint64_t* vaddr) const;
  // The file's bytes at ELF virtual addresses [vaddr, vaddr + out.size()) into `out` (the code before a
  // return address); false when a segment's file bytes do not hold them all.
  bool read_image(uint64_t vaddr, std::span<uint8_t> out) const;

  // The rule of the CFI row covering `vaddr`, or nullptr when no FDE covers it or the row uses
  // something this unwinder cannot evaluate; the entry point's code without CFI (entry_without_cfi) has
  // an outermost rule (return address undefined). `*hit` tells whether it came from the cache.
  const FrameRule* rule_at(uint64_t vaddr, bool* hit);

  // For the table compiler (cfi_table.h): the pc range [start, end) of every FDE, from .eh_frame
  // (through .eh_frame_hdr's sorted table) or .debug_frame; false with `*error` when the section
  // cannot be enumerated.
  struct FdeRange {
    uint64_t start, end;  // end = 0: unknown (.eh_frame_hdr gives only starts)
    uint64_t fde = 0;     // .eh_frame: the FDE's virtual address (from .eh_frame_hdr's table)
  };
  bool fde_ranges(bool debug_frame, std::vector<FdeRange>* out, std::string* error);
  // The CFI row covering `vaddr`, computed afresh and not cached; its expressions (ops()) stay valid
  // until the next call of row_for_table or rule_at.
  bool row_for_table(bool debug_frame, uint64_t vaddr, FrameRule* rule);

  std::span<const ExprOp> ops(uint32_t begin, uint16_t len) const {
    return std::span<const ExprOp>(ops_).subspan(begin, len);
  }
  // Every expression's operations: the store the rules' expr_begin and expr_len index.
  std::span<const ExprOp> all_ops() const { return ops_; }
  // .eh_frame's bytes and its virtual address (empty when the module has none).
  struct Section {
    std::span<const uint8_t> bytes;
    uint64_t vaddr = 0;
  };
  Section eh_frame() const;
  uint64_t memory_bytes() const;

 private:
  CfiModule() = default;
  bool load_elf(int fd, std::string* error);
  std::string read_build_id() const;
  void open_debug_frame();
  bool compute(Dwarf_CFI* cfi, uint64_t vaddr, FrameRule* rule);
  // .eh_frame's row for `vaddr`, else .debug_frame's (opened on this first miss); false, with ops_ as
  // it was, when neither covers it.
  bool compute_either(uint64_t vaddr, FrameRule* rule);

  ModuleSummary summary_;
  std::string debug_root_;
  size_t max_rules_ = 0;
  ElfHandle elf_;
  Dwarf_CFI* eh_cfi_ = nullptr;
  // .debug_frame, opened on the first .eh_frame miss (from the file or its build-id debug file).
  bool debug_tried_ = true;
  ElfHandle debug_elf_;  // declared after elf_: ended before it
  Dwarf* debug_dwarf_ = nullptr;
  Dwarf_CFI* debug_cfi_ = nullptr;
  std::vector<Segment> segments_;
  std::string build_id_;
  bool entry_gap_known_ = false;
  PcRange entry_gap_;
  FrameRule entry_rule_;  // entry_gap_'s: return address undefined

  // pc -> index into rules_ (or kNoRule); rows are shared by all pcs they cover.
  static constexpr uint32_t kNoRule = UINT32_MAX;
  std::unordered_map<uint64_t, uint32_t> by_pc_;
  std::vector<FrameRule> rules_;
  std::unordered_map<uint64_t, uint32_t> by_row_start_;  // row start -> index into rules_
  std::vector<ExprOp> ops_;
};

// The rules of a row from the operations libdw gives for them, shared by CfiModule (libdw's own) and
// EhFrameRows (which builds the same operations from .eh_frame), so that both read a row alike.
// Expressions are appended to `store` (at most 64 operations each).

// The CFA from dwarf_frame_cfa's operations: a register plus an offset, or an expression. False when
// there are none or the expression is too long (libdw's row is then not used).
bool cfa_rule_of(std::span<const ExprOp> ops, std::vector<ExprOp>* store, CfaRule* cfa);
// A register from dwarf_frame_register's operations. With none, `same` tells libdw's "same value" (a
// null ops pointer) from "undefined".
void reg_rule_of(std::span<const ExprOp> ops, bool same, std::vector<ExprOp>* store, RegRule* out);

}  // namespace hpd::unwind_detail
