// Gradient checks: every layer's backward against central finite differences
// of its forward, in f64. The scalar probed is L = sum(y * R) for a fixed
// random R, so dL/dy = R is what backward receives. Each analytic derivative a
// is compared with the numeric one n = (L(v + h) - L(v - h)) / 2h, h = 1e-5:
//
//     |a - n| <= 1e-6 * max(|a|, |n|) + 1e-8
//
// (central differences err by O(h^2) ~ 1e-10 times the third derivative, and
// by rounding ~ 1e-16 |L| / h ~ 1e-11 |L|; the bound leaves a wide margin and
// still catches any wrong term). Every parameter element and, where x is a
// float tensor, every input element is checked.
// Also: GEMM and Linear against a naive triple loop (f32), and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/error.h"
#include "harness/nn/gemm.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"

namespace dtl::nn {
namespace {

constexpr double kStep = 1e-5;

Tensor random_tensor(const Shape& shape, Rng& rng, double scale = 1.0, DType dtype = DType::kF64) {
  Tensor t = Tensor::zeros(shape, dtype, MemoryCategory::kOther);
  if (dtype == DType::kF64) {
    for (double& v : t.span<double>()) v = rng.normal(0.0, scale);
  } else {
    for (float& v : t.span<float>()) v = static_cast<float>(rng.normal(0.0, scale));
  }
  return t;
}

Tensor random_tokens(const Shape& shape, std::int64_t vocab, Rng& rng) {
  Tensor t = Tensor::zeros(shape, DType::kI32, MemoryCategory::kOther);
  for (std::int32_t& v : t.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

::testing::AssertionResult close(double analytic, double numeric) {
  if (std::fabs(analytic - numeric) <= 1e-6 * std::max(std::fabs(analytic), std::fabs(numeric)) + 1e-8) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "analytic " << analytic << " vs numeric " << numeric;
}

// Checks every element of `value` (perturbed in place) against `analytic`,
// with `loss` recomputing the scalar.
void check_elements(const std::string& what, const Tensor& value, const Tensor& analytic,
                    const std::function<double()>& loss) {
  int failures = 0;
  for (std::int64_t i = 0; i < value.numel() && failures < 5; ++i) {
    double& v = value.data<double>()[i];
    const double saved = v;
    v = saved + kStep;
    const double plus = loss();
    v = saved - kStep;
    const double minus = loss();
    v = saved;
    const double numeric = (plus - minus) / (2 * kStep);
    const auto result = close(analytic.data<double>()[i], numeric);
    if (!result) {
      ++failures;
      ADD_FAILURE() << what << "[" << i << "]: " << result.message();
    }
  }
}

// The gradient check of one layer on input x.
void check_layer(Layer& layer, const Tensor& x) {
  Rng rng(1234);
  const Tensor r = random_tensor(layer.output_shape(x.shape()), rng);
  for (Parameter* p : layer.parameters()) p->zero_grad();
  layer.forward(x);
  const Tensor& dx_ref = layer.backward(r, {});
  const Tensor dx = dx_ref.defined() ? dx_ref.clone(MemoryCategory::kOther) : Tensor();
  auto loss = [&] { return dot(layer.forward(x), r); };
  for (Parameter* p : layer.parameters()) {
    const Tensor grad = p->grad.clone(MemoryCategory::kOther);
    check_elements(p->name, p->value, grad, loss);
  }
  if (x.dtype() == DType::kF64) {
    ASSERT_TRUE(dx.defined());
    check_elements(layer.name() + ".dx", x, dx, loss);
  }
}

TEST(GradCheck, Linear) {
  Rng rng(1);
  Linear layer("fc", 4, 3, DType::kF64, rng);
  check_layer(layer, random_tensor({2, 5, 4}, rng));  // any leading dimensions
}

TEST(GradCheck, LinearWithoutBias) {
  Rng rng(2);
  Linear layer("fc", 6, 2, DType::kF64, rng, 0.5, /*bias=*/false);
  EXPECT_EQ(layer.parameters().size(), 1u);
  check_layer(layer, random_tensor({3, 6}, rng));
}

TEST(GradCheck, ReLU) {
  Rng rng(3);
  ReLU layer("relu");
  check_layer(layer, random_tensor({3, 7}, rng));
}

TEST(GradCheck, GELU) {
  Rng rng(4);
  GELU layer("gelu");
  check_layer(layer, random_tensor({3, 7}, rng, 2.0));
}

TEST(GradCheck, LayerNorm) {
  Rng rng(5);
  LayerNorm layer("ln", 6, DType::kF64);
  // Non-trivial weight and bias, so their gradients matter in dx.
  for (Parameter* p : layer.parameters())
    for (double& v : p->value.span<double>()) v += rng.normal(0.0, 0.5);
  check_layer(layer, random_tensor({2, 3, 6}, rng, 3.0));
}

TEST(GradCheck, Embedding) {
  Rng rng(6);
  Embedding layer("wte", 7, 5, DType::kF64, rng, 1.0);
  check_layer(layer, random_tokens({2, 6}, 7, rng));  // repeated tokens accumulate
}

TEST(GradCheck, PositionalEmbedding) {
  Rng rng(7);
  PositionalEmbedding layer("wpe", 6, 5, DType::kF64, rng, 1.0);
  check_layer(layer, random_tensor({2, 4, 5}, rng));  // T = 4 < context = 6
}

TEST(GradCheck, CausalSelfAttention) {
  Rng rng(8);
  // Large weights, so the attention is far from uniform and every term shows.
  CausalSelfAttention layer("attn", 8, 2, DType::kF64, rng, 0.5, 0.5);
  for (Parameter* p : layer.parameters())
    for (double& v : p->value.span<double>()) v += rng.normal(0.0, 0.1);  // non-zero biases too
  check_layer(layer, random_tensor({2, 5, 8}, rng));
}

TEST(GradCheck, ResidualMlpBlockReluAndGelu) {
  for (const Activation act : {Activation::kReLU, Activation::kGELU}) {
    Rng rng(9);
    auto block = make_mlp_block("mlp", 6, 10, act, DType::kF64, rng, 0.5, 0.5);
    check_layer(*block, random_tensor({3, 6}, rng));
  }
}

TEST(GradCheck, AttentionBlock) {
  Rng rng(10);
  auto block = make_attention_block("attn", 8, 4, DType::kF64, rng, 0.4, 0.4);
  check_layer(*block, random_tensor({2, 4, 8}, rng));
}

TEST(GradCheck, SoftmaxCrossEntropy) {
  Rng rng(11);
  Tensor logits = random_tensor({3, 4, 5}, rng, 2.0);
  const Tensor targets = random_tokens({3, 4}, 5, rng);
  SoftmaxCrossEntropy loss;
  loss.forward(logits, targets);
  const Tensor dlogits = loss.backward().clone(MemoryCategory::kOther);
  check_elements("dlogits", logits, dlogits, [&] { return loss.forward(logits, targets); });
  // The loss scale of lab 05 scales the gradient and nothing else.
  loss.forward(logits, targets);
  const Tensor& scaled = loss.backward(8.0);
  for (std::int64_t i = 0; i < dlogits.numel(); ++i) EXPECT_DOUBLE_EQ(scaled.data<double>()[i], 8.0 * dlogits.data<double>()[i]);
}

TEST(GradCheck, SoftmaxCrossEntropyClosedForm) {
  // Equal logits over V classes: loss = log V exactly, and every row is "correct" only if target 0.
  const Tensor logits = Tensor::zeros({2, 4}, DType::kF64, MemoryCategory::kOther);
  Tensor targets = Tensor::zeros({2}, DType::kI32, MemoryCategory::kOther);
  targets.span<std::int32_t>()[1] = 3;
  SoftmaxCrossEntropy loss;
  EXPECT_NEAR(loss.forward(logits, targets), std::log(4.0), 1e-15);
  EXPECT_EQ(loss.correct(), 1);
}

// Whole models: the loss is the cross-entropy, every parameter is checked. With
// `split`, the gradients come from B then W (Note [Split backward]), not backward().
void check_model(Model& model, const Tensor& x, const Tensor& targets, bool split = false) {
  SoftmaxCrossEntropy ce;
  model.zero_grad();
  ce.forward(model.forward(x), targets);
  if (split) {
    model.backward_input(ce.backward());
    model.backward_weight();
  } else {
    model.backward(ce.backward());
  }
  auto loss = [&] { return ce.forward(model.forward(x), targets); };
  for (Parameter* p : model.parameters()) {
    const Tensor grad = p->grad.clone(MemoryCategory::kOther);
    check_elements(p->name, p->value, grad, loss);
  }
}

TEST(GradCheck, WholeMlp) {
  Model model = make_mlp(4, 8, 3, 2, /*seed=*/5, DType::kF64);
  Rng rng(12);
  check_model(model, random_tensor({6, 4}, rng), random_tokens({6}, 3, rng));
}

TEST(GradCheck, WholeGpt) {
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "B then W" : "fused backward");
    Model model =
        make_gpt(/*vocab=*/11, /*context=*/6, /*channels=*/8, /*heads=*/2, /*layers=*/2, /*seed=*/5, DType::kF64);
    Rng rng(13);
    // Larger weights than the 0.02 of initialization, so every path carries signal.
    for (Parameter* p : model.parameters())
      for (double& v : p->value.span<double>()) v += rng.normal(0.0, 0.2);
    check_model(model, random_tokens({2, 5}, 11, rng), random_tokens({2, 5}, 11, rng), split);
  }
}

TEST(GradCheck, WholeMlpSplitBackward) {
  Model model = make_mlp(4, 8, 3, 2, /*seed=*/5, DType::kF64);
  Rng rng(12);
  check_model(model, random_tensor({6, 4}, rng), random_tokens({6}, 3, rng), /*split=*/true);
}

// ---------------------------------------------------------------------------
// GEMM and Linear against a naive triple loop (f32 data, double accumulation)
// ---------------------------------------------------------------------------

TEST(Gemm, AllTransposesMatchTheTripleLoop) {
  Rng rng(14);
  const std::int64_t m = 7, n = 5, k = 9;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, rng, 1.0, DType::kF32);
      const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, rng, 1.0, DType::kF32);
      const Tensor c = random_tensor({m, n}, rng, 1.0, DType::kF32);
      const Tensor c0 = c.clone(MemoryCategory::kOther);
      gemm(ta, tb, m, n, k, 0.5f, a.data<float>(), ta ? m : k, b.data<float>(), tb ? k : n, 2.0f, c.data<float>(), n);
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::int64_t p = 0; p < k; ++p) {
            const double av = a.data<float>()[ta ? p * m + i : i * k + p];
            const double bv = b.data<float>()[tb ? j * k + p : p * n + j];
            s += av * bv;
          }
          const double want = 0.5 * s + 2.0 * c0.data<float>()[i * n + j];
          EXPECT_NEAR(c.data<float>()[i * n + j], want, 1e-5 * (1 + std::fabs(want))) << ta << tb << " " << i << "," << j;
        }
      }
    }
  }
}

