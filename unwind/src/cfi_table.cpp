// The CFI table compiler: every FDE's rows (.eh_frame's read by EhFrameRows, through libdw when it cannot;
// .debug_frame's through libdw, CfiModule), classified into the few rule forms the eBPF walker evaluates,
// sorted, gaps marked, identical neighbours merged.
#include "hpd/unwind/cfi_table.h"

#include <dwarf.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "cfi_module.h"
#include "eh_frame_rows.h"

namespace hpd {

using unwind_detail::CfiModule;
using unwind_detail::EhFrameRows;
using unwind_detail::ExprOp;
using unwind_detail::FrameRule;
using unwind_detail::kBpReg;
using unwind_detail::kRaReg;
using unwind_detail::kRdiReg;
using unwind_detail::kSpReg;
using unwind_detail::RuleKind;

namespace {

constexpr uint8_t kOpBreg7 = DW_OP_breg0 + 7;
constexpr uint8_t kOpBreg6 = DW_OP_breg0 + 6;
constexpr uint8_t kOpBreg16 = DW_OP_breg0 + 16;

bool is_breg_of(const ExprOp& op, uint8_t breg_atom, unsigned regno) {
  return op.atom == breg_atom || (op.atom == DW_OP_bregx && op.number == regno);
}
int64_t breg_offset(const ExprOp& op) {
  return static_cast<int64_t>(op.atom == DW_OP_bregx ? op.number2 : op.number);
}

// The PLT's CFA (GNU ld's lazy-binding PLT: each 16-byte entry pushes once, after its first 11 or 10
// bytes): DW_OP_breg7 (rsp) K; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and; DW_OP_litN; DW_OP_ge;
// DW_OP_lit3; DW_OP_shl; DW_OP_plus. Gives K and N.
bool match_plt(std::span<const ExprOp> ops, int64_t* offset, int64_t* threshold) {
  if (ops.size() != 9) return false;
  if (!is_breg_of(ops[0], kOpBreg7, 7) || !is_breg_of(ops[1], kOpBreg16, 16) || breg_offset(ops[1]) != 0)
    return false;
  if (ops[2].atom != DW_OP_lit15 || ops[3].atom != DW_OP_and || ops[4].atom < DW_OP_lit0 ||
      ops[4].atom > DW_OP_lit15 || ops[5].atom != DW_OP_ge || ops[6].atom != DW_OP_lit3 ||
      ops[7].atom != DW_OP_shl || ops[8].atom != DW_OP_plus)
    return false;
  *offset = breg_offset(ops[0]);
  *threshold = ops[4].atom - DW_OP_lit0;
  return true;
}

// A register saved at rsp + K in the signal frame: DW_CFA_expression with DW_OP_breg7 K.
// `store`: the operations the rules' expressions index (CfiModule::all_ops, EhFrameRows::ops).
bool is_sigframe_slot(const unwind_detail::RegRule& r, std::span<const ExprOp> store, int64_t k) {
  if (r.kind != RuleKind::kExpression) return false;
  auto ops = store.subspan(r.expr_begin, r.expr_len);
  // libdw puts the CFA push of DW_CFA_expression in front; the breg replaces it as the result.
  if (!ops.empty() && ops[0].atom == DW_OP_call_frame_cfa) ops = ops.subspan(1);
  return ops.size() == 1 && is_breg_of(ops[0], kOpBreg7, 7) && breg_offset(ops[0]) == k;
}

// glibc's __restore_rt: CFA = *(rsp + 160), rip and rbp read from their slots of the ucontext.
bool match_signal(const FrameRule& rule, std::span<const ExprOp> store) {
  if (!rule.cfa.is_expr) return false;
  const auto ops = store.subspan(rule.cfa.expr_begin, rule.cfa.expr_len);
  return ops.size() == 2 && is_breg_of(ops[0], kOpBreg7, 7) && breg_offset(ops[0]) == kSigframeRsp &&
         ops[1].atom == DW_OP_deref && is_sigframe_slot(rule.regs[kRaReg], store, kSigframeRip) &&
         is_sigframe_slot(rule.regs[kBpReg], store, kSigframeRbp);
}

bool fits16(int64_t v) {
  return v >= INT16_MIN && v <= INT16_MAX;
}
bool fits32(int64_t v) {
  return v >= INT32_MIN && v <= INT32_MAX;
}

// One CFI row in compact form; `*unsupported` when the row's rule is beyond what the rows express.
CfiRow classify(const FrameRule& rule, std::span<const ExprOp> store) {
  CfiRow row;
  const auto& ra = rule.regs[kRaReg];
  if (ra.kind == RuleKind::kUndefined) {
    row.cfa_kind = static_cast<uint8_t>(CfaKind::kOutermost);
    return row;
  }
  if (match_signal(rule, store)) {
    row.cfa_kind = static_cast<uint8_t>(CfaKind::kSignal);
    return row;
  }
  row.cfa_kind = static_cast<uint8_t>(CfaKind::kUnsupported);
  // glibc's vfork: `pop %rdi` keeps the return address in rdi (DWARF register 5) across the system call.
  const bool ra_in_rdi = ra.kind == RuleKind::kRegister && ra.reg == kRdiReg && ra.offset == 0;
  if (ra_in_rdi) {
    if (rule.cfa.is_expr || rule.cfa.reg != kSpReg || !fits32(rule.cfa.offset)) return row;
    row.cfa_kind = static_cast<uint8_t>(CfaKind::kRspRaInRdi);
    row.cfa_offset = static_cast<int32_t>(rule.cfa.offset);
  } else if (ra.kind != RuleKind::kOffset || ra.offset != -8) {
    return row;
  } else if (!rule.cfa.is_expr) {
    if (!fits32(rule.cfa.offset)) return row;
    if (rule.cfa.reg == kSpReg)
      row.cfa_kind = static_cast<uint8_t>(CfaKind::kRsp);
    else if (rule.cfa.reg == kBpReg)
      row.cfa_kind = static_cast<uint8_t>(CfaKind::kRbp);
    else
      return row;
    row.cfa_offset = static_cast<int32_t>(rule.cfa.offset);
  } else {
    int64_t offset = 0;
    int64_t threshold = 0;
    if (!match_plt(store.subspan(rule.cfa.expr_begin, rule.cfa.expr_len), &offset, &threshold) ||
        !fits32(offset))
      return row;
    row.cfa_kind = static_cast<uint8_t>(CfaKind::kPlt);
    row.cfa_offset = static_cast<int32_t>(offset);
    row.rbp_offset = static_cast<int16_t>(threshold);
    // The PLT does not touch rbp.
    return row;
  }
  const auto& bp = rule.regs[kBpReg];
  if (bp.kind == RuleKind::kSameValue) {
    row.rbp_kind = static_cast<uint8_t>(RbpKind::kSame);
  } else if (bp.kind == RuleKind::kOffset && fits16(bp.offset)) {
    row.rbp_kind = static_cast<uint8_t>(RbpKind::kAtCfa);
    row.rbp_offset = static_cast<int16_t>(bp.offset);
  } else {
    // The caller's rbp is lost; the walk goes on while nothing needs it (an rbp-based CFA, or the
    // frame-pointer fallback, then stops).
    row.rbp_kind = static_cast<uint8_t>(RbpKind::kUndefined);
  }
  return row;
}

struct Interval {
  uint64_t start, end;
  CfiRow row;
};

// One row from `pc` (its rule's start) to its end or `limit`, counted; returns where it ends.
uint64_t add_row(const FrameRule& rule, std::span<const ExprOp> store, uint64_t pc, uint64_t limit,
                 CfiTable& table, std::vector<Interval>& out) {
  const CfiRow row = classify(rule, store);
  ++table.cfi_rows;
  if (row.cfa_kind == static_cast<uint8_t>(CfaKind::kUnsupported)) ++table.unsupported_rows;
  const uint64_t row_end = std::min<uint64_t>(rule.row_end, limit);
  out.push_back({pc, row_end, row});
  return row_end;
}

// Rows of one FDE range from `source` into `out`. `end` = 0: the FDE's own end (the last row's end).
void rows_of_range(CfiModule& m, bool debug_frame, uint64_t start, uint64_t end, uint64_t next_start,
                   CfiTable& table, std::vector<Interval>& out) {
  uint64_t pc = start;
  const uint64_t limit = end != 0 ? end : next_start;
  // A bound on rows per FDE, against a malformed one that never advances.
  for (int guard = 0; guard < 1 << 20 && pc < limit; ++guard) {
    FrameRule rule;
    if (!m.row_for_table(debug_frame, pc, &rule)) break;
    if (rule.row_end <= pc || rule.row_start > pc) break;
    pc = add_row(rule, m.all_ops(), pc, limit, table, out);
  }
}

// The rows of every .eh_frame FDE (`ranges`, sorted by start) read by EhFrameRows, as rows_of_range would
// give them from libdw: each FDE's rows up to the next FDE's start. False, with `*why`, when the section
// holds something EhFrameRows does not interpret (or two FDEs for one address, where libdw picks one):
// the caller then reads it through libdw.
bool eh_frame_rows(const CfiModule& m, const std::vector<CfiModule::FdeRange>& ranges, CfiTable& table,
                   std::vector<Interval>& out, std::string* why) {
  const CfiModule::Section section = m.eh_frame();
  if (section.bytes.empty()) {
    *why = "no .eh_frame";
    return false;
  }
  EhFrameRows reader(section.bytes, section.vaddr);
  std::vector<FrameRule> rows;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i > 0 && ranges[i].start == ranges[i - 1].start) {
      *why = "two FDEs for one address";
      return false;
    }
    const uint64_t limit = i + 1 < ranges.size() ? ranges[i + 1].start : UINT64_MAX;
    ++table.fdes;
    rows.clear();
    reader.clear_ops();
    if (!reader.rows(ranges[i].fde, ranges[i].start, &rows, why)) return false;
    uint64_t pc = ranges[i].start;
    for (const FrameRule& rule : rows) {
      if (pc >= limit || rule.row_start != pc) break;
      pc = add_row(rule, reader.ops(), pc, limit, table, out);
    }
  }
  return true;
}

}  // namespace

