// The portable Rng against values computed independently: splitmix64's
// published test vector, and xoshiro256** / uniform / below as computed by a
// separate Python implementation of the published algorithms (arbitrary
// precision integers, masked to 64 bits). A change of engine, seeding or
// transform breaks these.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>

#include "harness/random.h"

namespace dtl::data {
namespace {

TEST(Rng, SplitMix64MatchesThePublishedTestVector) {
  // Seed 1234567: the vector used by the reference implementations' tests.
  uint64_t state = 1234567;
  const std::array<uint64_t, 5> expected = {6457827717110365317ULL, 3203168211198807973ULL,
                                            9817491932198370423ULL, 4593380528125082431ULL,
                                            16408922859458223821ULL};
  for (const uint64_t e : expected) EXPECT_EQ(splitmix64(state), e);
}

TEST(Rng, Xoshiro256StarStarMatchesAnIndependentImplementation) {
  Rng zero(0);
  for (const uint64_t e : {11091344671253066420ULL, 13793997310169335082ULL,
                           1900383378846508768ULL, 7684712102626143532ULL}) {
    EXPECT_EQ(zero.next_u64(), e);
  }
  Rng rng(42);
  for (const uint64_t e : {1546998764402558742ULL, 6990951692964543102ULL,
                           12544586762248559009ULL, 17057574109182124193ULL}) {
    EXPECT_EQ(rng.next_u64(), e);
  }
}

TEST(Rng, UniformIsTheTop53BitsExactly) {
  Rng rng(42);
  EXPECT_EQ(rng.uniform(), 0.08386297105988216);
  EXPECT_EQ(rng.uniform(), 0.3789802506626686);
  EXPECT_EQ(rng.uniform(), 0.6800434110281394);
}

TEST(Rng, BelowRejectsTheBiasedValues) {
  // 2^64 mod 10 = 6: raw values below 6 would be rejected (none occur here).
  Rng rng(42);
  for (const uint64_t e : {2, 2, 9, 3, 6, 4, 4, 7}) EXPECT_EQ(rng.below(10), e);
  Rng one(1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(one.below(1), 0u);
  EXPECT_EQ(one.below(0), 0u);
}

TEST(Rng, BelowIsUniformOverSmallRanges) {
  // Chi-square over 7 outcomes, 70000 draws: 6 degrees of freedom, the 99.9%
  // quantile is 22.46.
  Rng rng(5);
  std::array<int, 7> hits{};
  for (int i = 0; i < 70000; ++i) ++hits[rng.below(7)];
  double chi2 = 0;
  for (const int h : hits) chi2 += (h - 10000.0) * (h - 10000.0) / 10000.0;
  EXPECT_LT(chi2, 22.46);
}

TEST(Rng, NormalHasMeanZeroAndUnitVariance) {
  // 200000 draws: the standard error of the mean is 0.0022, of the variance 0.0032.
  Rng rng(9);
  const int n = 200000;
  double sum = 0;
  double sum_sq = 0;
  int beyond_2 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal();
    sum += z;
    sum_sq += z * z;
    beyond_2 += std::abs(z) > 2.0;
  }
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.011);
  EXPECT_NEAR(sum_sq / n - mean * mean, 1.0, 0.016);
  // P(|Z| > 2) = 0.0455 for a Gaussian (a uniform or a sum of few uniforms differs).
  EXPECT_NEAR(static_cast<double>(beyond_2) / n, 0.0455, 0.003);
}

TEST(Rng, SameSeedSameStreamDifferentSeedDifferentStream) {
  Rng a(123);
  Rng b(123);
  Rng c(124);
  int same_as_c = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t va = a.next_u64();
    EXPECT_EQ(va, b.next_u64());
    same_as_c += va == c.next_u64();
  }
  EXPECT_EQ(same_as_c, 0);
}

}  // namespace
}  // namespace dtl::data