TEST(Linear, ForwardAndBackwardMatchTheTripleLoop) {
  Rng rng(15);
  const std::int64_t rows = 13, in = 37, out = 29;
  Linear layer("fc", in, out, DType::kF32, rng);
  for (float& v : layer.bias().value.span<float>()) v = static_cast<float>(rng.normal(0.0, 1.0));
  const Tensor x = random_tensor({rows, in}, rng, 1.0, DType::kF32);
  const Tensor dy = random_tensor({rows, out}, rng, 1.0, DType::kF32);
  const float* w = layer.weight().value.data<float>();
  const float* b = layer.bias().value.data<float>();
  const Tensor& y = layer.forward(x);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (std::int64_t p = 0; p < in; ++p) s += static_cast<double>(x.data<float>()[i * in + p]) * w[o * in + p];
      EXPECT_NEAR(y.data<float>()[i * out + o], s, 1e-5 * (1 + std::fabs(s)));
    }
  layer.weight().zero_grad();
  layer.bias().zero_grad();
  const Tensor& dx = layer.backward(dy, {});
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t p = 0; p < in; ++p) {
      double s = 0;
      for (std::int64_t o = 0; o < out; ++o) s += static_cast<double>(dy.data<float>()[i * out + o]) * w[o * in + p];
      EXPECT_NEAR(dx.data<float>()[i * in + p], s, 1e-5 * (1 + std::fabs(s)));
    }
  for (std::int64_t o = 0; o < out; ++o) {
    double db = 0;
    for (std::int64_t i = 0; i < rows; ++i) db += dy.data<float>()[i * out + o];
    EXPECT_NEAR(layer.bias().grad.data<float>()[o], db, 1e-5 * (1 + std::fabs(db)));
    for (std::int64_t p = 0; p < in; ++p) {
      double s = 0;
      for (std::int64_t i = 0; i < rows; ++i) s += static_cast<double>(dy.data<float>()[i * out + o]) * x.data<float>()[i * in + p];
      EXPECT_NEAR(layer.weight().grad.data<float>()[o * in + p], s, 1e-5 * (1 + std::fabs(s)));
    }
  }
}