const CfiRow* CfiTable::find(uint64_t vaddr) const {
  if (vaddr > UINT32_MAX || rows.empty()) return nullptr;
  const auto it = std::upper_bound(rows.begin(), rows.end(), static_cast<uint32_t>(vaddr),
                                   [](uint32_t pc, const CfiRow& r) { return pc < r.pc; });
  if (it == rows.begin()) return nullptr;
  return &*(it - 1);
}

CfiBucket CfiIndex::bucket_of(uint64_t vaddr) const {
  if (buckets.empty() || vaddr < base) return CfiBucket{};
  const uint64_t b = std::min<uint64_t>((vaddr - base) >> shift, buckets.size() - 1);
  return buckets[b];
}

CfiIndex build_cfi_index(const std::vector<CfiRow>& rows) {
  CfiIndex index;
  if (rows.empty()) return index;
  index.base = rows.front().pc;
  const uint64_t span = uint64_t{rows.back().pc} - index.base + 1;
  const uint64_t max_buckets = std::max<uint64_t>(1, rows.size() / 4);
  index.shift = 4;
  while (index.shift < 32 && ((span - 1) >> index.shift) + 1 > max_buckets) ++index.shift;
  const uint64_t count = ((span - 1) >> index.shift) + 1;
  index.buckets.resize(count);
  // One pass: `first` is the last row starting at or before the bucket's start, `last` the last row
  // starting within the bucket.
  size_t row = 0;
  for (uint64_t b = 0; b < count; ++b) {
    const uint64_t start = index.base + (b << index.shift);
    const uint64_t end = start + (uint64_t{1} << index.shift);  // exclusive
    while (row + 1 < rows.size() && rows[row + 1].pc <= start) ++row;
    size_t last = row;
    if (b + 1 == count) {
      last = rows.size() - 1;
    } else {
      while (last + 1 < rows.size() && rows[last + 1].pc < end) ++last;
    }
    index.buckets[b] = CfiBucket{static_cast<uint32_t>(row), static_cast<uint32_t>(last - row + 1)};
  }
  return index;
}

