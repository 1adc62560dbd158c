// Symbolizer: finds module and debug files, caches their symbol tables (LRU), resolves offsets.
#include "hpd/symbolizer/symbolizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <list>
#include <unordered_map>

#include "debug_info.h"
#include "elf_file.h"
#include "hpd/base/demangle.h"
#include "hpd/symbolizer/debuginfod_client.h"
#include "symbol_table.h"

namespace hpd {
namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join_errors(const std::vector<std::string>& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty()) out += "; ";
    out += e;
  }
  return out;
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

// What Symbolizer::prepare found for each address, in the order the addresses were given: the
// lookups that follow ask for them in that order, so each finds its entry at the cursor (or a few
// entries on, when the caller answered some addresses itself) and reads memory in sequence.
class PreparedAddresses {
 public:
  static constexpr uint32_t kNoSymbol = UINT32_MAX;
  static constexpr uint32_t kFindSymbol = UINT32_MAX - 1;  // an index too large to keep: look it up
  struct Entry {
    uint64_t vaddr;
    DebugPlace place;
    uint32_t symbol;  // index in the module's SymbolTable (its display name already computed)
  };
  static_assert(sizeof(Entry) == 32);

  void assign(std::vector<Entry> entries) {
    entries_ = std::move(entries);
    next_ = 0;
  }
  // The entry for `vaddr` at the cursor or up to kLookAhead entries after it, moving the cursor
  // past it; nullptr (cursor unmoved) when the caller has left the prepared order.
  const Entry* take(uint64_t vaddr, DebugInfo* debug, const SymbolTable& symbols) {
    const size_t end = std::min(entries_.size(), next_ + kLookAhead);
    for (size_t i = next_; i < end; ++i) {
      if (entries_[i].vaddr == vaddr) {
        next_ = i + 1;
        // The entries are in the caller's order, their tables' memory in address order: start
        // loading what a later lookup will read, so that its cache misses overlap this one's work.
        // Pointers are followed only once what they point to had time to arrive: the symbol is
        // asked for 8 entries ahead, its name's string object 4 ahead, the characters 2 ahead.
        if (const Entry* ahead = at(i + kPrefetchDistance)) {
          if (debug != nullptr) debug->prefetch(ahead->place, 0);
          if (const SymbolTable::Symbol* s = symbol_of(*ahead, symbols)) __builtin_prefetch(s);
        }
        if (const Entry* ahead = at(i + kPrefetchDistance / 2)) {
          if (debug != nullptr) debug->prefetch(ahead->place, 1);
          if (const SymbolTable::Symbol* s = symbol_of(*ahead, symbols))
            __builtin_prefetch(symbols.display_name_if_known(*s));
        }
        if (const Entry* ahead = at(i + kPrefetchDistance / 4)) {
          const SymbolTable::Symbol* s = symbol_of(*ahead, symbols);
          if (const std::string* name = s != nullptr ? symbols.display_name_if_known(*s) : nullptr)
            __builtin_prefetch(name->data());
        }
        return &entries_[i];
      }
    }
    return nullptr;
  }
  size_t memory_bytes() const { return entries_.capacity() * sizeof(Entry); }

  // The entry's symbol when it holds one (nullptr for kNoSymbol and kFindSymbol).
  static const SymbolTable::Symbol* symbol_of(const Entry& e, const SymbolTable& symbols) {
    return e.symbol < kFindSymbol ? &symbols.symbols()[e.symbol] : nullptr;
  }

 private:
  static constexpr size_t kLookAhead = 64;
  static constexpr size_t kPrefetchDistance = 8;
  const Entry* at(size_t k) const { return k < entries_.size() ? &entries_[k] : nullptr; }
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

// The tables of one loaded module; everything the LRU cache can drop and rebuild.
struct LoadedModule {
  SegmentMap segments;
  SymbolTable symbols;
  std::unique_ptr<DebugInfo> debug;
  PreparedAddresses prepared;  // the last Symbolizer::prepare's addresses

  size_t memory_bytes() const {
    return sizeof(*this) + segments.memory_bytes() + symbols.memory_bytes() +
           (debug ? debug->memory_bytes() : 0) + prepared.memory_bytes();
  }
};

}  // namespace

struct Symbolizer::Impl {
  struct Entry {
    ModuleInfo info;
    std::unique_ptr<LoadedModule> loaded;  // null when unreadable or evicted
    bool attempted = false;
    size_t bytes = 0;
    size_t lookups_since_measure = 0;
    std::list<std::string>::iterator lru;  // valid while loaded
  };

  SymbolizerOptions options;
  DebuginfodClient debuginfod;
  std::unordered_map<std::string, Entry> entries;
  std::list<std::string> lru;  // most recently used first
  uint64_t bytes_used = 0;

