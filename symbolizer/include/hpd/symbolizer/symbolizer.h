// Symbolizer: turns (module file, file offset) into functions, source lines and inline chains.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// demangle(), which the symbolizer applies to every name, is in the base layer.
#include "hpd/base/demangle.h"

namespace hpd {

// Address conventions used throughout the symbolizer:
//
//   file offset    what a runtime mapping gives: runtime address - mapping start + mapping offset.
//   ELF vaddr      the link-time virtual address; a file offset becomes one through the PT_LOAD
//                  program header whose file range holds it (executable segments preferred).
//   image_base     the lowest PT_LOAD p_vaddr rounded down to 4 KiB: 0 for PIE executables and
//                  shared objects, 0x400000 for classic non-PIE x86-64 executables.
//   lib-relative   ELF vaddr - image_base. Location::rel_address, Location::symbol_address and the
//                  Firefox frame/nativeSymbol addresses are all lib-relative (what samply calls the
//                  "relative address"), so they are small and stable across runs and ASLR.
//
// When a module cannot be read at all, no program headers are known and rel_address is the file
// offset itself (for PIE/.so files linked by GNU ld and lld the two coincide for .text anyway).
//
// The kernel is its own "lib": kernel addresses are made relative to KernelSymbols::base(), the
// lowest text symbol address, so they stay well below 2^53 (the Firefox format stores JS numbers).

// One level of an inline chain.
struct SourceFrame {
  std::string function;  // demangled
  std::string file;      // empty = unknown
  uint32_t line = 0;     // 0 = unknown
  uint32_t column = 0;   // 0 = unknown
};

// What one address resolves to.
struct Location {
  bool found = false;  // a symbol or debug information covered the address
  // The ELF symbol of the outer (real) function, demangled; empty when !found. It is the symbol
  // table's name of the code (a clone such as "f.isra.0", or one of several aliases); frames[0]
  // names the function as the binary exports it or DWARF names it (Symbolizer::Impl::locate_vaddr).
  std::string symbol;
  // The ELF symbol version the symbol-table name carried ("@@GLIBC_2.17"), which `symbol` and the
  // frames leave out; empty when none.
  std::string symbol_version;
  uint64_t symbol_address = 0;  // lib-relative start of that function
  uint64_t symbol_size = 0;     // 0 = unknown
  uint64_t rel_address = 0;     // lib-relative address that was looked up
  // The inline chain, outermost (the real function) first. When !found: empty, or one level with
  // no function name but the file:line of a line-table row that covers the address (code that
  // debug information describes but no symbol or function entry names).
  std::vector<SourceFrame> frames;
};

// A Location whose strings are views into the Symbolizer's tables, for callers that print an
// answer at once and want no copy of its names (deep C++ inline chains carry kilobytes of them).
// Valid until the next call on the Symbolizer that produced it.
struct SourceFrameView {
  std::string_view function;
  std::string_view file;
  uint32_t line = 0;
  uint32_t column = 0;
};
struct LocationView {
  bool found = false;
  std::string_view symbol;
  std::string_view symbol_version;
  uint64_t symbol_address = 0;
  uint64_t symbol_size = 0;
  uint64_t rel_address = 0;
  std::vector<SourceFrameView> frames;  // as Location::frames
};

// Identifies a module file to read symbols from.
struct ModuleRef {
  std::string path;        // path as the process saw it
  std::string build_id;    // expected build id (lower-case hex), may be empty
  int32_t pid = 0;         // a live process that maps it (for /proc/PID/root and map_files), 0 = none
  uint64_t map_start = 0;  // with pid: the mapping's start, to reach /proc/PID/map_files
  uint64_t map_end = 0;
  // A descriptor of the file held open since the recording (RawModule::file), tried first as
  // /proc/self/fd/FD: the file the process ran, whatever mount namespace this one is. -1 = none.
  int held_fd = -1;
  // The module's ELF image in memory (the vDSO, RawModule::image): read instead of any file. The
  // bytes are copied when the module is first loaded.
  std::span<const uint8_t> image;
};

// What the symbolizer found out about a module file.
//
// Choice of file: the module's image when it has one (the vDSO); else a file whose build-id
// matches the expected one (tried in the order of the held descriptor,
// /proc/PID/map_files/START-END, /proc/PID/root/PATH, PATH) wins; failing that, a debug file found by
// the expected build-id under /usr/lib/debug/.build-id (its program headers keep the vaddrs but
// not the file offsets, so offsets are assumed to be vaddr - image_base, and `error` says so);
// failing that, the first readable file with a different build-id is still used (symbols from a
// rebuilt binary are usually close, and better than bare offsets) and `error` says
// "build-id mismatch ...", with readable = true.
struct ModuleInfo {
  bool readable = false;
  std::string error;        // why not, when !readable; a warning (build-id mismatch) when readable
  std::string opened_path;  // the file actually read
  std::string debug_path;   // the file debug information came from (may equal opened_path); empty = none
  std::string build_id;     // as read from the file
  uint64_t image_base = 0;  // vaddr that lib-relative addresses are measured from
  // Additions beyond the first interface:
  bool has_debug_info = false;     // a file with .debug_info was found (debug_path)
  bool dwarf_index = false;        // a DWARF index supplies file:line and inline chains
  std::string debug_error;         // why debug information was found but not used (else empty)
  bool build_id_mismatch = false;  // the file read does not carry the expected build-id
  size_t symbol_count = 0;         // function symbols in the sorted table (incl. synthesized @plt)
  bool from_debuginfod = false;    // debug_path is a file fetched through debuginfod
  std::string debuginfod_error;    // why debuginfod was asked and gave nothing (else empty)
  // Files that would have been read but SymbolizerOptions::open_file refused (EACCES, EPERM): the
  // binary (named by the module's path) when no file stood in for it, a debug file when none was
  // found. Empty when none.
  std::vector<std::string> denied;
};

struct SymbolizerOptions {
  bool demangle = true;
  bool inline_frames = true;            // resolve inline chains where debug info allows
  uint64_t cache_bytes = 512ull << 20;  // memory cap of the module cache (LRU)
  // Root of the separate debug-file tree (/usr/lib/debug); tests point it elsewhere.
  std::string debug_root = "/usr/lib/debug";
  // When no local debug file matches a module's build-id and DEBUGINFOD_URLS is set, ask those
  // servers through libdebuginfod (downloads are cached in $DEBUGINFOD_CACHE_PATH or
  // ~/.cache/debuginfod_client; misses are remembered there too).
  bool debuginfod = true;
  // Opens a file symbols may come from (a module's binary through any of its paths, a separate
  // debug file, a debuginfod download): open(2)'s answer, a descriptor or -1 with errno set.
  // Unset: open(2) as this process. hpd sets it to open_as(client) for a client's recording, so
  // that the client gets names only from files it could read itself (ModuleInfo::denied).
  std::function<int(const std::string& path, int flags)> open_file;
};

// Not thread-safe: one Symbolizer per thread, or external locking.
class Symbolizer {
 public:
  explicit Symbolizer(SymbolizerOptions options = {});
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Facts about a module; opens and caches it on first use. The reference stays valid for the
  // Symbolizer's lifetime (facts are kept even when the module's tables are evicted).
  const ModuleInfo& module_info(const ModuleRef& module);

