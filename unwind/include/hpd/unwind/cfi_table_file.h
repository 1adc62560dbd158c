// A compiled CFI table (cfi_table.h) as bytes, for the unwind-table cache on disk
// (hpd/collect/unwind_cache.h): a header that says what the table was compiled from, then the rows and
// the module's segments. The reader trusts nothing: a file that is truncated, damaged, written by another
// format version, or compiled from another file than the one asked about is refused with the reason.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hpd/unwind/cfi_table.h"

namespace hpd {

// Bump when CfiRow's layout or meaning changes, when the compiler's output for the same file changes
// (a fix in how rules are classified), or when the file layout below changes: older files are then
// refused and compiled again.
// 2: rows whose return address is in rdi (CfaKind::kRspRaInRdi, glibc's vfork), kUnsupported in 1.
// 3: .eh_frame read without .eh_frame_hdr (static executables), walked by frame pointer in 2.
// 4: an outermost row at an entry point without CFI (ld.so's _start and _dl_start_user), none in 3.
inline constexpr uint32_t kCfiTableFileVersion = 4;

// What a table was compiled from: the module's build-id and the file opened (its device, inode, size
// and modification time), and its separate debug file's size and time (its .debug_frame rows may be in
// the table) when there is one. Two files with the same build-id but another inode, size or time are
// taken for different files (a copy, a rebuild, a file made to look like another).
struct CfiTableSource {
  std::string build_id;  // lower-case hex, as CfiTable::build_id
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  uint64_t mtime_ns = 0;
  bool has_debug_file = false;
  uint64_t debug_size = 0;
  uint64_t debug_mtime_ns = 0;
  bool operator==(const CfiTableSource&) const = default;
};

// The longest build-id (hex) a file may name.
inline constexpr size_t kCfiTableFileMaxBuildId = 128;

// The file's bytes: header (magic, kCfiTableFileVersion, source, payload length, checksums), payload.
// The index is not stored: it is built again from the rows on reading.
std::vector<uint8_t> serialize_cfi_table(const CfiTable& table, const CfiTableSource& source);

struct CfiTableFileRead {
  std::shared_ptr<const CfiTable> table;  // null when refused
  std::string refused;                    // why, in words ("truncated: 12 of 4096 bytes", ...)
};

// Reads a table written by serialize_cfi_table, when it was compiled from `expected` (build-id, sizes
// and times all equal). Never throws on bad bytes.
CfiTableFileRead read_cfi_table_file(std::span<const uint8_t> bytes, const CfiTableSource& expected);

}  // namespace hpd
