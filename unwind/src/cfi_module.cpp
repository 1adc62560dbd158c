// CfiModule: CFI of one module file through libdw, with a per-pc rule cache.
#include "cfi_module.h"

#include <dwarf.h>
#include <fcntl.h>
#include <gelf.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "eh_frame_rows.h"
#include "hpd/base/elf.h"
#include "hpd/base/unique_fd.h"

namespace hpd::unwind_detail {

namespace {

// The section called `name` with contents in the file (not NOBITS, as in a stripped debug file).
ElfSection find_section(const ElfHandle& elf, const char* name) {
  const ElfSection s = elf.view().section(name);
  return s.has_bytes() && s.header.sh_size != 0 ? s : ElfSection{};
}

bool is_breg(uint8_t atom) {
  return atom >= DW_OP_breg0 && atom <= DW_OP_breg31;
}
bool is_reg(uint8_t atom) {
  return atom >= DW_OP_reg0 && atom <= DW_OP_reg31;
}

}  // namespace

CfiModule::~CfiModule() {
  if (debug_dwarf_ != nullptr) dwarf_end(debug_dwarf_);  // owns debug_cfi_
  if (eh_cfi_ != nullptr) dwarf_cfi_end(eh_cfi_);
  // Then the members: debug_elf_, then elf_.
}

std::unique_ptr<CfiModule> CfiModule::open_file(const std::vector<std::string>& candidates,
                                                const std::string& expected_build_id,
                                                const std::string& debug_root, bool use_debug_frame,
                                                size_t max_rules) {
  std::unique_ptr<CfiModule> m(new CfiModule());
  m->debug_root_ = debug_root;
  m->max_rules_ = max_rules;
  m->debug_tried_ = !use_debug_frame;
  std::string errors;
  for (const std::string& path : candidates) {
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      errors += (errors.empty() ? "" : "; ") + path + ": " + std::strerror(errno);
      continue;
    }
    std::string error;
    // Closed at the end of this iteration: after release_fd, libelf no longer needs the descriptor.
    const bool loaded = m->load_elf(fd.get(), &error);
    if (loaded) {
      m->build_id_ = m->read_build_id();
      if (expected_build_id.empty() || m->build_id_ == expected_build_id) {
        m->summary_.opened = true;
        m->summary_.opened_path = path;
        break;
      }
      error = "build-id " + (m->build_id_.empty() ? std::string("missing") : m->build_id_) + ", expected " +
              expected_build_id;
      m->elf_ = ElfHandle();
      m->build_id_.clear();
    }
    errors += (errors.empty() ? "" : "; ") + path + ": " + error;
  }
  if (!m->summary_.opened) {
    m->summary_.error = candidates.empty() ? "no file to open" : errors;
    m->debug_tried_ = true;
    return m;
  }
  m->segments_ = m->elf_.view().load_segments();
  m->summary_.has_eh_frame = static_cast<bool>(find_section(m->elf_, ".eh_frame"));
  if (m->summary_.has_eh_frame) m->eh_cfi_ = dwarf_getcfi_elf(m->elf_.get());
  return m;
}

std::unique_ptr<CfiModule> CfiModule::open_image(std::span<const uint8_t> image, const std::string& name,
                                                 size_t max_rules) {
  std::unique_ptr<CfiModule> m(new CfiModule());
  m->max_rules_ = max_rules;
  m->debug_tried_ = true;
  if (image.empty()) {
    m->summary_.error = name + ": no image";
    return m;
  }
  // libelf only reads the image (no ELF_C_RDWR), so the const_cast never leads to a write.
  m->elf_ =
      ElfHandle::open_memory(const_cast<char*>(reinterpret_cast<const char*>(image.data())), image.size());
  if (!m->elf_.is_elf()) {
    m->summary_.error = name + ": not an ELF image";
    m->elf_ = ElfHandle();
    return m;
  }
  m->summary_.opened = true;
  m->summary_.opened_path = name;
  m->build_id_ = m->read_build_id();
  m->segments_ = m->elf_.view().load_segments();
  m->summary_.has_eh_frame = static_cast<bool>(find_section(m->elf_, ".eh_frame"));
  if (m->summary_.has_eh_frame) m->eh_cfi_ = dwarf_getcfi_elf(m->elf_.get());
  return m;
}