  // Resolves file offsets inside `module` (as a runtime mapping gives them: address - start +
  // mapping offset). Returns one Location per input, in order (searched in address order, which
  // is faster than the order most callers have). Never throws for bad input files:
  // an unreadable module yields !found locations with rel_address still set where computable.
  // Callers pass return addresses already decremented by one.
  std::vector<Location> resolve(const ModuleRef& module, std::span<const uint64_t> file_offsets);

  // The same for ELF virtual addresses of the module file (what nm, objdump and llvm-symbolizer
  // print and take), with no file-offset translation.
  std::vector<Location> resolve_vaddrs(const ModuleRef& module, std::span<const uint64_t> vaddrs);
  // One ELF virtual address into `out`, whose strings' storage is reused: a loop resolving one
  // address at a time with the same Location allocates nothing per address once warm.
  void resolve_vaddr(const ModuleRef& module, uint64_t vaddr, Location& out);
  // The same answer without copying its names (see LocationView).
  void resolve_vaddr(const ModuleRef& module, uint64_t vaddr, LocationView& out);
  // For return addresses inside `module` (file offsets already decremented by one, as resolve
  // takes them): the code of the function the call there calls, as the caller's DWARF call-site
  // information names it (DW_TAG_call_site's DW_AT_call_origin: gcc and clang emit it at -O2 -g),
  // lib-relative [low, high) ranges, hot and cold parts. Empty when unknown: no call-site
  // information (no DWARF, -O0), an indirect call, a callee defined in another compile unit or
  // module, or code of which a part does not begin at a function symbol (a discarded COMDAT copy's
  // DWARF, at address 0). When the frame below a caller lies outside its call's callee, that
  // callee did not return to it: it tail-called (jumped) on, once or more, to the function of that
  // frame.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> call_site_callees(
      const ModuleRef& module, std::span<const uint64_t> file_offsets);
  // Searches addresses ahead of the one-at-a-time calls (resolve_vaddr, or resolve with one
  // offset) that will ask for them: compile unit by compile unit, each in address order, which
  // builds one unit's tables at a time and walks them once instead of once per address in random
  // order (the search tables of a unit the batch is done with are freed; a later search there
  // rebuilds them). What it finds is kept (32 bytes an address) in the given order until the
  // next prepare for the module; lookups in that order, possibly skipping some, take it from
  // there, and any other lookup searches as usual, so answers are the same with or without it.
  // hpctl symbolize prepares each batch of its input.
  void prepare(const ModuleRef& module, std::span<const uint64_t> file_offsets);
  void prepare_vaddrs(const ModuleRef& module, std::span<const uint64_t> vaddrs);