const CfiRow* CfiTable::find_indexed(uint64_t vaddr) const {
  if (vaddr > UINT32_MAX || rows.empty()) return nullptr;
  const CfiBucket b = index.bucket_of(vaddr);
  if (b.count == 0 || uint64_t{b.first} + b.count > rows.size()) return nullptr;
  const auto begin = rows.begin() + b.first;
  const auto it = std::upper_bound(begin, begin + b.count, static_cast<uint32_t>(vaddr),
                                   [](uint32_t pc, const CfiRow& r) { return pc < r.pc; });
  if (it == begin) return nullptr;
  return &*(it - 1);
}

bool CfiTable::vaddr_of(uint64_t file_offset, uint64_t* vaddr) const {
  constexpr uint64_t kPage = 4096;
  // An executable segment whose page-aligned start covers the offset: the mapping of that segment.
  for (const Segment& s : segments) {
    const uint64_t aligned = s.offset & ~(kPage - 1);
    if (s.executable && file_offset >= aligned && file_offset < s.offset + s.filesz &&
        s.vaddr >= s.offset - aligned) {
      *vaddr = file_offset - aligned + (s.vaddr - (s.offset - aligned));
      return true;
    }
  }
  for (const Segment& s : segments) {
    if (file_offset >= s.offset && file_offset - s.offset < s.filesz) {
      *vaddr = file_offset - s.offset + s.vaddr;
      return true;
    }
  }
  return false;
}

