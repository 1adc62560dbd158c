// KernelSymbols: the kernel's text symbols from /proc/kallsyms, sorted for binary search.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <iterator>
#include <string_view>

#include "hpd/base/unique_fd.h"
#include "hpd/model/raw_profile.h"
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

bool parse_kallsyms_line(std::string_view s, KallsymsLine& out) {
  // "ADDRESS T NAME" then, for a module's symbol, "\t[MODULE]"; one space between the first fields.
  const size_t sp1 = s.find(' ');
  if (sp1 == 0 || sp1 == std::string_view::npos || sp1 + 3 > s.size() || s[sp1 + 2] != ' ') return false;
  uint64_t address = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + sp1, address, 16);
  if (ec != std::errc() || ptr != s.data() + sp1) return false;
  std::string_view name = s.substr(sp1 + 3);
  std::string_view module;
  if (const size_t tab = name.find('\t'); tab != std::string_view::npos) {
    module = name.substr(tab + 1);
    name = name.substr(0, tab);
  }
  if (name.empty()) return false;
  out.address = address;
  out.type = s[sp1 + 1];
  out.name = name;
  out.module = module;
  return true;
}

void KernelSymbols::add_line(std::string_view text) {
  KallsymsLine line;
  if (!parse_kallsyms_line(text, line) || !is_text_type(line.type)) return;
  if (line.address != 0) any_nonzero_ = true;
  symbols_.push_back(Symbol{line.address, static_cast<uint32_t>(names_.size()), line.type});
  names_ += line.name;
  if (!line.module.empty()) {
    names_ += ' ';
    names_ += line.module;  // already "[module]"
  }
  names_ += '\0';
}

bool KernelSymbols::finish() {
  if (!any_nonzero_) {  // kptr_restrict hides the addresses: the table is useless
    symbols_.clear();
    names_.clear();
    return false;
  }
  std::stable_sort(symbols_.begin(), symbols_.end(),
                   [](const Symbol& a, const Symbol& b) { return a.address < b.address; });
  // Zero addresses (a few per-cpu and absolute symbols) would swallow every low address.
  symbols_.erase(
      std::remove_if(symbols_.begin(), symbols_.end(), [](const Symbol& x) { return x.address == 0; }),
      symbols_.end());
  // Held for long in hpd (its kept table): what the reading's growth left beyond a little room for code
  // added later (replace_range) is given back.
  constexpr size_t kRoomSymbols = 512;
  if (symbols_.capacity() > symbols_.size() + kRoomSymbols) {
    std::vector<Symbol> fitted;
    fitted.reserve(symbols_.size() + kRoomSymbols);
    fitted.assign(symbols_.begin(), symbols_.end());
    symbols_.swap(fitted);
  }
  constexpr size_t kRoomNames = 64 * kRoomSymbols;
  if (names_.capacity() > names_.size() + kRoomNames) {
    std::string fitted;
    fitted.reserve(names_.size() + kRoomNames);
    fitted.assign(names_);
    names_.swap(fitted);
  }
  return true;
}

bool KernelSymbols::load(const std::string& path) {
  symbols_.clear();
  names_.clear();
  any_nonzero_ = false;
  last_end_ = 0;
  // Read in blocks and split as it comes: /proc/kallsyms has no size, and the whole text (several MiB)
  // need not be held at once.
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  std::string pending;
  char block[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), block, sizeof block);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      symbols_.clear();
      names_.clear();
      return false;
    }
    if (n == 0) break;
    std::string_view data(block, static_cast<size_t>(n));
    // A line cut by the previous block: complete it first.
    if (!pending.empty()) {
      const size_t end = data.find('\n');
      pending.append(data.substr(0, end));
      if (end == std::string_view::npos) continue;
      add_line(pending);
      pending.clear();
      data.remove_prefix(end + 1);
    }
    for (size_t end; (end = data.find('\n')) != std::string_view::npos; data.remove_prefix(end + 1))
      add_line(data.substr(0, end));
    pending.assign(data);
  }
  if (!pending.empty()) add_line(pending);
  return finish();
}

