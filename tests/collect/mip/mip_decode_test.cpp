// MIP decoder tests on synthetic sections: both layouts, coverage and call-count modes, every header check,
// out-of-range map entries, every truncation, merging, and the printers.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mip_internal.h"

namespace hpd::mip {
namespace {

struct FnSpec {
  std::string name;
  int64_t function_offset = -0x1000;  // .text before __llvm_mipraw, as linkers lay it out
  uint32_t size = 32;
  std::vector<uint32_t> blocks;  // block offsets
  uint32_t count = UINT32_MAX;   // as stored in the raw record
  uint32_t timestamp = UINT32_MAX;
  uint8_t covered = 0xFF;            // coverage mode
  std::vector<uint8_t> block_bytes;  // as stored (0 = covered)
};

void put(std::vector<uint8_t>& v, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  v.insert(v.end(), b, b + n);
}
template <typename T>
void put(std::vector<uint8_t>& v, T x) {
  put(v, &x, sizeof x);
}
template <typename T>
void poke(std::vector<uint8_t>& v, size_t at, T x) {
  std::memcpy(v.data() + at, &x, sizeof x);
}
void pad(std::vector<uint8_t>& v, size_t align) {
  while (v.size() % align) v.push_back(0);
}

// Builds a raw section and its map the way the MIP backend lays them out.
struct Synthetic {
  Layout layout = Layout::kB;
  bool is_32bit = false;
  uint32_t profile_type = kFunctionCallCount | kFunctionTimestamp | kBlockCoverage;
  uint32_t hash = 0x1234abcd;
  uint16_t version = 8;
  int64_t section_pc = 0x4000;  // __start___llvm_mipraw - map header (GNU ld: the section's vaddr)
  std::vector<FnSpec> fns;
  std::vector<size_t> raw_offsets;  // filled by raw()

  void header(std::vector<uint8_t>& v, bool map) const {
    put<uint32_t>(v, kMagic);
    put<uint16_t>(v, version);
    if (layout == Layout::kA) {
      put<uint16_t>(v, map ? 2 : 1);
      put<uint32_t>(v, profile_type);
      put<uint32_t>(v, hash);
      put<uint32_t>(v, 0);
      put<uint32_t>(v, 24);
    } else {
      put<uint16_t>(v, (map ? 4 : 1) | (is_32bit ? 0x20 : 0x10));
      put<uint32_t>(v, profile_type);
      put<uint32_t>(v, hash);
      if (is_32bit) {
        put<int32_t>(v, map ? static_cast<int32_t>(section_pc) : 0);
        put<uint32_t>(v, 0);
      } else {
        put<int64_t>(v, map ? section_pc : 0);
      }
      put<uint32_t>(v, 0);
      put<uint32_t>(v, 32);
    }
  }

  std::vector<uint8_t> raw() {
    std::vector<uint8_t> v;
    header(v, false);
    raw_offsets.clear();
    const bool counts = profile_type & (kFunctionCallCount | kFunctionTimestamp);
    for (const FnSpec& f : fns) {
      if (counts) pad(v, 4);
      raw_offsets.push_back(v.size());
      if (counts) {
        put<uint32_t>(v, f.count);
        put<uint32_t>(v, f.timestamp);
      } else {
        v.push_back(f.covered);
      }
      if (profile_type & kBlockCoverage) {
        for (size_t i = 0; i < f.blocks.size(); i++)
          v.push_back(i < f.block_bytes.size() ? f.block_bytes[i] : 0xFF);
      }
    }
    return v;
  }

