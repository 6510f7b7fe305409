// Task B: rounding to 16 bits, and the loss scaler, each given its inputs
// directly (no trainer, no 16-bit allreduce: the found-inf flag is an int32 sum).
//
// Oracles: closed forms. Powers of two 2^-k round to zero in fp16 exactly when
// k >= 25 (2^-25 is half the smallest subnormal: a tie, to even, i.e. zero); the
// scale after a sequence of clean and overflowing steps is computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "labs/05_mixed_precision/tests/mixed_test_util.h"

namespace lab05_test {
namespace {

nn::Tensor f32_tensor(const std::vector<float>& values) {
  nn::Tensor t = nn::Tensor::zeros({static_cast<std::int64_t>(values.size())}, nn::DType::kF32,
                                   nn::MemoryCategory::kOther);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

// 2^-k for k = 0..60, each times `scale` (1 or 2^15), rounded to fp16: the underflowed
// fraction without and with a loss scale (the figure of Note [Loss scaling]).
TEST(RoundToHalf, UnderflowOfPowersOfTwoIsTheClosedForm) {
  for (const float scale : {1.0f, 32768.0f}) {  // 2^16 x 2^0 would overflow (65504)
    std::vector<float> values;
    for (int k = 0; k <= 60; ++k) values.push_back(std::ldexp(1.0f, -k) * scale);
    const nn::Tensor src = f32_tensor(values);
    nn::Tensor dst = nn::Tensor::zeros({src.numel()}, nn::DType::kF16, nn::MemoryCategory::kOther);
    const lab05::RoundStats stats = lab05::round_to_half(dst, src);
    // 2^(s-k) underflows when s - k <= -25, i.e. k >= 25 + s, s = log2(scale).
    const int s = static_cast<int>(std::log2(scale));
    const std::int64_t expected_underflow = std::max(0, 60 - (25 + s) + 1);
    EXPECT_EQ(stats.count, 61);
    EXPECT_EQ(stats.nonzero, 61);
    EXPECT_EQ(stats.underflow, expected_underflow) << "scale " << scale;
    EXPECT_EQ(stats.overflow, 0);
    for (int k = 0; k <= 60; ++k) {
      const float expected = s - k >= -24 ? values[static_cast<std::size_t>(k)] : 0.0f;
      EXPECT_EQ(static_cast<float>(dst.data<nn::f16>()[k]), expected) << "2^" << s - k;
    }
    if (comm().rank() == 0) {
      std::printf("[ info ] 2^0 .. 2^-60 times %g in fp16: %lld of 61 underflow (%.0f%%)\n", scale,
                  static_cast<long long>(stats.underflow), 100.0 * stats.underflow_fraction());
    }
  }
}

TEST(RoundToHalf, OverflowInfNaNAndBf16) {
  const float inf = std::numeric_limits<float>::infinity();
  const nn::Tensor src = f32_tensor({70000.0f, 65504.0f, -1e6f, inf, std::nanf(""), 0.0f, 1e-30f});
  nn::Tensor h = nn::Tensor::zeros({src.numel()}, nn::DType::kF16, nn::MemoryCategory::kOther);
  const lab05::RoundStats f16 = lab05::round_to_half(h, src);
  EXPECT_EQ(f16.nonzero, 4);   // 70000, 65504, -1e6, 1e-30 (inf, NaN and 0 are not counted)
  EXPECT_EQ(f16.overflow, 2);  // 70000 and -1e6 (inf was inf already)
  EXPECT_EQ(f16.underflow, 1); // 1e-30
  EXPECT_EQ(static_cast<float>(h.data<nn::f16>()[1]), 65504.0f);
  EXPECT_TRUE(std::isnan(static_cast<float>(h.data<nn::f16>()[4])));
  nn::Tensor b = nn::Tensor::zeros({src.numel()}, nn::DType::kBF16, nn::MemoryCategory::kOther);
  const lab05::RoundStats bf = lab05::round_to_half(b, src);
  EXPECT_EQ(bf.overflow, 0) << "bf16 has fp32's range";
  EXPECT_EQ(bf.underflow, 0) << "bf16 has fp32's range";
  EXPECT_EQ(static_cast<float>(b.data<nn::bf16>()[6]), static_cast<float>(nn::bf16(1e-30f)));
  nn::Tensor wrong = nn::Tensor::zeros({3}, nn::DType::kF16, nn::MemoryCategory::kOther);
  EXPECT_THROW(lab05::round_to_half(wrong, src), dtl::InvalidArgument);
}

TEST(LossScalerOptions, BadOptionsNameTheArgument) {
  auto throws_naming = [](lab05::LossScalerOptions o, const std::string& name) {
    try {
      lab05::LossScaler s(o);
    } catch (const dtl::InvalidArgument& e) {
      return std::string(e.what()).find(name) != std::string::npos &&
             std::string(e.what()).find("rank") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(throws_naming({.init_scale = 0.0f}, "init_scale"));
  EXPECT_TRUE(throws_naming({.init_scale = std::numeric_limits<float>::infinity()}, "init_scale"));
  EXPECT_TRUE(throws_naming({.growth_factor = 1.0f}, "growth_factor"));
  EXPECT_TRUE(throws_naming({.backoff_factor = 1.0f}, "backoff_factor"));
  EXPECT_TRUE(throws_naming({.growth_interval = 0}, "growth_interval"));
  EXPECT_EQ(lab05::LossScaler({.mode = lab05::ScalingMode::kNone}).scale(), 1.0f);
}

// The trajectory of the comment in loss_scaler.cc, by hand: init 2^10, interval 3,
// overflows at steps 4 and 9 and 10 (two in a row).
TEST(LossScalerUpdate, DynamicTrajectoryIsTheClosedForm) {
  lab05::LossScaler s({.mode = lab05::ScalingMode::kDynamic, .init_scale = 1024.0f, .growth_interval = 3});
  const std::vector<bool> overflow = {false, false, false, false, true, false, false, false, false, true, true, false};
  const std::vector<float> expected = {1024, 1024, 1024, 2048, 2048, 1024, 1024, 1024, 2048, 2048, 1024, 512};
  for (std::size_t step = 0; step < overflow.size(); ++step) {
    EXPECT_EQ(s.scale(), expected[step]) << "scale used by step " << step;
    s.update(overflow[step]);
  }
  EXPECT_EQ(s.scale(), 512.0f) << "after the last step (one clean step since the backoff)";
  EXPECT_EQ(s.clean_steps(), 1);
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScalerUpdate, GrowthAndBackoffFactorsAreParameters) {
  lab05::LossScaler s({.init_scale = 100.0f, .growth_factor = 3.0f, .backoff_factor = 0.25f, .growth_interval = 1});
  s.update(false);
  EXPECT_EQ(s.scale(), 300.0f);
  s.update(true);
  EXPECT_EQ(s.scale(), 75.0f);
}

TEST(LossScalerUpdate, StaticAndNoneNeverMove) {
  for (auto mode : {lab05::ScalingMode::kStatic, lab05::ScalingMode::kNone}) {
    lab05::LossScaler s({.mode = mode, .init_scale = 128.0f, .growth_interval = 1});
    const float first = s.scale();
    EXPECT_EQ(first, mode == lab05::ScalingMode::kNone ? 1.0f : 128.0f);
    for (bool inf : {false, true, false, false}) s.update(inf);
    EXPECT_EQ(s.scale(), first) << lab05::scaling_mode_name(mode);
    EXPECT_EQ(s.skipped_steps(), 1) << lab05::scaling_mode_name(mode);
    // The counters run as in kDynamic: clean steps since the overflow, back to 0 at growth_interval.
    lab05::LossScaler c({.mode = mode, .init_scale = 128.0f, .growth_interval = 3});
    for (bool inf : {false, true, false, false}) c.update(inf);
    EXPECT_EQ(c.clean_steps(), 2) << lab05::scaling_mode_name(mode) << ": two clean steps since the overflow";
    c.update(false);
    EXPECT_EQ(c.clean_steps(), 0) << lab05::scaling_mode_name(mode) << ": the count returns to 0 at growth_interval";
    EXPECT_EQ(c.scale(), first) << lab05::scaling_mode_name(mode);
  }
}

// Unscale: exact for a power-of-two scale; and the found-inf flag on one rank only
// must skip the step on all of them (each rank in turn is the one with the inf).
TEST(UnscaleAndCheck, UnscalesInFp32AndAgreesOnInfAcrossRanks) {
  auto backend_ = backend();
  const int w = comm().size(), r = comm().rank();
  for (nn::DType dtype : {nn::DType::kF16, nn::DType::kBF16, nn::DType::kF32}) {
    for (int bad = -1; bad < w; ++bad) {  // -1: nobody
      for (float poison : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
        lab05::LossScaler s({.init_scale = 1024.0f});
        const std::int64_t n = 37;
        nn::Tensor g32 = nn::Tensor::zeros({n}, nn::DType::kF32, nn::MemoryCategory::kOther);
        for (std::int64_t i = 0; i < n; ++i) g32.data<float>()[i] = static_cast<float>((i % 11) - 5) * 256.0f;
        if (bad == r) g32.data<float>()[n - 2] = poison;
        nn::Tensor grads = nn::Tensor::zeros({n}, dtype, nn::MemoryCategory::kOther);
        nn::convert(grads, g32);
        nn::Tensor out = nn::Tensor::zeros({n}, nn::DType::kF32, nn::MemoryCategory::kOther);
        const bool found = s.unscale_and_check(*backend_, grads, out);
        EXPECT_EQ(found, bad >= 0) << dtype_name(dtype) << ", poison " << poison << " on rank " << bad;
        for (std::int64_t i = 0; i < n; ++i) {
          if (bad == r && i == n - 2) continue;
          EXPECT_EQ(out.data<float>()[i], static_cast<float>((i % 11) - 5) / 4.0f) << "element " << i;
        }
      }
    }
  }
}

// Unscaling must happen in fp32: scaled fp16 gradients k * 2^-8 with S = 2^20 are
// k * 2^-28 unscaled, exact in fp32 and below fp16's smallest subnormal (2^-24),
// so an unscale rounded to fp16 on the way makes them zero.
TEST(UnscaleAndCheck, UnscaledValuesBelowFp16sRangeStayInFp32) {
  auto backend_ = backend();
  lab05::LossScaler s({.init_scale = std::ldexp(1.0f, 20)});
  const std::int64_t n = 9;
  nn::Tensor grads = nn::Tensor::zeros({n}, nn::DType::kF16, nn::MemoryCategory::kOther);
  for (std::int64_t i = 0; i < n; ++i) grads.data<nn::f16>()[i] = nn::f16(std::ldexp(static_cast<float>(i - 4), -8));
  nn::Tensor out = nn::Tensor::zeros({n}, nn::DType::kF32, nn::MemoryCategory::kOther);
  EXPECT_FALSE(s.unscale_and_check(*backend_, grads, out));
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(out.data<float>()[i], std::ldexp(static_cast<float>(i - 4), -28))
        << "element " << i << ": (" << i - 4 << " x 2^-8) / 2^20 in fp32";
  }
}

TEST(UnscaleAndCheck, InPlaceForF32AndEmpty) {
  auto backend_ = backend();
  lab05::LossScaler s({.init_scale = 8.0f});
  nn::Tensor g = f32_tensor({8.0f, -16.0f, 4.0f});
  EXPECT_FALSE(s.unscale_and_check(*backend_, g, g));
  EXPECT_EQ(g.data<float>()[0], 1.0f);
  EXPECT_EQ(g.data<float>()[1], -2.0f);
  EXPECT_EQ(g.data<float>()[2], 0.5f);
  nn::Tensor empty = nn::Tensor::zeros({0}, nn::DType::kF16, nn::MemoryCategory::kOther);
  nn::Tensor empty_out = nn::Tensor::zeros({0}, nn::DType::kF32, nn::MemoryCategory::kOther);
  EXPECT_FALSE(s.unscale_and_check(*backend_, empty, empty_out));
}

}  // namespace
}  // namespace lab05_test
