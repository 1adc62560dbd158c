// The unwind-table cache on disk (collect/src/unwind_cache.h, hpd/unwind/cfi_table_file.h) through its real
// reader and writer, on tables compiled from real binaries: a stored table comes back as compiled; a
// file that is truncated, of another binary at the same path, written by another format version, or
// garbage is refused, removed and compiled again, never trusted and never a crash; the directory's size
// stays within its bound by removing the least recently used tables; a directory that cannot be written
// is said once and recording goes on.
#include "unwind_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "hpd/unwind/cfi_table.h"
#include "hpd/unwind/cfi_table_file.h"
#include "temp_dir.h"

namespace hpd {
namespace {

namespace fs = std::filesystem;

const char* const kLibc = "/lib/x86_64-linux-gnu/libc.so.6";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void expect_same(const CfiTable& a, const CfiTable& b) {
  ASSERT_EQ(a.rows.size(), b.rows.size());
  EXPECT_EQ(0, std::memcmp(a.rows.data(), b.rows.data(), a.rows.size() * sizeof(CfiRow)));
  ASSERT_EQ(a.index.buckets.size(), b.index.buckets.size());
  EXPECT_EQ(a.index.base, b.index.base);
  EXPECT_EQ(a.index.shift, b.index.shift);
  EXPECT_EQ(0, std::memcmp(a.index.buckets.data(), b.index.buckets.data(),
                           a.index.buckets.size() * sizeof(CfiBucket)));
  ASSERT_EQ(a.segments.size(), b.segments.size());
  for (size_t i = 0; i < a.segments.size(); ++i) {
    EXPECT_EQ(a.segments[i].offset, b.segments[i].offset);
    EXPECT_EQ(a.segments[i].filesz, b.segments[i].filesz);
    EXPECT_EQ(a.segments[i].vaddr, b.segments[i].vaddr);
    EXPECT_EQ(a.segments[i].executable, b.segments[i].executable);
  }
  EXPECT_EQ(a.build_id, b.build_id);
  EXPECT_EQ(a.fdes, b.fdes);
  EXPECT_EQ(a.error, b.error);
}

class UnwindCacheTest : public ::testing::Test {
 protected:
  // A binary copied to a path of the test's own (the file a table is compiled from), with its table.
  struct Binary {
    std::string path;
    CfiTableSource source;
    std::shared_ptr<const CfiTable> table;
  };
  Binary binary(const std::string& from, const std::string& name) {
    Binary b;
    b.path = tmp_.file(name);
    fs::copy_file(from, b.path, fs::copy_options::overwrite_existing);
    b.table = compile_cfi_table({b.path}, "", CfiTableOptions{});
    EXPECT_FALSE(b.table->rows.empty()) << from << ": " << b.table->error;
    EXPECT_TRUE(UnwindCache::source_of_file(b.path, b.table->build_id, "/usr/lib/debug", &b.source))
        << b.path;
    return b;
  }
  std::string cache_file(const Binary& b) const { return dir_ + "/" + b.source.build_id + ".cfi"; }
  UnwindCache make_cache(uint64_t max_bytes = kDefaultUnwindCacheBytes) {
    UnwindCacheSettings settings;
    settings.directory = dir_;
    settings.max_bytes = max_bytes;
    settings.warn = [this](const std::string& text) { warnings_.push_back(text); };
    return UnwindCache(settings);
  }

  testing::TempDir tmp_{"hpd-unwind-cache", testing::TempDir::Cleanup::kKeepOnFailure};
  std::string dir_ = tmp_.file("cache");
  std::vector<std::string> warnings_;
};

TEST_F(UnwindCacheTest, StoredTableComesBackAsCompiled) {
  const Binary libc = binary(kLibc, "libc.so.6");
  UnwindCache cache = make_cache();
  EXPECT_EQ(cache.load(libc.source), nullptr);  // cold
  cache.store(*libc.table, libc.source);
  ASSERT_TRUE(fs::exists(cache_file(libc)));
  // Private to its owner: the directory and the files.
  EXPECT_EQ(fs::status(dir_).permissions() & fs::perms::all, fs::perms::owner_all);
  const auto loaded = cache.load(libc.source);
  ASSERT_NE(loaded, nullptr);
  expect_same(*libc.table, *loaded);
  // Lookups through the index agree with the table compiled now, on every row's pc.
  for (const CfiRow& row : libc.table->rows) ASSERT_EQ(loaded->find_indexed(row.pc)->pc, row.pc);
  const UnwindCache::Stats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.refused, 0u);
  EXPECT_EQ(s.stored, 1u);
  // No temporary file left behind.
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().extension(), ".cfi") << e.path();
  EXPECT_TRUE(warnings_.empty());
}

