// EhFrameRows: the CFI rows of a module's .eh_frame FDEs read in one pass over each FDE's instructions,
// for the table compiler (cfi_table.cpp). libdw answers one pc at a time (dwarf_cfi_addrframe runs the
// FDE's instructions from its start up to that pc, after finding the FDE again), so a table of n rows
// per FDE cost it n runs; this reader runs each FDE once and gives every row. Its rows are libdw's, row
// for row (the operations it builds for each rule are the ones libdw gives, turned into rules by the same
// code: cfa_rule_of and reg_rule_of); what it does not interpret (an augmentation, an encoding or an
// instruction beyond what compilers and assemblers emit on x86-64) it says, and the compiler then reads the
// whole module through libdw as before.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cfi_module.h"

namespace hpd::unwind_detail {

class EhFrameRows {
 public:
  // `section`: .eh_frame's bytes, at virtual address `vaddr`; it must outlive this object.
  EhFrameRows(std::span<const uint8_t> section, uint64_t vaddr) : section_(section), vaddr_(vaddr) {}

  // The rows of the FDE at virtual address `fde`, which .eh_frame_hdr lists for `start`, appended to
  // `rows` in pc order, each with its [row_start, row_end) as libdw gives it: a row ends where the next
  // begins, the last one at the FDE's end. Each holds the rules the table's rows use: the CFA, rbp and
  // the return address (the other registers' are left undefined). Expressions go to ops(). False, with
  // `*why`, when the FDE (or its CIE) holds something this reader does not interpret.
  bool rows(uint64_t fde, uint64_t start, std::vector<FrameRule>* rows, std::string* why);

  // The start address (pc_begin) of the FDE at virtual address `fde`; false, with `*why`, when it
  // cannot be read.
  bool fde_start(uint64_t fde, uint64_t* start, std::string* why);

  // Every FDE of the section, read one entry after the other, with its range and virtual address: what
  // .eh_frame_hdr's table lists, for a module that has none (a static executable: GCC asks the linker
  // for the header only when it links dynamically). FDEs of no code (empty, or at address 0: a
  // function the linker discarded) are left out. False, with `*why`, at an entry it cannot read; the
  // FDEs before it are in `out`.
  bool all_fdes(std::vector<CfiModule::FdeRange>* out, std::string* why);

  // The operations of the rules' expressions (their expr_begin and expr_len index it).
  std::span<const ExprOp> ops() const { return ops_; }
  void clear_ops() { ops_.clear(); }

 private:
  // One register's rule as the instructions set it, before it is turned into libdw's operations.
  enum class Rule : uint8_t {
    kUnspecified,
    kUndefined,
    kSameValue,
    kOffset,
    kValOffset,
    kRegister,
    kExpression,
    kValExpression
  };
  struct Reg {
    Rule rule = Rule::kUnspecified;
    int64_t value = 0;               // the offset, or the register of kRegister
    std::span<const uint8_t> block;  // the expression of kExpression and kValExpression
  };
  struct State {
    bool cfa_set = false;  // the ABI's defaults leave the CFA undefined until the CIE defines it
    bool cfa_is_expr = false;
    uint64_t cfa_reg = kSpReg;
    int64_t cfa_offset = 0;
    std::span<const uint8_t> cfa_block;
    Reg regs[kRegCount];
  };
  struct Cie {
    uint64_t code_align = 1;
    int64_t data_align = 1;
    uint8_t fde_encoding = 0;  // DW_EH_PE_absptr unless 'R'
    bool augmented = false;    // 'z': FDEs carry augmentation data with its length
    bool signal = false;       // 'S'
    State initial;             // after the ABI's defaults and the CIE's initial instructions
  };
  class Reader;
  // An FDE's header read: its CIE, its range and where its instructions are.
  struct Fde {
    const Cie* cie = nullptr;
    uint64_t pc_begin = 0;
    uint64_t pc_range = 0;
    std::span<const uint8_t> program;
    uint64_t program_vaddr = 0;
  };
  bool parse_fde(uint64_t fde, Fde* out, std::string* why);

  const Cie* cie_at(size_t offset, std::string* why);
  // Runs `program` over `state` from `*loc`; at each advance past it, the row so far (when it begins
  // before `end`, the FDE's end) goes to `rows` (emit). `initial`: the CIE's own initial instructions
  // (no advance, no restore). `program_vaddr`: where `program` lies (DW_CFA_set_loc's pcrel base).
  bool run(std::span<const uint8_t> program, const Cie& cie, bool initial, uint64_t program_vaddr,
           State* state, uint64_t* loc, uint64_t end, std::vector<FrameRule>* rows, std::string* why);
  bool emit(const State& state, const Cie& cie, uint64_t start, uint64_t end, std::vector<FrameRule>* rows,
            std::string* why);
  bool decode_expression(std::span<const uint8_t> block, std::vector<ExprOp>* out, std::string* why) const;

  std::span<const uint8_t> section_;
  uint64_t vaddr_ = 0;
  std::unordered_map<size_t, Cie> cies_;
  std::vector<ExprOp> ops_;
  std::vector<ExprOp> scratch_;
  std::vector<State> remembered_;
};

}  // namespace hpd::unwind_detail
