// fp16 and bf16 conversions against two independent oracles:
//   - CUDA's own host-side conversions (cuda_fp16.h, cuda_bf16.h), where the
//     toolkit is present (DTL_HAVE_CUDA);
//   - a closed form: the value of a 16-bit pattern from its fields with ldexp,
//     and float -> 16 bits as "the nearest of the two neighbouring values, ties
//     to the even pattern", found by binary search over the ordered patterns.
// half -> float: all 65,536 patterns. float -> half: every rounding boundary
// (the midpoint between two neighbours, and the floats just either side of
// it), every 16-bit value itself, and a strided sweep over all 2^32 floats.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "harness/nn/half.h"

#ifdef DTL_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace dtl::nn {
namespace {

// ---------------------------------------------------------------------------
// The closed-form oracle
// ---------------------------------------------------------------------------

struct Format {
  int exponent_bits, mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
};
constexpr Format kHalf{5, 10};
constexpr Format kBf16{8, 7};

// The exact value of a 16-bit pattern, from its fields.
double value_of(std::uint16_t bits, Format f) {
  const int sign = bits >> 15;
  const int exponent = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  double v;
  if (exponent == (1 << f.exponent_bits) - 1) {
    v = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(mantissa, 1 - f.bias() - f.mantissa_bits);
  } else {
    v = std::ldexp((1 << f.mantissa_bits) + mantissa, exponent - f.bias() - f.mantissa_bits);
  }
  return sign ? -v : v;
}

bool is_nan_bits(std::uint16_t bits, Format f) { return std::isnan(value_of(bits, f)); }

// float -> 16 bits, round to nearest, ties to the even pattern. The positive
// finite patterns 0 .. inf-1 are ordered by value, so binary search finds the
// neighbours; beyond the largest finite value, half an ulp past it rounds to inf.
std::uint16_t oracle_round(float x, Format f) {
  const std::uint16_t inf = static_cast<std::uint16_t>(((1 << f.exponent_bits) - 1) << f.mantissa_bits);
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<std::uint16_t>(inf | 1);  // some NaN; compared as "is NaN"
  const double a = std::fabs(static_cast<double>(x));
  const std::uint16_t max_finite = static_cast<std::uint16_t>(inf - 1);
  const double largest = value_of(max_finite, f);
  const double ulp = largest - value_of(static_cast<std::uint16_t>(max_finite - 1), f);
  if (a >= largest + ulp / 2) return static_cast<std::uint16_t>(sign | inf);  // the tie goes to inf (even)
  std::uint16_t lo = 0, hi = max_finite;  // invariant: value(lo) <= a, and a <= value(hi) or hi = max
  if (a >= largest) return static_cast<std::uint16_t>(sign | max_finite);
  while (hi - lo > 1) {
    const auto mid = static_cast<std::uint16_t>((lo + hi) / 2);
    if (value_of(mid, f) <= a) lo = mid; else hi = mid;
  }
  const double dlo = a - value_of(lo, f), dhi = value_of(hi, f) - a;
  std::uint16_t pick;
  if (dlo < dhi) pick = lo;
  else if (dhi < dlo) pick = hi;
  else pick = (lo & 1) ? hi : lo;
  return static_cast<std::uint16_t>(sign | pick);
}

// ---------------------------------------------------------------------------
// The floats to round: every boundary, every value, a sweep.
// ---------------------------------------------------------------------------

std::vector<float> test_floats(Format f) {
  std::vector<float> xs;
  auto push_around = [&](float v) {
    xs.push_back(v);
    xs.push_back(std::nextafter(v, std::numeric_limits<float>::infinity()));
    xs.push_back(std::nextafter(v, -std::numeric_limits<float>::infinity()));
  };
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const double v = value_of(bits, f);
    if (std::isnan(v) || std::isinf(v)) continue;
    push_around(static_cast<float>(v));
    // The midpoint to the next pattern up in magnitude (exact in float: one more bit).
    const auto next = static_cast<std::uint16_t>(bits + 1);
    const double w = value_of(next, f);
    if (!std::isnan(w) && ((bits & 0x7fff) != 0x7fff)) {
      const double mid = std::isinf(w) ? v + (v - value_of(static_cast<std::uint16_t>(bits - 1), f)) / 2 : (v + w) / 2;
      push_around(static_cast<float>(mid));
    }
  }
  for (std::uint64_t b = 0; b < (1ull << 32); b += 4099) xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
  for (float special : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(), std::numeric_limits<float>::denorm_min(),
                        std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                        std::numeric_limits<float>::min()}) {
    xs.push_back(special);
  }
  return xs;
}

// ---------------------------------------------------------------------------
// fp16
// ---------------------------------------------------------------------------

TEST(Half, AllPatternsToFloatMatchTheClosedForm) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float got = f16_bits_to_float(bits);
    const double want = value_of(bits, kHalf);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << "pattern 0x" << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << "pattern 0x" << std::hex << b;
      ASSERT_EQ(std::signbit(got), (b & 0x8000) != 0) << "pattern 0x" << std::hex << b;  // -0 stays -0
    }
  }
}

