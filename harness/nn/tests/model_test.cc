// Model: hook order, gradient-ready order and finality, flat buffers (no
// copies), stages and slices, activation slots. Oracles: the parameter list
// reversed, the final gradients, an unflattened twin model, the full model.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "harness/error.h"
#include "harness/nn/model.h"

namespace dtl::nn {
namespace {

Tensor random_input(const Shape& shape, std::uint64_t seed, DType dtype = DType::kF32) {
  Rng rng(seed);
  Tensor t = Tensor::zeros(shape, dtype, MemoryCategory::kOther);
  if (dtype == DType::kF32) {
    for (float& v : t.span<float>()) v = static_cast<float>(rng.normal(0.0, 1.0));
  } else {
    for (double& v : t.span<double>()) v = rng.normal(0.0, 1.0);
  }
  return t;
}

Tensor random_tokens(const Shape& shape, std::int64_t vocab, std::uint64_t seed) {
  Rng rng(seed);
  Tensor t = Tensor::zeros(shape, DType::kI32, MemoryCategory::kOther);
  for (std::int32_t& v : t.span<std::int32_t>()) v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), static_cast<std::size_t>(a.bytes())) == 0;
}

// One step of forward + loss + backward; returns the loss.
double train_step(Model& model, const Tensor& x, const Tensor& targets) {
  SoftmaxCrossEntropy ce;
  const double loss = ce.forward(model.forward(x), targets);
  model.backward(ce.backward());
  return loss;
}

TEST(ModelHooks, UnitHooksRunInOrderAndGradReadyInReverseParameterOrder) {
  Model model = make_gpt(13, 8, 16, 2, 2, 1);
  std::vector<std::string> events;
  std::vector<Parameter*> ready;
  std::map<Parameter*, Tensor> grad_at_ready;
  model.hooks().pre_forward = [&](int u) { events.push_back("pre_forward " + std::to_string(u)); };
  model.hooks().post_forward = [&](int u) { events.push_back("post_forward " + std::to_string(u)); };
  model.hooks().pre_backward = [&](int u) { events.push_back("pre_backward " + std::to_string(u)); };
  model.hooks().post_backward = [&](int u) { events.push_back("post_backward " + std::to_string(u)); };
  model.hooks().grad_ready = [&](Parameter& p) {
    events.push_back("grad_ready " + p.name);
    ready.push_back(&p);
    grad_at_ready[&p] = p.grad.clone(MemoryCategory::kOther);
  };
  train_step(model, random_tokens({2, 8}, 13, 1), random_tokens({2, 8}, 13, 2));

  // Expected: forward hooks unit by unit; backward hooks in reverse, each
  // unit's parameters announced between its pre and post backward.
  std::vector<std::string> expected;
  for (int u = 0; u < model.unit_count(); ++u) {
    expected.push_back("pre_forward " + std::to_string(u));
    expected.push_back("post_forward " + std::to_string(u));
  }
  for (int u = model.unit_count() - 1; u >= 0; --u) {
    expected.push_back("pre_backward " + std::to_string(u));
    const auto params = model.unit(u).parameters();
    for (auto it = params.rbegin(); it != params.rend(); ++it) expected.push_back("grad_ready " + (*it)->name);
    expected.push_back("post_backward " + std::to_string(u));
  }
  EXPECT_EQ(events, expected);

  // Every parameter exactly once, in reverse order, and its gradient was already final.
  const auto params = model.parameters();
  ASSERT_EQ(ready.size(), params.size());
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_EQ(ready[i], params[params.size() - 1 - i]);
  for (Parameter* p : params) EXPECT_TRUE(same_bits(grad_at_ready[p], p->grad)) << p->name << " changed after grad_ready";
}

TEST(ModelHooks, NamesAreUniqueAndCountsAddUp) {
  Model gpt = make_gpt(13, 8, 16, 2, 3, 1);
  std::map<std::string, int> names;
  std::int64_t total = 0;
  for (const Parameter* p : gpt.parameters()) {
    ++names[p->name];
    total += p->value.numel();
  }
  for (const auto& [name, count] : names) EXPECT_EQ(count, 1) << name;
  EXPECT_EQ(total, gpt.parameter_count());
  // Closed form: wte V*C + wpe T*C; per block 2 LayerNorms (4C), qkv (3C*C + 3C), proj (C*C + C),
  // fc (4C*C + 4C), proj (C*4C + C); final LayerNorm 2C; head V*C.
  const std::int64_t v = 13, t = 8, c = 16, layers = 3;
  const std::int64_t block = 4 * c + 3 * c * c + 3 * c + c * c + c + 4 * c * c + 4 * c + 4 * c * c + c;
  EXPECT_EQ(gpt.parameter_count(), v * c + t * c + layers * block + 2 * c + v * c);
  EXPECT_EQ(gpt.unit_count(), 2 + layers);
  EXPECT_EQ(gpt.unit(0).name, "embed");
  EXPECT_EQ(gpt.unit(4).name, "head");
  Model mlp = make_mlp(5, 7, 3, 2, 1);
  EXPECT_EQ(mlp.parameter_count(), (5 * 7 + 7) + (7 * 7 + 7) + (7 * 3 + 3));
}