namespace {

// The entry point's code without CFI (CfiModule::entry_without_cfi) as an outermost row, unless some
// row covers part of it after all. `all` is sorted by start and stays so.
void add_entry_row(CfiModule& module, std::vector<Interval>& all) {
  if (all.empty()) return;  // no CFI read: the table says why it has no rows
  const CfiModule::PcRange gap = module.entry_without_cfi();
  if (gap.start == gap.end) return;
  const auto next = std::upper_bound(all.begin(), all.end(), gap.start,
                                     [](uint64_t pc, const Interval& iv) { return pc < iv.start; });
  for (auto it = all.begin(); it != next; ++it)
    if (it->end > gap.start) return;  // overlapping FDEs: not only the one just before
  if (next != all.end() && next->start < gap.end) return;
  Interval outermost{gap.start, gap.end, CfiRow{}};
  outermost.row.cfa_kind = static_cast<uint8_t>(CfaKind::kOutermost);
  all.insert(next, outermost);
}

std::shared_ptr<const CfiTable> compile_module(std::unique_ptr<CfiModule> module,
                                               const CfiTableOptions& options,
                                               std::chrono::steady_clock::time_point begin) {
  auto table = std::make_shared<CfiTable>();
  if (!module->summary().opened) {
    table->error = module->summary().error;
    return table;
  }
  table->opened_path = module->summary().opened_path;
  table->build_id = module->build_id();
  for (const auto& seg : module->segments())
    table->segments.push_back({seg.offset, seg.filesz, seg.vaddr, seg.executable});

  std::vector<Interval> eh;
  std::string eh_error;
  std::vector<CfiModule::FdeRange> ranges;
  if (module->fde_ranges(false, &ranges, &eh_error)) {
    std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
    const bool read = !options.eh_frame_through_libdw &&
                      eh_frame_rows(*module, ranges, *table, eh, &table->eh_frame_through_libdw);
    if (!read) {
      eh.clear();
      table->fdes = table->cfi_rows = table->unsupported_rows = 0;
      for (size_t i = 0; i < ranges.size(); ++i) {
        if (i > 0 && ranges[i].start == ranges[i - 1].start) continue;
        const uint64_t next = i + 1 < ranges.size() ? ranges[i + 1].start : UINT64_MAX;
        ++table->fdes;
        rows_of_range(*module, false, ranges[i].start, 0, next, *table, eh);
      }
    }
  }
  std::vector<Interval> debug;  // .debug_frame's rows, where .eh_frame has none
  std::string debug_error;
  if (options.use_debug_frame && module->fde_ranges(true, &ranges, &debug_error)) {
    // Only what .eh_frame leaves uncovered: the two usually describe the same code alike.
    std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
    for (const auto& r : ranges) {
      const auto it = std::upper_bound(eh.begin(), eh.end(), r.start,
                                       [](uint64_t pc, const Interval& iv) { return pc < iv.start; });
      const bool overlaps_before = it != eh.begin() && (it - 1)->end > r.start;
      const bool overlaps_after = it != eh.end() && it->start < r.end;
      if (overlaps_before || overlaps_after) continue;
      ++table->fdes;
      ++table->debug_frame_fdes;
      rows_of_range(*module, true, r.start, r.end, r.end, *table, debug);
    }
  }
  // Every row by start, .eh_frame's first among equals (a stable sort of both; .eh_frame's rows come
  // sorted, FDE after FDE, so mostly there is nothing to sort).
  const auto by_start = [](const Interval& a, const Interval& b) { return a.start < b.start; };
  if (!std::is_sorted(eh.begin(), eh.end(), by_start)) std::stable_sort(eh.begin(), eh.end(), by_start);
  std::vector<Interval> all;
  if (debug.empty()) {
    all = std::move(eh);
  } else {
    std::stable_sort(debug.begin(), debug.end(), by_start);
    all.reserve(eh.size() + debug.size());
    std::merge(eh.begin(), eh.end(), debug.begin(), debug.end(), std::back_inserter(all), by_start);
  }

  add_entry_row(*module, all);

  std::vector<CfiRow>& rows = table->rows;
  uint64_t covered_to = 0;
  auto push = [&rows](uint64_t pc, const CfiRow& rule) {
    CfiRow r = rule;
    r.pc = static_cast<uint32_t>(pc);
    if (!rows.empty() && rows.back().pc == r.pc) rows.pop_back();  // an empty gap before this row
    if (!rows.empty() && rows.back().same_rule(r)) return;
    rows.push_back(r);
  };
  for (const Interval& iv : all) {
    if (iv.end > UINT32_MAX) {
      table->error = "code above 4 GiB of virtual addresses";
      rows.clear();
      break;
    }
    uint64_t start = iv.start;
    if (start < covered_to) start = covered_to;  // overlapping FDEs: the first one wins
    if (start >= iv.end) continue;
    if (covered_to != 0 && start > covered_to) push(covered_to, CfiRow{});  // a gap without CFI
    push(start, iv.row);
    covered_to = iv.end;
  }
  if (!rows.empty()) push(covered_to, CfiRow{});
  if (rows.empty() && table->error.empty()) {
    table->error = eh_error.empty() ? "no CFI rows" : eh_error;
    if (!debug_error.empty()) table->error += "; " + debug_error;
  }
  // Grown by push_back, the rows' capacity is up to twice their number: the table is kept (for the
  // recording and in CfiTableCache, whose bound counts what tables hold), so it keeps only its rows.
  rows.shrink_to_fit();
  table->index = build_cfi_index(rows);
  table->build_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin).count());
  return table;
}

}  // namespace