  // Needs raw() first (for the record offsets).
  std::vector<uint8_t> map() const {
    std::vector<uint8_t> v;
    header(v, true);
    const size_t align = is_32bit ? 4 : 8;
    for (size_t i = 0; i < fns.size(); i++) {
      const FnSpec& f = fns[i];
      pad(v, align);
      const int64_t c = static_cast<int64_t>(v.size());
      const int64_t raw_off = static_cast<int64_t>(raw_offsets[i]);
      if (layout == Layout::kA) {
        const int32_t start_pc = static_cast<int32_t>(section_pc - c);
        put<int32_t>(v, start_pc);
        put<int32_t>(v, static_cast<int32_t>(raw_off + start_pc));
        put<int32_t>(v, static_cast<int32_t>(f.function_offset + start_pc));
      } else if (is_32bit) {
        put<int32_t>(v, static_cast<int32_t>(raw_off + section_pc - c));
        put<int32_t>(v, static_cast<int32_t>(f.function_offset + section_pc - c));
      } else {
        put<int64_t>(v, raw_off + section_pc - c);
        put<int64_t>(v, f.function_offset + section_pc - c);
      }
      put<uint32_t>(v, f.size);
      put<uint32_t>(v, 0xC0FFEE);
      put<uint32_t>(v, static_cast<uint32_t>(f.blocks.size()));
      for (uint32_t b : f.blocks) put<uint32_t>(v, b);
      put<uint32_t>(v, static_cast<uint32_t>(f.name.size()));
      put(v, f.name.data(), f.name.size());
    }
    pad(v, align);
    return v;
  }
};

// main (1st, 1 call), hot (2nd, 32000 calls, 2 blocks covered of 2), cold (never, 1 block).
Synthetic three_functions() {
  Synthetic s;
  s.fns = {
      {"main", -0x300, 40, {12}, 1, 1, 0xFF, {0}},
      {"_ZN2ns3hotEi", -0x200, 64, {8, 20}, 32000, 2, 0xFF, {0, 0}},
      {"cold", -0x100, 16, {4}, UINT32_MAX, UINT32_MAX, 0xFF, {0xFF}},
  };
  return s;
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const MipError& e) {
    EXPECT_NE(std::string(e.what()), "");
    return e.code();
  }
  ADD_FAILURE() << "no MipError thrown";
  return ErrorCode::kIo;
}

void expect_three_functions(const Module& m) {
  ASSERT_EQ(m.functions.size(), 3u);
  const Function* main = m.find("main");
  const Function* hot = m.find("_ZN2ns3hotEi");
  const Function* cold = m.find("cold");
  ASSERT_TRUE(main && hot && cold);
  EXPECT_EQ(main->call_count, 1u);
  EXPECT_EQ(hot->call_count, 32000u);
  EXPECT_EQ(cold->call_count, 0u);
  EXPECT_FALSE(cold->called());
  EXPECT_EQ(main->order_sum, 1u);
  EXPECT_EQ(hot->order_sum, 2u);
  EXPECT_EQ(main->section_offset, -0x300);
  EXPECT_EQ(hot->section_offset, -0x200);
  EXPECT_EQ(hot->size, 64u);
  EXPECT_EQ(hot->block_offsets, (std::vector<uint32_t>{8, 20}));
  EXPECT_EQ(hot->blocks_total(), 3u);
  EXPECT_EQ(hot->blocks_covered(), 3u);
  EXPECT_EQ(cold->blocks_total(), 2u);
  EXPECT_EQ(cold->blocks_covered(), 0u);
  const auto order = m.call_order();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0]->name, "main");
  EXPECT_EQ(order[1]->name, "_ZN2ns3hotEi");
  const auto never = m.never_called();
  ASSERT_EQ(never.size(), 1u);
  EXPECT_EQ(never[0]->name, "cold");
}

TEST(MipDecode, LayoutB64) {
  Synthetic s = three_functions();
  const auto raw = s.raw();
  const Map map = parse_map(s.map());
  EXPECT_EQ(map.header.layout, Layout::kB);
  EXPECT_EQ(map.header.module_hash, 0x1234abcdu);
  EXPECT_EQ(map.header.raw_section_offset, 0x4000);
  ASSERT_EQ(map.entries.size(), 3u);
  EXPECT_EQ(map.entries[1].raw_offset, static_cast<int64_t>(s.raw_offsets[1]));
  EXPECT_EQ(map.entries[1].cfg_signature, 0xC0FFEEu);
  expect_three_functions(decode(raw, map, false));
}

TEST(MipDecode, LayoutA) {
  Synthetic s = three_functions();
  s.layout = Layout::kA;
  const auto raw = s.raw();
  const Map map = parse_map(s.map());
  EXPECT_EQ(map.header.layout, Layout::kA);
  EXPECT_EQ(map.header.size, 24u);
  expect_three_functions(decode(raw, map, false));
}

