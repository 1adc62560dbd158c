// Symbolizer: the lookup. Resolves addresses in a module's tables (symbols, then DWARF inline
// chains) in address or compile-unit order; files come from DebugFileFinder, tables from ModuleCache.
#include "hpd/symbolizer/symbolizer.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <utility>
#include <vector>

#include "debug_file_finder.h"
#include "loaded_module.h"
#include "module_cache.h"
#include "prepared_addresses.h"

namespace hpd {
namespace {

// Whether `symbol` (demangled) is a qualified name whose last component is `name`, an unqualified
// DWARF name: "ns::{lambda(int)#1}::operator()(int) const" for "operator()".
bool qualifies(std::string_view symbol, std::string_view name) {
  if (name.empty() || name.find("::") != std::string_view::npos) return false;
  const std::string needle = "::" + std::string(name) + "(";
  return symbol.find(needle) != std::string_view::npos;
}

// `symbol` without the clone suffixes the demangler appends (" (.isra.0)", " [clone .cold]").
std::string_view without_clone_suffix(std::string_view symbol) {
  while (!symbol.empty()) {
    const size_t paren = symbol.rfind(" (.");
    const size_t bracket = symbol.rfind(" [clone .");
    if (paren != std::string_view::npos && symbol.back() == ')' &&
        (bracket == std::string_view::npos || paren > bracket)) {
      symbol = symbol.substr(0, paren);
    } else if (bracket != std::string_view::npos && symbol.back() == ']') {
      symbol = symbol.substr(0, bracket);
    } else {
      break;
    }
  }
  return symbol;
}

// Least-significant-digit radix sort of `items` by bits [low_bit, 64) of each, stably: only over
// the bytes in which those bits differ. One module's addresses span a few megabytes, so three
// passes over a batch usually do, where std::sort makes log2(n) rounds of comparisons (a twentieth
// of hpctl symbolize's time on 100,000 addresses).
template <class T, class KeyOf>
void radix_sort(std::vector<T>& items, unsigned low_bit, KeyOf key_of) {
  uint64_t all_or = 0, all_and = ~uint64_t{0};
  for (const T& item : items) {
    all_or |= key_of(item);
    all_and &= key_of(item);
  }
  const uint64_t varying = (all_or ^ all_and) >> low_bit << low_bit;
  std::vector<T> scratch(items.size());
  for (unsigned shift = low_bit / 8 * 8; shift < 64; shift += 8) {
    if (((varying >> shift) & 0xff) == 0) continue;
    size_t start[256] = {};
    for (const T& item : items) ++start[(key_of(item) >> shift) & 0xff];
    size_t sum = 0;
    for (size_t& c : start) {
      const size_t count = c;
      c = sum;
      sum += count;
    }
    for (const T& item : items) scratch[start[(key_of(item) >> shift) & 0xff]++] = item;
    items.swap(scratch);
  }
}

// Calls fn(key, i) for the n keys key_at(i) (addresses, or a DebugInfo's order keys) in key
// order, equal keys in the order given, and before each upcoming(j) with the index fn will see
// kUpcoming calls later (for prefetching); keys_read() once key_at will not be called again. The
// batch's order costs 8 bytes a key when the span of the keys leaves room for the index beside
// the offset in one word (one module's addresses always do), else 16.
constexpr size_t kUpcoming = 8;
template <class KeyAt, class Fn, class Upcoming, class KeysRead>
void for_each_in_key_order(size_t n, KeyAt key_at, Fn fn, Upcoming upcoming, KeysRead keys_read) {
  if (n == 0) return;
  uint64_t low = UINT64_MAX, high = 0;
  for (size_t i = 0; i < n; ++i) {
    low = std::min(low, key_at(i));
    high = std::max(high, key_at(i));
  }
  const unsigned index_bits = static_cast<unsigned>(std::bit_width(n - 1));
  if (index_bits < 64 && ((high - low) >> (63 - index_bits)) == 0) {
    // (offset << index_bits | i): in the order given, and so already ordered by the index bits
    // below `index_bits`, which the sort can then leave alone.
    std::vector<uint64_t> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = (key_at(i) - low) << index_bits | i;
    keys_read();
    if (n < 64) {
      std::sort(keys.begin(), keys.end());
    } else {
      radix_sort(keys, index_bits, [](uint64_t k) { return k; });
    }
    const uint64_t mask = (uint64_t{1} << index_bits) - 1;
    for (size_t k = 0; k < n; ++k) {
      if (k + kUpcoming < n) upcoming(static_cast<size_t>(keys[k + kUpcoming] & mask));
      fn(low + (keys[k] >> index_bits), static_cast<size_t>(keys[k] & mask));
    }
    return;
  }
  std::vector<std::pair<uint64_t, uint32_t>> pairs(n);
  for (size_t i = 0; i < n; ++i) pairs[i] = {key_at(i), static_cast<uint32_t>(i)};
  keys_read();
  radix_sort(pairs, 0, [](const std::pair<uint64_t, uint32_t>& p) { return p.first; });
  for (size_t k = 0; k < n; ++k) {
    if (k + kUpcoming < n) upcoming(pairs[k + kUpcoming].second);
    fn(pairs[k].first, pairs[k].second);
  }
}

}  // namespace

struct Symbolizer::Impl {
  explicit Impl(SymbolizerOptions opts)
      : options(std::move(opts)),
        finder(options.debug_root, options.debuginfod, options.open_file),
        cache(options.cache_bytes, [this](const ModuleRef& ref, ModuleInfo& info) {
          return load_module(finder, ref, options.demangle, info);
        }) {}

