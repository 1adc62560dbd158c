// Unit tests of the JIT symbol readers: perf-map text and jitdump records, well formed and broken.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "hpd/model/profile.h"
#include "hpd/session/perf_map.h"
#include "hpd/symbolizer/convert.h"
#include "hpd/symbolizer/symbolizer.h"

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

// read_jit_symbols against a perf map of this process (live: read through /proc/PID/root/tmp):
// only symbols covering a sampled address are kept, one per start (the last line), within the
// byte bound; the notes count what was left out.
struct OwnPerfMap {
  std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  explicit OwnPerfMap(const std::string& text) { std::ofstream(path) << text; }
  ~OwnPerfMap() { std::remove(path.c_str()); }
};

// A sample of `pid` whose user stack is `user` (leaf first).
void add_sample(RawProfile& p, int32_t pid, std::vector<uint64_t> user) {
  RawSample s;
  s.pid = s.tid = pid;
  s.stack = p.stacks.intern({}, user);
  p.samples.push_back(s);
}

RawProfile profile_sampling(std::vector<uint64_t> user_addresses) {
  RawProfile p;
  p.process(::getpid());
  add_sample(p, ::getpid(), std::move(user_addresses));
  return p;
}

TEST(ReadJitSymbols, KeepsOnlyWhatCoversSampledCodeOncePerStart) {
  const OwnPerfMap map(
      "1000 100 cold\n"
      "2000 100 hot_old\n"
      "2000 100 hot\n"  // rewritten at the same start: the later line is current
      "3000 10 ends_where_a_return_address_is\n"
      "zz not a line\n");
  RawProfile p = profile_sampling({0x2050, 0x3010});
  const JitReadResult r = read_jit_symbols(p);
  ASSERT_EQ(p.jit_symbols.size(), 2u);
  EXPECT_EQ(p.jit_symbols[0].name, "hot");
  EXPECT_EQ(p.jit_symbols[0].pid, ::getpid());
  EXPECT_EQ(p.jit_symbols[1].name, "ends_where_a_return_address_is");
  EXPECT_EQ(r.symbols_read, 4u);
  EXPECT_EQ(r.symbols_unsampled, 1u);
  EXPECT_EQ(r.symbols_dropped, 0u);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("2 of 4 from /tmp/perf-"), std::string::npos) << r.notes[0];
  EXPECT_NE(r.notes[0].find("1 cover no sampled address"), std::string::npos) << r.notes[0];
  EXPECT_NE(r.notes[0].find("1 written over an earlier one at the same address"), std::string::npos)
      << r.notes[0];
  EXPECT_NE(r.notes[0].find("1 lines not understood"), std::string::npos) << r.notes[0];
}

TEST(ReadJitSymbols, DropsWhatIsBeyondTheBoundAndSaysSo) {
  // 1000 blobs, each the one that names a sampled address of its own.
  std::string text;
  std::vector<uint64_t> sampled;
  for (int i = 0; i < 1000; ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "%x 20 blob_%04d\n", 0x10000 + 64 * i, i);
    text += line;
    sampled.push_back(0x10000 + 64 * i + 8);
  }
  // An overlong line is not kept in memory: it is one line not understood.
  text += std::string(100000, 'x') + "\n";
  const OwnPerfMap map(text);
  RawProfile p = profile_sampling(sampled);
  JitReadOptions options;
  const uint64_t each = sizeof(RawJitSymbol) + 9 + 48;  // as read_jit_symbols counts one
  options.max_bytes = 100 * each;
  options.bound_name = "the test's bound";
  const JitReadResult r = read_jit_symbols(p, options);
  EXPECT_EQ(p.jit_symbols.size(), 100u);
  EXPECT_EQ(r.symbols_kept, 100u);
  EXPECT_EQ(r.symbols_dropped, 900u);
  EXPECT_LE(r.bytes_kept, options.max_bytes);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("1 lines not understood"), std::string::npos) << r.notes[0];
  EXPECT_NE(r.notes[0].find("900 dropped: the recording's JIT symbols reached the test's bound"),
            std::string::npos)
      << r.notes[0];
}

