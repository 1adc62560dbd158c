// Unit tests for RawProfile: stack interning, module/process/thread tables, mapping lookup.
#include "hpd/model/raw_profile.h"

#include <gtest/gtest.h>

#include <vector>

namespace hpd {
namespace {

TEST(RawStackTable, InternsIdenticalStacksOnce) {
  RawStackTable table;
  const std::vector<uint64_t> k{0xffffffff81000010, 0xffffffff81000020};
  const std::vector<uint64_t> u{0x401000, 0x401100, 0x401200};
  const uint32_t a = table.intern(k, u);
  const uint32_t b = table.intern(k, u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(table.size(), 1u);
  ASSERT_EQ(table.kernel_frames(a).size(), 2u);
  ASSERT_EQ(table.user_frames(a).size(), 3u);
  EXPECT_EQ(table.kernel_frames(a)[1], 0xffffffff81000020u);
  EXPECT_EQ(table.user_frames(a)[2], 0x401200u);
}

TEST(RawStackTable, SplitPointDistinguishesStacks) {
  // The same address sequence split differently between kernel and user is a different stack.
  RawStackTable table;
  const std::vector<uint64_t> all{1, 2, 3};
  const uint32_t a = table.intern(std::span(all).first(1), std::span(all).subspan(1));
  const uint32_t b = table.intern(std::span(all).first(2), std::span(all).subspan(2));
  const uint32_t c = table.intern({}, all);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.user_frames(c).size(), 3u);
  EXPECT_EQ(table.kernel_frames(c).size(), 0u);
}

TEST(RawStackTable, ManyStacksStayDistinct) {
  RawStackTable table;
  for (uint64_t i = 0; i < 5000; ++i) {
    const std::vector<uint64_t> u{i, i + 1, i * 7};
    EXPECT_EQ(table.intern({}, u), i);
  }
  for (uint64_t i = 0; i < 5000; ++i) {
    const std::vector<uint64_t> u{i, i + 1, i * 7};
    EXPECT_EQ(table.intern({}, u), i);
  }
  EXPECT_EQ(table.size(), 5000u);
}

TEST(RawProfile, ModulesAreKeyedByPathAndBuildId) {
  RawProfile p;
  const uint32_t a = p.intern_module("/usr/lib/libc.so.6", "abcd");
  const uint32_t b = p.intern_module("/usr/lib/libc.so.6", "abcd");
  const uint32_t c = p.intern_module("/usr/lib/libc.so.6", "ef01");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(p.modules.size(), 2u);
  EXPECT_EQ(p.modules[c].build_id, "ef01");
}

TEST(RawProfile, ProcessesAndThreads) {
  RawProfile p;
  p.process(10).name = "app";
  p.thread(10, 10).name = "app";
  p.thread(10, 11).name = "worker";
  p.thread(20, 11).name = "other";  // a tid reused in another process is another thread
  EXPECT_EQ(p.processes.size(), 1u);
  EXPECT_EQ(p.threads.size(), 3u);
  ASSERT_NE(p.find_thread(10, 11), nullptr);
  EXPECT_EQ(p.find_thread(10, 11)->name, "worker");
  EXPECT_EQ(p.find_thread(20, 11)->name, "other");
  EXPECT_EQ(p.find_thread(30, 11), nullptr);
  EXPECT_EQ(p.find_process(10)->name, "app");
  EXPECT_EQ(p.find_process(11), nullptr);
}

TEST(RawProcess, LaterMappingReplacesEarlierFromItsTime) {
  RawProcess proc;
  proc.mappings.push_back({0x1000, 0x2000, 0, 0, 0});
  proc.mappings.push_back({0x1000, 0x2000, 0x3000, 1, 500});
  ASSERT_NE(proc.find_mapping(0x1800, 100), nullptr);
  EXPECT_EQ(proc.find_mapping(0x1800, 100)->module, 0u);
  EXPECT_EQ(proc.find_mapping(0x1800, 600)->module, 1u);
  EXPECT_EQ(proc.find_mapping(0x2000, 600), nullptr);  // end is exclusive
  EXPECT_EQ(proc.find_mapping(0x0fff, 600), nullptr);
}

TEST(RawProcess, MappingsUnmappedAtExecNoLongerMatch) {
  RawProcess proc;
  RawMapping old_image{0x1000, 0x2000, 0, 0, 0};
  old_image.unmapped_ns = 300;  // the process exec'd at t=300
  proc.mappings.push_back(old_image);
  proc.mappings.push_back({0x5000, 0x6000, 0, 1, 300});
  EXPECT_EQ(proc.find_mapping(0x1800, 100)->module, 0u);
  EXPECT_EQ(proc.find_mapping(0x1800, 400), nullptr);
  EXPECT_EQ(proc.find_mapping(0x5800, 400)->module, 1u);
}

TEST(StackEnd, Names) {
  EXPECT_STREQ(to_string(StackEnd::kComplete), "complete");
  EXPECT_STREQ(to_string(StackEnd::kTruncated), "truncated");
  EXPECT_STREQ(to_string(StackEnd::kFailed), "failed");
  EXPECT_STREQ(to_string(StackEnd::kUnknown), "unknown");
}

// A block of `size` bytes is sampled with probability 1 - exp(-size/mean): its weight is the inverse.
TEST(AllocSampleScale, IsTheInverseOfTheSamplingProbability) {
  EXPECT_EQ(alloc_sample_scale(0, 4096), 0.0);
  EXPECT_EQ(alloc_sample_scale(64, 0), 0.0);
  // size = mean: 1 / (1 - 1/e).
  EXPECT_NEAR(alloc_sample_scale(4096, 4096), 1.0 / (1.0 - 0.36787944117144233), 1e-12);
  // Much larger than the mean: always sampled, weight 1.
  EXPECT_DOUBLE_EQ(alloc_sample_scale(uint64_t{1} << 30, 4096), 1.0);
  // Much smaller: about mean/size + 1/2 (the series of x / (1 - exp(-x))), not mean/size.
  EXPECT_NEAR(alloc_sample_scale(1, 524288), 524288.5, 1e-3);
}

}  // namespace
}  // namespace hpd