bool CfiModule::load_elf(int fd, std::string* error) {
  elf_ = ElfHandle::open_fd(fd, ELF_C_READ_MMAP);
  if (!elf_) {
    *error = elf_errmsg(-1);
    return false;
  }
  const std::optional<GElf_Ehdr> ehdr = elf_.view().header();
  const char* why = nullptr;
  if (!ehdr) {
    why = "not an ELF file";
  } else if (ehdr->e_ident[EI_CLASS] != ELFCLASS64 || ehdr->e_machine != EM_X86_64) {
    why = "not an x86-64 ELF file";
  } else if (!elf_.release_fd()) {
    why = "cannot read the file";
  }
  if (why != nullptr) {
    *error = why;
    elf_ = ElfHandle();
    return false;
  }
  return true;
}

uint64_t CfiModule::entry() const {
  const std::optional<GElf_Ehdr> ehdr = elf_ ? elf_.view().header() : std::nullopt;
  return ehdr ? ehdr->e_entry : 0;
}

CfiModule::PcRange CfiModule::entry_without_cfi() {
  if (entry_gap_known_) return entry_gap_;
  entry_gap_known_ = true;
  const uint64_t entry = this->entry();
  const bool in_code = entry != 0 && std::any_of(segments_.begin(), segments_.end(), [&](const Segment& seg) {
                         return seg.executable && entry >= seg.vaddr && entry < seg.vaddr + seg.filesz;
                       });
  // Without CFI read from the module (none, or a damaged file) nothing says where the gap ends.
  if (!in_code || eh_cfi_ == nullptr) return entry_gap_;
  const size_t ops_before = ops_.size();
  uint64_t end = entry;
  for (FrameRule probe; end < entry + kEntryGapMaxBytes && !compute_either(end, &probe); ++end) {
  }
  ops_.resize(ops_before);  // the probe's expressions are not kept
  entry_gap_ = PcRange{entry, end};
  entry_rule_ = FrameRule{};
  entry_rule_.regs[kRaReg].kind = RuleKind::kUndefined;
  entry_rule_.row_start = entry;
  entry_rule_.row_end = end;
  return entry_gap_;
}

std::string CfiModule::read_build_id() const {
  // Sections first: a debug file found by build-id is checked against the same note.
  return elf_build_id(elf_.get(), BuildIdSearch::kSectionsFirst);
}

void CfiModule::open_debug_frame() {
  debug_tried_ = true;
  if (!elf_) return;
  if (find_section(elf_, ".debug_frame")) {
    debug_dwarf_ = dwarf_begin_elf(elf_.get(), DWARF_C_READ, nullptr);
    if (debug_dwarf_ != nullptr) debug_cfi_ = dwarf_getcfi(debug_dwarf_);
    if (debug_cfi_ != nullptr) {
      summary_.has_debug_frame = true;
      return;
    }
  }
  if (debug_root_.empty()) return;
  const std::string path = build_id_path(debug_root_, build_id_);
  if (path.empty()) return;
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return;
  debug_elf_ = ElfHandle::open_fd(fd.get(), ELF_C_READ_MMAP);
  if (debug_elf_ && !debug_elf_.release_fd()) debug_elf_ = ElfHandle();
  if (!debug_elf_ || !find_section(debug_elf_, ".debug_frame")) return;
  if (debug_dwarf_ != nullptr) dwarf_end(debug_dwarf_);
  debug_dwarf_ = dwarf_begin_elf(debug_elf_.get(), DWARF_C_READ, nullptr);
  debug_cfi_ = debug_dwarf_ != nullptr ? dwarf_getcfi(debug_dwarf_) : nullptr;
  summary_.has_debug_frame = debug_cfi_ != nullptr;
}

bool CfiModule::vaddr_of(uint64_t file_offset, uint64_t* vaddr) const {
  const std::optional<uint64_t> found = vaddr_of_offset(segments_, file_offset);
  if (found) *vaddr = *found;
  return found.has_value();
}

bool CfiModule::read_image(uint64_t vaddr, std::span<uint8_t> out) const {
  if (!elf_) return false;
  for (const Segment& seg : segments_) {
    if (vaddr < seg.vaddr || vaddr - seg.vaddr >= seg.filesz || seg.filesz - (vaddr - seg.vaddr) < out.size())
      continue;
    const uint64_t offset = vaddr - seg.vaddr + seg.offset;
    const std::span<const uint8_t> file = elf_.view().file_bytes();
    if (offset > file.size() || file.size() - offset < out.size()) return false;
    std::memcpy(out.data(), file.data() + offset, out.size());
    return true;
  }
  return false;
}