  static std::string key_of(const ModuleRef& ref) {
    // Files without a build-id are told apart by path, and by process (a container's /usr/lib/x
    // is not the host's).
    if (!ref.build_id.empty()) return "b:" + ref.build_id;
    return "p:" + ref.path + "#" + std::to_string(ref.pid);
  }

  // The entry of the previous get(): callers resolving one address at a time ask for the same
  // module again and again, and building its key string each time shows in profiles.
  Entry* last_entry = nullptr;
  ModuleRef last_ref;

  Entry& get(const ModuleRef& ref) {
    const bool same_as_last =
        last_entry != nullptr && ref.build_id == last_ref.build_id &&
        (!ref.build_id.empty() || (ref.pid == last_ref.pid && ref.path == last_ref.path));
    Entry& e = same_as_last ? *last_entry : entries.try_emplace(key_of(ref)).first->second;
    if (!same_as_last) {
      last_entry = &e;  // entries are never erased, so the pointer stays valid
      last_ref = ref;
    }
    if (e.loaded) {
      lru.splice(lru.begin(), lru, e.lru);  // touch
      return e;
    }
    if (e.attempted && !e.info.readable) return e;  // a known failure; do not retry every call
    e.attempted = true;
    e.loaded = load(ref, e.info);
    if (e.loaded) {
      lru.push_front(key_of(ref));
      e.lru = lru.begin();
      e.bytes = e.loaded->memory_bytes();
      bytes_used += e.bytes;
      evict_over_cap(&e);
    }
    return e;
  }

  // Re-measures an entry whose tables grew (demangled names and DWARF units are cached lazily).
  // Measuring walks the module's tables, so callers that resolve one address at a time (hpctl
  // symbolize reading stdin) re-measure only every kLookupsPerMeasure lookups; batches always.
  static constexpr size_t kLookupsPerMeasure = 256;
  void remeasure(Entry& e, size_t lookups) {
    if (!e.loaded) return;
    e.lookups_since_measure += lookups;
    if (lookups <= 1 && e.lookups_since_measure < kLookupsPerMeasure) return;
    e.lookups_since_measure = 0;
    const size_t now = e.loaded->memory_bytes();
    bytes_used = bytes_used - e.bytes + now;
    e.bytes = now;
    evict_over_cap(&e);
  }

  void evict_over_cap(const Entry* keep) {
    while (bytes_used > options.cache_bytes && !lru.empty()) {
      Entry& victim = entries.at(lru.back());
      if (&victim == keep) break;  // the module in use stays, even alone over the cap
      bytes_used -= victim.bytes;
      victim.bytes = 0;
      victim.loaded.reset();
      lru.pop_back();
    }
  }