TEST(FlatBuffers, ParametersBecomeViewsWithoutCopies) {
  Model model = make_mlp(5, 7, 3, 2, 42);
  std::vector<std::vector<float>> before;
  for (const Parameter* p : model.parameters()) before.emplace_back(p->value.span<float>().begin(), p->value.span<float>().end());
  MemoryTracker& tracker = memory_tracker();
  const std::int64_t param_bytes = tracker.current(MemoryCategory::kParameters);
  const std::int64_t count = model.parameter_count();

  const Tensor& flat = model.flatten_values(/*pad_multiple=*/4);
  const std::int64_t padded = (count + 3) / 4 * 4;
  EXPECT_EQ(flat.numel(), padded);
  // The old storages were freed: parameter memory is now exactly the flat buffer.
  EXPECT_EQ(tracker.current(MemoryCategory::kParameters) - param_bytes, (padded - count) * 4);

  std::int64_t offset = 0;
  const auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    Parameter* p = params[i];
    EXPECT_EQ(p->value.data<float>(), flat.data<float>() + offset) << p->name;  // pointer identity
    EXPECT_EQ(p->value.offset(), offset);
    EXPECT_TRUE(std::equal(before[i].begin(), before[i].end(), p->value.span<float>().begin())) << p->name;
    offset += p->value.numel();
  }
  for (std::int64_t i = count; i < padded; ++i) EXPECT_EQ(flat.data<float>()[i], 0.0f);  // padding is zero
  // Writes go both ways.
  flat.data<float>()[0] = 123.0f;
  EXPECT_EQ(params[0]->value.data<float>()[0], 123.0f);
  params.back()->value.data<float>()[0] = -7.0f;
  EXPECT_EQ(flat.data<float>()[count - params.back()->value.numel()], -7.0f);

  const Tensor& flat_grads = model.flatten_grads();
  offset = 0;
  for (Parameter* p : params) {
    EXPECT_EQ(p->grad.data<float>(), flat_grads.data<float>() + offset);
    EXPECT_EQ(p->grad.category(), MemoryCategory::kGradients);
    offset += p->grad.numel();
  }
}

TEST(FlatBuffers, TrainingIsBitIdenticalWithAndWithoutFlattening) {
  Model plain = make_mlp(6, 16, 4, 3, 9);
  Model flat = make_mlp(6, 16, 4, 3, 9);
  flat.flatten_values();
  flat.flatten_grads();
  const Tensor x = random_input({8, 6}, 3);
  const Tensor y = random_tokens({8}, 4, 4);
  for (int step = 0; step < 3; ++step) {
    plain.zero_grad();
    flat.zero_grad();
    EXPECT_EQ(train_step(plain, x, y), train_step(flat, x, y));
    const auto a = plain.parameters(), b = flat.parameters();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(same_bits(a[i]->grad, b[i]->grad)) << a[i]->name;
      for (std::int64_t j = 0; j < a[i]->value.numel(); ++j) {  // a plain SGD step on both
        a[i]->value.data<float>()[j] -= 0.1f * a[i]->grad.data<float>()[j];
        b[i]->value.data<float>()[j] -= 0.1f * b[i]->grad.data<float>()[j];
      }
    }
  }
}

TEST(Stages, ActivationShapesAndBalancedSplit) {
  const std::int64_t batch = 2, seq = 8, vocab = 13, c = 16;
  Model gpt = make_gpt(vocab, seq, c, 2, 4, 1);
  const auto shapes = gpt.activation_shapes({batch, seq});
  ASSERT_EQ(shapes.size(), 7u);
  EXPECT_EQ(shapes[0], (Shape{batch, seq}));
  for (int u = 1; u <= 5; ++u) EXPECT_EQ(shapes[static_cast<std::size_t>(u)], (Shape{batch, seq, c}));
  EXPECT_EQ(shapes[6], (Shape{batch, seq, vocab}));

  // Four equal blocks and no embedding/head cost: the split is exactly even.
  const std::vector<double> costs{0, 1, 1, 1, 1, 0};
  const auto two = gpt.split_stages(2, {batch, seq}, costs);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].begin, 0);
  EXPECT_EQ(two[0].end, 3);  // embed, block0, block1 | block2, block3, head
  EXPECT_EQ(two[1].begin, 3);
  EXPECT_EQ(two[1].end, 6);
  EXPECT_EQ(two[0].input_shape, (Shape{batch, seq}));
  EXPECT_EQ(two[0].output_shape, (Shape{batch, seq, c}));
  EXPECT_EQ(two[1].input_shape, (Shape{batch, seq, c}));
  EXPECT_EQ(two[1].output_shape, (Shape{batch, seq, vocab}));
  EXPECT_EQ(two[0].parameter_count + two[1].parameter_count, gpt.parameter_count());

  // By parameter count (the default), every unit in some stage, contiguous, non-empty.
  for (int k = 1; k <= gpt.unit_count(); ++k) {
    const auto stages = gpt.split_stages(k, {batch, seq});
    ASSERT_EQ(stages.size(), static_cast<std::size_t>(k));
    EXPECT_EQ(stages.front().begin, 0);
    EXPECT_EQ(stages.back().end, gpt.unit_count());
    for (std::size_t s = 0; s < stages.size(); ++s) {
      EXPECT_LT(stages[s].begin, stages[s].end);
      if (s > 0) {
        EXPECT_EQ(stages[s].begin, stages[s - 1].end);
      }
    }
  }
  // Unequal costs: the optimum of {5, 1, 1, 1, 1, 5} in 3 stages has max 5.
  const std::vector<double> lumpy{5, 1, 1, 1, 1, 5};
  const auto three = gpt.split_stages(3, {batch, seq}, lumpy);
  EXPECT_EQ(three[0].end, 1);
  EXPECT_EQ(three[2].begin, 5);
  EXPECT_THROW(gpt.split_stages(0, {batch, seq}), InvalidArgument);
  EXPECT_THROW(gpt.split_stages(7, {batch, seq}), InvalidArgument);
}