namespace {

bool store_ops(std::span<const ExprOp> ops, std::vector<ExprOp>* store, uint32_t* begin, uint16_t* len) {
  if (ops.empty() || ops.size() > 64 || store->size() + ops.size() > UINT32_MAX) return false;
  *begin = static_cast<uint32_t>(store->size());
  *len = static_cast<uint16_t>(ops.size());
  store->insert(store->end(), ops.begin(), ops.end());
  return true;
}

// libdw's operations as ExprOps (without their byte offsets); `buffer` holds them.
std::span<const ExprOp> as_expr_ops(const Dwarf_Op* ops, size_t n, std::vector<ExprOp>* buffer) {
  buffer->clear();
  for (size_t i = 0; i < n; ++i) buffer->push_back({ops[i].atom, ops[i].number, ops[i].number2});
  return *buffer;
}

}  // namespace

bool cfa_rule_of(std::span<const ExprOp> ops, std::vector<ExprOp>* store, CfaRule* cfa) {
  if (ops.empty()) return false;
  if (ops.size() == 1 && ops[0].atom == DW_OP_bregx && ops[0].number < kRegCount) {
    cfa->reg = static_cast<uint8_t>(ops[0].number);
    cfa->offset = static_cast<int64_t>(ops[0].number2);
  } else if (ops.size() == 1 && is_breg(ops[0].atom) &&
             ops[0].atom - DW_OP_breg0 < static_cast<int>(kRegCount)) {
    cfa->reg = static_cast<uint8_t>(ops[0].atom - DW_OP_breg0);
    cfa->offset = static_cast<int64_t>(ops[0].number);
  } else {
    cfa->is_expr = true;
    if (!store_ops(ops, store, &cfa->expr_begin, &cfa->expr_len)) return false;
  }
  return true;
}

void reg_rule_of(std::span<const ExprOp> ops, bool same, std::vector<ExprOp>* store, RegRule* out) {
  if (ops.empty()) {
    out->kind = same ? RuleKind::kSameValue : RuleKind::kUndefined;
    return;
  }
  const bool value = ops.back().atom == DW_OP_stack_value;
  if (value) ops = ops.first(ops.size() - 1);
  const size_t n = ops.size();
  if (n == 1 && ops[0].atom == DW_OP_call_frame_cfa) {
    out->kind = value ? RuleKind::kValOffset : RuleKind::kOffset;
    out->offset = 0;
  } else if (n == 2 && ops[0].atom == DW_OP_call_frame_cfa && ops[1].atom == DW_OP_plus_uconst) {
    out->kind = value ? RuleKind::kValOffset : RuleKind::kOffset;
    out->offset = static_cast<int64_t>(ops[1].number);
  } else if (n == 1 && value && ops[0].atom == DW_OP_bregx && ops[0].number < kRegCount) {
    out->kind = RuleKind::kRegister;
    out->reg = static_cast<uint8_t>(ops[0].number);
    out->offset = static_cast<int64_t>(ops[0].number2);
  } else if (n == 1 && !value && ops[0].atom == DW_OP_regx && ops[0].number < kRegCount) {
    out->kind = RuleKind::kRegister;
    out->reg = static_cast<uint8_t>(ops[0].number);
  } else if (n == 1 && !value && is_reg(ops[0].atom) &&
             ops[0].atom - DW_OP_reg0 < static_cast<int>(kRegCount)) {
    out->kind = RuleKind::kRegister;
    out->reg = static_cast<uint8_t>(ops[0].atom - DW_OP_reg0);
  } else if (n > 0) {
    out->kind = value ? RuleKind::kValExpression : RuleKind::kExpression;
    if (!store_ops(ops, store, &out->expr_begin, &out->expr_len)) out->kind = RuleKind::kUndefined;
  } else {
    out->kind = RuleKind::kUndefined;
  }
}

bool CfiModule::compute_either(uint64_t vaddr, FrameRule* rule) {
  const size_t ops_before = ops_.size();
  *rule = FrameRule{};
  if (eh_cfi_ != nullptr && compute(eh_cfi_, vaddr, rule)) return true;
  ops_.resize(ops_before);
  if (!debug_tried_) open_debug_frame();
  *rule = FrameRule{};
  if (debug_cfi_ != nullptr && compute(debug_cfi_, vaddr, rule)) return true;
  ops_.resize(ops_before);
  return false;
}

