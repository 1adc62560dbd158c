// EhFrameRows: .eh_frame's CIEs and FDEs parsed here, each FDE's instructions run once (see the header).
#include "eh_frame_rows.h"

#include <dwarf.h>

#include "hpd/base/dwarf_bytes.h"

namespace hpd::unwind_detail {

namespace {

constexpr uint8_t kPeOmit = 0xff;
constexpr uint8_t kPeIndirect = 0x80;
constexpr uint8_t kPeApplication = 0x70;
constexpr uint8_t kPeFormat = 0x0f;
// Register numbers beyond the 17 the rows use are read and ignored; beyond this one, the FDE is not
// what a compiler writes for x86-64.
constexpr uint64_t kMaxRegister = 128;

// An operand times a factor (the CIE's data alignment), wrapping as two's complement does rather than
// overflowing: damaged CFI may hold any number.
int64_t scaled(uint64_t operand, int64_t factor) {
  return static_cast<int64_t>(operand * static_cast<uint64_t>(factor));
}

}  // namespace

// Bounded little-endian reads over [pos, end) of the section; every read fails once past the end.
class EhFrameRows::Reader {
 public:
  Reader(std::span<const uint8_t> bytes, size_t pos, size_t end) : bytes_(bytes), pos_(pos), end_(end) {}
  size_t pos() const { return pos_; }
  size_t end() const { return end_; }
  bool at_end() const { return pos_ >= end_; }
  void seek(size_t pos) { pos_ = pos; }

