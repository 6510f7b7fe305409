// Task A: the 16-bit reduction and where the divide goes.
//
// Oracles: the IEEE rounding of harness/nn/half.h applied to sums done in
// double (exact for two 16-bit values), and integer-valued data whose sums and
// quotients are exact in fp16 and bf16, so results are compared bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "harness/nn/half.h"
#include "labs/05_mixed_precision/tests/mixed_test_util.h"

namespace lab05_test {
namespace {

using dtl::DType;

std::uint16_t to_bits(DType t, float v) { return t == DType::kF16 ? nn::float_to_f16_bits(v) : nn::float_to_bf16_bits(v); }
float from_bits(DType t, std::uint16_t b) { return t == DType::kF16 ? nn::f16_bits_to_float(b) : nn::bf16_bits_to_float(b); }

class HalfTypes : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Types, HalfTypes, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const auto& p) { return std::string(dtl::dtype_name(p.param)); });

// Every pair from a spread of values, against round16(float(a + b)) with the sum
// formed in double and rounded to float: double has more than 2 x 24 + 2 bits,
// so that is exactly the float addition's result (double rounding is innocuous
// for +), computed without the code under test.
TEST_P(HalfTypes, ReduceHalfSumMatchesTheRoundedExactSum) {
  const DType t = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {0.0f,   -0.0f,   1.0f,  -1.0f,    0.5f,     3.0f,   1024.0f, 0.333f,
                                     1e-3f,  -7.25f,  6e-8f, 6.1e-5f,  60000.0f, 65504.0f, 1e30f, -1e30f,
                                     3e-39f, 1e-40f,  inf,   -inf};
  std::vector<std::uint16_t> in, inout, expected;
  for (float a : values) {
    for (float b : values) {
      const std::uint16_t ha = to_bits(t, a), hb = to_bits(t, b);
      in.push_back(ha);
      inout.push_back(hb);
      const double exact = static_cast<double>(from_bits(t, ha)) + static_cast<double>(from_bits(t, hb));
      expected.push_back(to_bits(t, static_cast<float>(exact)));
    }
  }
  lab05::reduce_half_sum(t, in.data(), inout.data(), in.size());
  // inf + -inf is NaN: compare "is NaN" there (NaN bits are not unique).
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const float e = from_bits(t, expected[i]), g = from_bits(t, inout[i]);
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i;
    } else {
      EXPECT_EQ(inout[i], expected[i]) << "element " << i << ": " << from_bits(t, in[i]) << " + "
                                       << from_bits(t, to_bits(t, values[i % values.size()])) << " gave " << g
                                       << ", expected " << e;
    }
  }
}

TEST_P(HalfTypes, ReduceHalfSumOfNothingAndBadTypes) {
  const DType t = GetParam();
  EXPECT_NO_THROW(lab05::reduce_half_sum(t, nullptr, nullptr, 0));
  std::uint16_t a = to_bits(t, 1.0f), b = to_bits(t, 2.0f);
  lab05::reduce_half_sum(t, &a, &b, 1);
  EXPECT_EQ(b, to_bits(t, 3.0f));
  EXPECT_THROW(lab05::reduce_half_sum(DType::kF32, &a, &b, 1), dtl::InvalidArgument);
  EXPECT_THROW(lab05::reduce_half_sum(t, nullptr, &b, 1), dtl::InvalidArgument);
}

TEST_P(HalfTypes, DivideHalfRoundsOnce) {
  const DType t = GetParam();
  std::vector<std::uint16_t> buf = {to_bits(t, 6.0f), to_bits(t, -1.0f), to_bits(t, 1.0f), to_bits(t, 0.0f)};
  lab05::divide_half(t, buf.data(), buf.size(), 3.0f);
  EXPECT_EQ(buf[0], to_bits(t, 2.0f));
  EXPECT_EQ(buf[1], to_bits(t, static_cast<float>(-1.0 / 3.0)));
  EXPECT_EQ(buf[2], to_bits(t, static_cast<float>(1.0 / 3.0)));
  EXPECT_EQ(buf[3], to_bits(t, 0.0f));
  EXPECT_THROW(lab05::divide_half(t, buf.data(), buf.size(), 0.0f), dtl::InvalidArgument);
  EXPECT_THROW(lab05::divide_half(DType::kI32, buf.data(), buf.size(), 2.0f), dtl::InvalidArgument);
}

