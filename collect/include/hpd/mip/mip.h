// MIP (Machine IR Profile): decoding of __llvm_mipraw / __llvm_mipmap (layouts A and B), the live reader
// (process_vm_readv of every mapped module's raw section), offline .mipraw decoding, merging, and printing.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace hpd::mip {

// Every way MIP input can be wrong gets its own code, so callers (and tests) can tell them apart.
enum class ErrorCode {
  kTruncated,            // the data ends inside a header, a map entry or a raw record
  kBadMagic,             // not 0x50494DFB
  kUnsupportedVersion,   // Version > 8
  kWrongFileType,        // e.g. a map given where a raw section was expected
  kBadHeader,            // OffsetToData or the layout cannot be recognised
  kHashMismatch,         // raw and map ModuleHash differ: the raw data belongs to another build
  kProfileTypeMismatch,  // raw and map ProfileType differ
  kMapOutOfRange,        // a map entry points outside the raw section
  kNoSection,            // the ELF file has no __llvm_mipraw / __llvm_mipmap section
  kNotElf,               // the file is not a readable ELF file
  kIo,                   // a file could not be read
  kProcessGone,          // the process exited (or was never there) while it was being read
  kPermission,           // reading the process's memory was refused
  kIncompatible,         // merging profiles of different modules or builds
};

const char* to_string(ErrorCode code);