TEST(Linear, BackwardAccumulatesIntoGrad) {
  Rng rng(16);
  Linear layer("fc", 3, 2, DType::kF64, rng);
  const Tensor x = random_tensor({4, 3}, rng);
  const Tensor dy = random_tensor({4, 2}, rng);
  layer.forward(x);
  layer.backward(dy, {});
  const Tensor once = layer.weight().grad.clone(MemoryCategory::kOther);
  layer.forward(x);
  layer.backward(dy, {});
  for (std::int64_t i = 0; i < once.numel(); ++i)
    EXPECT_DOUBLE_EQ(layer.weight().grad.data<double>()[i], 2 * once.data<double>()[i]);
  layer.weight().zero_grad();
  for (const double v : layer.weight().grad.span<double>()) EXPECT_EQ(v, 0.0);
}

TEST(Layers, RejectBadArguments) {
  Rng rng(17);
  Linear fc("fc", 4, 3, DType::kF32, rng);
  EXPECT_THROW(fc.forward(Tensor::zeros({2, 5}, DType::kF32, MemoryCategory::kOther)), InvalidArgument);
  EXPECT_THROW(fc.forward(Tensor::zeros({2, 4}, DType::kF64, MemoryCategory::kOther)), InvalidArgument);
  EXPECT_THROW(Linear("bad", 0, 3, DType::kF32, rng), InvalidArgument);
  EXPECT_THROW(Linear("bad", 2, 3, DType::kI32, rng), InvalidArgument);
  Embedding wte("wte", 5, 3, DType::kF32, rng);
  Tensor tokens = Tensor::zeros({1, 2}, DType::kI32, MemoryCategory::kOther);
  tokens.span<std::int32_t>()[1] = 5;
  EXPECT_THROW(wte.forward(tokens), InvalidArgument);
  EXPECT_THROW(CausalSelfAttention("attn", 6, 4, DType::kF32, rng), InvalidArgument);
  SoftmaxCrossEntropy ce;
  EXPECT_THROW(ce.backward(), InvalidArgument);
  try {
    fc.forward(Tensor::zeros({2, 5}, DType::kF32, MemoryCategory::kOther));
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();  // names the argument
  }
}

}  // namespace
}  // namespace dtl::nn
