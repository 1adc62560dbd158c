// CFI tables as bytes (cfi_table_file.h). Layout, little-endian (x86-64 only, as the tables are):
//
//   header, kHeaderSize bytes
//     0  magic "HPDCFI\x1a\n"        8  u32 format version       12  u32 header size
//    16  u32 build-id length        20  u32 flags (1: debug file)
//    24  u64 file size              32  u64 file mtime (ns)       40  u64 debug file size
//    48  u64 debug file mtime (ns)  56  u64 payload length        64  u64 payload checksum
//    72  u64 header checksum (of the header with this field zero)  80  build-id, zero-padded
//   208  u64 file's device         216  u64 file's inode
//   payload
//     u64 rows, segments, fdes, cfi rows, unsupported rows, .debug_frame fdes, compile ns;
//     u32 error length, opened path length; error, path, zero-padded to 8;
//     rows (CfiRow, 12 bytes each), zero-padded to 8; segments (4 x u64: offset, filesz, vaddr, x).
#include "hpd/unwind/cfi_table_file.h"

#include <cstring>

namespace hpd {

namespace {

constexpr char kMagic[8] = {'H', 'P', 'D', 'C', 'F', 'I', '\x1a', '\n'};
constexpr size_t kHeaderSize = 256;
constexpr size_t kBuildIdAt = 80;
constexpr size_t kDeviceAt = kBuildIdAt + kCfiTableFileMaxBuildId;
constexpr size_t kInodeAt = kDeviceAt + 8;
static_assert(kInodeAt + 8 <= kHeaderSize);
constexpr size_t kHeaderChecksumAt = 72;
constexpr size_t kSegmentBytes = 32;

// A 64-bit checksum of bytes: words mixed by multiply and rotate, the tail byte by byte, then an
// avalanche. Against damage (a torn write, a flipped block), not against someone who forges files.
uint64_t checksum(std::span<const uint8_t> bytes, uint64_t seed) {
  constexpr uint64_t k1 = 0x9e3779b97f4a7c15ull;
  constexpr uint64_t k2 = 0xc2b2ae3d27d4eb4full;
  uint64_t h = seed ^ (bytes.size() * k1);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, 8);
    h ^= w * k2;
    h = ((h << 31) | (h >> 33)) * k1;
  }
  for (; i < bytes.size(); ++i) h = (h ^ bytes[i]) * k2;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

uint64_t header_checksum(std::span<const uint8_t> header) {
  uint8_t copy[kHeaderSize];
  std::memcpy(copy, header.data(), kHeaderSize);
  std::memset(copy + kHeaderChecksumAt, 0, 8);
  return checksum(std::span<const uint8_t>(copy, kHeaderSize), 0x48504443u);
}

template <typename T>
void put(std::vector<uint8_t>& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof value);
}
template <typename T>
void append(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof value);
  std::memcpy(out.data() + at, &value, sizeof value);
}
void pad8(std::vector<uint8_t>& out) {
  out.resize((out.size() + 7) / 8 * 8, 0);
}

