// The split backward (Note [Split backward] in layer_interface.h) against the
// fused one: two copies of the same model (same seed) run the same forwards of
// two micro-batches in two slots; one runs backward() per slot, the other B of
// both slots and then W of both, as a zero-bubble pipeline stage does. The dx
// of each slot and every parameter's gradient must be equal bit for bit (the
// same kernels on the same inputs), the Linears' gradients must still be zero
// after the Bs, and grad_ready must fire in W in the fused order. The split's
// gradients against finite differences are in layers_test.cc
// (GradCheck.WholeMlpSplitBackward, GradCheck.WholeGpt).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness/error.h"
#include "harness/nn/layers.h"
#include "harness/nn/model.h"

namespace dtl::nn {
namespace {

enum class Kind { kMlp, kGpt };

Model make(Kind kind) {
  return kind == Kind::kMlp ? make_mlp(5, 12, 4, 3, /*seed=*/21)
                            : make_gpt(/*vocab=*/13, /*context=*/6, /*channels=*/8, /*heads=*/2, /*layers=*/2, 21);
}

// Micro-batch `i`'s input: MLP (3, 5) floats; GPT (2, 6) tokens.
Tensor input(Kind kind, int i) {
  Rng rng(100 + static_cast<std::uint64_t>(i));
  if (kind == Kind::kMlp) {
    Tensor x = Tensor::zeros({3, 5}, DType::kF32, MemoryCategory::kOther);
    for (float& v : x.span<float>()) v = static_cast<float>(rng.normal(0.0, 1.0));
    return x;
  }
  Tensor x = Tensor::zeros({2, 6}, DType::kI32, MemoryCategory::kOther);
  for (std::int32_t& v : x.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(13));
  return x;
}

Tensor output_grad(const Tensor& y, int i) {
  Rng rng(200 + static_cast<std::uint64_t>(i));
  Tensor dy = Tensor::zeros(y.shape(), DType::kF32, MemoryCategory::kOther);
  for (float& v : dy.span<float>()) v = static_cast<float>(rng.normal(0.0, 1.0));
  return dy;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || (a.shape() == b.shape() &&
                                                         std::memcmp(a.raw(), b.raw(), a.bytes()) == 0));
}

struct Result {
  std::vector<Tensor> dx;          // per slot
  std::vector<Tensor> grads;       // per parameter
  std::vector<std::string> ready;  // grad_ready's order
};

constexpr int kSlots = 2;

Result run(Kind kind, bool split) {
  Model model = make(kind);
  Result r;
  model.hooks().grad_ready = [&](Parameter& p) { r.ready.push_back(p.name); };
  model.zero_grad();
  std::vector<Tensor> dy;
  for (int i = 0; i < kSlots; ++i) {
    model.set_slot(i);
    dy.push_back(output_grad(model.forward(input(kind, i)), i));
  }
  for (int i = 0; i < kSlots; ++i) {
    model.set_slot(i);
    const Tensor& dx = split ? model.backward_input(dy[static_cast<std::size_t>(i)])
                             : model.backward(dy[static_cast<std::size_t>(i)]);
    r.dx.push_back(dx.defined() ? dx.clone(MemoryCategory::kOther) : Tensor());
  }
  if (split) {
    // B added no Linear's gradient (every MLP parameter is a Linear's): that work is W's.
    if (kind == Kind::kMlp) {
      for (const Parameter* p : model.parameters()) {
        for (const float g : p->grad.span<float>()) EXPECT_EQ(g, 0.0f) << p->name << " has a gradient before W";
      }
    }
    EXPECT_TRUE(r.ready.empty()) << "grad_ready fired in B for " << r.ready.front();
    for (int i = 0; i < kSlots; ++i) {
      model.set_slot(i);
      model.backward_weight();
    }
  }
  for (const Parameter* p : model.parameters()) r.grads.push_back(p->grad.clone(MemoryCategory::kOther));
  return r;
}

class SplitBackward : public ::testing::TestWithParam<Kind> {};

TEST_P(SplitBackward, BThenWEqualsTheFusedBackwardBitForBit) {
  const Result fused = run(GetParam(), false);
  const Result split = run(GetParam(), true);
  ASSERT_EQ(split.dx.size(), fused.dx.size());
  for (std::size_t i = 0; i < fused.dx.size(); ++i) EXPECT_TRUE(bitwise_equal(split.dx[i], fused.dx[i])) << "dx of slot " << i;
  const std::vector<Parameter*> names = make(GetParam()).parameters();
  ASSERT_EQ(split.grads.size(), fused.grads.size());
  for (std::size_t k = 0; k < fused.grads.size(); ++k) {
    EXPECT_TRUE(bitwise_equal(split.grads[k], fused.grads[k])) << names[k]->name;
  }
  EXPECT_EQ(split.ready, fused.ready) << "grad_ready's order in W";
}

INSTANTIATE_TEST_SUITE_P(Models, SplitBackward, ::testing::Values(Kind::kMlp, Kind::kGpt),
                         [](const auto& param_info) { return param_info.param == Kind::kMlp ? "Mlp" : "Gpt"; });

TEST(SplitBackwardErrors, WBeforeBAndBTwiceAreRefused) {
  Model model = make(Kind::kMlp);
  const Tensor& y = model.forward(input(Kind::kMlp, 0));
  const Tensor dy = output_grad(y, 0);
  try {
    model.backward_weight();
    ADD_FAILURE() << "W before B was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("backward_weight"), std::string::npos) << e.what();
  }
  model.backward_input(dy);
  EXPECT_THROW(model.backward_input(dy), InvalidArgument);  // this slot's W is still due
  model.backward_weight();
  EXPECT_THROW(model.backward_weight(), InvalidArgument);   // and it ran once
}

TEST(SplitBackwardErrors, UnitHooksAreRefused) {
  Model model = make(Kind::kMlp);
  const Tensor dy = output_grad(model.forward(input(Kind::kMlp, 0)), 0);
  model.hooks().pre_backward = [](int) {};
  try {
    model.backward_input(dy);
    ADD_FAILURE() << "a split backward ran with a pre_backward hook";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("hooks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtl::nn