bool KernelSymbols::load_text(std::string_view text) {
  symbols_.clear();
  names_.clear();
  any_nonzero_ = false;
  last_end_ = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    add_line(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return finish();
}

std::string KernelSymbols::lines_for(std::span<const uint64_t> addresses) const {
  if (symbols_.empty()) return {};
  std::vector<size_t> picked{0};
  for (const uint64_t address : addresses) {
    std::vector<Symbol>::const_iterator next;
    auto it = holder(address, next);
    if (it == symbols_.end()) continue;
    while (it != symbols_.begin() && std::prev(it)->address == it->address) --it;
    picked.push_back(static_cast<size_t>(it - symbols_.begin()));
    if (next != symbols_.end()) picked.push_back(static_cast<size_t>(next - symbols_.begin()));
  }
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  std::string out;
  char hex[17];
  for (const size_t i : picked) {
    const Symbol& s = symbols_[i];
    const auto [end, ec] = std::to_chars(hex, hex + sizeof hex, s.address, 16);
    out.append(hex, end);
    out += ' ';
    out += s.type;
    out += ' ';
    // A module's symbol is stored as "func [module]"; kallsyms writes "func\t[module]".
    std::string_view n = name(s);
    if (const size_t bracket = n.rfind(" ["); bracket != std::string_view::npos && n.back() == ']') {
      out.append(n.substr(0, bracket));
      out += '\t';
      out.append(n.substr(bracket + 1));
    } else {
      out.append(n);
    }
    out += '\n';
  }
  return out;
}

std::string kernel_symbol_lines(const RawProfile& profile, const KernelSymbols& symbols,
                                std::vector<uint64_t>* unresolved) {
  std::vector<uint64_t> addresses;
  for (const uint64_t a : profile.kernel_addresses()) {  // those of stacks let go too
    addresses.push_back(a);
    if (a != 0) addresses.push_back(a - 1);
  }
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  if (unresolved != nullptr) {
    unresolved->clear();
    for (const uint64_t a : addresses)
      if (!symbols.resolve(a).found) unresolved->push_back(a);
  }
  return addresses.empty() ? std::string() : symbols.lines_for(addresses);
}

void KernelSymbols::replace_range(uint64_t start, uint64_t end, std::string_view name, char type) {
  if (symbols_.empty() || start == 0 || end <= start || name.empty() || !is_text_type(type)) return;
  const auto by_address = [](const Symbol& s, uint64_t a) { return s.address < a; };
  const auto first = std::lower_bound(symbols_.begin(), symbols_.end(), start, by_address);
  const auto last = std::lower_bound(first, symbols_.end(), end, by_address);
  const Symbol added{start, static_cast<uint32_t>(names_.size()), type};
  names_ += name;
  names_ += '\0';
  const auto inserted = symbols_.insert(symbols_.erase(first, last), added);
  if (std::next(inserted) == symbols_.end()) last_end_ = end;
}

bool KernelSymbols::of_image(const Symbol& s) const {
  return std::string_view(name(s)).find(' ') == std::string_view::npos;
}

std::vector<KernelSymbols::Symbol>::const_iterator KernelSymbols::after(uint64_t address) const {
  return std::upper_bound(symbols_.begin(), symbols_.end(), address,
                          [](uint64_t a, const Symbol& s) { return a < s.address; });
}

bool KernelSymbols::in_kernel_image(uint64_t address) const {
  const auto next = after(address);
  if (next == symbols_.begin() || next == symbols_.end()) return false;
  return of_image(*std::prev(next)) && of_image(*next);
}

std::vector<KernelSymbols::Symbol>::const_iterator KernelSymbols::holder(
    uint64_t address, std::vector<Symbol>::const_iterator& next) const {
  next = after(address);
  if (next == symbols_.begin()) return symbols_.end();
  const auto it = std::prev(next);
  // The image's last symbol (its next is a module's or a BPF program's, or none) does not reach into
  // the modules' area: seen naming the address of an unloaded BPF program "_einittext".
  if (next == symbols_.end() && last_end_ > it->address) return address < last_end_ ? it : symbols_.end();
  const bool last_of_its_kind = next == symbols_.end() || (of_image(*it) && !of_image(*next));
  if (last_of_its_kind && address - it->address >= kTailSlack) return symbols_.end();
  return it;
}

Location KernelSymbols::resolve(uint64_t address) const {
  Location loc;
  loc.rel_address = address - base();
  std::vector<Symbol>::const_iterator next;
  auto it = holder(address, next);
  if (it == symbols_.end()) return loc;
  // Several names at one address (aliases): upper_bound lands after the last; use the first one
  // listed at that address, which is the canonical one in kallsyms order.
  auto first = it;
  while (first != symbols_.begin() && std::prev(first)->address == it->address) --first;
  const uint64_t end = next != symbols_.end() ? next->address : last_end_;
  const uint64_t size = end > it->address ? end - it->address : 0;
  loc.found = true;
  loc.symbol = name(*first);
  loc.symbol_address = first->address - base();
  loc.symbol_size = size;
  loc.frames.push_back(SourceFrame{loc.symbol, {}, 0, 0});
  return loc;
}

}  // namespace hpd