  // Estimated bytes held by cached module tables (symbol tables, strings, DWARF indexes).
  uint64_t cache_bytes_used() const;
  // Number of modules whose tables are currently cached.
  size_t cached_modules() const;
  // The facts of every module asked for so far.
  std::vector<ModuleInfo> module_infos() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One line of /proc/kallsyms: "ffffffff81000000 T _stext", or "ffffffffc0a01000 t func\t[module]".
struct KallsymsLine {
  uint64_t address = 0;
  char type = 0;            // 'T', 't', 'W', 'D'... as nm prints it
  std::string_view name;    // "func"
  std::string_view module;  // "[module]" with its brackets; empty for the kernel image itself
};
// Splits one line (without its '\n'); false for a line not in that form (no address, no type, no name).
bool parse_kallsyms_line(std::string_view line, KallsymsLine& out);

// Kernel symbols from /proc/kallsyms (or a file in its format).
class KernelSymbols {
 public:
  struct Symbol {
    uint64_t address;
    uint32_t name;  // into the table's names: "func", or "func [module]" (name() gives it)
    char type;      // 't', 'T', 'w' or 'W': text symbols only
  };

  // Loads `path` (read in one pass, split as it is read); returns false (and leaves the table empty)
  // when it cannot be read or holds only zero addresses (kptr_restrict).
  bool load(const std::string& path = "/proc/kallsyms");
  // The same from the text of such a file.
  bool load_text(std::string_view text);
  bool empty() const { return symbols_.empty(); }
  size_t size() const { return symbols_.size(); }
  // The text symbols, sorted by address (equal addresses in kallsyms order), zero addresses left out.
  const std::vector<Symbol>& symbols() const { return symbols_; }
  // A symbol's name, NUL-terminated.
  const char* name(const Symbol& symbol) const { return names_.c_str() + symbol.name; }
  // Lowest symbol address: the base kernel lib-relative addresses are measured from.
  uint64_t base() const { return symbols_.empty() ? 0 : symbols_.front().address; }
  // Name ("func" or "func [module]") of the symbol containing `address`, or !found. A symbol
  // extends to the next one, except the last one of the kernel image (followed by a module's, a BPF
  // program's or none), which holds at most 1 MiB, and the table's last one, which ends where
  // replace_range said it does when it put it there: addresses below the first symbol or beyond those
  // are not found (in the modules' area, they belong to code the table does not know: a program
  // loaded or unloaded since it was read). The Location's symbol_size is where the symbol ends, 0 for
  // the table's last one when its end is unknown (kallsyms gives no sizes). Addresses in the Location
  // are relative to base().
  Location resolve(uint64_t address) const;
  // Whether `address` lies in a symbol of the kernel image itself (no "[module]", "[bpf]"... part)
  // whose next symbol is one too: code whose name cannot change while the system runs, unlike a
  // module's, a BPF program's or a trampoline's, which come and go (and an address past the image's
  // last symbol, which may be one of those loaded since the table was read).
  bool in_kernel_image(uint64_t address) const;
  // in_kernel_image of `address` and of the byte before it, both of which kernel_symbol_lines looks up
  // (a return address's call is the byte before): whether this table names a frame at `address` as any
  // later read of /proc/kallsyms would.
  bool frame_in_kernel_image(uint64_t address) const {
    return in_kernel_image(address) && (address == 0 || in_kernel_image(address - 1));
  }
  // The lines of /proc/kallsyms (its format) that resolve `addresses` the same way from a table
  // loaded with load_text: the lowest symbol (the base), and for each address found the symbol that
  // holds it (the first name at its address) and the one after it (where it ends). Each line once,
  // in address order. Empty when the table is.
  std::string lines_for(std::span<const uint64_t> addresses) const;
  // Code loaded at [start, end) since the table was read, as /proc/kallsyms would now list it (`name`:
  // "func" or "func [module]", a text `type`): its symbol replaces those the table had in that range
  // (code unloaded since: no other symbol can start inside live code). Its end is kept when it is the
  // table's last symbol, which no next symbol ends (a BPF program at the top of the area they are
  // packed in). Nothing on an empty table (its file unreadable, or its addresses hidden).
  // A read leaves room for a few hundred such symbols: adding them copies nothing but the symbols above.
  void replace_range(uint64_t start, uint64_t end, std::string_view name, char type = 't');

