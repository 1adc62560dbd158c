// Unwinder: the stack walk (CFI rules from CfiModule, frame-pointer fallback) and the module cache.
#include "hpd/unwind/unwinder.h"

#include <sys/auxv.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <unordered_map>

#include "cfi_module.h"
#include "dwarf_expr.h"
#include "hpd/base/x86_call.h"

namespace hpd {

using unwind_detail::CfiModule;
using unwind_detail::ExprEnv;
using unwind_detail::FrameRule;
using unwind_detail::kBpReg;
using unwind_detail::kRaReg;
using unwind_detail::kRegCount;
using unwind_detail::kSpReg;
using unwind_detail::ReadStatus;
using unwind_detail::RegRule;
using unwind_detail::RuleKind;

UserRegs UserRegs::from_perf(uint64_t mask, std::span<const uint64_t> regs) {
  // perf_event_x86_regs index -> DWARF number; -1 for flags and segment registers.
  static constexpr int kDwarfOf[24] = {0,  3,  2,  1,  4, 5, 6,  7,  16, -1, -1, -1,
                                       -1, -1, -1, -1, 8, 9, 10, 11, 12, 13, 14, 15};
  UserRegs out;
  size_t next = 0;
  for (unsigned bit = 0; bit < 64 && next < regs.size(); ++bit) {
    if (((mask >> bit) & 1) == 0) continue;
    const uint64_t v = regs[next++];
    if (bit < 24 && kDwarfOf[bit] >= 0) out.set(static_cast<DwarfReg>(kDwarfOf[bit]), v);
  }
  return out;
}

namespace {

constexpr uint64_t kUnknownCopyReach = 64ull << 20;

struct StackReader {
  const StackCopy* stack;
};

ReadStatus read_stack(const void* context, uint64_t address, unsigned size, uint64_t* value) {
  const StackCopy& s = *static_cast<const StackReader*>(context)->stack;
  if (address < s.sp) return ReadStatus::kOutside;
  const uint64_t off = address - s.sp;
  const uint64_t have = s.bytes.size();
  if (off >= have || have - off < size) {
    if (s.requested_size != 0)
      return have < s.requested_size ? ReadStatus::kOutside : ReadStatus::kBeyondCopy;
    return off < have + kUnknownCopyReach ? ReadStatus::kBeyondCopy : ReadStatus::kOutside;
  }
  uint64_t v = 0;
  std::memcpy(&v, s.bytes.data() + off, size);  // little-endian x86-64: low bytes first
  *value = v;
  return ReadStatus::kOk;
}

struct RegState {
  std::array<uint64_t, kRegCount> value{};
  uint32_t valid = 0;
  bool has(unsigned r) const { return (valid >> r) & 1; }
  void set(unsigned r, uint64_t v) {
    value[r] = v;
    valid |= 1u << r;
  }
};

// How one step ended, besides giving the caller's registers.
enum class Step : uint8_t { kOk, kOutermost, kTruncated, kFailed };

Step step_of(ReadStatus s) {
  switch (s) {
    case ReadStatus::kOk: return Step::kOk;
    case ReadStatus::kBeyondCopy: return Step::kTruncated;
    default: return Step::kFailed;
  }
}

ReadStatus eval_cfa(const FrameRule& rule, const CfiModule& module, const ExprEnv& env, uint64_t* cfa) {
  if (!rule.cfa.is_expr) {
    if (((env.valid >> rule.cfa.reg) & 1) == 0) return ReadStatus::kBadExpr;
    *cfa = env.regs[rule.cfa.reg] + static_cast<uint64_t>(rule.cfa.offset);
    return ReadStatus::kOk;
  }
  return unwind_detail::evaluate(module.ops(rule.cfa.expr_begin, rule.cfa.expr_len), env, false, cfa);
}

// The caller's value of one register under `r`; `*known` false when it cannot be recovered.
ReadStatus eval_reg(const RegRule& r, unsigned regno, const CfiModule& module, const ExprEnv& env,
                    const RegState& cur, uint64_t* value, bool* known) {
  *known = true;
  uint64_t addr = 0;
  switch (r.kind) {
    case RuleKind::kUndefined: *known = false; return ReadStatus::kOk;
    case RuleKind::kSameValue:
      *known = cur.has(regno);
      *value = cur.value[regno];
      return ReadStatus::kOk;
    case RuleKind::kOffset:
      return env.read(env.read_context, env.cfa + static_cast<uint64_t>(r.offset), 8, value);
    case RuleKind::kValOffset: *value = env.cfa + static_cast<uint64_t>(r.offset); return ReadStatus::kOk;
    case RuleKind::kRegister:
      *known = cur.has(r.reg);
      *value = cur.value[r.reg] + static_cast<uint64_t>(r.offset);
      return ReadStatus::kOk;
    case RuleKind::kExpression:
    case RuleKind::kValExpression: {
      const auto ops = module.ops(r.expr_begin, r.expr_len);
      const bool push_cfa = ops.empty() || ops[0].atom != 0x9c;  // DW_OP_call_frame_cfa
      const ReadStatus s = unwind_detail::evaluate(ops, env, push_cfa, &addr);
      if (s != ReadStatus::kOk) return s;
      if (r.kind == RuleKind::kValExpression) {
        *value = addr;
        return ReadStatus::kOk;
      }
      return env.read(env.read_context, addr, 8, value);
    }
  }
  return ReadStatus::kBadExpr;
}

// One CFI step: the caller's registers from the callee's.
Step step_cfi(const FrameRule& rule, const CfiModule& module, const RegState& cur, const StackReader& reader,
              RegState* next) {
  ExprEnv env;
  env.regs = cur.value.data();
  env.valid = cur.valid;
  env.read = &read_stack;
  env.read_context = &reader;
  uint64_t cfa = 0;
  if (const ReadStatus s = eval_cfa(rule, module, env, &cfa); s != ReadStatus::kOk) return step_of(s);
  env.cfa = cfa;
  env.have_cfa = true;

  uint64_t ra = 0;
  bool known = false;
  if (const ReadStatus s = eval_reg(rule.regs[kRaReg], kRaReg, module, env, cur, &ra, &known);
      s != ReadStatus::kOk) {
    return step_of(s);
  }
  if (!known) return Step::kFailed;
  *next = RegState{};
  next->set(kRaReg, ra);
  for (unsigned r = 0; r < kRaReg; ++r) {
    uint64_t v = 0;
    const ReadStatus s = eval_reg(rule.regs[r], r, module, env, cur, &v, &known);
    // A callee-saved register that cannot be read is only unknown to the caller: the walk goes on
    // unless a later rule needs it.
    if (s == ReadStatus::kOk && known) next->set(r, v);
  }
  // x86-64: the caller's rsp is the CFA unless the row says otherwise (glibc's signal trampoline does).
  const RuleKind sp_kind = rule.regs[kSpReg].kind;
  if (sp_kind == RuleKind::kUndefined || sp_kind == RuleKind::kSameValue) next->set(kSpReg, cfa);
  if (!next->has(kSpReg)) return Step::kFailed;
  return Step::kOk;
}

// One frame-pointer step: [rbp] is the caller's rbp, [rbp + 8] the return address.
Step step_fp(const RegState& cur, const StackReader& reader, RegState* next) {
  if (!cur.has(kBpReg)) return Step::kFailed;
  const uint64_t bp = cur.value[kBpReg];
  if (bp == 0) return Step::kOutermost;  // _start and thread entry points clear rbp
  if (bp < cur.value[kSpReg] || bp > UINT64_MAX - 16) return Step::kFailed;
  uint64_t saved_bp = 0;
  uint64_t ra = 0;
  if (const ReadStatus s = read_stack(&reader, bp, 8, &saved_bp); s != ReadStatus::kOk) return step_of(s);
  if (const ReadStatus s = read_stack(&reader, bp + 8, 8, &ra); s != ReadStatus::kOk) return step_of(s);
  *next = RegState{};
  next->set(kRaReg, ra);
  next->set(kSpReg, bp + 16);
  next->set(kBpReg, saved_bp);
  return Step::kOk;
}

// A private copy of this process's vDSO. Every x86-64 process of this kernel maps the same image,
// so its CFI describes the target's vDSO too, at the target's own base address.
std::vector<uint8_t> copy_own_vdso() {
  const uint64_t base = getauxval(AT_SYSINFO_EHDR);
  if (base == 0) return {};
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() < 6 || line.compare(line.size() - 6, 6, "[vdso]") != 0) continue;
    uint64_t start = 0;
    uint64_t end = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64, &start, &end) != 2 || start != base ||
        end <= start || end - start > (64u << 20)) {
      return {};
    }
    const auto* p = reinterpret_cast<const uint8_t*>(start);
    return std::vector<uint8_t>(p, p + (end - start));
  }
  return {};
}

}  // namespace