// The symbolizer names an address by the symbol covering it that starts closest below it: of blobs
// overlapping there by the thousand (4.1 million in a user's map once took hpd's whole bound, and in a
// continuous chunk left no room for the other processes' maps), only that one is kept, in either order
// of the lines; one let go for a closer one is counted with those that named nothing.
TEST(ReadJitSymbols, OfSymbolsOverlappingASampledAddressOnlyTheOneNamingItIsKept) {
  for (const bool closest_first : {true, false}) {
    SCOPED_TRACE(closest_first ? "closest first" : "closest last");
    std::string text;
    for (int k = 0; k < 1000; ++k) {
      const int i = closest_first ? k : 999 - k;
      char line[64];
      std::snprintf(line, sizeof line, "%x %x covering_%04d\n", 0x10000 - 16 * i, 16 * i + 32, i);
      text += line;
    }
    // A blob of its own for a second address, which a wide one also covers.
    text += "20000 20 own_blob\n1f000 2000 wide_blob\n";
    const OwnPerfMap map(text);
    RawProfile p = profile_sampling({0x10008, 0x20008});
    const JitReadResult r = read_jit_symbols(p);
    ASSERT_EQ(p.jit_symbols.size(), 2u);
    EXPECT_EQ(p.jit_symbols[0].name, "covering_0000");
    EXPECT_EQ(p.jit_symbols[0].start, 0x10000u);
    EXPECT_EQ(p.jit_symbols[1].name, "own_blob");
    EXPECT_EQ(r.symbols_read, 1002u);
    EXPECT_EQ(r.symbols_kept, 2u);
    EXPECT_EQ(r.symbols_shadowed, 1000u);
    EXPECT_EQ(r.symbols_dropped, 0u);
    ASSERT_EQ(r.notes.size(), 1u);
    EXPECT_NE(r.notes[0].find("2 of 1002 from /tmp/perf-"), std::string::npos) << r.notes[0];
    EXPECT_NE(r.notes[0].find("1000 name no sampled address: other symbols covering them start closer"),
              std::string::npos)
        << r.notes[0];
  }
}

// Weighing a symbol costs a look per sampled address it covers: a process's files get 2^25 looks, and
// the symbols past them are counted as not weighed (the note says so) rather than read on for minutes.
// 1000 sampled addresses and 40,000 blobs each covering all of them: 33,554 weighed.
TEST(ReadJitSymbols, BlobsOverlappingTooOftenToFollowAreCountedNotWeighed) {
  std::vector<uint64_t> sampled;
  for (uint64_t i = 0; i < 1000; ++i) sampled.push_back(0x100000 + 16 * i);
  std::string text;
  for (int i = 0; i < 40000; ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "%x %x wide_%05d\n", 0x100000 - 16 * i, 16 * i + 16000, i);
    text += line;
  }
  const OwnPerfMap map(text);
  RawProfile p = profile_sampling(sampled);
  const JitReadResult r = read_jit_symbols(p);
  const uint64_t weighed = (uint64_t{1} << 25) / 1000;
  EXPECT_EQ(r.symbols_read, 40000u);
  EXPECT_EQ(r.symbols_dropped, 40000u - weighed);
  ASSERT_EQ(p.jit_symbols.size(), 1u);
  EXPECT_EQ(p.jit_symbols[0].name, "wide_00000");  // the closest below every address
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find(std::to_string(40000u - weighed) + " not weighed"), std::string::npos)
      << r.notes[0];
}

TEST(ReadJitSymbols, ReadsFilesThroughTheGivenOpener) {
  const OwnPerfMap map("2000 100 hot\n");
  RawProfile p = profile_sampling({0x2050});
  std::vector<std::string> asked;
  JitReadOptions options;
  options.open_file = [&](int32_t, const std::string& path, int) {
    asked.push_back(path);
    errno = EACCES;
    return -1;
  };
  const JitReadResult r = read_jit_symbols(p, options);
  EXPECT_TRUE(p.jit_symbols.empty());
  EXPECT_TRUE(r.notes.empty());
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked[0], "/proc/" + std::to_string(::getpid()) + "/root" + map.path);
}

// The function names of every sample of `raw` symbolized, per thread, leaf last.
std::vector<std::vector<std::string>> sampled_names(const RawProfile& raw) {
  Symbolizer symbolizer;
  const Profile profile = symbolize_profile(raw, symbolizer);
  std::vector<std::vector<std::string>> out;
  for (const Thread& thread : profile.threads) {
    for (const Sample& sample : thread.samples) {
      std::vector<std::string> names{std::to_string(thread.tid)};
      for (const uint32_t frame : profile.stack_frames_root_first(sample.stack))
        names.push_back(profile.func_name(profile.frames[frame].func));
      out.push_back(std::move(names));
    }
  }
  return out;
}