TEST(Stages, SlicesChainedGiveTheFullModel) {
  const Tensor tokens = random_tokens({2, 6}, 11, 5);
  const Tensor targets = random_tokens({2, 6}, 11, 6);
  Model full = make_gpt(11, 6, 8, 2, 2, 77);
  const double loss_full = train_step(full, tokens, targets);

  Model whole = make_gpt(11, 6, 8, 2, 2, 77);
  const auto stages = whole.split_stages(2, {2, 6});
  Model first = std::move(whole).slice(0, stages[0].end);
  Model whole2 = make_gpt(11, 6, 8, 2, 2, 77);
  Model second = std::move(whole2).slice(stages[1].begin, stages[1].end);
  const Tensor& mid = first.forward(tokens);
  EXPECT_EQ(mid.shape(), stages[0].output_shape);
  SoftmaxCrossEntropy ce;
  const double loss_staged = ce.forward(second.forward(mid), targets);
  EXPECT_EQ(loss_staged, loss_full);  // same arithmetic, same bits
  const Tensor& dmid = second.backward(ce.backward());
  first.backward(dmid);
  const auto all = full.parameters();
  std::vector<Parameter*> staged = first.parameters();
  for (Parameter* p : second.parameters()) staged.push_back(p);
  ASSERT_EQ(all.size(), staged.size());
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(same_bits(all[i]->grad, staged[i]->grad)) << all[i]->name;
}

TEST(Slots, TwoMicroBatchesInFlightGiveTheSumOfTheirGradients) {
  // f64, so that the two accumulation orders agree to rounding.
  Model model = make_gpt(11, 6, 8, 2, 1, 3, DType::kF64);
  const Tensor x0 = random_tokens({1, 6}, 11, 1), y0 = random_tokens({1, 6}, 11, 2);
  const Tensor x1 = random_tokens({1, 6}, 11, 3), y1 = random_tokens({1, 6}, 11, 4);
  // Reference: one micro-batch after the other.
  for (const auto& [x, y] : {std::pair{x0, y0}, std::pair{x1, y1}}) train_step(model, x, y);
  std::vector<Tensor> reference;
  for (Parameter* p : model.parameters()) reference.push_back(p->grad.clone(MemoryCategory::kOther));
  model.zero_grad();
  // Pipeline-style: forward both (slots 0 and 1), then backward in reverse order.
  SoftmaxCrossEntropy ce0, ce1;
  model.set_slot(0);
  ce0.forward(model.forward(x0), y0);
  model.set_slot(1);
  ce1.forward(model.forward(x1), y1);
  model.backward(ce1.backward());
  model.set_slot(0);
  model.backward(ce0.backward());
  model.release_slot(1);
  const auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    for (std::int64_t j = 0; j < params[i]->grad.numel(); ++j)
      EXPECT_NEAR(params[i]->grad.data<double>()[j], reference[i].data<double>()[j], 1e-12) << params[i]->name;
}

TEST(Model, ActivationsAreChargedAndReused) {
  MemoryTracker& tracker = memory_tracker();
  Model model = make_mlp(8, 32, 4, 2, 1);
  const Tensor x = random_input({16, 8}, 1);
  const Tensor y = random_tokens({16}, 4, 2);
  const std::int64_t before = tracker.current(MemoryCategory::kActivations);
  train_step(model, x, y);
  const std::int64_t after_one = tracker.current(MemoryCategory::kActivations);
  EXPECT_GT(after_one, before);
  train_step(model, x, y);
  EXPECT_EQ(tracker.current(MemoryCategory::kActivations), after_one);  // steady state: nothing new
  model.release_slot(0);
  // What is left is the loss object's, freed with it at the end of train_step.
  EXPECT_EQ(tracker.current(MemoryCategory::kActivations), before);
}

}  // namespace
}  // namespace dtl::nn