TEST(MipDecode, LayoutB32) {
  Synthetic s = three_functions();
  s.is_32bit = true;
  const auto raw = s.raw();
  const Map map = parse_map(s.map());
  EXPECT_TRUE(map.header.is_32bit);
  expect_three_functions(decode(raw, map, false));
}

TEST(MipDecode, CoverageMode) {
  Synthetic s = three_functions();
  s.profile_type = kFunctionCoverage | kBlockCoverage;
  s.fns[0].covered = 0;
  s.fns[1].covered = 0;
  const auto raw = s.raw();
  const Module m = decode(raw, parse_map(s.map()), false);
  EXPECT_FALSE(m.counts_calls());
  EXPECT_EQ(m.find("main")->call_count, 1u);
  EXPECT_TRUE(m.find("_ZN2ns3hotEi")->called());
  EXPECT_EQ(m.find("_ZN2ns3hotEi")->blocks_covered(), 3u);
  EXPECT_FALSE(m.find("cold")->called());
  EXPECT_EQ(m.call_order().size(), 2u);  // untimed, but still the called ones
}

TEST(MipDecode, FileAddressesFromSectionAddress) {
  Synthetic s = three_functions();
  const auto raw = s.raw();
  Map map = parse_map(s.map());
  map.raw_section_address_known = true;
  map.raw_section_address = 0x4000;
  const Module m = decode(raw, map, false);
  EXPECT_TRUE(m.addresses_known);
  EXPECT_EQ(m.find("main")->file_address, 0x4000u - 0x300u);
}

TEST(MipDecode, DemanglesWhenAsked) {
  Synthetic s = three_functions();
  const auto raw = s.raw();
  const Module m = decode(raw, parse_map(s.map()), true);
  EXPECT_EQ(m.find("_ZN2ns3hotEi")->demangled, "ns::hot(int)");
  EXPECT_EQ(m.find("ns::hot(int)")->name, "_ZN2ns3hotEi");
  EXPECT_EQ(m.find("main")->demangled, "main");
}

TEST(MipDecode, SecondMapHeaderIsFollowed) {
  Synthetic s = three_functions();
  const auto raw = s.raw();
  auto map_bytes = s.map();
  // A second copy of the header (as when comdat deduplication fails), then one more entry relative to it.
  Synthetic t = s;
  t.fns = {s.fns[2]};
  t.raw_offsets = {s.raw_offsets[2]};
  const size_t base = map_bytes.size();
  auto second = t.map();
  // The entry's PC offsets are relative to its own position, which moved by `base`: fix the header's offset.
  poke<int64_t>(second, 16, s.section_pc - static_cast<int64_t>(base));
  poke<int64_t>(second, 32,
                static_cast<int64_t>(s.raw_offsets[2]) + s.section_pc - static_cast<int64_t>(base) - 32);
  map_bytes.insert(map_bytes.end(), second.begin(), second.end());
  const Map map = parse_map(map_bytes);
  ASSERT_EQ(map.entries.size(), 4u);
  EXPECT_EQ(map.entries[3].raw_offset, static_cast<int64_t>(s.raw_offsets[2]));
  EXPECT_EQ(map.entries[3].name, "cold");
}

