// Hidden tests for lab 05 (an example set), run at 5 and 6 ranks. Oracles as in
// the public tests: exact integer data, closed forms written out by hand, and an
// fp32 single-process run (here of a global batch of 30 rows, divisible by 5 and 6).
// The trainer's tests give it the test's rounding, averaging and scaler
// (oracle_hooks()), so they grade task C alone, as the public ones do. Rounding
// at the edges of fp16's and bf16's ranges is checked against closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

// What rounding lost is read from the rounded value, not guessed from the input:
// closed forms of fp16 and bf16 rounding (round to nearest, ties to even) at the
// edges of their ranges, each worked out by hand.
//   fp16: 65519 -> 65504 (below the midpoint 65520 to 2^16: finite); 65520 -> inf (a
//   tie, to the even 2^16: overflow), -65520 -> -inf; 3 x 2^-26 -> 2^-24 (nearer than
//   0); 2^-25 -> 0 (a tie, to the even 0: underflow); -2^-26 -> -0 (underflow, signed);
//   1.5 x 2^-24 -> 2^-23 (a tie, to the even 2); 1e-6 -> a subnormal (kept).
//   bf16 (fp32's exponent, 8 significant bits): 3.4e38 is above the midpoint
//   (2 - 2^-8) 2^127 = 3.3962e38 between the largest bf16, 3.3895e38, and 2^128:
//   inf (bf16 overflows too); -3.39e38 -> -3.3895e38 (finite); fp32's smallest
//   subnormal 2^-149 and -2^-149 -> 0 and -0 (below bf16's 2^-133: underflow);
//   2^-133 is exact.
TEST(HiddenRound, CountsFollowTheRoundedValue) {
  auto tensor = [](const std::vector<float>& v, nn::DType dtype) {
    nn::Tensor t = nn::Tensor::zeros({static_cast<std::int64_t>(v.size())}, dtype, nn::MemoryCategory::kOther);
    if (dtype == nn::DType::kF32) std::copy(v.begin(), v.end(), t.data<float>());
    return t;
  };
  {
    const std::vector<float> v = {65519.0f, 65520.0f, -65520.0f, 3.0f * std::ldexp(1.0f, -26), std::ldexp(1.0f, -25),
                                  -std::ldexp(1.0f, -26), 1.5f * std::ldexp(1.0f, -24), 1e-6f};
    const nn::Tensor src = tensor(v, nn::DType::kF32), dst = tensor(v, nn::DType::kF16);
    const lab05::RoundStats st = lab05::round_to_half(dst, src);
    EXPECT_EQ(st.count, 8);
    EXPECT_EQ(st.nonzero, 8);
    EXPECT_EQ(st.overflow, 2) << "fp16: 65520 and -65520 round to inf; 65519 rounds to 65504";
    EXPECT_EQ(st.underflow, 2) << "fp16: 2^-25 and -2^-26 round to (signed) zero; 3 x 2^-26, 1.5 x 2^-24 and 1e-6 do not";
    const std::vector<float> want = {65504.0f, std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(), std::ldexp(1.0f, -24), 0.0f, -0.0f,
                                     std::ldexp(1.0f, -23)};
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(static_cast<float>(dst.data<nn::f16>()[i]), want[i]) << "fp16 element " << i << " (" << v[i] << ")";
    }
    EXPECT_TRUE(std::signbit(static_cast<float>(dst.data<nn::f16>()[5]))) << "-2^-26 rounds to -0 in fp16";
  }
  {
    const float tiny = std::numeric_limits<float>::denorm_min();  // 2^-149
    const std::vector<float> v = {3.4e38f, -3.39e38f, tiny, -tiny, std::ldexp(1.0f, -133)};
    const nn::Tensor src = tensor(v, nn::DType::kF32), dst = tensor(v, nn::DType::kBF16);
    const lab05::RoundStats st = lab05::round_to_half(dst, src);
    EXPECT_EQ(st.count, 5);
    EXPECT_EQ(st.nonzero, 5);
    EXPECT_EQ(st.overflow, 1) << "bf16: 3.4e38 rounds to inf (bf16's largest is 3.3895e38)";
    EXPECT_EQ(st.underflow, 2) << "bf16: fp32's smallest subnormals round to (signed) zero";
    EXPECT_TRUE(std::isinf(static_cast<float>(dst.data<nn::bf16>()[0])));
    EXPECT_EQ(static_cast<float>(dst.data<nn::bf16>()[4]), std::ldexp(1.0f, -133));
  }
}

std::vector<double> oracle_losses(int steps, ModelKind kind = ModelKind::kGpt) {
  nn::Model model = make_model(kind, 21);
  const std::vector<nn::Parameter*> params = model.parameters();
  const nn::Tensor values = nn::flatten_values(params), grads = nn::flatten_grads(params);
  nn::AdamW adam(kAdamW, values.numel());
  nn::SoftmaxCrossEntropy ce;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(kind, step, kGlobalBatch, 0, kBatch30);
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

// Buckets hold whole elements and never exceed the cap: a cap of 67 bytes is 33
// bf16 elements (66 bytes) and 16 fp32 ones (64 bytes), so ceil(n / 33) and
// ceil(n / 16) buckets of 2n and 4n bytes in all (the MLP, n = 1251). fp32
// precision at 5 and 6 ranks averages with ReduceOp::kAvg: the loss curve of one
// fp32 process.
TEST(HiddenTrainer, AnOddCapHoldsWholeElements) {
  const int steps = 3;
  const std::vector<double> expected = oracle_losses(steps, ModelKind::kMlp);
  auto backend_ = backend();
  for (lab05::Precision precision : {lab05::Precision::kBF16, lab05::Precision::kF32}) {
    nn::Model model = make_model(ModelKind::kMlp, 21 + static_cast<std::uint64_t>(comm().rank()));
    const std::int64_t n = model.parameter_count();  // 1251: 38 bf16 buckets, 79 fp32 ones
    lab05::MixedOptions o;
    o.precision = precision;
    o.adamw = kAdamW;
    o.bucket_cap_bytes = 67;
    o.scaler = {.mode = lab05::ScalingMode::kNone};
    o.hooks = oracle_hooks();
    lab05::MixedPrecisionTrainer trainer(*backend_, model, o);
    const std::int64_t per_bucket = precision == lab05::Precision::kF32 ? 16 : 33;
    const std::int64_t element = precision == lab05::Precision::kF32 ? 4 : 2;
    const std::int64_t b = kBatch30 / comm().size();
    const std::string what = std::string(lab05::precision_name(precision)) + ", cap 67 bytes";
    for (int step = 0; step < steps; ++step) {
      const Batch batch = make_batch(ModelKind::kMlp, step, kGlobalBatch, comm().rank() * b, (comm().rank() + 1) * b);
      const lab05::StepResult r = trainer.step(batch.x, batch.y);
      EXPECT_EQ(r.buckets, static_cast<int>((n + per_bucket - 1) / per_bucket)) << what << ", step " << step;
      EXPECT_EQ(r.comm_bytes, element * n) << what << ", step " << step;
      EXPECT_FALSE(r.skipped) << what << ", step " << step;
      if (precision == lab05::Precision::kF32) {
        EXPECT_LE(std::abs(r.loss - expected[static_cast<std::size_t>(step)]), 1e-4 * (1 + expected[static_cast<std::size_t>(step)]))
            << what << ", step " << step;
      }
    }
    EXPECT_TRUE(same_as_rank0(bytes_of(trainer.master()), what + ": master weights"));
  }
}

}  // namespace
}  // namespace lab05_test