struct Unwinder::Impl {
  struct Entry {
    std::unique_ptr<CfiModule> module;  // nullptr for pseudo mappings ([anon], [heap], ...)
    uint64_t last_use = 0;
  };
  struct Located {
    CfiModule* module = nullptr;
    uint64_t vaddr = 0;
  };

  UnwinderOptions options;
  UnwindStats stats;
  std::unordered_map<std::string, Entry> modules;  // key: path '\n' build-id
  uint64_t tick = 0;
  const std::vector<RawModule>* indexed_for = nullptr;
  std::vector<Entry*> by_index;  // RawModule index -> entry, for `indexed_for`
  uint64_t last_unmapped_pc = 0;
  bool vdso_loaded = false;
  std::vector<uint8_t> vdso_image;

  Entry* entry_for(const UnwindContext& ctx, const RawMapping& mapping);
  bool locate(const UnwindContext& ctx, uint64_t pc, Located* out);
  std::optional<uint64_t> leaf_return_at_sp(const UnwindContext& ctx, uint64_t sp, const StackReader& reader);
  StackEnd walk(const UnwindContext& ctx, const UserRegs& regs, const StackCopy& stack,
                std::vector<uint64_t>& out);
  void evict_one();
};

void Unwinder::Impl::evict_one() {
  auto victim = modules.end();
  for (auto it = modules.begin(); it != modules.end(); ++it) {
    if (victim == modules.end() || it->second.last_use < victim->second.last_use) victim = it;
  }
  if (victim == modules.end()) return;
  modules.erase(victim);
  by_index.clear();  // it may point at the evicted entry
}

