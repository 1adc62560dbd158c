// Unit tests of the JIT symbol readers: perf-map text and jitdump records, well formed and broken.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "hpd/session/perf_map.h"

namespace hpd::session {
namespace {

TEST(PerfMap, ParsesLinesAndSkipsWhatIsNotOne) {
  size_t bad = 0;
  const auto symbols = parse_perf_map(
      "7f0010 40 LazyCompile:*fib /app.js:1\n"
      "7f0100 10 Builtin: with spaces  \r\n"
      "\n"
      "zzz 10 not hex\n"
      "7f0200 0 zero size\n"
      "7f0300 20\n"
      "7f0400 8 last line without newline",
      42, &bad);
  ASSERT_EQ(symbols.size(), 3u);
  EXPECT_EQ(symbols[0].pid, 42);
  EXPECT_EQ(symbols[0].start, 0x7f0010u);
  EXPECT_EQ(symbols[0].size, 0x40u);
  EXPECT_EQ(symbols[0].name, "LazyCompile:*fib /app.js:1");
  EXPECT_EQ(symbols[1].name, "Builtin: with spaces  ");
  EXPECT_EQ(symbols[2].name, "last line without newline");
  EXPECT_EQ(bad, 3u);
}

// A jitdump in this machine's byte order: header, then the given records.
struct Jitdump {
  std::string bytes;
  Jitdump() {
    const uint32_t header[] = {0x4A695444, 1, 40, 62, 0, 1234};
    bytes.append(reinterpret_cast<const char*>(header), sizeof header);
    bytes.append(16, '\0');  // timestamp, flags
  }
  template <typename T>
  void put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void load(uint64_t addr, uint64_t size, uint64_t index, const std::string& name) {
    const uint32_t total = 16 + 40 + static_cast<uint32_t>(name.size()) + 1 + static_cast<uint32_t>(size);
    put<uint32_t>(0);
    put(total);
    put<uint64_t>(0);
    put<uint32_t>(1234);
    put<uint32_t>(1234);
    put(addr);
    put(addr);
    put(size);
    put(index);
    bytes += name;
    bytes.push_back('\0');
    bytes.append(size, '\x90');
  }
  void move(uint64_t from, uint64_t to, uint64_t size, uint64_t index) {
    put<uint32_t>(1);
    put<uint32_t>(16 + 48);
    put<uint64_t>(0);
    put<uint32_t>(1234);
    put<uint32_t>(1234);
    put(to);
    put(from);
    put(to);
    put(size);
    put(index);
  }
};

TEST(Jitdump, LoadsAndMovesNameCode) {
  Jitdump d;
  d.load(0x1000, 0x20, 7, "JS:*hot");
  d.load(0x2000, 0x10, 8, "JS:cold");
  d.move(0x1000, 0x3000, 0x20, 7);
  std::vector<RawJitSymbol> out;
  ASSERT_TRUE(parse_jitdump(d.bytes, 1234, out));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].name, "JS:*hot");
  EXPECT_EQ(out[0].start, 0x1000u);
  EXPECT_EQ(out[1].name, "JS:cold");
  EXPECT_EQ(out[2].name, "JS:*hot");  // moved: the same name at its new address
  EXPECT_EQ(out[2].start, 0x3000u);
  EXPECT_EQ(out[2].size, 0x20u);
}

TEST(Jitdump, TruncatedOrForeignInputNeverCrashes) {
  Jitdump d;
  d.load(0x1000, 0x20, 7, "JS:*hot");
  d.load(0x2000, 0x10, 8, "JS:cold");
  // Every prefix of a valid file: the complete records before the cut, and no more.
  for (size_t cut = 0; cut <= d.bytes.size(); ++cut) {
    std::vector<RawJitSymbol> out;
    const bool ok = parse_jitdump(d.bytes.substr(0, cut), 1, out);
    EXPECT_EQ(ok, cut >= 40) << cut;
    EXPECT_LE(out.size(), 2u);
  }
  std::vector<RawJitSymbol> out;
  EXPECT_FALSE(parse_jitdump("not a jitdump at all, but long enough to hold a header......", 1, out));
  // A record that claims more bytes than the file has ends the list.
  Jitdump lying;
  lying.load(0x1000, 0x20, 7, "JS:*hot");
  const uint32_t huge = 0x7fffffff;
  std::memcpy(lying.bytes.data() + 40 + 4, &huge, sizeof huge);
  EXPECT_TRUE(parse_jitdump(lying.bytes, 1, out));
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace hpd::session