// A runtime's map of 200,000 blobs, of which this process sampled four, recorded beside another
// process whose samples fall all over the same addresses (its own code there: --all on a busy
// machine). Kept are only the blobs the profile names: the three this process sampled in anonymous
// memory or in no known mapping, not the one inside a library it mapped during the recording and
// kept (the library names that address, also in a sample taken before the mmap was seen), nor any
// the other process's addresses fall in. The samples are named as with every line
// of the map kept: what is held grows with the blobs sampled, not with the map, nor with the other
// processes' samples.
TEST(ReadJitSymbols, KeepsOnlyTheBlobsItsOwnProcessSampledOfALargeMap) {
  constexpr uint64_t kBase = 0x7f0000000000, kBlob = 0x100;
  constexpr int kBlobs = 200000;
  std::string text;
  text.reserve(kBlobs * 40);
  for (int i = 0; i < kBlobs; ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "%llx %llx LazyCompile:*blob_%06d\n",
                  static_cast<unsigned long long>(kBase + i * kBlob), static_cast<unsigned long long>(kBlob),
                  i);
    text += line;
  }
  const OwnPerfMap map(text);
  RawProfile p;
  const int32_t self = ::getpid();
  for (const char* path : {"/nonexistent/libinterpreter.so", "[anon]"}) {
    RawModule module;
    module.path = path;
    p.modules.push_back(module);
  }
  RawProcess& process = p.process(self);
  process.mappings.push_back(
      RawMapping{.start = kBase + 50 * kBlob, .end = kBase + 51 * kBlob, .module = 0, .time_ns = 1000});
  process.mappings.push_back(
      RawMapping{.start = kBase + 100000 * kBlob, .end = kBase + kBlobs * kBlob, .module = 1});
  add_sample(p, self, {kBase + 17 * kBlob + 0x10, kBase + 123456 * kBlob + 0x80});
  add_sample(p, self, {kBase + 199999 * kBlob + 0x4});
  add_sample(p, self, {kBase + 50 * kBlob + 0x8});
  // Another process (no map of its own), sampled at 10,000 addresses inside the map's range.
  const int32_t other = 0x3ffffff0;
  p.process(other);
  for (int i = 0; i < 10000; ++i) add_sample(p, other, {kBase + (i * 19 + 5) * kBlob + 0x20});
  const JitReadResult r = read_jit_symbols(p);
  EXPECT_EQ(r.symbols_read, static_cast<uint64_t>(kBlobs));
  EXPECT_EQ(r.symbols_kept, 3u);
  EXPECT_EQ(r.symbols_unsampled, static_cast<uint64_t>(kBlobs - 3));
  ASSERT_EQ(p.jit_symbols.size(), 3u);
  EXPECT_EQ(p.jit_symbols[0].name, "LazyCompile:*blob_000017");
  EXPECT_EQ(p.jit_symbols[0].start, kBase + 17 * kBlob);
  EXPECT_EQ(p.jit_symbols[1].name, "LazyCompile:*blob_123456");
  EXPECT_EQ(p.jit_symbols[2].name, "LazyCompile:*blob_199999");
  for (const RawJitSymbol& s : p.jit_symbols) {
    EXPECT_EQ(s.pid, self);
    EXPECT_EQ(s.size, kBlob);
  }
  EXPECT_EQ(r.bytes_kept, 3 * (sizeof(RawJitSymbol) + 24 + 48));
  // The same names as from the whole map.
  RawProfile whole = p;
  whole.jit_symbols = parse_perf_map(text, self);
  ASSERT_EQ(whole.jit_symbols.size(), static_cast<size_t>(kBlobs));
  const auto names = sampled_names(p);
  ASSERT_EQ(names.size(), 10003u);
  EXPECT_EQ(names, sampled_names(whole));
  const auto is_self = [&](const std::vector<std::string>& n) { return n[0] == std::to_string(self); };
  const std::vector<std::string> jit_frames{"LazyCompile:*blob_000017", "LazyCompile:*blob_123456",
                                            "LazyCompile:*blob_199999"};
  size_t seen = 0;
  for (const auto& n : names) {
    if (!is_self(n)) continue;
    for (size_t i = 1; i < n.size(); ++i) {
      seen += std::count(jit_frames.begin(), jit_frames.end(), n[i]);
      EXPECT_EQ(n[i].find("blob_000050"), std::string::npos);
    }
  }
  EXPECT_EQ(seen, 3u);
}
}  // namespace
}  // namespace hpd::session
