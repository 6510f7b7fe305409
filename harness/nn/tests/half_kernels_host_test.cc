// The GPU's 16-bit rounding (kernels/half_math.cuh) on the host, against the
// CPU's (half.h), bit for bit. The two are different algorithms (see the header
// of half_math.cuh), so agreement on every 16-bit pattern and every rounding
// boundary checks both. half_test.cc checks half.h against CUDA's own host-side
// conversions and a closed form; nn_gpu_test runs the kernels on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "harness/nn/half.h"
#include "harness/nn/kernels/half_math.cuh"
#include "harness/random.h"

namespace dtl::nn {
namespace {

using kernels::bf16_to_f32;
using kernels::f16_to_f32;
using kernels::f32_to_bf16_rne;
using kernels::f32_to_f16_rne;
using kernels::float_bits;

// One float through both roundings; `what` names the input in a failure.
::testing::AssertionResult rounds_alike(float x) {
  const std::uint16_t f16_gpu = f32_to_f16_rne(x), f16_cpu = float_to_f16_bits(x);
  const std::uint16_t bf16_gpu = f32_to_bf16_rne(x), bf16_cpu = float_to_bf16_bits(x);
  if (f16_gpu == f16_cpu && bf16_gpu == bf16_cpu) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hex << "float bits 0x" << float_bits(x) << " (" << x
                                       << "): f16 kernel 0x" << f16_gpu << " vs CPU 0x" << f16_cpu
                                       << ", bf16 kernel 0x" << bf16_gpu << " vs CPU 0x" << bf16_cpu;
}

TEST(HalfKernelsHost, WideningEvery16BitPatternIsExactAndEqual) {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    ASSERT_EQ(float_bits(f16_to_f32(bits)), float_bits(f16_bits_to_float(bits))) << "f16 0x" << std::hex << h;
    ASSERT_EQ(float_bits(bf16_to_f32(bits)), float_bits(bf16_bits_to_float(bits))) << "bf16 0x" << std::hex << h;
  }
}

TEST(HalfKernelsHost, EveryValueRoundTripsAndNaNsKeepTheirPayload) {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    ASSERT_TRUE(rounds_alike(f16_bits_to_float(bits)));
    ASSERT_TRUE(rounds_alike(bf16_bits_to_float(bits)));
    if (!std::isnan(f16_bits_to_float(bits))) {
      ASSERT_EQ(f32_to_f16_rne(f16_bits_to_float(bits)), bits);
    }
    if (!std::isnan(bf16_bits_to_float(bits))) {
      ASSERT_EQ(f32_to_bf16_rne(bf16_bits_to_float(bits)), bits);
    }
  }
}

// Halfway between two neighbours (a tie: to even), and one float ulp either
// side (to the nearer one): every boundary of both formats, both signs,
// subnormals, and the step from 65504 to infinity included.
TEST(HalfKernelsHost, EveryRoundingBoundaryRoundsAlike) {
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) {  // positive finite f16 and its upper neighbour
    const double lo = f16_bits_to_float(static_cast<std::uint16_t>(h));
    const double hi = h + 1 == 0x7c00u ? 65536.0 : f16_bits_to_float(static_cast<std::uint16_t>(h + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // 12 significant bits: exact
    for (const float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      ASSERT_TRUE(rounds_alike(x));
      ASSERT_TRUE(rounds_alike(-x));
    }
  }
  for (std::uint32_t h = 0; h < 0x7f80u; ++h) {  // positive finite bf16: the tie is the dropped half 0x8000
    const float mid = kernels::bits_float((h << 16) | 0x8000u);
    for (const float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e38f)}) {
      ASSERT_TRUE(rounds_alike(x));
      ASSERT_TRUE(rounds_alike(-x));
    }
  }
}

// Every 4099th float bit pattern (~1 million, all exponents, NaNs and infinities
// included), then random ones.
TEST(HalfKernelsHost, ASweepOfAllFloatBitPatternsRoundsAlike) {
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += 4099) ASSERT_TRUE(rounds_alike(kernels::bits_float(static_cast<std::uint32_t>(u))));
  Rng rng(11);
  for (int i = 0; i < 200000; ++i) ASSERT_TRUE(rounds_alike(kernels::bits_float(static_cast<std::uint32_t>(rng.next_u64()))));
}

// Lab 05's element operations, against the closed form its handout works out.
TEST(HalfKernelsHost, LabFiveSumRoundsOnceAndUnscaleIsExact) {
  using kernels::half_sum;
  const std::uint16_t h1024 = float_to_f16_bits(1024.0f), half = float_to_f16_bits(0.5f);
  EXPECT_EQ(f16_bits_to_float(half_sum(kernels::kF16Kind, h1024, half)), 1024.0f);  // 1024.5: a tie, to even
  EXPECT_EQ(f16_bits_to_float(half_sum(kernels::kF16Kind, float_to_f16_bits(1025.0f), half)), 1026.0f);
  EXPECT_EQ(f16_bits_to_float(half_sum(kernels::kF16Kind, float_to_f16_bits(65504.0f), float_to_f16_bits(16.0f))),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_bits_to_float(half_sum(kernels::kBF16Kind, float_to_bf16_bits(256.0f), float_to_bf16_bits(1.0f))),
            256.0f);  // bf16 spacing at 256 is 2: 257 is a tie, to even
  // A gradient scaled by 2^16 and unscaled comes back exactly (a power of two).
  const std::uint16_t g = float_to_f16_bits(3000.0f);
  EXPECT_EQ(kernels::unscale16(kernels::kF16Kind, g, 1.0f / 65536.0f), f16_bits_to_float(g) / 65536.0f);
}

}  // namespace
}  // namespace dtl::nn