// rank r contributes W * v(i, r), v small integers: both placements are exact, the
// average is sum_r v(i, r). Counts: empty, 1, fewer than ranks, not divisible, large.
TEST_P(HalfTypes, AllreduceMeanIsExactOnIntegers) {
  const DType t = GetParam();
  auto backend_ = backend();
  const int w = comm().size(), r = comm().rank();
  auto v = [](std::size_t i, int rank) { return static_cast<float>(static_cast<int>((i * 7 + rank * 3) % 9) - 4); };
  for (lab05::DividePlacement placement : {lab05::DividePlacement::kPre, lab05::DividePlacement::kPost}) {
    for (std::size_t count : {0, 1, 3, 1001, 40000}) {
      std::vector<std::uint16_t> buf(count), expected(count);
      for (std::size_t i = 0; i < count; ++i) {
        buf[i] = to_bits(t, static_cast<float>(w) * v(i, r));
        float sum = 0.0f;
        for (int q = 0; q < w; ++q) sum += v(i, q);
        expected[i] = to_bits(t, sum);
      }
      lab05::allreduce_mean_half(*backend_, buf.data(), count, t, placement);
      EXPECT_TRUE(dtl::testing::buffers_equal(expected, buf,
                                              std::string(lab05::divide_placement_name(placement)) + " buf, count " +
                                                  std::to_string(count)));
    }
  }
}

// Note [Where to divide], measured: 40000 on every rank. Post-divide sums to
// 40000 W first, which is above fp16's 65504 for W >= 2: inf. Pre-divide never
// leaves the range. The smallest subnormal, 2^-24, is the other way round:
// pre-divide halves it to zero (W >= 2), post-divide keeps it.
TEST(AllreduceMeanPlacement, PostDivideOverflowsFp16PreDivideUnderflows) {
  auto backend_ = backend();
  const int w = comm().size();
  const float tiny = std::ldexp(1.0f, -24);
  for (lab05::DividePlacement placement : {lab05::DividePlacement::kPre, lab05::DividePlacement::kPost}) {
    std::vector<std::uint16_t> buf = {nn::float_to_f16_bits(40000.0f), nn::float_to_f16_bits(tiny)};
    lab05::allreduce_mean_half(*backend_, buf.data(), buf.size(), DType::kF16, placement);
    const float big = nn::f16_bits_to_float(buf[0]), small = nn::f16_bits_to_float(buf[1]);
    const bool pre = placement == lab05::DividePlacement::kPre;
    const std::string what = std::string(lab05::divide_placement_name(placement)) + " at " + std::to_string(w) + " ranks";
    if (w == 1 || pre) {
      EXPECT_EQ(big, 40000.0f) << what;
    } else {
      EXPECT_TRUE(std::isinf(big)) << what << ": 40000 x " << w << " overflows fp16 before the divide; got " << big;
    }
    if (w == 1 || !pre) {
      EXPECT_EQ(small, tiny) << what;
    } else {
      EXPECT_EQ(small, 0.0f) << what << ": 2^-24 / " << w << " underflows fp16 before the sum; got " << small;
    }
  }
}

TEST(AllreduceMeanPlacement, BadTypeThrowsBeforeCommunicating) {
  auto backend_ = backend();
  float f = 1.0f;
  EXPECT_THROW(lab05::allreduce_mean_half(*backend_, &f, 1, DType::kF32, lab05::DividePlacement::kPre),
               dtl::InvalidArgument);
}

}  // namespace
}  // namespace lab05_test