std::shared_ptr<const CfiTable> compile_cfi_table(const std::vector<std::string>& candidates,
                                                  const std::string& build_id,
                                                  const CfiTableOptions& options) {
  const auto begin = std::chrono::steady_clock::now();
  // The benchmarks' anchor (bench/unwind_cache.sh's cold-libdw): every .eh_frame through libdw.
  static const bool through_libdw = std::getenv("HPD_EH_FRAME_THROUGH_LIBDW") != nullptr;
  CfiTableOptions o = options;
  o.eh_frame_through_libdw = o.eh_frame_through_libdw || through_libdw;
  return compile_module(CfiModule::open_file(candidates, build_id, o.debug_root, o.use_debug_frame, 16), o,
                        begin);
}

std::shared_ptr<const CfiTable> compile_cfi_table_image(std::span<const uint8_t> image,
                                                        const std::string& name) {
  const auto begin = std::chrono::steady_clock::now();
  CfiTableOptions options;
  options.use_debug_frame = false;  // an image in memory has no separate debug file
  return compile_module(CfiModule::open_image(image, name, 16), options, begin);
}

namespace {

// The trampoline's code, and which of its bytes are the syscall number (any).
constexpr uint8_t kTrampolineCode[kUprobeTrampolineCodeBytes] = {
    0x51,                          // 0x0: push %rcx
    0x41, 0x53,                    // 0x1: push %r11
    0x50,                          // 0x3: push %rax
    0x48, 0xc7, 0xc0, 0, 0, 0, 0,  // 0x4: mov $NR,%rax
    0x0f, 0x05,                    // 0xb: syscall
    0x58,                          // 0xd: pop %rax
    0x41, 0x5b,                    // 0xe: pop %r11
    0x59,                          // 0x10: pop %rcx
    0xc3,                          // 0x11: ret
};
constexpr size_t kTrampolineImmFirst = 7, kTrampolineImmEnd = 11;

// Whether `code` starts with `expected`, bytes [imm_first, imm_end) aside; `why` says how it differs.
bool matches_code(std::span<const uint8_t> code, std::span<const uint8_t> expected, size_t imm_first,
                  size_t imm_end, std::string* why) {
  if (code.size() < expected.size()) {
    if (why != nullptr) *why = "only " + std::to_string(code.size()) + " bytes";
    return false;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (i >= imm_first && i < imm_end) continue;
    if (code[i] != expected[i]) {
      if (why != nullptr) {
        char text[96];
        std::snprintf(text, sizeof text, "byte 0x%zx is 0x%02x, not 0x%02x: not the code hpd has rows for", i,
                      code[i], expected[i]);
        *why = text;
      }
      return false;
    }
  }
  return true;
}

// A row of code that keeps rbp: CFA = rsp + `cfa`.
CfiRow rsp_row(uint32_t pc, int32_t cfa) {
  return CfiRow{pc, cfa, 0, static_cast<uint8_t>(CfaKind::kRsp), static_cast<uint8_t>(RbpKind::kSame)};
}

// The table of a one-page mapping of code the kernel writes, from rows written for it.
std::shared_ptr<const CfiTable> one_page_table(std::vector<CfiRow> rows) {
  auto t = std::make_shared<CfiTable>();
  t->rows = std::move(rows);
  t->cfi_rows = t->rows.size();
  t->index = build_cfi_index(t->rows);
  t->segments.push_back(CfiTable::Segment{0, 4096, 0, true});
  return t;
}

}  // namespace

