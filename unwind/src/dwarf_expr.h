// A small DWARF expression evaluator for CFI rules (DW_CFA_def_cfa_expression, DW_CFA_expression,
// DW_CFA_val_expression): the operations compilers and glibc emit there, bounded and side-effect free.
#pragma once

#include <cstdint>
#include <span>

namespace hpd::unwind_detail {

// One operation, as libdw decodes it (Dwarf_Op without the byte offset).
struct ExprOp {
  uint8_t atom = 0;
  uint64_t number = 0;
  uint64_t number2 = 0;
};

// Why an evaluation or a memory read did not give a value.
enum class ReadStatus : uint8_t {
  kOk = 0,
  kBeyondCopy,  // the address lies above the end of the stack copy (the copy was too small)
  kOutside,     // below the copy, or not stack memory at all
  kBadExpr,     // unsupported operation, stack underflow/overflow, division by zero, missing register
};

// Reads `size` (1..8) little-endian bytes at an address (from the stack copy).
using MemoryReader = ReadStatus (*)(const void* context, uint64_t address, unsigned size, uint64_t* value);

struct ExprEnv {
  const uint64_t* regs = nullptr;  // by DWARF register number, kRegs entries
  uint32_t valid = 0;              // bit N: regs[N] is known
  uint64_t cfa = 0;
  bool have_cfa = false;
  MemoryReader read = nullptr;
  const void* read_context = nullptr;
};

// Evaluates `ops`; when `push_cfa` is set the CFA is pushed first (DW_CFA_expression semantics).
// The result is the top of the stack; a trailing DW_OP_stack_value is accepted and ignored (the
// caller decides between value and location).
ReadStatus evaluate(std::span<const ExprOp> ops, const ExprEnv& env, bool push_cfa, uint64_t* result);

}  // namespace hpd::unwind_detail