  // Opens the first candidate whose build-id matches; remembers the first mismatching one.
  std::unique_ptr<ElfFile> open_binary(const ModuleRef& ref, std::vector<std::string>& errors,
                                       std::unique_ptr<ElfFile>& mismatched) {
    std::vector<std::string> candidates;
    if (!ref.image.empty()) {
      std::string error;
      auto file = ElfFile::open_image(ref.image, ref.path, &error);
      if (file && (ref.build_id.empty() || file->build_id() == ref.build_id)) return file;
      errors.push_back(file ? ref.path + ": the image's build-id " + file->build_id() +
                                  " is not the recorded " + ref.build_id
                            : error);
      return nullptr;
    }
    if (ref.path == "[vdso]") {  // no file anywhere: only the image the process mapped describes it
      errors.push_back(
          "[vdso]: its image was not read while the process lived (the process was gone or its memory "
          "unreadable, or the capture was written by an older hpd)");
      return nullptr;
    }
    if (ref.held_fd >= 0) candidates.push_back("/proc/self/fd/" + std::to_string(ref.held_fd));
    if (ref.pid != 0) {
      if (ref.map_end > ref.map_start) {
        char buf[96];
        std::snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, ref.pid, ref.map_start,
                      ref.map_end);
        candidates.emplace_back(buf);
      }
      if (!ref.path.empty() && ref.path[0] == '/') {
        candidates.push_back("/proc/" + std::to_string(ref.pid) + "/root" + ref.path);
      }
    }
    if (!ref.path.empty()) candidates.push_back(ref.path);
    for (const auto& path : candidates) {
      std::string error;
      auto file = ElfFile::open(path, &error);
      if (!file) {
        // /proc candidates fail routinely (exited process, no permission); report only the path.
        if (path == ref.path) errors.push_back(error);
        continue;
      }
      if (ref.build_id.empty() || file->build_id() == ref.build_id) return file;
      if (!mismatched) mismatched = std::move(file);
    }
    if (candidates.empty()) errors.push_back("no path to open");
    return nullptr;
  }

  std::string build_id_path(const std::string& build_id) const {
    if (build_id.size() < 3) return {};
    return options.debug_root + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
  }

  // A debug file from the debuginfod servers (DEBUGINFOD_URLS), checked against the build-id.
  std::unique_ptr<ElfFile> fetch_debug_file(const std::string& build_id, ModuleInfo& info) {
    if (!options.debuginfod || build_id.empty() || !DebuginfodClient::configured()) return nullptr;
    std::string error;
    auto path = debuginfod.find_debuginfo(build_id, &error);
    if (!path) {
      info.debuginfod_error = error;
      return nullptr;
    }
    auto file = ElfFile::open(*path, &error);
    if (!file || file->build_id() != build_id) {
      info.debuginfod_error = "debuginfod: " + *path + (file ? ": build-id differs" : ": " + error);
      return nullptr;
    }
    info.from_debuginfod = true;
    return file;
  }

  // A separate debug file for `binary`: by build-id, then by .gnu_debuglink, then from debuginfod.
  // Its build-id must match the binary's when both have one (a stale debug file gives confidently
  // wrong lines).
  std::unique_ptr<ElfFile> find_debug_file(const ElfFile& binary, const ModuleRef& ref, ModuleInfo& info) {
    std::vector<std::string> candidates;
    const std::string& bid = binary.build_id().empty() ? ref.build_id : binary.build_id();
    if (auto p = build_id_path(bid); !p.empty()) candidates.push_back(p);
    if (auto link = binary.debuglink()) {
      std::vector<std::string> dirs{dir_of(binary.path())};
      if (!ref.path.empty() && dir_of(ref.path) != dirs[0]) dirs.push_back(dir_of(ref.path));
      for (const auto& dir : dirs) {
        if (dir.rfind("/proc/", 0) == 0 && dir.find("/map_files") != std::string::npos) continue;
        candidates.push_back(dir + "/" + *link);
        candidates.push_back(dir + "/.debug/" + *link);
        candidates.push_back(options.debug_root + dir + "/" + *link);
      }
    }
    for (const auto& path : candidates) {
      if (path == binary.path() || !is_regular_file(path)) continue;
      auto file = ElfFile::open(path, nullptr);
      if (!file) continue;
      if (!bid.empty() && !file->build_id().empty() && file->build_id() != bid) continue;
      if (file->has_debug_info() || file->section(".symtab") != nullptr) return file;
    }
    return fetch_debug_file(bid, info);
  }

  std::unique_ptr<LoadedModule> load(const ModuleRef& ref, ModuleInfo& info) {
    info = ModuleInfo{};
    std::vector<std::string> errors;
    std::unique_ptr<ElfFile> mismatched;
    std::unique_ptr<ElfFile> binary = open_binary(ref, errors, mismatched);
    std::unique_ptr<ElfFile> debug;
    if (!binary && !ref.build_id.empty()) {
      // The binary is gone or rebuilt, but a debug file with the expected build-id beats a
      // mismatching binary: it carries the same program headers and a full .symtab.
      if (auto p = build_id_path(ref.build_id); !p.empty() && is_regular_file(p)) {
        auto file = ElfFile::open(p, nullptr);
        if (file && file->build_id() == ref.build_id && !file->segments().empty()) debug = std::move(file);
      }
      if (!debug) {  // a debug file with the right build-id also beats a mismatching binary
        auto file = fetch_debug_file(ref.build_id, info);
        if (file && !file->segments().empty()) debug = std::move(file);
      }
    }
    if (!binary && !debug && mismatched) {
      binary = std::move(mismatched);
      info.build_id_mismatch = true;
      info.error = "build-id mismatch: expected " + ref.build_id + ", " + binary->path() + " has " +
                   (binary->build_id().empty() ? std::string("none") : binary->build_id()) +
                   "; symbols may be wrong";
    }
    if (!binary && !debug) {
      info.error = join_errors(errors);
      if (info.error.empty()) info.error = "cannot read " + ref.path;
      return nullptr;
    }
    if (binary && !binary->has_debug_info()) debug = find_debug_file(*binary, ref, info);

    auto module = std::make_unique<LoadedModule>();
    const ElfFile& primary = binary ? *binary : *debug;
    if (binary && !binary->segments().empty()) {
      module->segments = binary->segments();
    } else if (debug && !debug->segments().empty()) {
      module->segments = debug->segments().with_linear_offsets();
      info.error = "no binary with build-id " + ref.build_id + " at " + ref.path + "; using " +
                   debug->path() + " alone, assuming file offsets = vaddr - image base (GNU ld layout)";
    }
    if (module->segments.empty()) {
      info.error = primary.path() + ": no PT_LOAD program headers; not a loadable module";
      return nullptr;
    }
    if (binary) {
      add_plt_symbols(*binary, module->symbols);
      add_elf_symbols(*binary, module->symbols);
    }
    if (debug) add_elf_symbols(*debug, module->symbols);
    module->symbols.finalize();

    info.readable = true;
    info.opened_path = primary.path();
    info.build_id = primary.build_id();
    info.image_base = module->segments.image_base();
    info.symbol_count = module->symbols.size();
    const ElfFile* dwarf_file = binary && binary->has_debug_info() ? binary.get()
                                : debug && debug->has_debug_info() ? debug.get()
                                                                   : nullptr;
    if (dwarf_file != nullptr) {
      info.has_debug_info = true;
      info.debug_path = dwarf_file->path();
      // One spelling per function: inlined levels named from DWARF must read like symbol-table
      // names, or a function shows up twice (inlined and not) in call trees.
      module->debug = open_debug_info(dwarf_file->path(), &info.debug_error,
                                      options.demangle ? decode_rust_legacy_escapes : nullptr);
      info.dwarf_index = module->debug != nullptr;
    } else if (debug) {
      info.debug_path = debug->path();  // symbols only
    }
    return module;
  }

  // Resolves n addresses, the i-th at vaddr_at(i), into out[i], searching them in address order:
  // each compile unit's tables and each stretch of the symbol table are then walked once, in
  // order, rather than once per address in whatever order the caller has them.
  template <class VaddrAt>
  std::vector<Location> resolve_in_address_order(Entry& e, size_t n, VaddrAt vaddr_at) {
    std::vector<Location> out(n);
    if (!e.loaded) {
      for (size_t i = 0; i < n; ++i) out[i].rel_address = vaddr_at(i) - e.info.image_base;
      return out;
    }
    for_each_in_key_order(
        n, vaddr_at, [&](uint64_t vaddr, size_t i) { locate_vaddr(*e.loaded, e.info, vaddr, out[i]); },
        [&](size_t i) { __builtin_prefetch(&out[i], 1); }, [] {});
    remeasure(e, n);
    return out;
  }

  void prepare(Entry& e, std::span<const uint64_t> vaddrs) {
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
    remeasure(e, vaddrs.size() + 2);  // always: the tables grew by a batch
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
      // llvm's rule: the outermost frame is named by the symbol table (keeps ".isra.0" etc.).
      if (loc.frames.empty()) loc.frames.emplace_back();
      loc.frames.front().function = loc.symbol;
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

Symbolizer::Symbolizer(SymbolizerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

Symbolizer::~Symbolizer() = default;

const ModuleInfo& Symbolizer::module_info(const ModuleRef& module) {
  return impl_->get(module).info;
}

std::vector<Location> Symbolizer::resolve(const ModuleRef& module, std::span<const uint64_t> file_offsets) {
  Impl::Entry& e = impl_->get(module);
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
  Impl::Entry& e = impl_->get(module);
  return impl_->resolve_in_address_order(e, vaddrs.size(), [&](size_t i) { return vaddrs[i]; });
}

void Symbolizer::prepare(const ModuleRef& module, std::span<const uint64_t> file_offsets) {
  Impl::Entry& e = impl_->get(module);
  if (!e.loaded) return;
  std::vector<uint64_t> vaddrs(file_offsets.size());
  for (size_t i = 0; i < vaddrs.size(); ++i) vaddrs[i] = e.loaded->segments.vaddr_of(file_offsets[i]);
  impl_->prepare(e, vaddrs);
}

void Symbolizer::prepare_vaddrs(const ModuleRef& module, std::span<const uint64_t> vaddrs) {
  Impl::Entry& e = impl_->get(module);
  impl_->prepare(e, vaddrs);
}

void Symbolizer::resolve_vaddr(const ModuleRef& module, uint64_t vaddr, Location& out) {
  Impl::Entry& e = impl_->get(module);
  if (!e.loaded) {
    out = Location{};
    out.rel_address = vaddr - e.info.image_base;
    return;
  }
  impl_->locate_vaddr(*e.loaded, e.info, vaddr, out);
  impl_->remeasure(e, 1);
}

void Symbolizer::resolve_vaddr(const ModuleRef& module, uint64_t vaddr, LocationView& out) {
  Impl::Entry& e = impl_->get(module);
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
  impl_->remeasure(e, 1);
}

uint64_t Symbolizer::cache_bytes_used() const {
  return impl_->bytes_used;
}

size_t Symbolizer::cached_modules() const {
  return impl_->lru.size();
}

}  // namespace hpd