Unwinder::Impl::Entry* Unwinder::Impl::entry_for(const UnwindContext& ctx, const RawMapping& mapping) {
  if (ctx.modules == nullptr || mapping.module >= ctx.modules->size()) return nullptr;
  if (indexed_for != ctx.modules) {
    by_index.clear();
    indexed_for = ctx.modules;
  }
  if (mapping.module < by_index.size() && by_index[mapping.module] != nullptr) {
    Entry* e = by_index[mapping.module];
    e->last_use = ++tick;
    return e;
  }
  const RawModule& raw = (*ctx.modules)[mapping.module];
  if (raw.is_kernel) return nullptr;
  std::string key = raw.path;
  key += '\n';
  key += raw.build_id;
  auto it = modules.find(key);
  if (it == modules.end()) {
    if (modules.size() >= options.max_modules) evict_one();
    Entry entry;
    if (raw.path == "[vdso]") {
      if (!vdso_loaded) {
        vdso_image = copy_own_vdso();
        vdso_loaded = true;
      }
      entry.module = CfiModule::open_image(vdso_image, "[vdso]", options.max_rules_per_module);
    } else if (!raw.path.empty() && raw.path.front() == '/') {
      std::vector<std::string> candidates;
      const int32_t pid = ctx.process != nullptr ? ctx.process->pid : 0;
      if (pid > 0) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, mapping.start,
                      mapping.end);
        candidates.emplace_back(buf);
        candidates.push_back("/proc/" + std::to_string(pid) + "/root" + raw.path);
      }
      candidates.push_back(raw.path);
      entry.module = CfiModule::open_file(candidates, raw.build_id, options.debug_root,
                                          options.use_debug_frame, options.max_rules_per_module);
    }
    if (entry.module != nullptr) {
      ++stats.modules_opened;
      if (!entry.module->summary().has_eh_frame) ++stats.modules_without_cfi;
    }
    it = modules.emplace(std::move(key), std::move(entry)).first;
  }
  if (by_index.size() <= mapping.module) by_index.resize(mapping.module + 1, nullptr);
  by_index[mapping.module] = &it->second;
  it->second.last_use = ++tick;
  return &it->second;
}

bool Unwinder::Impl::locate(const UnwindContext& ctx, uint64_t pc, Located* out) {
  *out = Located{};
  if (ctx.process == nullptr) return false;
  const RawMapping* mapping = ctx.process->find_mapping(pc, ctx.time_ns);
  if (mapping == nullptr) return false;
  Entry* entry = entry_for(ctx, *mapping);
  if (entry == nullptr || entry->module == nullptr || !entry->module->summary().opened) return true;
  uint64_t vaddr = 0;
  if (entry->module->vaddr_of(pc - mapping->start + mapping->file_offset, &vaddr)) {
    out->module = entry->module.get();
    out->vaddr = vaddr;
  }
  return true;
}

