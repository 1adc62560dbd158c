// Decoding of MIP headers, maps and raw sections (layouts A and B), and merging of decoded profiles.
// Everything here works on untrusted bytes: every read is bounds-checked and offset arithmetic is checked.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "mip_internal.h"

namespace hpd::mip {
namespace {

// Little-endian field reads from a bounds-checked cursor over `data`.
class Reader {
 public:
  Reader(std::span<const uint8_t> data, const char* what) : data_(data), what_(what) {}

  [[nodiscard]] size_t pos() const { return pos_; }
  [[nodiscard]] size_t remaining() const { return data_.size() - pos_; }
  void seek(size_t pos) {
    if (pos > data_.size()) fail(pos);
    pos_ = pos;
  }
  void need(size_t n) const {
    if (n > remaining()) fail(pos_ + n);
  }
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));  // x86-64 and the formats are little endian
    pos_ += sizeof(T);
    return v;
  }
  std::string get_string(size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  [[noreturn]] void fail(size_t wanted) const {
    std::ostringstream msg;
    msg << what_ << " is truncated: need " << wanted << " bytes, have " << data_.size();
    throw MipError(ErrorCode::kTruncated, msg.str());
  }

  std::span<const uint8_t> data_;
  const char* what_;
  size_t pos_ = 0;
};