  bool fixed(unsigned size, uint64_t* value) {
    return at(
        [&](const uint8_t*& p, const uint8_t* end) { return dwarf_bytes::read_fixed(p, end, size, *value); });
  }
  bool signed_fixed(unsigned size, int64_t* value) {
    uint64_t v = 0;
    if (!fixed(size, &v)) return false;
    const unsigned shift = 64 - 8 * size;
    *value = shift == 0 ? static_cast<int64_t>(v) : static_cast<int64_t>(v << shift) >> shift;
    return true;
  }
  bool u8(uint8_t* value) {
    uint64_t v = 0;
    if (!fixed(1, &v)) return false;
    *value = static_cast<uint8_t>(v);
    return true;
  }
  bool uleb(uint64_t* value) {
    return at([&](const uint8_t*& p, const uint8_t* end) { return dwarf_bytes::read_uleb(p, end, *value); });
  }
  bool sleb(int64_t* value) {
    return at([&](const uint8_t*& p, const uint8_t* end) { return dwarf_bytes::read_sleb(p, end, *value); });
  }
  // A pointer in `encoding` (DW_EH_PE_*): absolute, or relative to its own address (`section_vaddr` +
  // its offset). False for the encodings .eh_frame on x86-64 does not use (datarel, textrel, funcrel,
  // aligned, indirect).
  bool pointer(uint8_t encoding, uint64_t section_vaddr, uint64_t* value) {
    if (encoding == kPeOmit || (encoding & kPeIndirect) != 0) return false;
    const uint64_t field = section_vaddr + pos_;
    uint64_t v = 0;
    int64_t s = 0;
    bool ok = false;
    switch (encoding & kPeFormat) {
      case DW_EH_PE_absptr:
      case DW_EH_PE_udata8:
      case DW_EH_PE_sdata8: ok = fixed(8, &v); break;
      case DW_EH_PE_uleb128: ok = uleb(&v); break;
      case DW_EH_PE_udata2: ok = fixed(2, &v); break;
      case DW_EH_PE_udata4: ok = fixed(4, &v); break;
      case DW_EH_PE_sleb128:
        ok = sleb(&s);
        v = static_cast<uint64_t>(s);
        break;
      case DW_EH_PE_sdata2:
        ok = signed_fixed(2, &s);
        v = static_cast<uint64_t>(s);
        break;
      case DW_EH_PE_sdata4:
        ok = signed_fixed(4, &s);
        v = static_cast<uint64_t>(s);
        break;
      default: return false;
    }
    if (!ok) return false;
    switch (encoding & kPeApplication) {
      case DW_EH_PE_absptr: *value = v; return true;
      case DW_EH_PE_pcrel: *value = field + v; return true;
      default: return false;
    }
  }
  // One of dwarf_bytes' reads (hpd/base/dwarf_bytes.h) at pos_, which moves past what it read.
  template <typename Read>
  bool at(Read&& read) {
    if (pos_ > end_) return false;
    const uint8_t* p = bytes_.data() + pos_;
    const bool ok = read(p, bytes_.data() + end_);
    pos_ = static_cast<size_t>(p - bytes_.data());
    return ok;
  }
  bool block(std::span<const uint8_t>* out) {
    uint64_t length = 0;
    if (!uleb(&length) || length > end_ - pos_) return false;
    *out = bytes_.subspan(pos_, length);
    pos_ += length;
    return true;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_, end_;
};

const EhFrameRows::Cie* EhFrameRows::cie_at(size_t offset, std::string* why) {
  if (const auto it = cies_.find(offset); it != cies_.end()) return &it->second;
  Reader r(section_, offset, section_.size());
  uint64_t length = 0;
  uint64_t id = 0;
  if (!r.fixed(4, &length) || length == 0 || length == 0xffffffff || length > r.end() - r.pos()) {
    *why = "a CIE's length (64-bit, empty or past the section)";
    return nullptr;
  }
  r = Reader(section_, r.pos(), r.pos() + length);
  uint8_t version = 0;
  if (!r.fixed(4, &id) || id != 0 || !r.u8(&version) || (version != 1 && version != 3 && version != 4)) {
    *why = "a CIE's id or version";
    return nullptr;
  }
  std::string augmentation;
  for (uint8_t c = 0; r.u8(&c) && c != 0;) augmentation += static_cast<char>(c);
  Cie cie;
  uint64_t ra = 0;
  if (version == 4) {
    uint8_t address_size = 0;
    uint8_t segment_size = 0;
    if (!r.u8(&address_size) || !r.u8(&segment_size) || address_size != 8 || segment_size != 0) {
      *why = "a CIE's address or segment size";
      return nullptr;
    }
  }
  uint8_t ra8 = 0;
  if (!r.uleb(&cie.code_align) || !r.sleb(&cie.data_align) ||
      !(version == 1 ? r.u8(&ra8) && ((ra = ra8), true) : r.uleb(&ra))) {
    *why = "a truncated CIE";
    return nullptr;
  }
  if (ra != kRaReg) {
    *why = "a CIE whose return address is in register " + std::to_string(ra);
    return nullptr;
  }
  if (!augmentation.empty()) {
    uint64_t data_length = 0;
    if (augmentation[0] != 'z' || !r.uleb(&data_length) || data_length > r.end() - r.pos()) {
      *why = "CIE augmentation \"" + augmentation + "\"";
      return nullptr;
    }
    cie.augmented = true;
    const size_t data_end = r.pos() + data_length;
    for (size_t i = 1; i < augmentation.size(); ++i) {
      uint8_t encoding = 0;
      uint64_t ignored = 0;
      bool ok = true;
      switch (augmentation[i]) {
        case 'R': ok = r.u8(&cie.fde_encoding); break;
        case 'L': ok = r.u8(&encoding); break;
        case 'P':
          // The personality routine's address: its encoding may be indirect (a GOT slot), never read.
          ok = r.u8(&encoding) && r.pointer(static_cast<uint8_t>(encoding & ~kPeIndirect), vaddr_, &ignored);
          break;
        case 'S': cie.signal = true; break;
        default: ok = false;
      }
      if (!ok) {
        *why = "CIE augmentation \"" + augmentation + "\"";
        return nullptr;
      }
    }
    r.seek(data_end);
  }
  // The ABI's defaults first, as libdw plays them out before every CIE (elfutils' x86_64_abi_cfi): the
  // call-saved registers keep their values (libdw's list names 0, 6, 12-16) and rsp is the CFA.
  for (const unsigned reg : {0u, 6u, 12u, 13u, 14u, 15u, 16u}) cie.initial.regs[reg].rule = Rule::kSameValue;
  cie.initial.regs[kSpReg] = {Rule::kValOffset, 0, {}};
  uint64_t loc = 0;
  if (!run(section_.subspan(r.pos(), r.end() - r.pos()), cie, true, 0, &cie.initial, &loc, 0, nullptr, why))
    return nullptr;
  return &cies_.emplace(offset, std::move(cie)).first->second;
}

bool EhFrameRows::parse_fde(uint64_t fde, Fde* out, std::string* why) {
  if (fde < vaddr_ || fde - vaddr_ >= section_.size()) {
    *why = "an FDE outside .eh_frame";
    return false;
  }
  const size_t offset = fde - vaddr_;
  Reader r(section_, offset, section_.size());
  uint64_t length = 0;
  if (!r.fixed(4, &length) || length == 0 || length == 0xffffffff || length > r.end() - r.pos()) {
    *why = "an FDE's length (64-bit, empty or past the section)";
    return false;
  }
  r = Reader(section_, r.pos(), r.pos() + length);
  const size_t pointer_at = r.pos();
  uint64_t cie_pointer = 0;
  if (!r.fixed(4, &cie_pointer) || cie_pointer == 0 || cie_pointer > pointer_at) {
    *why = "an FDE's CIE pointer";
    return false;
  }
  out->cie = cie_at(pointer_at - cie_pointer, why);
  if (out->cie == nullptr) return false;
  if (!r.pointer(out->cie->fde_encoding, vaddr_, &out->pc_begin) ||
      !r.pointer(out->cie->fde_encoding & kPeFormat, vaddr_, &out->pc_range)) {
    *why = "FDE address encoding " + std::to_string(out->cie->fde_encoding);
    return false;
  }
  if (out->cie->augmented) {
    std::span<const uint8_t> data;
    if (!r.block(&data)) {
      *why = "an FDE's augmentation data";
      return false;
    }
  }
  out->program = section_.subspan(r.pos(), r.end() - r.pos());
  out->program_vaddr = vaddr_ + r.pos();
  return true;
}

bool EhFrameRows::fde_start(uint64_t fde, uint64_t* start, std::string* why) {
  Fde f;
  if (!parse_fde(fde, &f, why)) return false;
  *start = f.pc_begin;
  return true;
}

bool EhFrameRows::all_fdes(std::vector<CfiModule::FdeRange>* out, std::string* why) {
  size_t offset = 0;
  while (section_.size() - offset >= 4) {
    Reader r(section_, offset, section_.size());
    uint64_t length = 0;
    uint64_t id = 0;
    r.fixed(4, &length);
    if (length == 0) return true;  // the terminator (crtend.o's)
    if (length == 0xffffffff || length < 4 || length > r.end() - r.pos() || !r.fixed(4, &id)) {
      *why =
          "an entry's length (64-bit, too short or past the section) at .eh_frame+" + std::to_string(offset);
      return false;
    }
    const uint64_t at = vaddr_ + offset;
    offset += 4 + length;
    if (id == 0) continue;  // a CIE
    Fde f;
    if (!parse_fde(at, &f, why)) return false;
    if (f.pc_range == 0 || f.pc_begin == 0 || f.pc_begin + f.pc_range < f.pc_begin) continue;
    out->push_back({f.pc_begin, f.pc_begin + f.pc_range, at});
  }
  return true;
}

bool EhFrameRows::rows(uint64_t fde, uint64_t start, std::vector<FrameRule>* rows, std::string* why) {
  Fde f;
  if (!parse_fde(fde, &f, why)) return false;
  if (f.pc_begin != start) {
    *why = "an FDE whose start is not the one .eh_frame_hdr lists";
    return false;
  }
  State state = f.cie->initial;
  remembered_.clear();
  uint64_t loc = f.pc_begin;
  return run(f.program, *f.cie, false, f.program_vaddr, &state, &loc, f.pc_begin + f.pc_range, rows, why);
}

bool EhFrameRows::run(std::span<const uint8_t> program, const Cie& cie, bool initial, uint64_t program_vaddr,
                      State* state, uint64_t* loc, uint64_t end, std::vector<FrameRule>* rows,
                      std::string* why) {
  // The program as a reader of its own: pointers (DW_CFA_set_loc) are relative to program_vaddr.
  Reader r(program, 0, program.size());
  const uint64_t base = program_vaddr;
  auto fail = [why](const char* what) {
    *why = what;
    return false;
  };
  // A move to `to`: the row so far ends there. A row that begins at or past the FDE's end is beyond
  // any pc it covers: nothing more to read.
  bool past_end = false;
  auto advance = [&](uint64_t to) {
    if (initial) return fail("an advance in a CIE's initial instructions");
    if (to < *loc) return fail("DW_CFA_set_loc backwards");
    if (to == *loc) return true;
    if (*loc < end && !emit(*state, cie, *loc, to, rows, why)) return false;
    *loc = to;
    past_end = to >= end;
    return true;
  };
  // Registers beyond the 17 the rows use are checked and ignored.
  auto set = [&](uint64_t reg, Rule rule, int64_t value) {
    if (reg >= kMaxRegister) return fail("a register number beyond x86-64's");
    if (reg < kRegCount) state->regs[reg] = Reg{rule, value, {}};
    return true;
  };
  auto restore = [&](uint64_t reg) {
    if (initial) return fail("DW_CFA_restore in a CIE");
    if (reg >= kMaxRegister) return fail("a register number beyond x86-64's");
    if (reg < kRegCount) state->regs[reg] = cie.initial.regs[reg];
    return true;
  };
  auto set_cfa = [&](uint64_t reg, int64_t offset) {
    state->cfa_set = true;
    state->cfa_is_expr = false;
    state->cfa_reg = reg;
    state->cfa_offset = offset;
    return true;
  };
  // DW_CFA_def_cfa_register and _offset change a register-based CFA: after an expression (hand-written
  // assembly does this, libgcrypt's), libdw refuses the rule for every pc from there on, so the FDE's
  // rows end at the row that holds the instruction.
  bool refused = false;
  auto cfa_offset_rule = [&] {
    if (!state->cfa_set) return fail("a CFA offset or register before any CFA");
    if (!state->cfa_is_expr) return true;
    if (initial) return fail("a CFA offset or register after a CFA expression in a CIE");
    refused = true;
    return true;
  };
  while (!r.at_end() && !past_end && !refused) {
    uint8_t op = 0;
    r.u8(&op);
    uint64_t a = 0;
    uint64_t b = 0;
    int64_t s = 0;
    std::span<const uint8_t> block;
    bool ok = true;
    switch (op & 0xc0) {
      case DW_CFA_advance_loc: ok = advance(*loc + (op & 0x3f) * cie.code_align); break;
      case DW_CFA_offset: ok = r.uleb(&a) && set(op & 0x3f, Rule::kOffset, scaled(a, cie.data_align)); break;
      case DW_CFA_restore: ok = restore(op & 0x3f); break;
      default:
        switch (op) {
          case DW_CFA_nop: break;
          case DW_CFA_set_loc: ok = r.pointer(cie.fde_encoding, base, &a) && advance(a); break;
          case DW_CFA_advance_loc1: ok = r.fixed(1, &a) && advance(*loc + a * cie.code_align); break;
          case DW_CFA_advance_loc2: ok = r.fixed(2, &a) && advance(*loc + a * cie.code_align); break;
          case DW_CFA_advance_loc4: ok = r.fixed(4, &a) && advance(*loc + a * cie.code_align); break;
          case DW_CFA_offset_extended:
            ok = r.uleb(&a) && r.uleb(&b) && set(a, Rule::kOffset, scaled(b, cie.data_align));
            break;
          case DW_CFA_restore_extended: ok = r.uleb(&a) && restore(a); break;
          case DW_CFA_undefined: ok = r.uleb(&a) && set(a, Rule::kUndefined, 0); break;
          case DW_CFA_same_value: ok = r.uleb(&a) && set(a, Rule::kSameValue, 0); break;
          case DW_CFA_register:
            ok = r.uleb(&a) && r.uleb(&b) && set(a, Rule::kRegister, static_cast<int64_t>(b));
            break;
          case DW_CFA_remember_state: remembered_.push_back(*state); break;
          case DW_CFA_restore_state:
            if (remembered_.empty()) return fail("DW_CFA_restore_state without a remembered state");
            *state = remembered_.back();
            remembered_.pop_back();
            break;
          case DW_CFA_def_cfa: ok = r.uleb(&a) && r.uleb(&b) && set_cfa(a, static_cast<int64_t>(b)); break;
          case DW_CFA_def_cfa_sf:
            ok = r.uleb(&a) && r.sleb(&s) && set_cfa(a, scaled(static_cast<uint64_t>(s), cie.data_align));
            break;
          case DW_CFA_def_cfa_register:
            ok = cfa_offset_rule() && r.uleb(&a);
            state->cfa_reg = a;
            break;
          case DW_CFA_def_cfa_offset:
            ok = cfa_offset_rule() && r.uleb(&a);
            state->cfa_offset = static_cast<int64_t>(a);
            break;
          case DW_CFA_def_cfa_offset_sf:
            ok = cfa_offset_rule() && r.sleb(&s);
            state->cfa_offset = scaled(static_cast<uint64_t>(s), cie.data_align);
            break;
          case DW_CFA_def_cfa_expression:
            ok = r.block(&block);
            state->cfa_set = true;
            state->cfa_is_expr = true;
            state->cfa_block = block;
            break;
          case DW_CFA_expression:
          case DW_CFA_val_expression:
            ok = r.uleb(&a) && r.block(&block) &&
                 set(a, op == DW_CFA_expression ? Rule::kExpression : Rule::kValExpression, 0);
            if (ok && a < kRegCount) state->regs[a].block = block;
            break;
          case DW_CFA_offset_extended_sf:
            ok = r.uleb(&a) && r.sleb(&s) &&
                 set(a, Rule::kOffset, scaled(static_cast<uint64_t>(s), cie.data_align));
            break;
          case DW_CFA_val_offset:
            ok = r.uleb(&a) && r.uleb(&b) && set(a, Rule::kValOffset, scaled(b, cie.data_align));
            break;
          case DW_CFA_val_offset_sf:
            ok = r.uleb(&a) && r.sleb(&s) &&
                 set(a, Rule::kValOffset, scaled(static_cast<uint64_t>(s), cie.data_align));
            break;
          case DW_CFA_GNU_args_size: ok = r.uleb(&a); break;
          case DW_CFA_GNU_negative_offset_extended:
            ok = r.uleb(&a) && r.uleb(&b) && set(a, Rule::kOffset, scaled(0 - b, cie.data_align));
            break;
          default: *why = "CFA instruction " + std::to_string(op); return false;
        }
    }
    if (!ok) {
      if (why->empty()) *why = "a truncated CFA instruction";
      return false;
    }
  }
  if (!initial && !past_end && !refused && *loc < end && !emit(*state, cie, *loc, end, rows, why))
    return false;
  return true;
}

bool EhFrameRows::emit(const State& state, const Cie& cie, uint64_t start, uint64_t end,
                       std::vector<FrameRule>* rows, std::string* why) {
  FrameRule& rule = rows->emplace_back();
  rule.signal_frame = cie.signal;
  rule.row_start = start;
  rule.row_end = end;
  // The operations libdw gives for each rule (dwarf_frame_cfa, dwarf_frame_register), turned into rules
  // by the code that turns libdw's own (cfa_rule_of, reg_rule_of). Those without an expression are built
  // in `fixed` (three at most), expressions decoded into scratch_.
  if (!state.cfa_set) {
    *why = "a row without a CFA";
    return false;
  }
  ExprOp fixed[3];
  std::span<const ExprOp> ops(fixed, 1);
  if (state.cfa_is_expr) {
    scratch_.clear();
    if (!decode_expression(state.cfa_block, &scratch_, why)) return false;
    ops = scratch_;
  } else {
    fixed[0] = {DW_OP_bregx, state.cfa_reg, static_cast<uint64_t>(state.cfa_offset)};
  }
  if (!cfa_rule_of(ops, &ops_, &rule.cfa)) {
    *why = "a CFA rule libdw does not give";
    return false;
  }
  // Only the registers the rows use; the others stay undefined in these rules.
  for (const unsigned reg : {kBpReg, kRaReg}) {
    const Reg& in = state.regs[reg];
    size_t n = 0;
    ops = {};
    switch (in.rule) {
      case Rule::kUnspecified:  // libdw: undefined (x86-64 has no default of "same value")
      case Rule::kUndefined:
      case Rule::kSameValue: break;
      case Rule::kOffset:
      case Rule::kValOffset:
        fixed[n++] = {DW_OP_call_frame_cfa, 0, 0};
        if (in.value != 0) fixed[n++] = {DW_OP_plus_uconst, static_cast<uint64_t>(in.value), 0};
        if (in.rule == Rule::kValOffset) fixed[n++] = {DW_OP_stack_value, 0, 0};
        ops = {fixed, n};
        break;
      case Rule::kRegister:
        fixed[0] = {DW_OP_regx, static_cast<uint64_t>(in.value), 0};
        ops = {fixed, 1};
        break;
      case Rule::kExpression:
      case Rule::kValExpression:
        scratch_.clear();
        scratch_.push_back({DW_OP_call_frame_cfa, 0, 0});
        if (!decode_expression(in.block, &scratch_, why)) return false;
        if (in.rule == Rule::kValExpression) scratch_.push_back({DW_OP_stack_value, 0, 0});
        ops = scratch_;
        break;
    }
    reg_rule_of(ops, in.rule == Rule::kSameValue, &ops_, &rule.regs[reg]);
  }
  return true;
}

bool EhFrameRows::decode_expression(std::span<const uint8_t> block, std::vector<ExprOp>* out,
                                    std::string* why) const {
  Reader r(block, 0, block.size());
  if (block.empty()) {
    *why = "an empty DWARF expression";
    return false;
  }
  while (!r.at_end()) {
    uint8_t atom = 0;
    r.u8(&atom);
    ExprOp op{atom, 0, 0};
    int64_t s = 0;
    bool ok = true;
    if ((atom >= DW_OP_lit0 && atom <= DW_OP_lit31) || (atom >= DW_OP_reg0 && atom <= DW_OP_reg31)) {
      // no operand
    } else if (atom >= DW_OP_breg0 && atom <= DW_OP_breg31) {
      ok = r.sleb(&s);
      op.number = static_cast<uint64_t>(s);
    } else {
      switch (atom) {
        case DW_OP_deref:
        case DW_OP_dup:
        case DW_OP_drop:
        case DW_OP_over:
        case DW_OP_swap:
        case DW_OP_rot:
        case DW_OP_abs:
        case DW_OP_and:
        case DW_OP_div:
        case DW_OP_minus:
        case DW_OP_mod:
        case DW_OP_mul:
        case DW_OP_neg:
        case DW_OP_not:
        case DW_OP_or:
        case DW_OP_plus:
        case DW_OP_shl:
        case DW_OP_shr:
        case DW_OP_shra:
        case DW_OP_xor:
        case DW_OP_eq:
        case DW_OP_ge:
        case DW_OP_gt:
        case DW_OP_le:
        case DW_OP_lt:
        case DW_OP_ne:
        case DW_OP_nop:
        case DW_OP_call_frame_cfa:
        case DW_OP_stack_value: break;
        case DW_OP_addr:
        case DW_OP_const8u: ok = r.fixed(8, &op.number); break;
        case DW_OP_const1u:
        case DW_OP_pick:
        case DW_OP_deref_size: ok = r.fixed(1, &op.number); break;
        case DW_OP_const2u: ok = r.fixed(2, &op.number); break;
        case DW_OP_const4u: ok = r.fixed(4, &op.number); break;
        case DW_OP_const1s:
        case DW_OP_const2s:
        case DW_OP_const4s:
        case DW_OP_const8s:
          ok = r.signed_fixed(atom == DW_OP_const1s   ? 1
                              : atom == DW_OP_const2s ? 2
                              : atom == DW_OP_const4s ? 4
                                                      : 8,
                              &s);
          op.number = static_cast<uint64_t>(s);
          break;
        case DW_OP_constu:
        case DW_OP_plus_uconst:
        case DW_OP_regx: ok = r.uleb(&op.number); break;
        case DW_OP_consts:
          ok = r.sleb(&s);
          op.number = static_cast<uint64_t>(s);
          break;
        case DW_OP_bregx:
          ok = r.uleb(&op.number) && r.sleb(&s);
          op.number2 = static_cast<uint64_t>(s);
          break;
        default: *why = "DWARF operation " + std::to_string(atom) + " in a CFI expression"; return false;
      }
    }
    if (!ok) {
      *why = "a truncated CFI expression";
      return false;
    }
    out->push_back(op);
  }
  return true;
}

}  // namespace hpd::unwind_detail