bool is_uprobe_trampoline_code(std::span<const uint8_t> code, std::string* why) {
  return matches_code(code, kTrampolineCode, kTrampolineImmFirst, kTrampolineImmEnd, why);
}

std::shared_ptr<const CfiTable> uprobe_trampoline_cfi_table() {
  // After each push the CFA is 8 further from rsp; after each pop 8 nearer; the syscall changes nothing.
  return one_page_table({rsp_row(0x0, 8), rsp_row(0x1, 16), rsp_row(0x3, 24), rsp_row(0x4, 32),
                         rsp_row(0xe, 24), rsp_row(0x10, 16), rsp_row(0x11, 8), CfiRow{0x12, 0, 0, 0, 0}});
}

namespace {

// The return probes' trampoline, and which of its bytes are the syscall number (any).
constexpr uint8_t kUretprobeCode[kUretprobeTrampolineCodeBytes] = {
    0x50,                          // 0x0: push %rax
    0x51,                          // 0x1: push %rcx
    0x41, 0x53,                    // 0x2: push %r11
    0x48, 0xc7, 0xc0, 0, 0, 0, 0,  // 0x4: mov $NR,%rax
    0x0f, 0x05,                    // 0xb: syscall
    0x41, 0x5b,                    // 0xd: pop %r11
    0x59,                          // 0xf: pop %rcx
    0xc3,                          // 0x10: ret
    0xcc,                          // 0x11: int3
};

}  // namespace

bool is_uretprobe_trampoline_code(std::span<const uint8_t> code, std::string* why) {
  return matches_code(code, kUretprobeCode, 7, 11, why);
}

std::shared_ptr<const CfiTable> uretprobe_trampoline_cfi_table() {
  // Entered by the probed function's ret: the slot of the replaced return address is just below rsp.
  return one_page_table({rsp_row(0x0, 0), rsp_row(0x1, 8), rsp_row(0x2, 16), rsp_row(0x4, 24),
                         rsp_row(0xf, 16), rsp_row(0x10, 8), CfiRow{0x11, 0, 0, 0, 0}});
}

std::shared_ptr<const CfiTable> CfiTableCache::get(const std::string& path, const std::string& build_id,
                                                   const std::vector<std::string>& candidates) {
  return get(path, build_id, [&] { return compile_cfi_table(candidates, build_id, options_); });
}

namespace {

std::string table_key(const std::string& path, const std::string& build_id, const std::string& identity) {
  return (build_id.empty() ? "path:" + path : build_id) + (identity.empty() ? "" : "@" + identity);
}

}  // namespace

std::shared_ptr<const CfiTable> CfiTableCache::get(const std::string& path, const std::string& build_id,
                                                   const Make& make, const std::string& identity) {
  const std::string key = table_key(path, build_id, identity);
  if (auto table = find(path, build_id, identity)) return table;
  auto table = make();
  if (!table) return nullptr;
  std::lock_guard lock(mutex_);
  if (const auto it = tables_.find(key); it != tables_.end()) {  // made meanwhile by another caller
    it->second.last_used = ++clock_;
    return it->second.table;
  }
  if (build_id.empty() && !table->build_id.empty())
    keep_locked(table_key(path, table->build_id, identity), table);
  keep_locked(key, table);
  evict_locked(key);
  return table;
}

std::shared_ptr<const CfiTable> CfiTableCache::find(const std::string& path, const std::string& build_id,
                                                    const std::string& identity) const {
  const std::string key = table_key(path, build_id, identity);
  std::lock_guard lock(mutex_);
  const auto it = tables_.find(key);
  if (it == tables_.end()) return nullptr;
  it->second.last_used = ++clock_;
  return it->second.table;
}

