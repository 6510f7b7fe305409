// The GPU step's logic, run on the host where CI runs it (no GPU needed). See
// Note [The GPU step] in lab05/mixed.h.
//
//  - The device kernels' per-element arithmetic (given/mixed_device_math.h, the
//    same __host__ __device__ functions the kernels of given/mixed_device.cu call)
//    against closed forms and the tests' oracles: the counts of a rounding as
//    round_to_half() defines them (oracle_round), the 16-bit divide as half.h
//    rounds it, every 16-bit pattern; the found-inf test of the unscale.
//  - The agreement: the scaler's whole skip/backoff/growth sequence when one
//    rank in turn injects an inf, on host tensors over the CPU backend, through
//    the same unscale_and_check() code the GPU step runs (the flag in a
//    one-element i32 on the gradients' device, ONE allreduce, read back): every
//    rank's scale sequence equals rank 0's and the closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "harness/nn/kernels/half_math.cuh"
#include "labs/05_mixed_precision/given/mixed_device_math.h"
#include "labs/05_mixed_precision/tests/mixed_test_util.h"

namespace lab05_test {
namespace {

namespace dm = dtl::lab05::device_math;
namespace hk = dtl::nn::kernels;

// Values at every edge of fp16's and bf16's range: zeros, fp16's underflow tie
// 2^-25 and just above it, subnormals, normals, 65504, the overflow tie 65520
// and just below, fp32's largest, inf and NaN, both signs.
std::vector<float> edge_values() {
  std::vector<float> v = {0.0f, -0.0f, std::ldexp(1.0f, -25), std::nextafter(std::ldexp(1.0f, -25), 1.0f),
                          std::ldexp(1.0f, -24), std::ldexp(3.0f, -26), 1e-30f, 1e-40f, 6.1e-5f, 1.0f, 1.0009765625f,
                          65504.0f, 65519.99f, 65520.0f, 1e5f, 3.0e38f, std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  const std::size_t n = v.size();
  for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  for (int k = -140; k <= 127; k += 3) v.push_back(std::ldexp(1.3f, k));
  return v;
}

TEST(DeviceLogic, RoundClassCountsAsRoundToHalfDefinesThem) {
  const std::vector<float> values = edge_values();
  nn::Tensor src = nn::Tensor::zeros({static_cast<std::int64_t>(values.size())}, nn::DType::kF32, nn::MemoryCategory::kOther);
  std::memcpy(src.raw(), values.data(), values.size() * sizeof(float));
  for (const nn::DType dtype : {nn::DType::kF16, nn::DType::kBF16, nn::DType::kF32}) {
    nn::Tensor dst = nn::Tensor::zeros(src.shape(), dtype, nn::MemoryCategory::kOther);
    const lab05::RoundStats want = oracle_round(dst, src);  // the tests' oracle: nn::convert and std::isfinite
    lab05::RoundStats got;
    got.count = src.numel();
    const int kind = dtype == nn::DType::kF16 ? hk::kF16Kind : dtype == nn::DType::kBF16 ? hk::kBF16Kind : 0;
    for (const float v : values) {
      const float rounded = kind == 0 ? v : hk::widen16(kind, hk::narrow16(kind, v));  // what the kernel stores
      const unsigned c = dm::round_class(v, rounded);
      got.nonzero += (c & dm::kNonzero) != 0u;
      got.underflow += (c & dm::kUnderflow) != 0u;
      got.overflow += (c & dm::kOverflow) != 0u;
    }
    EXPECT_EQ(got.nonzero, want.nonzero) << dtype_name(dtype);
    EXPECT_EQ(got.underflow, want.underflow) << dtype_name(dtype);
    EXPECT_EQ(got.overflow, want.overflow) << dtype_name(dtype);
    if (dtype == nn::DType::kF16) {
      EXPECT_GT(want.overflow, 0) << "the edge values must overflow fp16";
    }
    if (dtype != nn::DType::kF32) {
      EXPECT_GT(want.underflow, 0) << "the edge values must underflow " << dtype_name(dtype);
    }
  }
}

// divide_half()'s element on the device, every 16-bit pattern, against half.h.
TEST(DeviceLogic, Divide16RoundsAsHalfHDoes) {
  for (const float divisor : {2.0f, 3.0f, 4.0f, 6.0f}) {
    for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
      const auto bits = static_cast<std::uint16_t>(b);
      const std::uint16_t f16 = nn::float_to_f16_bits(nn::f16_bits_to_float(bits) / divisor);
      const std::uint16_t bf16 = nn::float_to_bf16_bits(nn::bf16_bits_to_float(bits) / divisor);
      ASSERT_EQ(dm::divide16(hk::kF16Kind, bits, divisor), f16) << "fp16 pattern " << b << " / " << divisor;
      ASSERT_EQ(dm::divide16(hk::kBF16Kind, bits, divisor), bf16) << "bf16 pattern " << b << " / " << divisor;
    }
  }
}

// The unscale kernel's flag: set exactly for the 16-bit patterns whose unscaled
// value is inf or NaN (inf and NaN themselves: 1/S is finite and > 0).
TEST(DeviceLogic, UnscaleFlagIsSetExactlyForInfAndNaN) {
  for (const int kind : {hk::kF16Kind, hk::kBF16Kind}) {
    for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
      const auto bits = static_cast<std::uint16_t>(b);
      const float widened = kind == hk::kF16Kind ? nn::f16_bits_to_float(bits) : nn::bf16_bits_to_float(bits);
      const float unscaled = hk::unscale16(kind, bits, 1.0f / 1024.0f);
      ASSERT_EQ(dm::not_finite(unscaled), !std::isfinite(widened)) << "kind " << kind << " pattern " << b;
      if (std::isfinite(widened)) {
        ASSERT_EQ(unscaled, widened / 1024.0f) << "kind " << kind << " pattern " << b;
      }
    }
  }
  EXPECT_FALSE(dm::not_finite(std::numeric_limits<float>::max()));
  EXPECT_FALSE(dm::not_finite(-0.0f));
  EXPECT_TRUE(dm::not_finite(-std::numeric_limits<float>::infinity()));
}

// The agreement and the state machine after it: 8 steps, an inf on rank
// (step % W) at steps 2 and 5 only. Every rank skips steps 2 and 5 and has the
// scale sequence of the closed form (init 2^10, growth every 2 clean steps):
//   step   0     1     2      3     4     5      6     7
//   scale  2^10  2^10  2^11   2^10  2^10  2^11   2^10  2^10
//                      skip                skip
TEST(DeviceLogic, AnInfOnOneRankMovesEveryRanksScalerAlike) {
  auto backend_ = backend();
  const int w = comm().size(), r = comm().rank();
  lab05::LossScaler s({.mode = lab05::ScalingMode::kDynamic, .init_scale = 1024.0f, .growth_interval = 2});
  const std::vector<float> scales = {1024, 1024, 2048, 1024, 1024, 2048, 1024, 1024};
  std::vector<float> seen;
  for (int step = 0; step < 8; ++step) {
    nn::Tensor g32 = nn::Tensor::zeros({64}, nn::DType::kF32, nn::MemoryCategory::kOther);
    for (std::int64_t i = 0; i < 64; ++i) g32.data<float>()[i] = static_cast<float>(i - 32);
    const bool poison = (step == 2 || step == 5) && r == step % w;
    if (poison) g32.data<float>()[7] = std::numeric_limits<float>::infinity();
    nn::Tensor grads = nn::Tensor::zeros({64}, nn::DType::kF16, nn::MemoryCategory::kOther);
    nn::convert(grads, g32);
    nn::Tensor out = nn::Tensor::zeros({64}, nn::DType::kF32, nn::MemoryCategory::kOther);
    EXPECT_EQ(s.scale(), scales[static_cast<std::size_t>(step)]) << "rank " << r << ", step " << step;
    seen.push_back(s.scale());
    const bool found = s.unscale_and_check(*backend_, grads, out);
    EXPECT_EQ(found, step == 2 || step == 5) << "rank " << r << ", step " << step;
    s.update(found);
  }
  EXPECT_EQ(s.skipped_steps(), 2);
  std::vector<std::uint8_t> bytes(seen.size() * sizeof(float));
  std::memcpy(bytes.data(), seen.data(), bytes.size());
  EXPECT_TRUE(same_as_rank0(bytes, "the scale sequence"));
}

}  // namespace
}  // namespace lab05_test