TEST(MipDecodeErrors, EachHeaderCheckHasItsOwnError) {
  Synthetic s = three_functions();
  const auto raw = s.raw();
  const auto map_bytes = s.map();
  const Map map = parse_map(map_bytes);

  EXPECT_EQ(code_of([&] { parse_map({}); }), ErrorCode::kTruncated);
  EXPECT_EQ(code_of([&] { decode(std::span(raw).first(20), map); }), ErrorCode::kTruncated);

  auto bad_magic = raw;
  bad_magic[0] ^= 0xFF;
  EXPECT_EQ(code_of([&] { decode(bad_magic, map); }), ErrorCode::kBadMagic);
  auto bad_map_magic = map_bytes;
  poke<uint32_t>(bad_map_magic, 0, 0x7f454c46);
  EXPECT_EQ(code_of([&] { parse_map(bad_map_magic); }), ErrorCode::kBadMagic);

  Synthetic future = s;
  future.version = 9;
  const auto future_raw = future.raw();
  EXPECT_EQ(code_of([&] { decode(future_raw, map); }), ErrorCode::kUnsupportedVersion);
  EXPECT_EQ(code_of([&] { parse_map(future.map()); }), ErrorCode::kUnsupportedVersion);
  try {
    decode(future_raw, map);
  } catch (const MipError& e) {
    EXPECT_NE(std::string(e.what()).find("version 9"), std::string::npos) << e.what();
  }

  EXPECT_EQ(code_of([&] { decode(map_bytes, map); }), ErrorCode::kWrongFileType);  // a map given as raw
  EXPECT_EQ(code_of([&] { parse_map(raw); }), ErrorCode::kWrongFileType);          // raw given as a map
  auto unknown_type = raw;
  poke<uint16_t>(unknown_type, 6, 0x13);
  EXPECT_EQ(code_of([&] { decode(unknown_type, map); }), ErrorCode::kWrongFileType);

  auto bad_offset = raw;
  poke<uint32_t>(bad_offset, 28, 40);
  EXPECT_EQ(code_of([&] { decode(bad_offset, map); }), ErrorCode::kBadHeader);

  Synthetic other = s;
  other.hash = 0x99999999;
  const auto other_raw = other.raw();
  EXPECT_EQ(code_of([&] { decode(other_raw, map); }), ErrorCode::kHashMismatch);
  try {
    decode(other_raw, map);
  } catch (const MipError& e) {
    EXPECT_NE(std::string(e.what()).find("0x99999999"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0x1234abcd"), std::string::npos) << e.what();
  }

  Synthetic coverage = s;
  coverage.profile_type = kFunctionCoverage;
  const auto coverage_raw = coverage.raw();
  EXPECT_EQ(code_of([&] { decode(coverage_raw, map); }), ErrorCode::kProfileTypeMismatch);

  Synthetic a = s;
  a.layout = Layout::kA;
  const auto a_raw = a.raw();
  EXPECT_EQ(code_of([&] { decode(a_raw, map); }), ErrorCode::kBadHeader);
}

TEST(MipDecodeErrors, MapEntriesOutsideTheSection) {
  Synthetic s = three_functions();
  const auto raw = s.raw();
  Map map = parse_map(s.map());
  for (int64_t bad : {int64_t{-8}, int64_t{0}, int64_t{31}, static_cast<int64_t>(raw.size()),
                      static_cast<int64_t>(raw.size()) - 2, INT64_MAX, INT64_MIN}) {
    Map m = map;
    m.entries[1].raw_offset = bad;
    EXPECT_EQ(code_of([&] { decode(raw, m); }), ErrorCode::kMapOutOfRange) << bad;
  }
  // The same through the bytes: an entry whose RawProfilePCOffset points past the end.
  auto bytes = s.map();
  poke<int64_t>(bytes, 32, int64_t{1} << 40);
  EXPECT_EQ(code_of([&] { decode(raw, parse_map(bytes)); }), ErrorCode::kMapOutOfRange);
  // Offsets that overflow when rebased.
  poke<int64_t>(bytes, 32, INT64_MIN);
  EXPECT_EQ(code_of([&] { parse_map(bytes); }), ErrorCode::kMapOutOfRange);
}

TEST(MipDecodeErrors, TruncatedSectionKnownSize) {
  Synthetic s = three_functions();
  const auto raw = s.raw();
  Map map = parse_map(s.map());
  map.raw_section_size = raw.size();
  EXPECT_EQ(code_of([&] { decode(std::span(raw).first(raw.size() - 1), map); }), ErrorCode::kTruncated);
}

TEST(MipDecodeErrors, EveryTruncationIsAnErrorOrAPrefix) {
  Synthetic s = three_functions();
  const auto raw = s.raw();
  const auto map_bytes = s.map();
  const Map map = parse_map(map_bytes);
  for (size_t n = 0; n < map_bytes.size(); n++) {
    try {
      const Map m = parse_map(std::span(map_bytes).first(n));
      EXPECT_LE(m.entries.size(), map.entries.size()) << n;
    } catch (const MipError& e) {
      EXPECT_TRUE(e.code() == ErrorCode::kTruncated) << n << ": " << e.what();
    }
  }
  for (size_t n = 0; n < raw.size(); n++) {
    try {
      decode(std::span(raw).first(n), map, false);
      ADD_FAILURE() << "a raw section cut at " << n << " decoded";
    } catch (const MipError& e) {
      EXPECT_TRUE(e.code() == ErrorCode::kTruncated || e.code() == ErrorCode::kMapOutOfRange)
          << n << ": " << e.what();
    }
  }
}

TEST(MipMerge, CountsAddOrderSumsCoverageOrs) {
  Synthetic s = three_functions();
  const auto raw1 = s.raw();
  const Map map = parse_map(s.map());
  Synthetic t = s;
  t.fns[0].timestamp = 1;
  t.fns[1] = {"_ZN2ns3hotEi", -0x200, 64, {8, 20}, 100, 3, 0xFF, {0xFF, 0}};
  t.fns[2] = {"cold", -0x100, 16, {4}, 5, 2, 0xFF, {0}};
  const auto raw2 = t.raw();
  const Module parts[] = {decode(raw1, map, false), decode(raw2, map, false)};
  const Module m = merge(parts);
  EXPECT_EQ(m.raw_profiles, 2u);
  EXPECT_EQ(m.find("main")->call_count, 2u);
  EXPECT_EQ(m.find("main")->order_sum, 2u);
  EXPECT_EQ(m.find("main")->profiles_called, 2u);
  EXPECT_EQ(m.find("_ZN2ns3hotEi")->call_count, 32100u);
  EXPECT_EQ(m.find("_ZN2ns3hotEi")->order_sum, 5u);
  EXPECT_DOUBLE_EQ(m.find("_ZN2ns3hotEi")->first_call(), 2.5);
  EXPECT_EQ(m.find("_ZN2ns3hotEi")->blocks_covered(), 3u);  // block 0 covered only in the first
  EXPECT_EQ(m.find("cold")->call_count, 5u);
  EXPECT_EQ(m.find("cold")->profiles_called, 1u);
  EXPECT_TRUE(m.never_called().empty());

  Synthetic other = s;
  other.hash = 1;
  Map other_map = map;
  other_map.header.module_hash = 1;
  const Module mixed[] = {decode(raw1, map, false), decode(other.raw(), other_map, false)};
  EXPECT_EQ(code_of([&] { merge(mixed); }), ErrorCode::kIncompatible);
  EXPECT_EQ(code_of([&] { merge(std::span<const Module>()); }), ErrorCode::kIncompatible);
}

TEST(MipPrint, TableFitsEightyColumnsAndJsonParses) {
  Synthetic s = three_functions();
  s.fns[1].name = "_ZN9some_long9namespace20with_a_very_long_nameINS_5thingEE3runEv";
  const auto raw = s.raw();
  Module m = decode(raw, parse_map(s.map()), true);
  m.path = "/usr/bin/example";
  std::ostringstream table;
  print_table(m, table);
  std::istringstream lines(table.str());
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 80u) << line;
    rows++;
  }
  EXPECT_EQ(rows, 2 + 1 + 3);  // module line, summary, column heads, 3 functions
  EXPECT_NE(table.str().find("never"), std::string::npos);
  EXPECT_NE(table.str().find("32000"), std::string::npos);
  EXPECT_NE(table.str().find("3/3"), std::string::npos);

  const auto j = nlohmann::json::parse(to_json(m));
  EXPECT_EQ(j["module_hash"], "0x1234abcd");
  EXPECT_EQ(j["mode"], "call-count");
  ASSERT_EQ(j["functions"].size(), 3u);
  EXPECT_EQ(j["functions"][1]["calls"], 32000);
  EXPECT_EQ(j["functions"][1]["mangled"], s.fns[1].name);
  EXPECT_EQ(j["never_called"], nlohmann::json::array({"cold"}));
  EXPECT_EQ(j["call_order"][0], "main");

  Snapshot snap;
  snap.pid = 42;
  snap.modules.push_back(m);
  snap.errors.push_back({"/lib/x.so", "broken", ErrorCode::kHashMismatch});
  const auto js = nlohmann::json::parse(to_json(snap));
  EXPECT_EQ(js["pid"], 42);
  EXPECT_EQ(js["errors"][0]["error"], "hash-mismatch");
}

}  // namespace
}  // namespace hpd::mip