// The vectors' capacity, not their size: what the table holds on the heap, so that the bound is on
// memory (a table grown by push_back and kept with its slack would count for less than it holds).
uint64_t CfiTableCache::kept_bytes(const CfiTable& table) {
  return table.rows.capacity() * sizeof(CfiRow) + table.index.buckets.capacity() * sizeof(CfiBucket) +
         table.segments.capacity() * sizeof(CfiTable::Segment) + table.error.size() +
         table.opened_path.size() + table.build_id.size() + sizeof(CfiTable);
}

void CfiTableCache::keep_locked(const std::string& key, const std::shared_ptr<const CfiTable>& table) {
  auto [it, inserted] = tables_.try_emplace(key);
  if (!inserted) bytes_ -= kept_bytes(*it->second.table);
  it->second = Entry{table, ++clock_};
  bytes_ += kept_bytes(*table);
}

// Drops the least recently used tables until the rest fit the bound; `keep` (the table just made) stays
// even when it alone is larger.
void CfiTableCache::evict_locked(const std::string& keep) {
  while (bytes_ > limit_bytes_ && tables_.size() > 1) {
    auto oldest = tables_.end();
    for (auto it = tables_.begin(); it != tables_.end(); ++it) {
      if (it->first == keep) continue;
      if (oldest == tables_.end() || it->second.last_used < oldest->second.last_used) oldest = it;
    }
    if (oldest == tables_.end()) return;
    bytes_ -= kept_bytes(*oldest->second.table);
    tables_.erase(oldest);
    ++evicted_;
  }
}

size_t CfiTableCache::size() const {
  std::lock_guard lock(mutex_);
  return tables_.size();
}

uint64_t CfiTableCache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

uint64_t CfiTableCache::evicted() const {
  std::lock_guard lock(mutex_);
  return evicted_;
}

uint64_t CfiTableCache::limit_bytes() const {
  std::lock_guard lock(mutex_);
  return limit_bytes_;
}

uint64_t CfiTableCache::set_limit_bytes(uint64_t limit_bytes) {
  std::lock_guard lock(mutex_);
  const uint64_t before = evicted_;
  limit_bytes_ = limit_bytes;
  evict_locked("");  // no key is empty: any table may go, but the last one stays (as for a table made)
  return evicted_ - before;
}

CfiTableCache::Usage CfiTableCache::usage() const {
  std::lock_guard lock(mutex_);
  return Usage{tables_.size(), bytes_, limit_bytes_, evicted_};
}

std::string cfi_table_difference(const CfiTable& a, const CfiTable& b) {
  std::string out;
  const auto differ = [&](const char* what, const std::string& x, const std::string& y) {
    if (x == y) return;
    if (!out.empty()) out += "; ";
    out += std::string(what) + ": " + x + " against " + y;
  };
  differ("error", "'" + a.error + "'", "'" + b.error + "'");
  differ("FDEs", std::to_string(a.fdes), std::to_string(b.fdes));
  differ("CFI rows", std::to_string(a.cfi_rows), std::to_string(b.cfi_rows));
  differ("unsupported rows", std::to_string(a.unsupported_rows), std::to_string(b.unsupported_rows));
  differ(".debug_frame FDEs", std::to_string(a.debug_frame_fdes), std::to_string(b.debug_frame_fdes));
  differ("rows", std::to_string(a.rows.size()), std::to_string(b.rows.size()));
  differ("index buckets", std::to_string(a.index.buckets.size()), std::to_string(b.index.buckets.size()));
  const auto describe = [](const CfiRow& r) {
    char text[96];
    std::snprintf(text, sizeof text, "pc 0x%x cfa kind %u offset %d rbp kind %u offset %d", r.pc, r.cfa_kind,
                  r.cfa_offset, r.rbp_kind, r.rbp_offset);
    return std::string(text);
  };
  int shown = 0;
  for (size_t i = 0; i < std::min(a.rows.size(), b.rows.size()) && shown < 5; ++i) {
    if (a.rows[i].pc == b.rows[i].pc && a.rows[i].same_rule(b.rows[i])) continue;
    differ(("row " + std::to_string(i)).c_str(), describe(a.rows[i]), describe(b.rows[i]));
    ++shown;
  }
  return out;
}

}  // namespace hpd