uint32_t load_u32(std::span<const uint8_t> data, size_t at) {
  uint32_t v;
  std::memcpy(&v, data.data() + at, sizeof v);
  return v;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* kind_name(FileKind kind) {
  switch (kind) {
    case FileKind::kRaw: return "raw section (.mipraw)";
    case FileKind::kMap: return "map (.mipmap)";
    case FileKind::kProfile: return "profile (.mip)";
    case FileKind::kCallEdgeSamples: return "call-edge samples (.mipret)";
  }
  return "?";
}

// a - b + c with overflow detection; false when the result does not fit.
bool rebase(int64_t pc_offset, int64_t section_offset, int64_t entry_pos, int64_t* out) {
  int64_t t;
  if (__builtin_sub_overflow(pc_offset, section_offset, &t)) return false;
  return !__builtin_add_overflow(t, entry_pos, out);
}

size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

bool all_zero(std::span<const uint8_t> data) {
  return std::all_of(data.begin(), data.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kTruncated: return "truncated";
    case ErrorCode::kBadMagic: return "bad-magic";
    case ErrorCode::kUnsupportedVersion: return "unsupported-version";
    case ErrorCode::kWrongFileType: return "wrong-file-type";
    case ErrorCode::kBadHeader: return "bad-header";
    case ErrorCode::kHashMismatch: return "hash-mismatch";
    case ErrorCode::kProfileTypeMismatch: return "profile-type-mismatch";
    case ErrorCode::kMapOutOfRange: return "map-out-of-range";
    case ErrorCode::kNoSection: return "no-section";
    case ErrorCode::kNotElf: return "not-elf";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kProcessGone: return "process-gone";
    case ErrorCode::kPermission: return "permission";
    case ErrorCode::kIncompatible: return "incompatible";
  }
  return "unknown";
}

Header parse_header(std::span<const uint8_t> data, FileKind expected) {
  const char* what = expected == FileKind::kRaw ? "MIP raw section header" : "MIP map header";
  if (data.size() < 8) {
    throw MipError(ErrorCode::kTruncated, std::string(what) +
                                              " is truncated: " + std::to_string(data.size()) +
                                              " bytes, a header needs at least 24");
  }
  Reader r(data, what);
  const uint32_t magic = r.get<uint32_t>();
  if (magic != kMagic) {
    throw MipError(ErrorCode::kBadMagic, std::string("bad MIP magic ") + hex32(magic) + " in " + what +
                                             ", expected " + hex32(kMagic) + ": not MIP data");
  }
  Header h;
  h.version = r.get<uint16_t>();
  h.file_type = r.get<uint16_t>();
  if (h.version > kMaxVersion) {
    throw MipError(ErrorCode::kUnsupportedVersion, "MIP version " + std::to_string(h.version) +
                                                       " is newer than the newest this reader knows (" +
                                                       std::to_string(kMaxVersion) + ")");
  }
  // The layouts differ in where OffsetToData sits: offset 20 (= 24) in A, offset 28 (= 32) in B.
  if (data.size() < 24) r.need(24);
  if (load_u32(data, 20) == 24) {
    h.layout = Layout::kA;
    h.size = 24;
  } else if (data.size() >= 32 && load_u32(data, 28) == 32) {
    h.layout = Layout::kB;
    h.size = 32;
  } else if (data.size() < 32) {
    r.need(32);
  } else {
    throw MipError(ErrorCode::kBadHeader,
                   std::string(what) + ": OffsetToData is neither 24 (layout A) nor 32 (layout B)");
  }
  h.profile_type = r.get<uint32_t>();
  h.module_hash = r.get<uint32_t>();
  if (h.layout == Layout::kA) {
    switch (h.file_type) {
      case 1: h.kind = FileKind::kRaw; break;
      case 2: h.kind = FileKind::kMap; break;
      case 3: h.kind = FileKind::kProfile; break;
      case 4: h.kind = FileKind::kCallEdgeSamples; break;
      default:
        throw MipError(ErrorCode::kWrongFileType, std::string(what) + ": unknown file type " +
                                                      std::to_string(h.file_type) + " (layout A)");
    }
    h.is_32bit = false;
    r.get<uint32_t>();  // Reserved
  } else {
    switch (h.file_type & 0xF) {
      case 1: h.kind = FileKind::kRaw; break;
      case 2: h.kind = FileKind::kCallEdgeSamples; break;
      case 4: h.kind = FileKind::kMap; break;
      case 8: h.kind = FileKind::kProfile; break;
      default:
        throw MipError(ErrorCode::kWrongFileType,
                       std::string(what) + ": unknown file type " + hex32(h.file_type) + " (layout B)");
    }
    h.is_32bit = (h.file_type & 0x20) != 0;
    if (h.is_32bit) {
      h.raw_section_offset = r.get<int32_t>();
      r.get<uint32_t>();
    } else {
      h.raw_section_offset = r.get<int64_t>();
    }
    r.get<uint32_t>();  // Reserved
  }
  h.offset_to_data = r.get<uint32_t>();
  if (h.kind != expected) {
    throw MipError(ErrorCode::kWrongFileType,
                   std::string("expected a MIP ") + kind_name(expected) + ", got a " + kind_name(h.kind));
  }
  if (h.offset_to_data > data.size()) {
    throw MipError(ErrorCode::kTruncated, std::string(what) + ": data starts at " +
                                              std::to_string(h.offset_to_data) + ", past the end (" +
                                              std::to_string(data.size()) + " bytes)");
  }
  return h;
}

Map parse_map(std::span<const uint8_t> data) {
  Map map;
  map.header = parse_header(data, FileKind::kMap);
  Header current = map.header;
  size_t header_pos = 0;
  const size_t align = map.header.is_32bit ? 4 : 8;
  Reader r(data, "MIP map");
  r.seek(map.header.offset_to_data);
  while (r.remaining() > 0) {
    if (all_zero(data.subspan(r.pos()))) break;  // padding after the last entry
    // A second header: comdat deduplication did not happen (e.g. several relocatable links).
    if (r.remaining() >= 4 && load_u32(data, r.pos()) == kMagic) {
      const Header h = parse_header(data.subspan(r.pos()), FileKind::kMap);
      if (h.module_hash != map.header.module_hash || h.profile_type != map.header.profile_type ||
          h.layout != map.header.layout) {
        throw MipError(ErrorCode::kBadHeader,
                       "MIP map: a second header at offset " + std::to_string(r.pos()) +
                           " describes another module (hash " + hex32(h.module_hash) + ")");
      }
      header_pos = r.pos();
      current = h;
      r.seek(r.pos() + h.offset_to_data);
      continue;
    }
    const int64_t entry_pos = static_cast<int64_t>(r.pos() - header_pos);
    MapEntry e;
    int64_t raw_pc = 0, func_pc = 0, section_pc = current.raw_section_offset;
    if (map.header.layout == Layout::kA) {
      section_pc = r.get<int32_t>();
      raw_pc = r.get<int32_t>();
      func_pc = r.get<int32_t>();
    } else if (map.header.is_32bit) {
      raw_pc = r.get<int32_t>();
      func_pc = r.get<int32_t>();
    } else {
      raw_pc = r.get<int64_t>();
      func_pc = r.get<int64_t>();
    }
    e.size = r.get<uint32_t>();
    e.cfg_signature = r.get<uint32_t>();
    const uint32_t blocks = r.get<uint32_t>();
    r.need(static_cast<size_t>(blocks) * 4);
    e.block_offsets.resize(blocks);
    for (uint32_t i = 0; i < blocks; i++) e.block_offsets[i] = r.get<uint32_t>();
    const uint32_t name_len = r.get<uint32_t>();
    e.name = r.get_string(name_len);
    // Layout A stores the section's PC offset in every entry; B stores it once, relative to its header.
    bool ok;
    if (map.header.layout == Layout::kA) {
      ok = !__builtin_sub_overflow(raw_pc, section_pc, &e.raw_offset) &&
           !__builtin_sub_overflow(func_pc, section_pc, &e.function_offset);
    } else {
      ok = rebase(raw_pc, section_pc, entry_pos, &e.raw_offset) &&
           rebase(func_pc, section_pc, entry_pos, &e.function_offset);
    }
    if (!ok) {
      throw MipError(ErrorCode::kMapOutOfRange, "MIP map entry for " + e.name + " has offsets that overflow");
    }
    map.entries.push_back(std::move(e));
    const size_t next = align_up(r.pos(), align);
    if (next > data.size()) break;  // the last entry's padding may be cut by the section end
    r.seek(next);
  }
  return map;
}

uint32_t Function::blocks_total() const {
  return block_coverage ? static_cast<uint32_t>(block_covered.size()) + 1 : 0;
}

uint32_t Function::blocks_covered() const {
  if (!block_coverage) return 0;
  uint32_t n = called() ? 1 : 0;
  for (uint8_t b : block_covered) n += b ? 1 : 0;
  return n;
}

std::vector<const Function*> Module::call_order() const {
  std::vector<const Function*> out;
  for (const Function& f : functions) {
    if (f.called()) out.push_back(&f);
  }
  // Untimed functions (coverage mode, or timestamps disabled) go after the timed ones.
  std::stable_sort(out.begin(), out.end(), [](const Function* a, const Function* b) {
    const bool at = a->order_sum != 0, bt = b->order_sum != 0;
    if (at != bt) return at;
    if (a->first_call() != b->first_call()) return a->first_call() < b->first_call();
    return a->name < b->name;
  });
  return out;
}

std::vector<const Function*> Module::never_called() const {
  std::vector<const Function*> out;
  for (const Function& f : functions) {
    if (!f.called()) out.push_back(&f);
  }
  std::sort(out.begin(), out.end(), [](const Function* a, const Function* b) { return a->name < b->name; });
  return out;
}

const Function* Module::find(const std::string& name) const {
  for (const Function& f : functions) {
    if (f.name == name || f.demangled == name) return &f;
  }
  return nullptr;
}

Module decode_records(std::span<const uint8_t> raw, const Map& map) {
  const Header rh = parse_header(raw, FileKind::kRaw);
  const Header& mh = map.header;
  if (rh.layout != mh.layout) {
    throw MipError(ErrorCode::kBadHeader,
                   std::string("the raw section is layout ") + (rh.layout == Layout::kA ? "A" : "B") +
                       " but the map is layout " + (mh.layout == Layout::kA ? "A" : "B"));
  }
  if (rh.module_hash != mh.module_hash) {
    throw MipError(ErrorCode::kHashMismatch,
                   "MIP module hash mismatch: the raw data has " + hex32(rh.module_hash) + ", the map has " +
                       hex32(mh.module_hash) + " (the raw data comes from another build or module)");
  }
  if (rh.profile_type != mh.profile_type) {
    throw MipError(
        ErrorCode::kProfileTypeMismatch,
        "MIP profile type mismatch: raw " + hex32(rh.profile_type) + ", map " + hex32(mh.profile_type));
  }
  // A short read or a cut file: say so rather than blaming the first map entry that falls off the end.
  if (map.raw_section_size && raw.size() < map.raw_section_size) {
    throw MipError(ErrorCode::kTruncated, "MIP raw section is truncated: " + std::to_string(raw.size()) +
                                              " bytes, the module's section has " +
                                              std::to_string(map.raw_section_size));
  }
  Module m;
  m.layout = rh.layout;
  m.module_hash = rh.module_hash;
  m.profile_type = rh.profile_type;
  m.build_id = map.build_id;
  m.raw_section_address = map.raw_section_address_known ? map.raw_section_address : 0;
  m.addresses_known = map.raw_section_address_known;
  m.raw_section_size = raw.size();
  const bool counts = rh.counts_calls();
  const bool blocks = (rh.profile_type & kBlockCoverage) != 0;
  const size_t fixed = counts ? 8 : 1;
  m.functions.reserve(map.entries.size());
  for (const MapEntry& e : map.entries) {
    const size_t record = fixed + (blocks ? e.block_offsets.size() : 0);
    if (e.raw_offset < static_cast<int64_t>(rh.size) || static_cast<uint64_t>(e.raw_offset) > raw.size() ||
        record > raw.size() - static_cast<uint64_t>(e.raw_offset)) {
      throw MipError(ErrorCode::kMapOutOfRange, "MIP map entry for " + e.name + " points at raw offset " +
                                                    std::to_string(e.raw_offset) + " (+" +
                                                    std::to_string(record) + " bytes), outside the " +
                                                    std::to_string(raw.size()) + "-byte raw section");
    }
    const uint8_t* rec = raw.data() + e.raw_offset;
    Function f;
    f.name = e.name;
    f.demangled = e.name;
    f.section_offset = e.function_offset;
    f.file_address = m.addresses_known ? m.raw_section_address + static_cast<uint64_t>(e.function_offset) : 0;
    f.size = e.size;
    f.cfg_signature = e.cfg_signature;
    if (counts) {
      uint32_t count, timestamp;
      std::memcpy(&count, rec, 4);
      std::memcpy(&timestamp, rec + 4, 4);
      // 0xFFFFFFFF is the initial "never called"; 0 only appears in a zeroed section.
      if (count != UINT32_MAX && count != 0) {
        f.call_count = count;
        f.profiles_called = 1;
        f.order_sum = timestamp == UINT32_MAX ? 0 : timestamp;
      }
    } else if (rec[0] == 0) {
      f.call_count = 1;
      f.profiles_called = 1;
    }
    f.block_coverage = blocks;
    if (blocks) {
      f.block_offsets = e.block_offsets;
      f.block_covered.resize(e.block_offsets.size());
      for (size_t i = 0; i < e.block_offsets.size(); i++) f.block_covered[i] = rec[fixed + i] == 0 ? 1 : 0;
    } else {
      f.block_offsets = e.block_offsets;
    }
    m.functions.push_back(std::move(f));
  }
  return m;
}

Module merge(std::span<const Module> modules) {
  if (modules.empty()) throw MipError(ErrorCode::kIncompatible, "nothing to merge");
  Module out = modules[0];
  for (size_t i = 1; i < modules.size(); i++) {
    const Module& m = modules[i];
    if (m.module_hash != out.module_hash || m.profile_type != out.profile_type ||
        m.functions.size() != out.functions.size()) {
      throw MipError(ErrorCode::kIncompatible,
                     "cannot merge MIP profiles of different builds: " +
                         (m.path.empty() ? "profile " + std::to_string(i + 1) : m.path) +
                         " has module hash " + hex32(m.module_hash) + " and " +
                         std::to_string(m.functions.size()) + " functions, expected " +
                         hex32(out.module_hash) + " and " + std::to_string(out.functions.size()));
    }
    for (size_t k = 0; k < m.functions.size(); k++) {
      Function& dst = out.functions[k];
      const Function& src = m.functions[k];
      if (dst.name != src.name || dst.block_covered.size() != src.block_covered.size()) {
        throw MipError(ErrorCode::kIncompatible, "cannot merge MIP profiles: function " + std::to_string(k) +
                                                     " is " + src.name + " in one and " + dst.name +
                                                     " in another");
      }
      if (out.counts_calls()) {
        if (__builtin_add_overflow(dst.call_count, src.call_count, &dst.call_count))
          dst.call_count = UINT64_MAX;
      } else {
        dst.call_count = std::max(dst.call_count, src.call_count);
      }
      if (__builtin_add_overflow(dst.order_sum, src.order_sum, &dst.order_sum)) dst.order_sum = UINT64_MAX;
      dst.profiles_called += src.profiles_called;
      for (size_t b = 0; b < dst.block_covered.size(); b++) dst.block_covered[b] |= src.block_covered[b];
    }
    out.raw_profiles += m.raw_profiles;
  }
  return out;
}

}  // namespace hpd::mip