// A sampled frame no CFI covers (JIT code, assembly without CFI) whose function set up no frame has
// its return address at [sp], where a frame-pointer step would read the caller's frame and lose the
// caller. [sp] is taken when it points into a module with CFI for it, right after a call instruction
// (hpd_x86_call_length_before); a frame that pushed rbp has a saved rbp or a local there. As the eBPF
// programs' walk does (cfi_leaf_return_at_sp in bpf/cfi_walk.bpf.h).
std::optional<uint64_t> Unwinder::Impl::leaf_return_at_sp(const UnwindContext& ctx, uint64_t sp,
                                                          const StackReader& reader) {
  uint64_t ra = 0;
  if (read_stack(&reader, sp, 8, &ra) != ReadStatus::kOk || ra < 8) return std::nullopt;
  Located loc;
  if (!locate(ctx, ra - 1, &loc) || loc.module == nullptr || loc.vaddr < 7) return std::nullopt;
  bool hit = false;
  const FrameRule* rule = loc.module->rule_at(loc.vaddr, &hit);
  ++(hit ? stats.rule_cache_hits : stats.rule_cache_misses);
  std::array<uint8_t, 8> before{};
  if (rule == nullptr || !loc.module->read_image(loc.vaddr - 7, before) ||
      hpd_x86_call_length_before(before.data()) == 0)
    return std::nullopt;
  return ra;
}

StackEnd Unwinder::Impl::walk(const UnwindContext& ctx, const UserRegs& regs, const StackCopy& stack,
                              std::vector<uint64_t>& out) {
  RegState cur;
  cur.value = regs.value;
  cur.valid = regs.valid & ((1u << kRegCount) - 1);
  if (!cur.has(kRaReg)) return StackEnd::kFailed;
  out.push_back(cur.value[kRaReg]);
  if (!cur.has(kSpReg)) return StackEnd::kFailed;
  const StackReader reader{&stack};
  bool exact_pc = true;  // the sampled ip, or the interrupted pc after a signal frame
  bool after_signal = false;
  for (;;) {
    if (out.size() >= options.max_frames) return StackEnd::kTruncated;
    const uint64_t pc = cur.value[kRaReg];
    const uint64_t lookup = exact_pc ? pc : pc - 1;  // a return address may follow a noreturn call
    Located loc;
    const bool mapped = locate(ctx, lookup, &loc);
    if (!mapped && last_unmapped_pc == 0) last_unmapped_pc = pc;
    if (!mapped && out.size() > 1) return StackEnd::kFailed;  // a return address outside all code
    const FrameRule* rule = nullptr;
    if (loc.module != nullptr) {
      bool hit = false;
      rule = loc.module->rule_at(loc.vaddr, &hit);
      ++(hit ? stats.rule_cache_hits : stats.rule_cache_misses);
    }
    RegState next;
    Step step;
    bool signal_frame = false;
    std::optional<uint64_t> leaf_return;
    if (rule != nullptr) {
      if (rule->regs[kRaReg].kind == RuleKind::kUndefined) return StackEnd::kComplete;
      signal_frame = rule->signal_frame;
      step = step_cfi(*rule, *loc.module, cur, reader, &next);
      ++stats.cfi_steps;
    } else if (exact_pc && (leaf_return = leaf_return_at_sp(ctx, cur.value[kSpReg], reader))) {
      next = cur;
      next.set(kRaReg, *leaf_return);
      next.set(kSpReg, cur.value[kSpReg] + 8);
      step = Step::kOk;
      ++stats.sp_steps;
    } else {
      step = step_fp(cur, reader, &next);
      ++stats.fp_steps;
    }
    switch (step) {
      case Step::kOk: break;
      // rbp = 0 marks the outermost frame of a frame-pointer chain, but only when rbp came from a
      // chain or a CFI rule: at the sampled leaf of code without frame pointers it is just a value.
      case Step::kOutermost: return out.size() > 1 ? StackEnd::kComplete : StackEnd::kFailed;
      case Step::kTruncated: return StackEnd::kTruncated;
      case Step::kFailed: return StackEnd::kFailed;
    }
    const uint64_t ra = next.value[kRaReg];
    if (ra == 0) return StackEnd::kComplete;
    // Each frame lies above its callee; only a signal frame may switch stacks (sigaltstack).
    if (!signal_frame && !after_signal && next.value[kSpReg] <= cur.value[kSpReg]) return StackEnd::kFailed;
    out.push_back(ra);
    exact_pc = signal_frame;
    after_signal = signal_frame;
    cur = next;
  }
}

Unwinder::Unwinder(UnwinderOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  if (impl_->options.max_frames < 1) impl_->options.max_frames = 1;
  if (impl_->options.max_modules < 1) impl_->options.max_modules = 1;
  if (impl_->options.max_rules_per_module < 16) impl_->options.max_rules_per_module = 16;
}

Unwinder::~Unwinder() = default;

