// KernelSymbols: the kernel's text symbols from /proc/kallsyms, sorted for binary search.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <string_view>

#include "hpd/symbolizer/symbolizer.h"

namespace hpd {
namespace {

// How far past the last symbol an address is still attributed to it. Beyond that it is more
// likely an address of something kallsyms does not list (BPF JIT, trampolines) than code.
constexpr uint64_t kTailSlack = 1 << 20;

bool is_text_type(char t) {
  return t == 't' || t == 'T' || t == 'w' || t == 'W';
}

}  // namespace

bool KernelSymbols::load(const std::string& path) {
  symbols_.clear();
  std::ifstream in(path);
  if (!in) return false;
  std::vector<Symbol> symbols;
  bool any_nonzero = false;
  std::string line;
  while (std::getline(in, line)) {
    // "ffffffff81000000 T _stext" or "ffffffffc0a01000 t func\t[module]"
    std::string_view s = line;
    const size_t sp1 = s.find(' ');
    if (sp1 == std::string_view::npos || sp1 + 3 > s.size() || s[sp1 + 2] != ' ') continue;
    uint64_t address = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + sp1, address, 16);
    if (ec != std::errc() || ptr != s.data() + sp1) continue;
    if (!is_text_type(s[sp1 + 1])) continue;
    std::string_view rest = s.substr(sp1 + 3);
    std::string_view module;
    if (const size_t tab = rest.find('\t'); tab != std::string_view::npos) {
      module = rest.substr(tab + 1);
      rest = rest.substr(0, tab);
    }
    if (rest.empty()) continue;
    if (address != 0) any_nonzero = true;
    std::string name(rest);
    if (!module.empty()) {
      name += ' ';
      name += module;  // already "[module]"
    }
    symbols.push_back(Symbol{address, std::move(name)});
  }
  if (!any_nonzero) return false;  // kptr_restrict hides the addresses: the table is useless
  std::stable_sort(symbols.begin(), symbols.end(),
                   [](const Symbol& a, const Symbol& b) { return a.address < b.address; });
  // Zero addresses (a few per-cpu and absolute symbols) would swallow every low address.
  symbols.erase(
      std::remove_if(symbols.begin(), symbols.end(), [](const Symbol& x) { return x.address == 0; }),
      symbols.end());
  symbols_ = std::move(symbols);
  return true;
}

Location KernelSymbols::resolve(uint64_t address) const {
  Location loc;
  loc.rel_address = address - base();
  auto it = std::upper_bound(symbols_.begin(), symbols_.end(), address,
                             [](uint64_t a, const Symbol& s) { return a < s.address; });
  if (it == symbols_.begin()) return loc;
  const auto next = it;
  --it;
  // Several names at one address (aliases): upper_bound lands after the last; use the first one
  // listed at that address, which is the canonical one in kallsyms order.
  auto first = it;
  while (first != symbols_.begin() && std::prev(first)->address == it->address) --first;
  uint64_t size = 0;
  if (next != symbols_.end()) {
    size = next->address - it->address;
  } else if (address - it->address >= kTailSlack) {
    return loc;
  }
  loc.found = true;
  loc.symbol = first->name;
  loc.symbol_address = first->address - base();
  loc.symbol_size = size;
  loc.frames.push_back(SourceFrame{first->name, {}, 0, 0});
  return loc;
}

}  // namespace hpd
