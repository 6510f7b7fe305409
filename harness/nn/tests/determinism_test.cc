// Determinism: the generator's known values and moments; the same seed gives
// the same initial weights; the same run twice gives the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "harness/nn/model.h"
#include "harness/nn/optim.h"
#include "harness/random.h"

namespace dtl::nn {
namespace {

TEST(Rng, SplitmixMatchesItsPublishedFirstValue) {
  std::uint64_t state = 0;
  EXPECT_EQ(splitmix64(state), 0xe220a8397b1dcdafull);  // the reference implementation, seed 0
}

TEST(Rng, UniformAndNormalHaveTheRightMoments) {
  Rng rng(42);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = rng.normal(1.0, 2.0);
    sn += z;
    sn2 += z * z;
  }
  // Standard errors: uniform mean 1/sqrt(12 n) ~ 6.5e-4, normal mean 2/sqrt(n) ~ 4.5e-3.
  EXPECT_NEAR(su / n, 0.5, 5 * 6.5e-4);
  const double mean = sn / n;
  EXPECT_NEAR(mean, 1.0, 5 * 4.5e-3);
  EXPECT_NEAR(sn2 / n - mean * mean, 4.0, 0.05);
}

std::vector<std::uint32_t> parameter_bits(const Model& model) {
  std::vector<std::uint32_t> bits;
  for (const Parameter* p : model.parameters()) {
    const auto* raw = static_cast<const std::uint32_t*>(p->value.raw());
    bits.insert(bits.end(), raw, raw + p->value.numel());
  }
  return bits;
}

TEST(Determinism, SameSeedSameWeightsDifferentSeedDifferentWeights) {
  EXPECT_EQ(parameter_bits(make_gpt(17, 8, 16, 2, 2, 7)), parameter_bits(make_gpt(17, 8, 16, 2, 2, 7)));
  EXPECT_NE(parameter_bits(make_gpt(17, 8, 16, 2, 2, 7)), parameter_bits(make_gpt(17, 8, 16, 2, 2, 8)));
  EXPECT_EQ(parameter_bits(make_mlp(4, 8, 3, 2, 7)), parameter_bits(make_mlp(4, 8, 3, 2, 7)));
}

// A short GPT training run with AdamW over the flat buffer: loss and weights, as bits.
std::pair<std::vector<double>, std::vector<std::uint32_t>> run_training(std::uint64_t seed) {
  Model model = make_gpt(17, 8, 16, 2, 2, seed);
  const Tensor& params = model.flatten_values();
  const Tensor& grads = model.flatten_grads();
  AdamW adam({.lr = 1e-2f, .weight_decay = 0.01f}, params.numel());
  Rng data(seed + 1);
  Tensor x = Tensor::zeros({4, 8}, DType::kI32, MemoryCategory::kOther);
  Tensor y = Tensor::zeros({4, 8}, DType::kI32, MemoryCategory::kOther);
  std::vector<double> losses;
  SoftmaxCrossEntropy ce;
  for (int step = 0; step < 5; ++step) {
    for (std::int32_t& v : x.span<std::int32_t>()) v = static_cast<std::int32_t>(data.below(17));
    for (std::int32_t& v : y.span<std::int32_t>()) v = static_cast<std::int32_t>(data.below(17));
    model.zero_grad();
    losses.push_back(ce.forward(model.forward(x), y));
    model.backward(ce.backward());
    adam.step(params.span<float>(), grads.span<float>());
  }
  return {losses, parameter_bits(model)};
}

TEST(Determinism, SameRunTwiceGivesTheSameBits) {
  const auto a = run_training(3);
  const auto b = run_training(3);
  ASSERT_EQ(a.first.size(), b.first.size());
  for (std::size_t i = 0; i < a.first.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.first[i], &b.first[i], sizeof(double)), 0) << "loss of step " << i;
  EXPECT_EQ(a.second, b.second);
  EXPECT_LT(a.first.back(), a.first.front() + 1.0);  // sanity: it trained, nothing blew up
}

}  // namespace
}  // namespace dtl::nn
