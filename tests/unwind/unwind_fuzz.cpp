// libFuzzer target: Unwinder::unwind and frameless_leaf_return with registers and stack bytes from
// the input, against this process's real executable mappings (real CFI from libc and friends).
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "hpd/unwind/unwinder.h"

namespace {

struct World {
  std::vector<hpd::RawModule> modules;
  hpd::RawProcess process;
  hpd::Unwinder unwinder{
      hpd::UnwinderOptions{.max_frames = 128, .max_modules = 8, .max_rules_per_module = 4096}};
};

World& world() {
  static World* w = [] {
    auto* w = new World;
    w->process.pid = getpid();
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      uint64_t start = 0, end = 0, offset = 0;
      char perms[8] = {};
      int pos = 0;
      if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %n", &start, &end, perms,
                      &offset, &pos) < 4 ||
          perms[2] != 'x') {
        continue;
      }
      std::string path = pos > 0 && static_cast<size_t>(pos) <= line.size() ? line.substr(pos) : "[anon]";
      w->modules.emplace_back().path = path;
      w->process.mappings.push_back(
          hpd::RawMapping{start, end, offset, static_cast<uint32_t>(w->modules.size() - 1), 0, 0});
    }
    return w;
  }();
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  constexpr size_t kHeader = 1 + hpd::kDwarfRegCount * 8;
  if (size < kHeader || w.process.mappings.empty()) return 0;
  hpd::UserRegs regs;
  for (unsigned r = 0; r < hpd::kDwarfRegCount; ++r) {
    uint64_t v = 0;
    std::memcpy(&v, data + 1 + r * 8, 8);
    regs.set(static_cast<hpd::DwarfReg>(r), v);
  }
  const uint8_t mode = data[0];
  // Mostly put ip inside real code so that real CFI rows are evaluated on the garbage stack.
  if ((mode & 3) != 0) {
    const auto& m = w.process.mappings[(mode >> 2) % w.process.mappings.size()];
    regs.set(hpd::DwarfReg::kRip, m.start + regs.ip() % (m.end - m.start));
  }
  if ((mode & 0x40) != 0) regs.valid &= ~(1u << (regs.ip() % hpd::kDwarfRegCount));  // a missing register
  const std::span<const uint8_t> stack(data + kHeader, size - kHeader);
  const hpd::StackCopy copy{regs.sp(), stack, (mode & 0x80) != 0 ? stack.size() + 8 : 0};
  const hpd::UnwindContext ctx{&w.process, &w.modules, 0};
  std::vector<uint64_t> out;
  const hpd::StackEnd end = w.unwinder.unwind(ctx, regs, copy, out);
  if (end == hpd::StackEnd::kUnknown || out.size() > 128) __builtin_trap();
  (void)w.unwinder.frameless_leaf_return(ctx, regs, copy);
  return 0;
}