// Reads forward through bytes, refusing to go past their end.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  bool get(T* value) {
    if (sizeof(T) > left()) return false;
    std::memcpy(value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool text(uint32_t n, std::string* out) {
    if (n > left()) return false;
    out->assign(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return true;
  }
  bool align8() {
    const size_t to = (at_ + 7) / 8 * 8;
    if (to > bytes_.size()) return false;
    at_ = to;
    return true;
  }
  const uint8_t* here() const { return bytes_.data() + at_; }
  bool skip(size_t n) {
    if (n > left()) return false;
    at_ += n;
    return true;
  }
  size_t left() const { return bytes_.size() - at_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

std::string describe(const CfiTableSource& s) {
  std::string text = "build-id " + (s.build_id.empty() ? std::string("none") : s.build_id) + ", inode " +
                     std::to_string(s.device) + ":" + std::to_string(s.inode) + ", " +
                     std::to_string(s.size) + " bytes, mtime " + std::to_string(s.mtime_ns) + " ns";
  if (s.has_debug_file)
    text +=
        ", debug file " + std::to_string(s.debug_size) + " bytes, mtime " + std::to_string(s.debug_mtime_ns);
  return text;
}

CfiTableFileRead refuse(std::string why) {
  CfiTableFileRead r;
  r.refused = std::move(why);
  return r;
}

}  // namespace

std::vector<uint8_t> serialize_cfi_table(const CfiTable& table, const CfiTableSource& source) {
  std::vector<uint8_t> out(kHeaderSize, 0);
  append<uint64_t>(out, table.rows.size());
  append<uint64_t>(out, table.segments.size());
  append<uint64_t>(out, table.fdes);
  append<uint64_t>(out, table.cfi_rows);
  append<uint64_t>(out, table.unsupported_rows);
  append<uint64_t>(out, table.debug_frame_fdes);
  append<uint64_t>(out, table.build_ns);
  append<uint32_t>(out, static_cast<uint32_t>(table.error.size()));
  append<uint32_t>(out, static_cast<uint32_t>(table.opened_path.size()));
  out.insert(out.end(), table.error.begin(), table.error.end());
  out.insert(out.end(), table.opened_path.begin(), table.opened_path.end());
  pad8(out);
  const size_t rows_at = out.size();
  out.resize(rows_at + table.rows.size() * sizeof(CfiRow));
  if (!table.rows.empty())
    std::memcpy(out.data() + rows_at, table.rows.data(), table.rows.size() * sizeof(CfiRow));
  pad8(out);
  for (const CfiTable::Segment& s : table.segments) {
    append<uint64_t>(out, s.offset);
    append<uint64_t>(out, s.filesz);
    append<uint64_t>(out, s.vaddr);
    append<uint64_t>(out, s.executable ? 1 : 0);
  }

  const std::span<const uint8_t> payload(out.data() + kHeaderSize, out.size() - kHeaderSize);
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put<uint32_t>(out, 8, kCfiTableFileVersion);
  put<uint32_t>(out, 12, static_cast<uint32_t>(kHeaderSize));
  const size_t id_len = std::min(source.build_id.size(), kCfiTableFileMaxBuildId);
  put<uint32_t>(out, 16, static_cast<uint32_t>(id_len));
  put<uint32_t>(out, 20, source.has_debug_file ? 1u : 0u);
  put<uint64_t>(out, 24, source.size);
  put<uint64_t>(out, 32, source.mtime_ns);
  put<uint64_t>(out, 40, source.debug_size);
  put<uint64_t>(out, 48, source.debug_mtime_ns);
  put<uint64_t>(out, 56, payload.size());
  put<uint64_t>(out, 64, checksum(payload, 0x524f5753u));
  std::memcpy(out.data() + kBuildIdAt, source.build_id.data(), id_len);
  put<uint64_t>(out, kDeviceAt, source.device);
  put<uint64_t>(out, kInodeAt, source.inode);
  put<uint64_t>(out, kHeaderChecksumAt, header_checksum(out));
  return out;
}

CfiTableFileRead read_cfi_table_file(std::span<const uint8_t> bytes, const CfiTableSource& expected) {
  if (bytes.size() < kHeaderSize)
    return refuse("truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the header");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return refuse("not an hpd CFI table (bad magic)");
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  auto u64 = [&](size_t at) {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + at, 8);
    return v;
  };
  if (u32(8) != kCfiTableFileVersion)
    return refuse("written by format version " + std::to_string(u32(8)) + ", this hpd reads version " +
                  std::to_string(kCfiTableFileVersion));
  if (u32(12) != kHeaderSize || u64(kHeaderChecksumAt) != header_checksum(bytes.first(kHeaderSize)))
    return refuse("damaged header (checksum)");
  const uint32_t id_len = u32(16);
  if (id_len > kCfiTableFileMaxBuildId) return refuse("damaged header (build-id length)");
  CfiTableSource source;
  source.build_id.assign(reinterpret_cast<const char*>(bytes.data() + kBuildIdAt), id_len);
  source.has_debug_file = (u32(20) & 1u) != 0;
  source.size = u64(24);
  source.mtime_ns = u64(32);
  source.debug_size = u64(40);
  source.debug_mtime_ns = u64(48);
  source.device = u64(kDeviceAt);
  source.inode = u64(kInodeAt);
  if (!(source == expected))
    return refuse("compiled from another file (" + describe(source) +
                  "; the file now: " + describe(expected) + ")");
  const uint64_t payload_len = u64(56);
  if (bytes.size() - kHeaderSize != payload_len)
    return refuse("truncated or extended: " + std::to_string(bytes.size() - kHeaderSize) +
                  " payload bytes, the header says " + std::to_string(payload_len));
  const std::span<const uint8_t> payload = bytes.subspan(kHeaderSize);
  if (checksum(payload, 0x524f5753u) != u64(64)) return refuse("damaged payload (checksum)");

  auto table = std::make_shared<CfiTable>();
  Cursor c(payload);
  uint64_t rows = 0, segments = 0;
  uint32_t error_len = 0, path_len = 0;
  if (!c.get(&rows) || !c.get(&segments) || !c.get(&table->fdes) || !c.get(&table->cfi_rows) ||
      !c.get(&table->unsupported_rows) || !c.get(&table->debug_frame_fdes) || !c.get(&table->build_ns) ||
      !c.get(&error_len) || !c.get(&path_len) || !c.text(error_len, &table->error) ||
      !c.text(path_len, &table->opened_path) || !c.align8())
    return refuse("damaged payload (counts)");
  if (rows > c.left() / sizeof(CfiRow)) return refuse("damaged payload (row count)");
  table->rows.resize(rows);
  if (rows != 0) std::memcpy(table->rows.data(), c.here(), rows * sizeof(CfiRow));
  if (!c.skip(rows * sizeof(CfiRow)) || !c.align8()) return refuse("damaged payload (rows)");
  if (segments > c.left() / kSegmentBytes || c.left() != segments * kSegmentBytes)
    return refuse("damaged payload (segments)");
  for (uint64_t i = 0; i < segments; ++i) {
    uint64_t offset = 0, filesz = 0, vaddr = 0, executable = 0;
    c.get(&offset);
    c.get(&filesz);
    c.get(&vaddr);
    c.get(&executable);
    if (executable > 1) return refuse("damaged payload (segment)");
    table->segments.push_back({offset, filesz, vaddr, executable == 1});
  }
  // What the eBPF walker relies on: rows sorted by pc, kinds it knows.
  for (size_t i = 0; i < table->rows.size(); ++i) {
    const CfiRow& r = table->rows[i];
    if (r.cfa_kind > static_cast<uint8_t>(CfaKind::kRspRaInRdi) ||
        r.rbp_kind > static_cast<uint8_t>(RbpKind::kUndefined) || (i > 0 && r.pc <= table->rows[i - 1].pc))
      return refuse("damaged payload (row " + std::to_string(i) + ")");
  }
  table->build_id = source.build_id;
  table->index = build_cfi_index(table->rows);
  CfiTableFileRead read;
  read.table = std::move(table);
  return read;
}

}  // namespace hpd
