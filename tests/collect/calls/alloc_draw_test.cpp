// The exponential draw `--alloc --pid` makes in the kernel (bpf/alloc_event.h), in integers: checked
// against libm's log over the whole range of the random number, its mean, and the distance in bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "alloc_event.h"

namespace {

double exact(uint32_t r) {
  return -std::log((static_cast<double>(r) + 1.0) / 4294967296.0);
}

double drawn(uint32_t r) {
  return static_cast<double>(hpd_alloc_neg_ln_q24(r)) / 16777216.0;
}

// The table is ln(1 + i/64) in Q24, as libm computes it.
TEST(AllocDraw, TableIsLibmsLogarithm) {
  for (int i = 0; i <= 64; ++i)
    EXPECT_EQ(hpd_alloc_ln_table[i], static_cast<uint32_t>(std::llround(std::log1p(i / 64.0) * 16777216.0)))
        << i;
  EXPECT_EQ(HPD_ALLOC_LN2_Q24, static_cast<uint64_t>(std::llround(std::log(2.0) * 16777216.0)));
}

// Within the documented bound, (1/64)^2/8 plus rounding, everywhere: every power of two and its
// neighbours (the leading-bit count), and a stride over all 2^32 values.
TEST(AllocDraw, NegativeLogWithinTheStatedError) {
  constexpr double kBound = 3.1e-5;
  double worst = 0;
  const auto check = [&](uint32_t r) {
    const double e = std::fabs(drawn(r) - exact(r));
    worst = std::max(worst, e);
    ASSERT_LE(e, kBound) << r;
  };
  for (int k = 0; k < 32; ++k) {
    const uint64_t p = uint64_t{1} << k;
    for (int64_t d = -2; d <= 2; ++d) {
      const int64_t r = static_cast<int64_t>(p) - 1 + d;
      if (r >= 0 && r <= 0xffffffffll) check(static_cast<uint32_t>(r));
    }
  }
  check(0xffffffffu);
  for (uint64_t r = 12345; r <= 0xffffffffull; r += 4099) check(static_cast<uint32_t>(r));
  EXPECT_EQ(hpd_alloc_neg_ln_q24(0xffffffffu), 0u);  // u = 1
  EXPECT_GT(worst, 0.0);
}

// Over r spread evenly, the draws average the exponential's mean, 1.
TEST(AllocDraw, MeanIsOne) {
  double sum = 0;
  uint64_t n = 0;
  for (uint64_t r = 2048; r <= 0xffffffffull; r += 4096, ++n) sum += drawn(static_cast<uint32_t>(r));
  EXPECT_NEAR(sum / static_cast<double>(n), 1.0, 1e-4);
}

// The distance in bytes is the mean times the draw, without overflow up to a mean of 1 TiB.
TEST(AllocDraw, DistanceScalesTheDraw) {
  for (const uint64_t mean : {uint64_t{1}, uint64_t{4096}, uint64_t{524288}, uint64_t{1} << 40}) {
    for (const uint32_t r : {0u, 1u, 1000u, 0x7fffffffu, 0xfffffff0u}) {
      const double want = static_cast<double>(mean) * drawn(r);
      const double got = static_cast<double>(hpd_alloc_distance(mean, r));
      EXPECT_NEAR(got, std::max(want, 1.0), std::max(2.0, want * 1e-6)) << mean << " " << r;
    }
  }
}

}  // namespace