// Refused, removed, and compiled and stored again: what the recorder does on a refusal.
void expect_refused_then_rebuilt(UnwindCache& cache, const std::string& file, const CfiTableSource& source,
                                 const CfiTable& compiled, const std::string& why) {
  std::string refused;
  EXPECT_EQ(cache.load(source, &refused), nullptr) << why;
  EXPECT_NE(refused.find(why), std::string::npos) << refused;
  EXPECT_FALSE(fs::exists(file)) << "a refused file is removed";
  cache.store(compiled, source);
  const auto again = cache.load(source);
  ASSERT_NE(again, nullptr);
  expect_same(compiled, *again);
}

TEST_F(UnwindCacheTest, TruncatedFileIsRefusedAndRebuilt) {
  const Binary libc = binary(kLibc, "libc.so.6");
  UnwindCache cache = make_cache();
  cache.store(*libc.table, libc.source);
  std::vector<uint8_t> bytes = read_bytes(cache_file(libc));
  ASSERT_GT(bytes.size(), 4096u);
  // Cut in the payload, then within the header, then empty.
  for (const size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{100}, size_t{0}}) {
    write_bytes(cache_file(libc),
                std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(keep)));
    expect_refused_then_rebuilt(cache, cache_file(libc), libc.source, *libc.table, "truncated");
  }
  EXPECT_EQ(cache.stats().refused, 4u);
}

TEST_F(UnwindCacheTest, FileOfAnotherBinaryAtTheSamePathIsRefused) {
  UnwindCache cache = make_cache();
  // A program compiled and cached, then replaced at the same path by another one.
  const Binary first = binary("/bin/true", "prog");
  cache.store(*first.table, first.source);
  const Binary second = binary("/bin/ls", "prog");
  ASSERT_NE(first.source.build_id, second.source.build_id);
  // Its cache file under the new program's build-id (a file copied, or a build-id collision): refused.
  fs::copy_file(cache_file(first), cache_file(second));
  expect_refused_then_rebuilt(cache, cache_file(second), second.source, *second.table,
                              "compiled from another file");

  // The same build-id, but the file now has another size or modification time (rebuilt, replaced).
  CfiTableSource touched = first.source;
  touched.mtime_ns += 1;
  expect_refused_then_rebuilt(cache, cache_file(first), touched, *first.table, "compiled from another file");
  // The same build-id, size and time, another file (a copy, or one made to pass for it).
  CfiTableSource copy = touched;
  copy.inode += 1;
  expect_refused_then_rebuilt(cache, cache_file(first), copy, *first.table, "compiled from another file");
  CfiTableSource grown = copy;
  grown.size += 4096;
  expect_refused_then_rebuilt(cache, cache_file(first), grown, *first.table, "compiled from another file");
  // A separate debug file installed since (its .debug_frame may add rows).
  CfiTableSource with_debug = grown;
  with_debug.has_debug_file = true;
  with_debug.debug_size = 100;
  expect_refused_then_rebuilt(cache, cache_file(first), with_debug, *first.table,
                              "compiled from another file");
}

TEST_F(UnwindCacheTest, FileOfAnotherFormatVersionIsRefused) {
  const Binary libc = binary(kLibc, "libc.so.6");
  UnwindCache cache = make_cache();
  // What another version of hpd writes: here the same layout under another version number.
  cache.store(*libc.table, libc.source);
  const std::vector<uint8_t> good = serialize_cfi_table(*libc.table, libc.source);
  ASSERT_EQ(read_bytes(cache_file(libc)), good);
  for (const uint32_t version : {kCfiTableFileVersion - 1, kCfiTableFileVersion + 1}) {
    std::vector<uint8_t> bytes = good;
    std::memcpy(bytes.data() + 8, &version, 4);
    write_bytes(cache_file(libc), bytes);
    expect_refused_then_rebuilt(cache, cache_file(libc), libc.source, *libc.table,
                                "written by format version");
  }
}

