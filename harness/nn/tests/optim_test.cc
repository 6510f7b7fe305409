// Optimizers against closed-form steps, and sharded == unsharded, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness/error.h"
#include "harness/nn/memory.h"
#include "harness/nn/optim.h"
#include "harness/random.h"

#ifdef DTL_HAVE_CUDA
#include "harness/cuda/device.h"
#endif

namespace dtl::nn {
namespace {

// Whether a GPU is there (never in a build without CUDA); *why says why not.
bool gpu_present(std::string* why) {
#ifdef DTL_HAVE_CUDA
  return dtl::cuda::gpu_count(why) > 0;
#else
  *why = "built without CUDA";
  return false;
#endif
}

TEST(Sgd, TwoStepsMatchTheClosedForm) {
  const double lr = 0.1, mu = 0.9, wd = 0.01, g = 0.5;
  std::vector<float> p{1.0f};
  const std::vector<float> grad{static_cast<float>(g)};
  Sgd sgd({.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}, 1);
  sgd.step(p, grad);
  // step 1: g1 = g + wd p0; m1 = g1; p1 = p0 - lr m1
  const double g1 = g + wd * 1.0, m1 = g1, p1 = 1.0 - lr * m1;
  EXPECT_NEAR(p[0], p1, 1e-6);
  sgd.step(p, grad);
  // step 2: g2 = g + wd p1; m2 = mu m1 + g2; p2 = p1 - lr m2
  const double g2 = g + wd * p1, m2 = mu * m1 + g2, p2 = p1 - lr * m2;
  EXPECT_NEAR(p[0], p2, 1e-6);
  EXPECT_NEAR(sgd.momentum().data<float>()[0], m2, 1e-6);
}

TEST(Sgd, WithoutMomentumKeepsNoState) {
  Sgd sgd({.lr = 0.5f}, 3);
  EXPECT_FALSE(sgd.momentum().defined());
  std::vector<float> p{1, 2, 3};
  const std::vector<float> g{1, -1, 0.5f};
  sgd.step(p, g);
  EXPECT_EQ(p, (std::vector<float>{0.5f, 2.5f, 2.75f}));
}

TEST(Optimizers, StateInPinnedHostMemoryIsChargedThereAndStepsTheSame) {
  MemoryTracker& pinned = memory_tracker(Device::kPinnedHost);
  const std::int64_t before = pinned.current(MemoryCategory::kOptimizerState);
  Sgd sgd_host({.lr = 0.1f, .momentum = 0.9f}, 3), sgd_pinned({.lr = 0.1f, .momentum = 0.9f}, 3, Device::kPinnedHost);
  AdamW adam_host({.lr = 0.01f}, 3), adam_pinned({.lr = 0.01f}, 3, Device::kPinnedHost);
  EXPECT_EQ(pinned.current(MemoryCategory::kOptimizerState) - before, 4 * 3 + 8 * 3);  // momentum; m and v
  EXPECT_EQ(adam_pinned.m().device(), Device::kPinnedHost);
  std::vector<float> a{1, 2, 3}, b = a, c = a, d = a;
  const std::vector<float> g{0.5f, -0.25f, 2.0f};
  for (int t = 0; t < 3; ++t) {
    sgd_host.step(a, g);
    sgd_pinned.step(b, g);
    adam_host.step(c, g);
    adam_pinned.step(d, g);
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(c, d);
  // State on the GPU needs one (nn_gpu_test steps it there): without CUDA the
  // Storage refuses, with CUDA and no GPU cudaMalloc fails; both are dtl::Error.
  std::string why;
  if (!gpu_present(&why)) {
    EXPECT_THROW(Sgd({.lr = 0.1f, .momentum = 0.9f}, 3, Device::kCuda), Error) << why;
    EXPECT_THROW(AdamW({}, 3, Device::kCuda), Error) << why;
  }
}

TEST(Optimizers, TheTensorStepOnHostTensorsIsTheSpanStep) {
  const std::vector<float> g{0.5f, -0.25f, 2.0f, 1e-3f};
  Sgd sgd_span({.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}, 4);
  Sgd sgd_tensor({.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}, 4);
  AdamW adam_span({.lr = 0.01f, .weight_decay = 0.1f}, 4), adam_tensor({.lr = 0.01f, .weight_decay = 0.1f}, 4);
  std::vector<float> a{1, -2, 3, 0.5f}, c = a;
  const Tensor b = Tensor::from_values({4}, std::vector<double>{1, -2, 3, 0.5}, DType::kF32);
  const Tensor d = b.clone(MemoryCategory::kOther);
  const Tensor grads = Tensor::from_values({4}, std::vector<double>(g.begin(), g.end()), DType::kF32);
  for (int t = 0; t < 3; ++t) {
    sgd_span.step(a, g);
    sgd_tensor.step(b, grads);
    adam_span.step(c, g);
    adam_tensor.step(d, grads);
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], b.data<float>()[i]) << i;
    EXPECT_EQ(c[i], d.data<float>()[i]) << i;
  }
  EXPECT_EQ(adam_tensor.steps(), 3);
  EXPECT_NE(a[0], 1.0f);  // the steps did move the parameters
  EXPECT_THROW(sgd_tensor.step(b.view(0, {3}), grads.view(0, {3})), InvalidArgument);
}

TEST(AdamW, FirstStepsMatchTheClosedForm) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  AdamW adam({.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f}, 2);
  std::vector<float> p{1.0f, -2.0f};
  const std::vector<double> g1{0.3, -0.04}, g2{-0.1, 0.2};
  std::vector<double> ref{1.0, -2.0}, m{0, 0}, v{0, 0};
  for (int t = 1; t <= 2; ++t) {
    const auto& g = t == 1 ? g1 : g2;
    const std::vector<float> gf{static_cast<float>(g[0]), static_cast<float>(g[1])};
    adam.step(p, gf);
    for (int i = 0; i < 2; ++i) {
      ref[i] -= lr * wd * ref[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(b1, t)), v_hat = v[i] / (1 - std::pow(b2, t));
      ref[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      EXPECT_NEAR(p[static_cast<std::size_t>(i)], ref[i], 1e-6) << "step " << t << " element " << i;
    }
  }
  // Step 1 in words: the update is lr * sign(g) (m_hat = g, v_hat = g^2), after the decay.
  EXPECT_EQ(adam.steps(), 2);
}

// Shards of uneven sizes, each with its own optimizer, against one optimizer
// over the whole buffer: the same bits after several steps.
template <typename Optimizer, typename Options>
void expect_sharded_equals_whole(Options options) {
  const std::int64_t n = 1000;
  Rng rng(3);
  std::vector<float> whole(n), grads(n);
  for (float& v : whole) v = static_cast<float>(rng.normal(0, 1));
  std::vector<float> sharded = whole;
  Optimizer full(options, n);
  const std::vector<std::int64_t> bounds{0, 333, 334, 700, 1000};  // includes a one-element shard
  std::vector<Optimizer> shards;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) shards.emplace_back(options, bounds[s + 1] - bounds[s]);
  for (int step = 0; step < 5; ++step) {
    for (float& g : grads) g = static_cast<float>(rng.normal(0, 1));
    full.step(whole, grads);
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
      const auto begin = static_cast<std::size_t>(bounds[s]);
      const auto count = static_cast<std::size_t>(bounds[s + 1] - bounds[s]);
      shards[s].step(std::span<float>(sharded).subspan(begin, count), std::span<const float>(grads).subspan(begin, count));
    }
  }
  EXPECT_EQ(std::memcmp(whole.data(), sharded.data(), whole.size() * sizeof(float)), 0);
}