TEST(Half, FloatToHalfRoundsToNearestEven) {
  std::int64_t checked = 0;
  for (const float x : test_floats(kHalf)) {
    const std::uint16_t got = float_to_f16_bits(x);
    const std::uint16_t want = oracle_round(x, kHalf);
    if (std::isnan(x)) {
      ASSERT_TRUE(is_nan_bits(got, kHalf)) << "NaN must stay NaN, got 0x" << std::hex << got;
      ASSERT_EQ(got >> 15, std::bit_cast<std::uint32_t>(x) >> 31) << "NaN keeps its sign";
    } else {
      ASSERT_EQ(got, want) << "x = " << x << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(x) << ")";
    }
    ++checked;
  }
  EXPECT_GT(checked, 1'000'000);
}

TEST(Half, KnownValues) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7bff);        // largest finite
  EXPECT_EQ(float_to_f16_bits(65519.99f), 0x7bff);       // just under the tie: stays finite
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00);        // the tie rounds to the even pattern: inf
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even, 0
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float(f16(0.1f)), 0.0999755859375f);
}

// ---------------------------------------------------------------------------
// bf16
// ---------------------------------------------------------------------------

TEST(Bf16, AllPatternsToFloatMatchTheClosedForm) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float got = bf16_bits_to_float(bits);
    const double want = value_of(bits, kBf16);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << "pattern 0x" << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << "pattern 0x" << std::hex << b;
    }
  }
}

TEST(Bf16, FloatToBf16RoundsToNearestEven) {
  for (const float x : test_floats(kBf16)) {
    const std::uint16_t got = float_to_bf16_bits(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(is_nan_bits(got, kBf16)) << "NaN must stay NaN, got 0x" << std::hex << got;
    } else {
      ASSERT_EQ(got, oracle_round(x, kBf16)) << "x = " << x << " (bits 0x" << std::hex
                                             << std::bit_cast<std::uint32_t>(x) << ")";
    }
  }
}

TEST(Bf16, NanWithPayloadOnlyInTheLowBitsStaysNan) {
  // Truncation alone would turn 0x7f800001 into 0x7f80, infinity.
  const float x = std::bit_cast<float>(0x7f800001u);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(x))));
  EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(x))));
}

// ---------------------------------------------------------------------------
// Against CUDA's own conversions (host side)
// ---------------------------------------------------------------------------

#ifdef DTL_HAVE_CUDA
std::uint16_t cuda_f16_bits(float x) {
  const __half_raw r = __float2half_rn(x);
  return r.x;
}
std::uint16_t cuda_bf16_bits(float x) {
  const __nv_bfloat16_raw r = __float2bfloat16_rn(x);
  return r.x;
}
float cuda_f16_to_float(std::uint16_t bits) {
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}
float cuda_bf16_to_float(std::uint16_t bits) {
  __nv_bfloat16_raw r;
  r.x = bits;
  return __bfloat162float(__nv_bfloat16(r));
}

// CUDA returns one canonical NaN (0x7fff); ours keeps sign and payload. So a
// NaN is compared as "both are NaN", everything else bit for bit.
TEST(HalfVsCuda, AllPatternsToFloat) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float ours = f16_bits_to_float(bits), theirs = cuda_f16_to_float(bits);
    if (std::isnan(theirs)) {
      ASSERT_TRUE(std::isnan(ours)) << "pattern 0x" << std::hex << b;
    } else {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(ours), std::bit_cast<std::uint32_t>(theirs)) << "pattern 0x" << std::hex << b;
    }
    const float ours_bf = bf16_bits_to_float(bits), theirs_bf = cuda_bf16_to_float(bits);
    if (std::isnan(theirs_bf)) {
      ASSERT_TRUE(std::isnan(ours_bf)) << "bf16 pattern 0x" << std::hex << b;
    } else {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(ours_bf), std::bit_cast<std::uint32_t>(theirs_bf))
          << "bf16 pattern 0x" << std::hex << b;
    }
  }
}

TEST(HalfVsCuda, FloatToHalfAndBf16) {
  for (const Format f : {kHalf, kBf16}) {
    for (const float x : test_floats(f)) {
      const bool half = f.mantissa_bits == 10;
      const std::uint16_t ours = half ? float_to_f16_bits(x) : float_to_bf16_bits(x);
      const std::uint16_t theirs = half ? cuda_f16_bits(x) : cuda_bf16_bits(x);
      if (std::isnan(x)) {
        ASSERT_TRUE(is_nan_bits(ours, f) && is_nan_bits(theirs, f));
      } else {
        ASSERT_EQ(ours, theirs) << (half ? "fp16" : "bf16") << " of x = " << x << " (bits 0x" << std::hex
                                << std::bit_cast<std::uint32_t>(x) << ")";
      }
    }
  }
}
#else
TEST(HalfVsCuda, AllPatternsToFloat) { GTEST_SKIP() << "built without CUDA: the closed-form oracle above is the check"; }
#endif

}  // namespace
}  // namespace dtl::nn
