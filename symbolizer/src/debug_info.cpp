// DebugInfo factory: adapts the DWARF index (src/dwarf/) when it is built in, else reports none.
#include "debug_info.h"

#ifdef HPD_HAVE_DWARF_INDEX
#include "dwarf/dwarf_index.h"
#endif

namespace hpd {

#ifdef HPD_HAVE_DWARF_INDEX
namespace {

DebugPlace to_debug_place(const DwarfIndex::Place& p) {
  return DebugPlace{{p.unit, p.node, p.file, p.line, p.column}};
}

class DwarfDebugInfo final : public DebugInfo {
 public:
  explicit DwarfDebugInfo(std::unique_ptr<DwarfIndex> index) : index_(std::move(index)) {}
  void lookup(uint64_t vaddr, std::vector<SourceFrameView>& frames) override {
    index_->lookup(vaddr, frames);
  }
  std::vector<uint64_t> plan(std::span<const uint64_t> vaddrs) override { return index_->plan(vaddrs); }
  DebugPlace locate_planned(uint64_t vaddr) override { return to_debug_place(index_->locate_planned(vaddr)); }
  void describe(const DebugPlace& place, std::vector<SourceFrameView>& frames) override {
    const uint32_t* p = place.part;
    index_->describe(DwarfIndex::Place{p[0], p[1], p[2], p[3], p[4]}, frames);
  }
  void prefetch(const DebugPlace& place, int step) override {
    const uint32_t* p = place.part;
    index_->prefetch(DwarfIndex::Place{p[0], p[1], p[2], p[3], p[4]}, step);
  }
  std::vector<std::pair<uint64_t, uint64_t>> call_site_callee(uint64_t return_vaddr) override {
    return index_->call_site_callee(return_vaddr);
  }
  size_t memory_bytes() const override { return index_->memory_bytes(); }

 private:
  std::unique_ptr<DwarfIndex> index_;
};

}  // namespace

std::unique_ptr<DebugInfo> open_debug_info(const std::string& debug_path, std::string* error,
                                           std::string (*rewrite_name)(const std::string&)) {
  std::unique_ptr<DwarfIndex> index = DwarfIndex::open(debug_path, error, rewrite_name);
  if (!index) return nullptr;
  return std::make_unique<DwarfDebugInfo>(std::move(index));
}

#else

std::unique_ptr<DebugInfo> open_debug_info(const std::string& debug_path, std::string* error,
                                           std::string (*)(const std::string&)) {
  if (error) *error = "built without a DWARF index; " + debug_path + " is used for its symbol table only";
  return nullptr;
}

#endif

}  // namespace hpd