class MipError : public std::runtime_error {
 public:
  MipError(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  [[nodiscard]] ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

inline constexpr uint32_t kMagic = 0x50494DFB;
inline constexpr uint16_t kMaxVersion = 8;
inline constexpr const char* kRawSectionName = "__llvm_mipraw";
inline constexpr const char* kMapSectionName = "__llvm_mipmap";

// ProfileType bits (the same in both layouts).
enum ProfileTypeBits : uint32_t {
  kFunctionCoverage = 1u << 0,
  kBlockCoverage = 1u << 1,
  kFunctionTimestamp = 1u << 2,
  kFunctionCallCount = 1u << 3,
  kReturnAddress = 1u << 4,
};

enum class Layout : uint8_t {
  kA,  // 24-byte header, enumerated FileType, 32-bit PC-relative map offsets
  kB,  // 32-byte header, bit-flag FileType, 64-bit PC-relative map offsets
};

enum class FileKind : uint8_t { kRaw, kMap, kProfile, kCallEdgeSamples };

struct Header {
  Layout layout = Layout::kB;
  uint16_t version = 0;
  uint16_t file_type = 0;  // as stored
  FileKind kind = FileKind::kRaw;
  uint32_t profile_type = 0;
  uint32_t module_hash = 0;
  int64_t raw_section_offset = 0;  // layout B map: __start___llvm_mipraw - &header
  uint32_t offset_to_data = 0;
  size_t size = 0;        // 24 or 32
  bool is_32bit = false;  // layout B FileType 32BIT: 32-bit PC-relative map offsets

  [[nodiscard]] bool counts_calls() const { return profile_type & (kFunctionCallCount | kFunctionTimestamp); }
};

// Parses and checks a header at the start of `data`: size, magic, version, layout, file type.
Header parse_header(std::span<const uint8_t> data, FileKind expected);

struct MapEntry {
  std::string name;             // as in the map: mangled, not NUL-terminated on disk
  int64_t raw_offset = 0;       // the function's record, relative to the start of __llvm_mipraw
  int64_t function_offset = 0;  // the function's entry, relative to the start of __llvm_mipraw
  uint32_t size = 0;
  uint32_t cfg_signature = 0;
  std::vector<uint32_t> block_offsets;  // non-entry blocks, relative to the function's entry
};

// A decoded __llvm_mipmap: the header (of the first link unit) and every function.
struct Map {
  Header header;
  std::vector<MapEntry> entries;
  // Link-time address of __llvm_mipraw in the module, when the map came from the ELF file itself.
  bool raw_section_address_known = false;
  uint64_t raw_section_address = 0;
  uint64_t raw_section_size = 0;  // from the ELF section header; 0 = unknown
  std::string source;             // file the map was read from
  std::string build_id;           // of that file when it is ELF (lower-case hex)
};

// Decodes a __llvm_mipmap section (or .mipmap file). Throws MipError.
Map parse_map(std::span<const uint8_t> data);

// One function's profile. In a merged profile, call_count and order_sum are sums over the raw profiles.
struct Function {
  std::string name;            // mangled, as in the map
  std::string demangled;       // demangled when the name is mangled and demangling was asked for; else = name
  int64_t section_offset = 0;  // entry address - start of __llvm_mipraw (negative: .text comes first)
  uint64_t file_address = 0;   // link-time address (ELF vaddr); 0 when !Module::addresses_known
  uint64_t runtime_address = 0;  // in the live process; 0 when not read from a live process
  uint32_t size = 0;
  uint32_t cfg_signature = 0;
  uint64_t call_count = 0;       // exact in call-count mode; 1 = "called" in coverage mode
  uint64_t order_sum = 0;        // first-call timestamp (1 = first function called); 0 = never / unknown
  uint32_t profiles_called = 0;  // raw profiles in which it was called (0 or 1 for one snapshot)
  std::vector<uint32_t> block_offsets;  // non-entry blocks, relative to the entry
  std::vector<uint8_t> block_covered;   // 1 per block in block_offsets; empty without block coverage
  bool block_coverage = false;          // the profile records block coverage (ProfileType bit 2)

  [[nodiscard]] bool called() const { return profiles_called > 0; }
  // Mean first-call timestamp over the profiles that called it; 0 when never called or untimed.
  [[nodiscard]] double first_call() const {
    return profiles_called ? static_cast<double>(order_sum) / profiles_called : 0.0;
  }
  // Blocks including the entry block (covered when called); 0/0 without block coverage.
  [[nodiscard]] uint32_t blocks_total() const;
  [[nodiscard]] uint32_t blocks_covered() const;
};

// One link unit's profile (an executable or a DSO).
struct Module {
  std::string path;      // as mapped in the process, or the file given
  std::string build_id;  // lower-case hex, empty when unknown
  Layout layout = Layout::kB;
  uint32_t module_hash = 0;
  uint32_t profile_type = 0;
  bool addresses_known = false;      // the map came from the ELF file, so link-time addresses are known
  uint64_t raw_section_address = 0;  // link-time address of __llvm_mipraw (0 when unknown)
  uint64_t raw_section_size = 0;
  uint64_t load_bias = 0;           // runtime - link-time address; 0 offline
  uint32_t raw_profiles = 1;        // raw profiles merged into this one
  std::vector<Function> functions;  // in map order

  [[nodiscard]] bool counts_calls() const { return profile_type & (kFunctionCallCount | kFunctionTimestamp); }
  // Called functions by first call (ties by name), then never-called ones are left out.
  [[nodiscard]] std::vector<const Function*> call_order() const;
  [[nodiscard]] std::vector<const Function*> never_called() const;
  [[nodiscard]] const Function* find(const std::string& name) const;  // mangled or demangled
};

// Decodes a raw section (live bytes or a .mipraw file) with its map. Checks the raw header against the map
// header (magic, version, file type, module hash, profile type) and bounds-checks every record.
// Function addresses come from the map (file_address); runtime addresses are left 0.
Module decode(std::span<const uint8_t> raw, const Map& map, bool demangle = true);

// The map of a module: its __llvm_mipmap section when `path` is an ELF file, else a .mipmap file
// (the section's bytes, e.g. from objcopy --dump-section). Throws MipError.
Map load_map(const std::string& path);

// Reads a whole file; throws MipError(kIo) with the path and errno text.
std::vector<uint8_t> read_file(const std::string& path);

// `hpctl mip show FILE.mipraw --map BINARY`: decode a dumped raw file offline.
Module decode_file(const std::string& raw_path, const std::string& map_path, bool demangle = true);

// `hpctl mip merge`: call counts add, first-call timestamps add into order_sum, coverage ORs.
// All inputs must be of the same build (module hash and function list). Throws MipError(kIncompatible).
Module merge(std::span<const Module> modules);
Module merge_files(std::span<const std::string> raw_paths, const std::string& map_path, bool demangle = true);

// A snapshot of every MIP module of one live process.
struct ModuleError {
  std::string path;
  std::string message;
  ErrorCode code;
};
struct Snapshot {
  int32_t pid = 0;
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC when the read began
  uint64_t read_ns = 0;  // how long reading + decoding took
  std::vector<Module> modules;
  std::vector<ModuleError> errors;  // modules that have a raw section but could not be decoded
};

struct LiveOptions {
  // Map files overriding the module's own __llvm_mipmap: key = module path as mapped, or its file name.
  std::map<std::string, std::string> mipmap_files;
  bool demangle = true;
};

// Reads the MIP sections of one process. discover() finds the modules (the ELF work, done once per module);
// snapshot() then only reads each raw section with process_vm_readv and decodes it, so periodic snapshots are
// cheap. Needs CAP_SYS_PTRACE (or same uid and ptrace_scope 0) over the target.
class LiveReader {
 public:
  explicit LiveReader(int32_t pid, LiveOptions options = {});
  ~LiveReader();
  LiveReader(const LiveReader&) = delete;
  LiveReader& operator=(const LiveReader&) = delete;
  LiveReader(LiveReader&&) noexcept;
  LiveReader& operator=(LiveReader&&) noexcept;

  // Scans /proc/PID/maps for modules with a __llvm_mipraw section; returns how many were found. Call again to
  // pick up DSOs loaded later (known modules are kept). Throws MipError(kProcessGone) if the process is gone.
  size_t discover();
  // Reads and decodes every discovered module (discovering first if never done). A module that cannot be
  // decoded is listed in Snapshot::errors; the process exiting throws MipError(kProcessGone).
  Snapshot snapshot();
  [[nodiscard]] int32_t pid() const;
  [[nodiscard]] size_t module_count() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// One-shot: discover + snapshot.
Snapshot snapshot_process(int32_t pid, const LiveOptions& options = {});

// Whether any module mapped in the process has a __llvm_mipraw section (for "MIP by default" in record).
bool process_has_mip(int32_t pid);

// Output for `hpctl mip show/merge`.
enum class SortOrder : uint8_t { kFirstCall, kCalls, kName, kAddress };
struct PrintOptions {
  SortOrder sort = SortOrder::kFirstCall;
  bool include_never_called = true;
  size_t width = 80;
};
void print_table(const Module& module, std::ostream& out, const PrintOptions& options = {});
void print_table(const Snapshot& snapshot, std::ostream& out, const PrintOptions& options = {});
// JSON documents (schema in the .cpp's header comment and docs): one module, or a snapshot.
std::string to_json(const Module& module, int indent = 2);
std::string to_json(const Snapshot& snapshot, int indent = 2);

}  // namespace hpd::mip
