// Unit tests for CallLatency's figures (average, p95) and its merge, against hand-computed values.
#include <gtest/gtest.h>

#include "hpd/model/profile.h"

namespace hpd {
namespace {

// Histogram buckets used below (preload_abi.h layout): bucket 10 holds exactly 10 ticks (one bucket
// per value under 16); bucket 48 holds ticks [64, 68) (16 buckets per power of two above 16).
constexpr uint32_t kTenTicks = 10;
constexpr uint32_t kSixtyFourTicks = 48;
constexpr double kNsPerTick = 2.5;  // so bucket 10 is [25, 27.5) ns and bucket 48 is [160, 170) ns

CallLatency latency(int32_t pid, uint64_t calls, uint64_t sum_ns, uint64_t outer_ns, uint64_t max_ns,
                    std::vector<std::pair<uint32_t, uint64_t>> buckets) {
  CallLatency l;
  l.pid = pid;
  l.func = 7;
  l.calls = calls;
  l.sum_ns = sum_ns;
  l.outer_ns = outer_ns;
  l.max_ns = max_ns;
  l.histogram.ns_per_tick = kNsPerTick;
  l.histogram.buckets = std::move(buckets);
  return l;
}

TEST(CallLatency, TheBucketsAreTheOnesTheTestsAssume) {
  EXPECT_EQ(LatencyHistogram::bucket_low_ticks(kTenTicks), 10u);
  EXPECT_EQ(LatencyHistogram::bucket_low_ticks(kTenTicks + 1), 11u);
  EXPECT_EQ(LatencyHistogram::bucket_low_ticks(kSixtyFourTicks), 64u);
  EXPECT_EQ(LatencyHistogram::bucket_low_ticks(kSixtyFourTicks + 1), 68u);
}

TEST(CallLatency, NoCallsGiveZeroes) {
  const CallLatency l;
  EXPECT_EQ(l.avg_ns(), 0u);
  EXPECT_EQ(l.p95_ns(), 0u);
}

// 90 calls of 25 ns and 10 of 165 ns: the 95th of 100 is the 5th of the 10 in [160, 170) ns, half
// way through that bucket: 160 + 10 * 5/10 = 165 ns. The average is (90*25 + 10*165) / 100 = 39.
TEST(CallLatency, P95FallsHalfWayThroughTheSlowBucket) {
  const CallLatency l = latency(1, 100, 3900, 3900, 169, {{kTenTicks, 90}, {kSixtyFourTicks, 10}});
  EXPECT_EQ(l.avg_ns(), 39u);
  EXPECT_EQ(l.p95_ns(), 165u);
}

// With 96 fast calls the 95th is in the fast bucket, 95/96 of the way: (10 + 95/96) * 2.5 = 27.47,
// rounded to 27 ns; the average rounds down: (96*25 + 4*165) / 100 = 30.6 -> 30.
TEST(CallLatency, P95StaysInTheFastBucketWhenTheTailIsUnderFivePercent) {
  const CallLatency l = latency(1, 100, 3060, 3060, 169, {{kTenTicks, 96}, {kSixtyFourTicks, 4}});
  EXPECT_EQ(l.avg_ns(), 30u);
  EXPECT_EQ(l.p95_ns(), 27u);
}

// One call of 161 ns: the interpolation would say the bucket's top (170 ns), but no call took
// longer than the maximum, so p95 is the maximum.
TEST(CallLatency, OneCallsP95IsItsTime) {
  const CallLatency l = latency(1, 1, 161, 161, 161, {{kSixtyFourTicks, 1}});
  EXPECT_EQ(l.avg_ns(), 161u);
  EXPECT_EQ(l.p95_ns(), 161u);
}

// Calls timed without a histogram (ns_per_tick 0) still have an average but no p95.
TEST(CallLatency, WithoutAHistogramP95IsZero) {
  CallLatency l = latency(1, 3, 10, 10, 5, {});
  l.histogram.ns_per_tick = 0;
  EXPECT_EQ(l.avg_ns(), 3u);
  EXPECT_EQ(l.p95_ns(), 0u);
}

TEST(CallLatency, MergeAddsCountsSumsAndBucketsAndKeepsTheLargerMax) {
  CallLatency a = latency(1, 85, 85 * 25, 2000, 26, {{kTenTicks, 85}});
  const CallLatency b = latency(2, 15, 5 * 25 + 10 * 165, 1650, 169, {{kTenTicks, 5}, {kSixtyFourTicks, 10}});
  a.merge(b);
  EXPECT_EQ(a.pid, 1);  // identity stays the merged-into one's
  EXPECT_EQ(a.func, 7u);
  EXPECT_EQ(a.calls, 100u);
  EXPECT_EQ(a.sum_ns, 3900u);
  EXPECT_EQ(a.outer_ns, 3650u);
  EXPECT_EQ(a.max_ns, 169u);
  EXPECT_EQ(a.histogram.ns_per_tick, kNsPerTick);
  const std::vector<std::pair<uint32_t, uint64_t>> buckets{{kTenTicks, 90}, {kSixtyFourTicks, 10}};
  EXPECT_EQ(a.histogram.buckets, buckets);
  EXPECT_EQ(a.avg_ns(), 39u);
  EXPECT_EQ(a.p95_ns(), 165u);
}

// Merging into an empty CallLatency (the report's per-function total) gives the other's figures,
// its histogram's scale included; merging an empty one changes nothing.
TEST(CallLatency, MergeIntoEmptyCopiesAndMergingEmptyIsANoOp) {
  const CallLatency b = latency(2, 100, 3900, 3900, 169, {{kTenTicks, 90}, {kSixtyFourTicks, 10}});
  CallLatency total;
  total.merge(b);
  EXPECT_EQ(total.calls, 100u);
  EXPECT_EQ(total.histogram.ns_per_tick, kNsPerTick);
  EXPECT_EQ(total.histogram.buckets, b.histogram.buckets);
  total.merge(CallLatency{});
  EXPECT_EQ(total.calls, 100u);
  EXPECT_EQ(total.sum_ns, 3900u);
  EXPECT_EQ(total.max_ns, 169u);
  EXPECT_EQ(total.histogram.buckets, b.histogram.buckets);
  EXPECT_EQ(total.avg_ns(), 39u);
  EXPECT_EQ(total.p95_ns(), 165u);
}

}  // namespace
}  // namespace hpd
