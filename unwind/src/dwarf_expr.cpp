// DWARF expression evaluation for CFI rules.
#include "dwarf_expr.h"

#include <dwarf.h>

#include <array>

namespace hpd::unwind_detail {

namespace {

constexpr size_t kMaxStack = 64;
constexpr size_t kMaxSteps = 256;  // DW_OP_skip/bra are refused, so this only bounds long inputs
constexpr unsigned kRegs = 17;

class Stack {
 public:
  bool push(uint64_t v) {
    if (size_ == kMaxStack) return false;
    items_[size_++] = v;
    return true;
  }
  bool pop(uint64_t* v) {
    if (size_ == 0) return false;
    *v = items_[--size_];
    return true;
  }
  bool peek(size_t depth, uint64_t* v) const {
    if (depth >= size_) return false;
    *v = items_[size_ - 1 - depth];
    return true;
  }
  bool poke(size_t depth, uint64_t v) {
    if (depth >= size_) return false;
    items_[size_ - 1 - depth] = v;
    return true;
  }
  size_t size() const { return size_; }

 private:
  std::array<uint64_t, kMaxStack> items_{};
  size_t size_ = 0;
};

bool reg_value(const ExprEnv& env, uint64_t reg, uint64_t* v) {
  if (reg >= kRegs || ((env.valid >> reg) & 1) == 0) return false;
  *v = env.regs[reg];
  return true;
}

// Binary operations: pops b then a, pushes a OP b. False for a bad operation (division by zero).
bool binary(uint8_t atom, uint64_t a, uint64_t b, uint64_t* r) {
  const auto sa = static_cast<int64_t>(a);
  const auto sb = static_cast<int64_t>(b);
  switch (atom) {
    case DW_OP_and: *r = a & b; return true;
    case DW_OP_or: *r = a | b; return true;
    case DW_OP_xor: *r = a ^ b; return true;
    case DW_OP_plus: *r = a + b; return true;
    case DW_OP_minus: *r = a - b; return true;
    case DW_OP_mul: *r = a * b; return true;
    case DW_OP_div:
      if (b == 0 || (sa == INT64_MIN && sb == -1)) return false;
      *r = static_cast<uint64_t>(sa / sb);
      return true;
    case DW_OP_mod:
      if (b == 0) return false;
      *r = a % b;
      return true;
    case DW_OP_shl: *r = b >= 64 ? 0 : a << b; return true;
    case DW_OP_shr: *r = b >= 64 ? 0 : a >> b; return true;
    case DW_OP_shra: *r = static_cast<uint64_t>(b >= 64 ? (sa < 0 ? -1 : 0) : sa >> b); return true;
    case DW_OP_eq: *r = sa == sb; return true;
    case DW_OP_ne: *r = sa != sb; return true;
    case DW_OP_lt: *r = sa < sb; return true;
    case DW_OP_le: *r = sa <= sb; return true;
    case DW_OP_gt: *r = sa > sb; return true;
    case DW_OP_ge: *r = sa >= sb; return true;
    default: return false;
  }
}

}  // namespace

ReadStatus evaluate(std::span<const ExprOp> ops, const ExprEnv& env, bool push_cfa, uint64_t* result) {
  Stack stack;
  if (push_cfa) {
    if (!env.have_cfa) return ReadStatus::kBadExpr;
    stack.push(env.cfa);
  }
  if (ops.size() > kMaxSteps) return ReadStatus::kBadExpr;
  for (size_t i = 0; i < ops.size(); ++i) {
    const ExprOp& op = ops[i];
    const uint8_t a = op.atom;
    uint64_t x = 0;
    uint64_t y = 0;
    if (a >= DW_OP_lit0 && a <= DW_OP_lit31) {
      if (!stack.push(a - DW_OP_lit0)) return ReadStatus::kBadExpr;
      continue;
    }
    if (a >= DW_OP_breg0 && a <= DW_OP_breg31) {
      if (!reg_value(env, a - DW_OP_breg0, &x) || !stack.push(x + op.number)) return ReadStatus::kBadExpr;
      continue;
    }
    if (a >= DW_OP_reg0 && a <= DW_OP_reg31) {
      // A register location: only meaningful as the whole expression (the register's value).
      if (!reg_value(env, a - DW_OP_reg0, &x) || !stack.push(x)) return ReadStatus::kBadExpr;
      continue;
    }
    switch (a) {
      case DW_OP_nop: break;
      case DW_OP_stack_value:
        if (i + 1 != ops.size()) return ReadStatus::kBadExpr;
        break;
      case DW_OP_regx:
        if (!reg_value(env, op.number, &x) || !stack.push(x)) return ReadStatus::kBadExpr;
        break;
      case DW_OP_bregx:
        if (!reg_value(env, op.number, &x) || !stack.push(x + op.number2)) return ReadStatus::kBadExpr;
        break;
      case DW_OP_call_frame_cfa:
        if (!env.have_cfa || !stack.push(env.cfa)) return ReadStatus::kBadExpr;
        break;
      case DW_OP_addr:
      case DW_OP_const1u:
      case DW_OP_const1s:
      case DW_OP_const2u:
      case DW_OP_const2s:
      case DW_OP_const4u:
      case DW_OP_const4s:
      case DW_OP_const8u:
      case DW_OP_const8s:
      case DW_OP_constu:
      case DW_OP_consts:
        // libdw has already sign-extended the signed forms into `number`.
        if (!stack.push(op.number)) return ReadStatus::kBadExpr;
        break;
      case DW_OP_dup:
        if (!stack.peek(0, &x) || !stack.push(x)) return ReadStatus::kBadExpr;
        break;
      case DW_OP_drop:
        if (!stack.pop(&x)) return ReadStatus::kBadExpr;
        break;
      case DW_OP_over:
        if (!stack.peek(1, &x) || !stack.push(x)) return ReadStatus::kBadExpr;
        break;
      case DW_OP_pick:
        if (!stack.peek(op.number, &x) || !stack.push(x)) return ReadStatus::kBadExpr;
        break;
      case DW_OP_swap:
        if (!stack.peek(0, &x) || !stack.peek(1, &y)) return ReadStatus::kBadExpr;
        stack.poke(0, y);
        stack.poke(1, x);
        break;
      case DW_OP_rot: {
        uint64_t z = 0;
        if (!stack.peek(0, &x) || !stack.peek(1, &y) || !stack.peek(2, &z)) return ReadStatus::kBadExpr;
        stack.poke(0, y);
        stack.poke(1, z);
        stack.poke(2, x);
        break;
      }
      case DW_OP_abs:
        if (!stack.pop(&x)) return ReadStatus::kBadExpr;
        stack.push(static_cast<int64_t>(x) < 0 ? 0 - x : x);
        break;
      case DW_OP_neg:
        if (!stack.pop(&x)) return ReadStatus::kBadExpr;
        stack.push(0 - x);
        break;
      case DW_OP_not:
        if (!stack.pop(&x)) return ReadStatus::kBadExpr;
        stack.push(~x);
        break;
      case DW_OP_plus_uconst:
        if (!stack.pop(&x)) return ReadStatus::kBadExpr;
        stack.push(x + op.number);
        break;
      case DW_OP_deref:
      case DW_OP_deref_size: {
        const uint64_t size = a == DW_OP_deref ? 8 : op.number;
        if (size == 0 || size > 8 || !stack.pop(&x) || env.read == nullptr) return ReadStatus::kBadExpr;
        const ReadStatus s = env.read(env.read_context, x, static_cast<unsigned>(size), &y);
        if (s != ReadStatus::kOk) return s;
        stack.push(y);
        break;
      }
      case DW_OP_and:
      case DW_OP_or:
      case DW_OP_xor:
      case DW_OP_plus:
      case DW_OP_minus:
      case DW_OP_mul:
      case DW_OP_div:
      case DW_OP_mod:
      case DW_OP_shl:
      case DW_OP_shr:
      case DW_OP_shra:
      case DW_OP_eq:
      case DW_OP_ne:
      case DW_OP_lt:
      case DW_OP_le:
      case DW_OP_gt:
      case DW_OP_ge: {
        uint64_t r = 0;
        if (!stack.pop(&y) || !stack.pop(&x) || !binary(a, x, y, &r)) return ReadStatus::kBadExpr;
        stack.push(r);
        break;
      }
      default:
        // DW_OP_skip/bra (libdw's branch encoding is not worth trusting here), piece, calls, TLS...:
        // not seen in CFI of compiled code; the rule is refused rather than guessed.
        return ReadStatus::kBadExpr;
    }
  }
  if (!stack.pop(result)) return ReadStatus::kBadExpr;
  return ReadStatus::kOk;
}

}  // namespace hpd::unwind_detail