StackEnd Unwinder::unwind(const UnwindContext& context, const UserRegs& regs, const StackCopy& stack,
                          std::vector<uint64_t>& out) {
  out.clear();
  impl_->last_unmapped_pc = 0;
  const StackEnd end = impl_->walk(context, regs, stack, out);
  UnwindStats& s = impl_->stats;
  ++s.samples;
  if (impl_->last_unmapped_pc != 0) ++s.outside_mappings;
  s.frames += out.size();
  switch (end) {
    case StackEnd::kComplete: ++s.complete; break;
    case StackEnd::kTruncated: ++s.truncated; break;
    default: ++s.failed; break;
  }
  return end;
}

std::optional<uint64_t> Unwinder::frameless_leaf_return(const UnwindContext& context, const UserRegs& regs,
                                                        const StackCopy& stack) {
  if (!regs.has(DwarfReg::kRip) || !regs.has(DwarfReg::kRsp)) return std::nullopt;
  const StackReader reader{&stack};
  Impl::Located loc;
  const FrameRule* rule = nullptr;
  if (impl_->locate(context, regs.ip(), &loc) && loc.module != nullptr) {
    bool hit = false;
    rule = loc.module->rule_at(loc.vaddr, &hit);
    ++(hit ? impl_->stats.rule_cache_hits : impl_->stats.rule_cache_misses);
  }
  // Code no CFI covers (JIT code): its return address at [sp] when a call instruction precedes it.
  if (rule == nullptr) return impl_->leaf_return_at_sp(context, regs.sp(), reader);
  if (rule->signal_frame || rule->regs[kRaReg].kind != RuleKind::kOffset) return std::nullopt;
  // Evaluate the CFA knowing only rsp and rip: it succeeds exactly when the CFA does not depend on
  // rbp (or any other register), i.e. when the function has no frame-pointer frame at ip. PLT
  // entries (rsp- and rip-based expressions) count as frameless too.
  ExprEnv env;
  std::array<uint64_t, kRegCount> values{};
  values[kSpReg] = regs.sp();
  values[kRaReg] = regs.ip();
  env.regs = values.data();
  env.valid = (1u << kSpReg) | (1u << kRaReg);
  env.read = &read_stack;
  env.read_context = &reader;
  uint64_t cfa = 0;
  if (eval_cfa(*rule, *loc.module, env, &cfa) != ReadStatus::kOk) return std::nullopt;
  uint64_t ra = 0;
  if (read_stack(&reader, cfa + static_cast<uint64_t>(rule->regs[kRaReg].offset), 8, &ra) !=
          ReadStatus::kOk ||
      ra == 0) {
    return std::nullopt;
  }
  return ra;
}

bool Unwinder::is_outermost_frame(const UnwindContext& context, uint64_t pc, bool return_address) {
  if (pc == 0 || (return_address && pc == 1)) return false;
  Impl::Located loc;
  if (!impl_->locate(context, return_address ? pc - 1 : pc, &loc) || loc.module == nullptr) return false;
  bool hit = false;
  const FrameRule* rule = loc.module->rule_at(loc.vaddr, &hit);
  ++(hit ? impl_->stats.rule_cache_hits : impl_->stats.rule_cache_misses);
  return rule != nullptr && rule->regs[kRaReg].kind == RuleKind::kUndefined;
}

ModuleUnwindInfo Unwinder::module_info(const UnwindContext& context, uint64_t address) {
  ModuleUnwindInfo info;
  if (context.process == nullptr) {
    info.error = "no process";
    return info;
  }
  const RawMapping* mapping = context.process->find_mapping(address, context.time_ns);
  if (mapping == nullptr) {
    info.error = "address outside every mapping";
    return info;
  }
  Impl::Entry* entry = impl_->entry_for(context, *mapping);
  if (entry == nullptr || entry->module == nullptr) {
    info.error = "not a module file";
    return info;
  }
  CfiModule& m = *entry->module;
  m.probe_debug_frame();
  const auto& s = m.summary();
  info.opened = s.opened;
  info.error = s.error;
  info.opened_path = s.opened_path;
  info.has_eh_frame = s.has_eh_frame;
  info.has_debug_frame = s.has_debug_frame;
  return info;
}

uint64_t Unwinder::last_unmapped_pc() const {
  return impl_->last_unmapped_pc;
}

const UnwindStats& Unwinder::stats() const {
  return impl_->stats;
}

uint64_t Unwinder::memory_bytes() const {
  uint64_t total = sizeof(Impl) + impl_->vdso_image.capacity() + impl_->by_index.capacity() * sizeof(void*);
  for (const auto& [key, entry] : impl_->modules) {
    total += key.capacity() + 64;
    if (entry.module != nullptr) total += entry.module->memory_bytes();
  }
  return total;
}

}  // namespace hpd