 private:
  void add_line(std::string_view line);
  bool finish();  // sorts; false (and empty) when every address was zero
  // The symbol holding `address` by resolve()'s rule, or symbols_.end(); `next` gets the one after it.
  std::vector<Symbol>::const_iterator holder(uint64_t address,
                                             std::vector<Symbol>::const_iterator& next) const;
  bool of_image(const Symbol& s) const;                               // no " [module]" part
  std::vector<Symbol>::const_iterator after(uint64_t address) const;  // the first symbol above it

  std::vector<Symbol> symbols_;  // sorted by address
  std::string names_;            // every name, each followed by a NUL (about 3 MiB for 120,000)
  bool any_nonzero_ = false;
  // Where the last symbol ends, when replace_range put it there; 0: unknown.
  uint64_t last_end_ = 0;
};

struct RawProfile;  // hpd/model/raw_profile.h

// The lines of `symbols` that name the kernel addresses of `profile`'s stacks (KernelSymbols::lines_for,
// each address as itself and one byte back, as the symbolizer may look it up either way): what
// RawProfile::kernel_symbols keeps, so that a capture names its kernel frames as the recording would
// have, later, in another boot, and for the BPF programs and modules loaded only while it ran. When
// `unresolved` is given, it receives those addresses `symbols` does not hold.
std::string kernel_symbol_lines(const RawProfile& profile, const KernelSymbols& symbols,
                                std::vector<uint64_t>* unresolved = nullptr);

}  // namespace hpd