  SymbolizerOptions options;
  DebugFileFinder finder;
  ModuleCache cache;

  // Resolves n addresses, the i-th at vaddr_at(i), into out[i], searching them in address order:
  // each compile unit's tables and each stretch of the symbol table are then walked once, in
  // order, rather than once per address in whatever order the caller has them.
  template <class VaddrAt>
  std::vector<Location> resolve_in_address_order(ModuleCache::Entry& e, size_t n, VaddrAt vaddr_at) {
    std::vector<Location> out(n);
    if (!e.loaded) {
      for (size_t i = 0; i < n; ++i) out[i].rel_address = vaddr_at(i) - e.info.image_base;
      return out;
    }
    for_each_in_key_order(
        n, vaddr_at, [&](uint64_t vaddr, size_t i) { locate_vaddr(*e.loaded, e.info, vaddr, out[i]); },
        [&](size_t i) { __builtin_prefetch(&out[i], 1); }, [] {});
    cache.remeasure(e, n);
    return out;
  }

  void prepare(ModuleCache::Entry& e, std::span<const uint64_t> vaddrs) {
    if (!e.loaded) return;
    LoadedModule& m = *e.loaded;
    std::vector<PreparedAddresses::Entry> entries(vaddrs.size());
    // In the debug information's order (unit by unit) when it has one, else in address order.
    std::vector<uint64_t> order;
    if (m.debug) order = m.debug->plan(vaddrs);
    const bool by_order = order.size() == vaddrs.size();
    size_t previous = SIZE_MAX;
    uint64_t previous_vaddr = 0;  // kept here: the entries are written in the caller's order, at random
    for_each_in_key_order(
        vaddrs.size(), [&](size_t i) { return by_order ? order[i] : vaddrs[i]; },
        [&](uint64_t, size_t i) {
          const uint64_t vaddr = vaddrs[i];
          if (previous != SIZE_MAX && previous_vaddr == vaddr) {
            entries[i] = entries[previous];
            if (m.debug) m.debug->locate_planned(vaddr);  // a repeat still counts against the plan
          } else {
            const SymbolTable::Symbol* symbol = m.symbols.find(vaddr);
            uint32_t index = PreparedAddresses::kNoSymbol;
            if (symbol != nullptr) {
              m.symbols.display_name(*symbol, options.demangle);  // now, in search order
              index = static_cast<uint32_t>(
                  std::min<size_t>(symbol - m.symbols.symbols().data(), PreparedAddresses::kFindSymbol));
            }
            entries[i] = {vaddr, m.debug ? m.debug->locate_planned(vaddr) : DebugPlace{}, index};
          }
          previous = i;
          previous_vaddr = vaddr;
        },
        // The entries are written in the caller's order, at random: ask for each line ahead.
        [&](size_t i) { __builtin_prefetch(&entries[i], 1); }, [&] { std::vector<uint64_t>().swap(order); });
    m.prepared.assign(std::move(entries));
    cache.remeasure(e, vaddrs.size() + 2);  // always: the tables grew by a batch
  }