TEST_F(UnwindCacheTest, GarbageIsRefusedNeverTrusted) {
  const Binary libc = binary(kLibc, "libc.so.6");
  UnwindCache cache = make_cache();
  cache.store(*libc.table, libc.source);
  const std::vector<uint8_t> good = serialize_cfi_table(*libc.table, libc.source);
  std::mt19937_64 random(31);
  // Random bytes of the right size.
  std::vector<uint8_t> noise(good.size());
  for (uint8_t& b : noise) b = static_cast<uint8_t>(random());
  write_bytes(cache_file(libc), noise);
  expect_refused_then_rebuilt(cache, cache_file(libc), libc.source, *libc.table, "bad magic");
  // One byte changed anywhere in the rows, or in the header.
  for (int i = 0; i < 20; ++i) {
    std::vector<uint8_t> bytes = good;
    const size_t at = i == 0 ? 30 : 256 + random() % (bytes.size() - 256);
    bytes[at] ^= static_cast<uint8_t>(1 + random() % 255);
    write_bytes(cache_file(libc), bytes);
    std::string refused;
    EXPECT_EQ(cache.load(libc.source, &refused), nullptr) << "byte " << at;
    EXPECT_NE(refused.find("damaged"), std::string::npos) << refused;
  }
  // A directory, a symbolic link and a FIFO where the file would be: not read, never a crash.
  fs::create_directories(cache_file(libc));
  EXPECT_EQ(cache.load(libc.source), nullptr);
  fs::remove(cache_file(libc));
  fs::create_symlink(kLibc, cache_file(libc));
  EXPECT_EQ(cache.load(libc.source), nullptr);
  fs::remove(cache_file(libc));
  ASSERT_EQ(::mkfifo(cache_file(libc).c_str(), 0600), 0);
  EXPECT_EQ(cache.load(libc.source), nullptr);
  fs::remove(cache_file(libc));
  // A build-id that is no plain hex string names no file.
  CfiTableSource odd = libc.source;
  odd.build_id = "../" + odd.build_id;
  cache.store(*libc.table, odd);
  EXPECT_EQ(cache.load(odd), nullptr);
  EXPECT_FALSE(fs::exists(tmp_.file(libc.source.build_id + ".cfi")));
}

TEST_F(UnwindCacheTest, SizeStaysWithinItsBoundLeastRecentlyUsedFirst) {
  std::vector<Binary> binaries;
  for (const char* path : {"/bin/true", "/bin/ls", "/bin/cat", "/bin/sleep", "/bin/date", "/bin/echo"}) {
    binaries.push_back(binary(path, fs::path(path).filename()));
  }
  uint64_t all = 0;
  for (const Binary& b : binaries) all += serialize_cfi_table(*b.table, b.source).size();
  // Room for about half of them.
  const uint64_t bound = all * 6 / 10;
  UnwindCache cache = make_cache(bound);
  for (size_t i = 0; i < binaries.size(); ++i) {
    cache.store(*binaries[i].table, binaries[i].source);
    // The first one is used all the time: it stays.
    if (i > 0) {
      ASSERT_NE(cache.load(binaries[0].source), nullptr) << "after storing " << i;
    }
    EXPECT_LE(cache.disk_bytes(), bound);
    ::usleep(20000);  // mtimes a coarse file system can tell apart
  }
  EXPECT_GT(cache.stats().evicted, 0u);
  EXPECT_NE(cache.load(binaries[0].source), nullptr);
  EXPECT_NE(cache.load(binaries.back().source), nullptr);  // the newest
  EXPECT_EQ(cache.load(binaries[1].source), nullptr);      // the least recently used
}

TEST_F(UnwindCacheTest, DirectoryThatCannotBeWrittenIsSaidOnce) {
  const Binary libc = binary(kLibc, "libc.so.6");
  UnwindCacheSettings settings;
  settings.directory = "/dev/null/hpd-cache";  // cannot be created, whoever we are
  settings.warn = [this](const std::string& text) { warnings_.push_back(text); };
  UnwindCache cache(settings);
  EXPECT_EQ(cache.load(libc.source), nullptr);
  cache.store(*libc.table, libc.source);
  cache.store(*libc.table, libc.source);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("/dev/null/hpd-cache"), std::string::npos) << warnings_[0];
  EXPECT_NE(warnings_[0].find("recording goes on without it"), std::string::npos) << warnings_[0];
  EXPECT_EQ(cache.stats().store_failures, 1u);  // not tried again at once
}

}  // namespace
}  // namespace hpd