bool CfiModule::compute(Dwarf_CFI* cfi, uint64_t vaddr, FrameRule* rule) {
  Dwarf_Frame* frame = nullptr;
  if (dwarf_cfi_addrframe(cfi, vaddr, &frame) != 0 || frame == nullptr) return false;
  const std::unique_ptr<Dwarf_Frame, decltype(&std::free)> owner(frame, &std::free);
  Dwarf_Addr start = 0;
  Dwarf_Addr end = 0;
  bool signalp = false;
  if (dwarf_frame_info(frame, &start, &end, &signalp) != static_cast<int>(kRaReg)) return false;
  rule->signal_frame = signalp;
  rule->row_start = start;
  rule->row_end = end;

  std::vector<ExprOp> buffer;
  Dwarf_Op* ops = nullptr;
  size_t nops = 0;
  if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || ops == nullptr ||
      !cfa_rule_of(as_expr_ops(ops, nops, &buffer), &ops_, &rule->cfa))
    return false;
  for (unsigned r = 0; r < kRegCount; ++r) {
    Dwarf_Op mem[3];
    Dwarf_Op* rops = nullptr;
    size_t n = 0;
    if (dwarf_frame_register(frame, static_cast<int>(r), mem, &rops, &n) != 0) {
      rule->regs[r].kind = RuleKind::kUndefined;
      continue;
    }
    // libdw: no operations, with ops == mem for "undefined" and nullptr for "same value".
    reg_rule_of(as_expr_ops(rops, n, &buffer), n == 0 && rops == nullptr, &ops_, &rule->regs[r]);
  }
  return true;
}

const FrameRule* CfiModule::rule_at(uint64_t vaddr, bool* hit) {
  if (auto it = by_pc_.find(vaddr); it != by_pc_.end()) {
    *hit = true;
    return it->second == kNoRule ? nullptr : &rules_[it->second];
  }
  *hit = false;
  if (by_pc_.size() >= max_rules_) {
    // Bounded memory: start over rather than track recency per pc (profiles revisit few pcs).
    by_pc_.clear();
    by_row_start_.clear();
    rules_.clear();
    ops_.clear();
  }
  const size_t ops_before = ops_.size();
  FrameRule rule;
  if (!compute_either(vaddr, &rule)) {
    if (const PcRange gap = entry_without_cfi(); vaddr >= gap.start && vaddr < gap.end) return &entry_rule_;
    by_pc_.emplace(vaddr, kNoRule);
    return nullptr;
  }
  if (auto row = by_row_start_.find(rule.row_start);
      row != by_row_start_.end() && rules_[row->second].row_end == rule.row_end) {
    ops_.resize(ops_before);  // the same row was computed before: keep one copy
    by_pc_.emplace(vaddr, row->second);
    return &rules_[row->second];
  }
  const auto index = static_cast<uint32_t>(rules_.size());
  rules_.push_back(rule);
  by_row_start_[rule.row_start] = index;
  by_pc_.emplace(vaddr, index);
  return &rules_[index];
}