  // Fills `loc` with what `vaddr` resolves to, its strings viewing the module's tables.
  void locate_vaddr(LoadedModule& m, const ModuleInfo& info, uint64_t vaddr, LocationView& loc) const {
    const uint64_t base = info.image_base;
    loc.found = false;
    loc.symbol = {};
    loc.symbol_version = {};
    loc.symbol_address = loc.symbol_size = 0;
    loc.rel_address = vaddr - base;
    const PreparedAddresses::Entry* prepared = m.prepared.take(vaddr, m.debug.get(), m.symbols);
    const SymbolTable::Symbol* sym = prepared == nullptr || prepared->symbol == PreparedAddresses::kFindSymbol
                                         ? m.symbols.find(vaddr)
                                         : PreparedAddresses::symbol_of(*prepared, m.symbols);
    if (m.debug && prepared != nullptr) {
      m.debug->describe(prepared->place, loc.frames);
    } else if (m.debug) {
      m.debug->lookup(vaddr, loc.frames);
    } else {
      loc.frames.clear();
    }
    if (!options.inline_frames && loc.frames.size() > 1) loc.frames.resize(1);
    if (sym != nullptr) {
      loc.found = true;
      loc.symbol = m.symbols.display_name(*sym, options.demangle);
      loc.symbol_version = m.symbols.version(*sym);
      loc.symbol_address = sym->address - base;
      loc.symbol_size = sym->size != 0 ? sym->size : sym->end - sym->address;
      // The outermost frame is named as llvm-symbolizer names it from a stripped binary and its
      // separate debug file, wherever the DWARF is: by the function the binary exports there
      // (.dynsym: libc's ftello, not DWARF's __GI___ftello), else as DWARF names the function (its
      // linkage name, demangled, else its DW_AT_name), not by whichever local ELF alias or
      // compiler clone (".isra.0", ".cold") the full symbol table holds at the address; else by
      // that symbol. (Given a binary with its .symtab, llvm-symbolizer 14 names the function from
      // .symtab, so its names change with where the debug information is; hpd's do not. `symbol`
      // keeps the .symtab name: it identifies the code, for disassembly and native symbols.)
      // One exception: a DWARF name that is only the function's unqualified DW_AT_name (gcc gives
      // a lambda's operator() and a function of an anonymous namespace no linkage name) is named by
      // the symbol that qualifies it ("(anonymous namespace)::helper(long)",
      // "main::{lambda(int)#1}::operator()(int) const", as llvm-symbolizer names them from a binary
      // with its .symtab), its clone suffix dropped: else every lambda of a program is one
      // "operator()".
      // An inline level of the function itself (a recursive call inlined into it, as in glibc's
      // _IO_default_xsputn, which DWARF names __GI__IO_default_xsputn at both levels) takes the
      // exported name too, so that one function is one row (llvm-symbolizer names the inline level
      // by DWARF and the outer frame by .dynsym: two names for one function).
      if (loc.frames.empty()) loc.frames.emplace_back();
      std::string_view& outer = loc.frames.front().function;
      if (const SymbolTable::Symbol* exported = m.exported.find(vaddr)) {
        const std::string_view dwarf_outer = outer;
        outer = m.exported.display_name(*exported, options.demangle);
        for (size_t i = 1; i < loc.frames.size() && !dwarf_outer.empty(); ++i) {
          if (loc.frames[i].function == dwarf_outer) loc.frames[i].function = outer;
        }
      } else if (outer.empty()) {
        outer = loc.symbol;
      } else if (qualifies(loc.symbol, outer)) {
        outer = without_clone_suffix(loc.symbol);
      }
      // Also llvm's: with no file from DWARF, a local symbol's STT_FILE name (line 0).
      if (loc.frames.front().file.empty()) loc.frames.front().file = m.symbols.file(*sym);
    } else if (!loc.frames.empty() && loc.frames.front().function.empty()) {
      // A line-table row but neither a symbol nor a function DIE (hand-written assembly, a
      // function whose DIE the compiler dropped): no function, but the line is still worth
      // printing, as llvm-symbolizer does. `found` stays false: there is no function to attribute.
      loc.frames.resize(1);
    } else if (!loc.frames.empty()) {
      // Debug information without a symbol (a stripped .symtab): name from DWARF, start unknown.
      loc.found = true;
      loc.symbol = loc.frames.front().function;
      loc.symbol_address = loc.rel_address;
    }
  }

