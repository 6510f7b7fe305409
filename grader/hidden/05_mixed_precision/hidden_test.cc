// Hidden tests for lab 05 (an example set), run at 5 and 6 ranks. Oracles as in
// the public tests: exact integer data, closed forms written out by hand, and an
// fp32 single-process run (here of a global batch of 30 rows, divisible by 5 and 6).
// The trainer's tests give it the test's rounding, averaging and scaler
// (oracle_hooks()), so they grade task C alone, as the public ones do.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/nn/half.h"
#include "labs/05_mixed_precision/tests/mixed_test_util.h"

namespace lab05_test {
namespace {

constexpr std::int64_t kBatch30 = 30;

TEST(HiddenHalf, Bf16AndFp16AveragesAreExactAtManyRanks) {
  auto backend_ = backend();
  const int w = comm().size(), r = comm().rank();
  for (dtl::DType t : {dtl::DType::kF16, dtl::DType::kBF16}) {
    for (lab05::DividePlacement placement : {lab05::DividePlacement::kPre, lab05::DividePlacement::kPost}) {
      for (std::size_t count : {2, 5, 7, 4099}) {  // fewer than ranks, equal-ish, odd, large and odd
        std::vector<std::uint16_t> buf(count), expected(count);
        for (std::size_t i = 0; i < count; ++i) {
          const float v = static_cast<float>(static_cast<int>((i + 3 * static_cast<std::size_t>(r)) % 5) - 2);
          float sum = 0.0f;
          for (int q = 0; q < w; ++q) sum += static_cast<float>(static_cast<int>((i + 3 * static_cast<std::size_t>(q)) % 5) - 2);
          buf[i] = t == dtl::DType::kF16 ? nn::float_to_f16_bits(v * w) : nn::float_to_bf16_bits(v * w);
          expected[i] = t == dtl::DType::kF16 ? nn::float_to_f16_bits(sum) : nn::float_to_bf16_bits(sum);
        }
        lab05::allreduce_mean_half(*backend_, buf.data(), count, t, placement);
        EXPECT_TRUE(dtl::testing::buffers_equal(expected, buf, std::string(dtl::dtype_name(t)) + " " +
                                                                   lab05::divide_placement_name(placement) +
                                                                   ", count " + std::to_string(count)));
      }
    }
  }
}

// 20000 on every rank: post-divide sums to 20000 W > 65504 (inf) for W >= 4; pre-divide stays 20000.
TEST(HiddenHalf, PostDivideOverflowsAtFiveRanks) {
  auto backend_ = backend();
  for (lab05::DividePlacement placement : {lab05::DividePlacement::kPre, lab05::DividePlacement::kPost}) {
    std::vector<std::uint16_t> buf(3, nn::float_to_f16_bits(20000.0f));
    lab05::allreduce_mean_half(*backend_, buf.data(), buf.size(), dtl::DType::kF16, placement);
    const float got = nn::f16_bits_to_float(buf[1]);
    if (placement == lab05::DividePlacement::kPre) {
      EXPECT_EQ(got, 20000.0f);
    } else {
      EXPECT_TRUE(std::isinf(got)) << "post-divide at " << comm().size() << " ranks gave " << got;
    }
  }
}

// growth 4, backoff 1/8, interval 2, init 64, by hand:
//   step     0   1   2    3    4   5   6   7   8    9
//   inf      .   .   .    X    .   X   .   .   .    .
//   scale    64  64  256  256  32  32  4   4   16   16   -> after step 9: 64
TEST(HiddenScaler, LongTrajectoryWithOtherFactors) {
  lab05::LossScaler s({.init_scale = 64.0f, .growth_factor = 4.0f, .backoff_factor = 0.125f, .growth_interval = 2});
  const std::vector<bool> inf = {false, false, false, true, false, true, false, false, false, false};
  const std::vector<float> scale = {64, 64, 256, 256, 32, 32, 4, 4, 16, 16};
  for (std::size_t i = 0; i < inf.size(); ++i) {
    EXPECT_EQ(s.scale(), scale[i]) << "step " << i;
    s.update(inf[i]);
  }
  EXPECT_EQ(s.scale(), 64.0f);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(HiddenScaler, NaNOnOneRankOfManySkipsEverywhere) {
  auto backend_ = backend();
  for (int bad = 0; bad < comm().size(); bad += 2) {
    lab05::LossScaler s({.init_scale = 2.0f});
    nn::Tensor g = nn::Tensor::zeros({11}, nn::DType::kBF16, nn::MemoryCategory::kOther);
    for (int i = 0; i < 11; ++i) g.data<nn::bf16>()[i] = nn::bf16(static_cast<float>(i));
    if (comm().rank() == bad) g.data<nn::bf16>()[10] = nn::bf16(std::nanf(""));
    nn::Tensor out = nn::Tensor::zeros({11}, nn::DType::kF32, nn::MemoryCategory::kOther);
    EXPECT_TRUE(s.unscale_and_check(*backend_, g, out)) << "NaN on rank " << bad;
    EXPECT_EQ(out.data<float>()[3], 1.5f);
  }
}

std::vector<double> oracle_losses(int steps) {
  nn::Model model = make_model(ModelKind::kGpt, 21);
  const std::vector<nn::Parameter*> params = model.parameters();
  const nn::Tensor values = nn::flatten_values(params), grads = nn::flatten_grads(params);
  nn::AdamW adam(kAdamW, values.numel());
  nn::SoftmaxCrossEntropy ce;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(ModelKind::kGpt, step, kGlobalBatch, 0, kBatch30);
    model.zero_grad();
    losses.push_back(ce.forward(model.forward(b.x), b.y));
    model.backward(ce.backward());
    adam.step(values.span<float>(), grads.span<float>());
  }
  return losses;
}

TEST(HiddenTrainer, GptFp16PostDivideSmallBucketsMatchesOneProcess) {
  const int steps = 5;
  const std::vector<double> expected = oracle_losses(steps);
  auto backend_ = backend();
  nn::Model model = make_model(ModelKind::kGpt, 21 + static_cast<std::uint64_t>(comm().rank()));
  lab05::MixedOptions o;
  o.precision = lab05::Precision::kF16;
  o.adamw = kAdamW;
  o.divide = lab05::DividePlacement::kPost;
  o.bucket_cap_bytes = 66;  // 33 elements: many buckets, the last one short
  o.scaler = {.mode = lab05::ScalingMode::kStatic, .init_scale = 128.0f};
  o.hooks = oracle_hooks();
  lab05::MixedPrecisionTrainer trainer(*backend_, model, o);
  const std::int64_t b = kBatch30 / comm().size();
  for (int step = 0; step < steps; ++step) {
    const Batch batch = make_batch(ModelKind::kGpt, step, kGlobalBatch, comm().rank() * b, (comm().rank() + 1) * b);
    const lab05::StepResult r = trainer.step(batch.x, batch.y);
    EXPECT_LE(std::abs(r.loss - expected[static_cast<std::size_t>(step)]), 3e-4) << "step " << step;
    EXPECT_EQ(r.buckets, static_cast<int>((model.parameter_count() + 32) / 33));
  }
  EXPECT_TRUE(same_as_rank0(bytes_of(trainer.master()), "master weights"));
}

TEST(HiddenTrainer, OverflowOnRankTwoSkipsEverywhere) {
  auto backend_ = backend();
  nn::Model model = make_model(ModelKind::kMlp, 13);
  lab05::MixedOptions o;
  o.precision = lab05::Precision::kF16;
  o.adamw = kAdamW;
  o.scaler = {.mode = lab05::ScalingMode::kDynamic, .init_scale = 4096.0f, .growth_interval = 100};
  o.hooks = oracle_hooks();
  lab05::MixedPrecisionTrainer trainer(*backend_, model, o);
  for (int step = 0; step < 3; ++step) {
    const Batch b = rank_batch(ModelKind::kMlp, step, kGlobalBatch, comm().rank(), comm().size(), step == 1 && comm().rank() == 2 ? 1e6f : 1.0f);
    const auto before = bytes_of(trainer.master());
    const lab05::StepResult r = trainer.step(b.x, b.y);
    EXPECT_EQ(r.skipped, step == 1) << "step " << step;
    EXPECT_EQ(r.scale, step < 2 ? 4096.0f : 2048.0f) << "step " << step;
    if (step == 1) {
      EXPECT_TRUE(bytes_of(trainer.master()) == before) << "rank " << comm().rank();
    }
  }
  EXPECT_TRUE(same_as_rank0(bytes_of(trainer.master()), "master weights"));
}

}  // namespace
}  // namespace lab05_test