namespace {

// A value of .eh_frame_hdr in the encodings GNU ld, gold, lld and mold write: udata4 (the count),
// datarel|sdata4 (the table) and pcrel|sdata4 (the .eh_frame pointer). `*at` moves past it.
bool read_hdr_value(const uint8_t* base, size_t size, size_t* at, uint8_t encoding, uint64_t section_vaddr,
                    uint64_t* value) {
  if (encoding == 0xff) return false;  // DW_EH_PE_omit
  if (*at + 4 > size) return false;
  const uint8_t format = encoding & 0x0f;
  const uint8_t application = encoding & 0x70;
  int64_t raw = 0;
  if (format == DW_EH_PE_udata4) {
    uint32_t v = 0;
    std::memcpy(&v, base + *at, 4);
    raw = v;
  } else if (format == DW_EH_PE_sdata4) {
    int32_t v = 0;
    std::memcpy(&v, base + *at, 4);
    raw = v;
  } else {
    return false;
  }
  const uint64_t field = section_vaddr + *at;
  *at += 4;
  if (application == 0) {
    *value = static_cast<uint64_t>(raw);
  } else if (application == DW_EH_PE_pcrel) {
    *value = field + static_cast<uint64_t>(raw);
  } else if (application == DW_EH_PE_datarel) {
    *value = section_vaddr + static_cast<uint64_t>(raw);
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool CfiModule::fde_ranges(bool debug_frame, std::vector<FdeRange>* out, std::string* error) {
  out->clear();
  if (!elf_) {
    *error = summary_.error.empty() ? "not opened" : summary_.error;
    return false;
  }
  if (!debug_frame) {
    const ElfSection hdr = find_section(elf_, ".eh_frame_hdr");
    const GElf_Shdr& shdr = hdr.header;
    Elf_Data* data = hdr ? elf_getdata(hdr.scn, nullptr) : nullptr;
    if (data == nullptr || data->d_buf == nullptr || data->d_size < 4) {
      // A static executable: .eh_frame read entry after entry.
      const Section section = eh_frame();
      if (section.bytes.empty()) {
        *error = "no .eh_frame";
        return false;
      }
      EhFrameRows reader(section.bytes, section.vaddr);
      std::string why;
      if (!reader.all_fdes(out, &why)) *error = ".eh_frame without .eh_frame_hdr: " + why;
      return !out->empty();
    }
    const auto* b = static_cast<const uint8_t*>(data->d_buf);
    const size_t size = data->d_size;
    if (b[0] != 1) {
      *error = ".eh_frame_hdr version " + std::to_string(b[0]);
      return false;
    }
    size_t at = 4;
    uint64_t eh_frame = 0;
    uint64_t count = 0;
    if (!read_hdr_value(b, size, &at, b[1], shdr.sh_addr, &eh_frame) ||
        !read_hdr_value(b, size, &at, b[2], shdr.sh_addr, &count)) {
      *error = ".eh_frame_hdr without a search table";
      return false;
    }
    if (count > (size - at) / 8) {
      *error = ".eh_frame_hdr is truncated";
      return false;
    }
    out->reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t start = 0;
      uint64_t fde = 0;
      if (!read_hdr_value(b, size, &at, b[3], shdr.sh_addr, &start) ||
          !read_hdr_value(b, size, &at, b[3], shdr.sh_addr, &fde)) {
        *error = ".eh_frame_hdr table encoding " + std::to_string(b[3]) + " is not supported";
        out->clear();
        return false;
      }
      out->push_back({start, 0, fde});
    }
    return true;
  }
  if (!debug_tried_) open_debug_frame();
  if (debug_cfi_ == nullptr) {
    *error = "no .debug_frame";
    return false;
  }
  const ElfHandle& elf = debug_elf_ ? debug_elf_ : elf_;
  const ElfSection scn = find_section(elf, ".debug_frame");
  Elf_Data* data = scn ? elf_getdata(scn.scn, nullptr) : nullptr;
  const unsigned char* ident = reinterpret_cast<const unsigned char*>(elf_getident(elf.get(), nullptr));
  if (data == nullptr || ident == nullptr) {
    *error = "cannot read .debug_frame";
    return false;
  }
  Dwarf_Off offset = 0;
  for (;;) {
    Dwarf_Off next = 0;
    Dwarf_CFI_Entry entry;
    const int rc = dwarf_next_cfi(ident, data, false, offset, &next, &entry);
    if (rc == 1) break;
    if (rc != 0) {
      *error = std::string(".debug_frame: ") + dwarf_errmsg(-1);
      break;  // keep the FDEs read before the damage
    }
    offset = next;
    if (dwarf_cfi_cie_p(&entry)) continue;
    const uint8_t* p = entry.fde.start;
    if (p == nullptr || entry.fde.end - p < 16) continue;
    uint64_t start = 0;
    uint64_t length = 0;
    std::memcpy(&start, p, 8);
    std::memcpy(&length, p + 8, 8);
    if (length != 0 && start + length > start) out->push_back({start, start + length, 0});
  }
  return !out->empty();
}

CfiModule::Section CfiModule::eh_frame() const {
  const ElfSection scn = elf_ ? find_section(elf_, ".eh_frame") : ElfSection{};
  Elf_Data* data = scn ? elf_getdata(scn.scn, nullptr) : nullptr;
  if (data == nullptr || data->d_buf == nullptr) return {};
  return {std::span<const uint8_t>(static_cast<const uint8_t*>(data->d_buf), data->d_size),
          scn.header.sh_addr};
}

bool CfiModule::row_for_table(bool debug_frame, uint64_t vaddr, FrameRule* rule) {
  ops_.clear();
  by_pc_.clear();  // rule_at's cached rules point into ops_
  by_row_start_.clear();
  rules_.clear();
  *rule = FrameRule{};
  Dwarf_CFI* cfi = debug_frame ? debug_cfi_ : eh_cfi_;
  return cfi != nullptr && compute(cfi, vaddr, rule);
}

uint64_t CfiModule::memory_bytes() const {
  constexpr uint64_t kNode = 48;  // an unordered_map node with its bucket share, roughly
  return sizeof(*this) + (by_pc_.size() + by_row_start_.size()) * kNode +
         rules_.capacity() * sizeof(FrameRule) + ops_.capacity() * sizeof(ExprOp) +
         segments_.capacity() * sizeof(Segment);
}

}  // namespace hpd::unwind_detail