  // The same into `loc`, copied (reusing its strings' storage).
  void locate_vaddr(LoadedModule& m, const ModuleInfo& info, uint64_t vaddr, Location& loc) {
    locate_vaddr(m, info, vaddr, view_);
    loc.found = view_.found;
    loc.symbol.assign(view_.symbol);
    loc.symbol_version.assign(view_.symbol_version);
    loc.symbol_address = view_.symbol_address;
    loc.symbol_size = view_.symbol_size;
    loc.rel_address = view_.rel_address;
    loc.frames.resize(view_.frames.size());
    for (size_t i = 0; i < view_.frames.size(); ++i) {
      const SourceFrameView& from = view_.frames[i];
      SourceFrame& to = loc.frames[i];
      to.function.assign(from.function);
      to.file.assign(from.file);
      to.line = from.line;
      to.column = from.column;
    }
  }
  LocationView view_;  // the copying locate_vaddr's scratch
};

Symbolizer::Symbolizer(SymbolizerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Symbolizer::~Symbolizer() = default;

const ModuleInfo& Symbolizer::module_info(const ModuleRef& module) {
  return impl_->cache.get(module).info;
}

std::vector<Location> Symbolizer::resolve(const ModuleRef& module, std::span<const uint64_t> file_offsets) {
  ModuleCache::Entry& e = impl_->cache.get(module);
  if (!e.loaded) {
    // No program headers: the offsets themselves are the best relative addresses there are.
    std::vector<Location> out(file_offsets.size());
    for (size_t i = 0; i < out.size(); ++i) out[i].rel_address = file_offsets[i];
    return out;
  }
  const SegmentMap& segments = e.loaded->segments;
  return impl_->resolve_in_address_order(e, file_offsets.size(),
                                         [&](size_t i) { return segments.vaddr_of(file_offsets[i]); });
}

std::vector<Location> Symbolizer::resolve_vaddrs(const ModuleRef& module, std::span<const uint64_t> vaddrs) {
  ModuleCache::Entry& e = impl_->cache.get(module);
  return impl_->resolve_in_address_order(e, vaddrs.size(), [&](size_t i) { return vaddrs[i]; });
}

std::vector<std::vector<std::pair<uint64_t, uint64_t>>> Symbolizer::call_site_callees(
    const ModuleRef& module, std::span<const uint64_t> file_offsets) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> out(file_offsets.size());
  ModuleCache::Entry& e = impl_->cache.get(module);
  if (!e.loaded || !e.loaded->debug) return out;
  const uint64_t base = e.info.image_base;
  const SymbolTable& symbols = e.loaded->symbols;
  for (size_t i = 0; i < file_offsets.size(); ++i) {
    out[i] = e.loaded->debug->call_site_callee(e.loaded->segments.vaddr_of(file_offsets[i]) + 1);
    // Each part of the callee's code must begin where a function symbol does. The linker keeps one
    // copy of an inline or template function (COMDAT) and points the discarded copies' DWARF at
    // address 0 (or at the kept copy): a unit may describe code that is not there, and the frame
    // below, in the copy kept, would look like another function.
    const bool real =
        std::all_of(out[i].begin(), out[i].end(), [&](const std::pair<uint64_t, uint64_t>& range) {
          const SymbolTable::Symbol* symbol = symbols.find(range.first);
          return symbol != nullptr && symbol->address == range.first;
        });
    if (!real) out[i].clear();
    for (std::pair<uint64_t, uint64_t>& range : out[i]) {
      range.first -= base;
      range.second -= base;
    }
  }
  impl_->cache.remeasure(e, file_offsets.size());
  return out;
}

void Symbolizer::prepare(const ModuleRef& module, std::span<const uint64_t> file_offsets) {
  ModuleCache::Entry& e = impl_->cache.get(module);
  if (!e.loaded) return;
  std::vector<uint64_t> vaddrs(file_offsets.size());
  for (size_t i = 0; i < vaddrs.size(); ++i) vaddrs[i] = e.loaded->segments.vaddr_of(file_offsets[i]);
  impl_->prepare(e, vaddrs);
}

void Symbolizer::prepare_vaddrs(const ModuleRef& module, std::span<const uint64_t> vaddrs) {
  ModuleCache::Entry& e = impl_->cache.get(module);
  impl_->prepare(e, vaddrs);
}

void Symbolizer::resolve_vaddr(const ModuleRef& module, uint64_t vaddr, Location& out) {
  ModuleCache::Entry& e = impl_->cache.get(module);
  if (!e.loaded) {
    out = Location{};
    out.rel_address = vaddr - e.info.image_base;
    return;
  }
  impl_->locate_vaddr(*e.loaded, e.info, vaddr, out);
  impl_->cache.remeasure(e, 1);
}

void Symbolizer::resolve_vaddr(const ModuleRef& module, uint64_t vaddr, LocationView& out) {
  ModuleCache::Entry& e = impl_->cache.get(module);
  if (!e.loaded) {
    out.found = false;
    out.symbol = {};
    out.symbol_version = {};
    out.symbol_address = out.symbol_size = 0;
    out.rel_address = vaddr - e.info.image_base;
    out.frames.clear();
    return;
  }
  impl_->locate_vaddr(*e.loaded, e.info, vaddr, out);
  // Evicts other modules only: the views point into this one's tables.
  impl_->cache.remeasure(e, 1);
}

uint64_t Symbolizer::cache_bytes_used() const {
  return impl_->cache.bytes_used();
}

size_t Symbolizer::cached_modules() const {
  return impl_->cache.cached_modules();
}

std::vector<ModuleInfo> Symbolizer::module_infos() const {
  return impl_->cache.infos();
}

}  // namespace hpd
