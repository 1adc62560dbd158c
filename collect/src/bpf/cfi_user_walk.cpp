// CfiMaps::walk_stack: the programs' cfi walk (bpf/cfi_walk.bpf.h) done again in user space, over the
// maps as they are published now and a copy of a stack, for the off-CPU stacks the programs had to walk
// by frame pointer while a process's tables were not published yet.
#include <bpf/bpf.h>
#include <sys/uio.h>

#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "bpf/cfi_maps.h"
#include "hpd/base/x86_call.h"
#include "profile_event.h"

namespace hpd {
namespace {

// As the programs' walk: a frame pointer farther than this above the stack pointer is garbage.
constexpr uint64_t kUserStackReach = 1ull << 30;

struct Regs {
  uint64_t ip, sp, bp;
  bool exact;
};

// Reads `size` bytes of the stack at `addr` from the copy that starts at `base`.
bool read_stack(std::span<const uint8_t> stack, uint64_t base, uint64_t addr, void* out, size_t size) {
  if (addr < base || addr - base > stack.size() || stack.size() - (addr - base) < size) return false;
  std::memcpy(out, stack.data() + (addr - base), size);
  return true;
}

}  // namespace

CfiMaps::StackWalk CfiMaps::walk_stack(int32_t pid, uint64_t ip, uint64_t sp, uint64_t bp,
                                       std::span<const uint8_t> stack, std::optional<uint64_t> rdi) const {
  StackWalk walk;
  auto maps = std::make_unique<hpd_proc_mappings>();
  const bool have_maps = bpf_map_lookup_elem(procs_fd_, &pid, maps.get()) == 0;
  if (have_maps && maps->count > HPD_MAX_PROC_MAPPINGS) maps->count = HPD_MAX_PROC_MAPPINGS;
  const uint64_t base = sp;
  Regs r{ip, sp, bp, true};

  // One frame-pointer step ([rbp] the caller's rbp, [rbp + 8] the return address); 0 to go on.
  const auto fp_step = [&]() -> uint32_t {
    if (r.bp == 0) return r.exact ? HPD_USER_END_FP_BROKEN : HPD_USER_END_FP_ZERO;
    if ((r.bp & 7) != 0 || r.bp < r.sp || r.bp - r.sp > kUserStackReach) return HPD_USER_END_FP_BROKEN;
    uint64_t frame[2];
    if (!read_stack(stack, base, r.bp, frame, sizeof frame)) return HPD_USER_END_READ_FAULT;
    if (frame[1] == 0) return HPD_USER_END_ROOT;
    r.sp = r.bp + 16;
    r.bp = frame[0];
    r.ip = frame[1];
    r.exact = false;
    ++walk.fp_frames;
    return 0;
  };

  // The mapping holding `pc` among the published ones, or nullptr.
  const auto mapping_of = [&](uint64_t pc) -> const hpd_proc_mapping* {
    for (uint32_t i = 0; have_maps && i < maps->count; ++i) {
      if (pc >= maps->mappings[i].start && pc < maps->mappings[i].end) return &maps->mappings[i];
    }
    return nullptr;
  };

  // As cfi_leaf_return_at_sp: the sampled frame in code no table covers (JIT code) takes [sp] for its
  // return address when it points into a module with a table, right after a call instruction (read
  // from the process: it may have gone, and then the frame pointer is followed).
  const auto leaf_return_at_sp = [&]() {
    uint64_t ra = 0;
    if (!r.exact || !read_stack(stack, base, r.sp, &ra, 8) || ra < 8) return false;
    const hpd_proc_mapping* m = mapping_of(ra - 1);
    if (m == nullptr || m->row_count == 0) return false;
    unsigned char before[8];
    iovec local{before, sizeof before};
    iovec remote{reinterpret_cast<void*>(ra - 8), sizeof before};
    if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof before) ||
        hpd_x86_call_length_before(before) == 0)
      return false;
    r = Regs{ra, r.sp + 8, r.bp, false};
    return true;
  };

  // A frame no row covers: its return address at [sp], or a frame-pointer step.
  const auto step_without_row = [&]() -> uint32_t { return leaf_return_at_sp() ? 0 : fp_step(); };

  // The rule of the row covering `vaddr` among the map's rows [first, first + count).
  const auto find_row = [&](uint32_t first, uint32_t count, uint32_t vaddr, hpd_cfi_rule* out) {
    if (count == 0 || uint64_t{first} + count > capacity_) return false;
    uint32_t lo = first, hi = first + count;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      hpd_cfi_row row;
      std::memcpy(&row, rows_ + size_t{mid} * kRowStride, sizeof row);
      if (vaddr < row.pc)
        hi = mid;
      else
        lo = mid + 1;
    }
    if (lo == first) return false;
    hpd_cfi_row row;
    std::memcpy(&row, rows_ + size_t{lo - 1} * kRowStride, sizeof row);
    if (row.rule >= rule_capacity_) return false;
    std::memcpy(out, rules_ + size_t{row.rule} * kRuleStride, sizeof *out);
    return true;
  };

  // One step from the frame in r to its caller, as cfi_step does; 0 to go on.
  const auto step = [&]() -> uint32_t {
    const uint64_t pc = r.exact ? r.ip : r.ip - 1;
    const hpd_proc_mapping* m = mapping_of(pc);
    if (m == nullptr) {
      if (!have_maps) walk.pending = true;
      return step_without_row();
    }
    if (m->row_count == 0) {
      if (m->flags & HPD_MAPPING_PENDING) walk.pending = true;
      return step_without_row();
    }
    const uint64_t vaddr = pc - m->bias;
    if (vaddr > 0xffffffffull) return step_without_row();
    uint32_t first = m->row_first;
    uint32_t count = m->row_count;
    if (m->index_count != 0) {
      if (static_cast<uint32_t>(vaddr) < m->index_base) return step_without_row();
      uint32_t bucket = (static_cast<uint32_t>(vaddr) - m->index_base) >> (m->index_shift & 31);
      if (bucket >= m->index_count) bucket = m->index_count - 1;
      bucket += m->index_first;
      if (bucket >= index_capacity_ || index_ == nullptr) return step_without_row();
      hpd_cfi_bucket b;
      std::memcpy(&b, index_ + size_t{bucket} * kBucketStride, sizeof b);
      if (b.first >= count || b.count > count - b.first) return step_without_row();
      first += b.first;
      count = b.count;
    }
    hpd_cfi_rule row{};
    if (!find_row(first, count, static_cast<uint32_t>(vaddr), &row) || row.cfa_kind == HPD_CFA_NONE)
      return step_without_row();
    uint64_t cfa = 0, ra = 0, next_bp = r.bp;
    bool exact = false;
    // Only the sampled frame has its rdi.
    const std::optional<uint64_t> di = std::exchange(rdi, std::nullopt);
    bool ra_in_register = false;
    switch (row.cfa_kind) {
      case HPD_CFA_RSP: cfa = r.sp + static_cast<int64_t>(row.cfa_offset); break;
      case HPD_CFA_RSP_RA_RDI:
        // glibc's vfork keeps its return address in rdi across the system call.
        if (!di) return HPD_USER_END_UNSUPPORTED;
        cfa = r.sp + static_cast<int64_t>(row.cfa_offset);
        ra = *di;
        ra_in_register = true;
        break;
      case HPD_CFA_RBP: cfa = r.bp + static_cast<int64_t>(row.cfa_offset); break;
      case HPD_CFA_PLT:
        cfa = r.sp + static_cast<int64_t>(row.cfa_offset) +
              ((r.ip & 15) >= static_cast<uint64_t>(static_cast<int64_t>(row.rbp_offset)) ? 8 : 0);
        break;
      case HPD_CFA_SIGNAL:
        if (!read_stack(stack, base, r.sp + HPD_SIGFRAME_RSP, &cfa, 8) ||
            !read_stack(stack, base, r.sp + HPD_SIGFRAME_RIP, &ra, 8) ||
            !read_stack(stack, base, r.sp + HPD_SIGFRAME_RBP, &next_bp, 8))
          return HPD_USER_END_READ_FAULT;
        exact = true;
        break;
      case HPD_CFA_OUTERMOST: return HPD_USER_END_ROOT;
      default: return HPD_USER_END_UNSUPPORTED;
    }
    if (!exact) {
      if (!ra_in_register && !read_stack(stack, base, cfa - 8, &ra, 8)) return HPD_USER_END_READ_FAULT;
      if (row.rbp_kind == HPD_RBP_AT_CFA) {
        if (!read_stack(stack, base, cfa + static_cast<int64_t>(row.rbp_offset), &next_bp, 8))
          return HPD_USER_END_READ_FAULT;
      } else if (row.rbp_kind != HPD_RBP_SAME) {
        next_bp = 0;
      }
      // As the programs' walk: the sampled frame may have CFA = sp (vfork after its `pop`, code entered
      // by a `ret`).
      if (cfa < r.sp || (cfa == r.sp && !r.exact)) return HPD_USER_END_NO_GROWTH;
    }
    if (ra == 0) return HPD_USER_END_ROOT;
    r = Regs{ra, cfa, next_bp, exact};
    return 0;
  };

  walk.ips.push_back(ip);
  walk.end = HPD_USER_END_DEPTH;
  while (walk.ips.size() < HPD_MAX_USER_FRAMES) {
    if (const uint32_t how = step(); how != 0) {
      walk.end = how;
      return walk;
    }
    walk.ips.push_back(r.ip);
  }
  // Full: if the next step would end at the root, the stack is complete all the same.
  if (const uint32_t how = step(); how == HPD_USER_END_ROOT || how == HPD_USER_END_FP_ZERO) walk.end = how;
  return walk;
}

}  // namespace hpd