TEST(Sgd, ShardedStepEqualsWholeStepBitForBit) {
  expect_sharded_equals_whole<Sgd>(SgdOptions{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f});
}

TEST(AdamW, ShardedStepEqualsWholeStepBitForBit) {
  expect_sharded_equals_whole<AdamW>(AdamWOptions{.lr = 0.01f, .weight_decay = 0.1f});
}

// Resuming: a fresh AdamW given another's m, v and step count continues exactly as
// the original would have (the bias corrections depend on t).
TEST(AdamW, ResumesBitForBitFromCopiedStateAndStepCount) {
  const AdamWOptions o{.lr = 0.01f, .weight_decay = 0.1f};
  std::vector<float> p = {0.5f, -1.25f, 2.0f}, g = {0.1f, -0.3f, 0.7f};
  AdamW first(o, 3);
  for (int i = 0; i < 3; ++i) first.step(p, g);
  std::vector<float> resumed_p = p;
  AdamW resumed(o, 3);
  resumed.m().copy_from(first.m());
  resumed.v().copy_from(first.v());
  resumed.set_steps(first.steps());
  first.step(p, g);
  resumed.step(resumed_p, g);
  EXPECT_EQ(std::memcmp(p.data(), resumed_p.data(), p.size() * sizeof(float)), 0);
  EXPECT_EQ(resumed.steps(), 4);
  // Without the step count the bias correction differs, and so does the update.
  std::vector<float> wrong_p = resumed_p;
  AdamW wrong(o, 3);
  wrong.m().copy_from(first.m());
  wrong.v().copy_from(first.v());
  std::vector<float> q = p;
  first.step(q, g);
  wrong.step(wrong_p, g);
  EXPECT_NE(std::memcmp(q.data(), wrong_p.data(), q.size() * sizeof(float)), 0);
  EXPECT_THROW(wrong.set_steps(-1), InvalidArgument);
}

TEST(Optimizers, StateIsChargedToOptimizerState) {
  MemoryTracker& tracker = memory_tracker();
  const std::int64_t before = tracker.current(MemoryCategory::kOptimizerState);
  {
    AdamW adam({}, 100);
    Sgd sgd({.momentum = 0.9f}, 50);
    EXPECT_EQ(tracker.current(MemoryCategory::kOptimizerState) - before, 100 * 8 + 50 * 4);
  }
  EXPECT_EQ(tracker.current(MemoryCategory::kOptimizerState), before);
}

TEST(Optimizers, RejectMismatchedSlices) {
  AdamW adam({}, 4);
  std::vector<float> p(3), g(4);
  EXPECT_THROW(adam.step(p, g), InvalidArgument);
  Sgd sgd({}, 3);
  EXPECT_THROW(sgd.step(p, g), InvalidArgument);
  EXPECT_THROW(AdamW({.beta1 = 1.0f}, 4), InvalidArgument);
  EXPECT_THROW(Sgd({.lr = -1.0f}, 4), InvalidArgument);
}

}  // namespace
}  // namespace dtl::nn
