// The GPT of lab 08's tests: nn::make_gpt() on the character corpus, trained a
// few SGD steps in one process (the oracle, inside every rank) and tensor-parallel
// (make_tensor_parallel_gpt() over your layers), optionally data parallel across
// replicas. f32, like training: |got - want| <= 2e-5 + 1e-4 |want| (the
// tensor-parallel model adds partial sums in another order).
#pragma once

#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "datasets/test_batches.h"
#include "datasets/test_data.h"
#include "harness/nn/optim.h"
#include "labs/08_tensor_parallel/tests/tp_test_util.h"

namespace lab08_test {

// The shared fixtures (harness/testing/training_fixtures.h, datasets/test_batches.h):
// this lab trains the GPT only.
using dtl::testing::Batch;
using dtl::testing::ModelKind;
using dtl::data::testing::corpus;  // datasets/test_data.h: the same rows in every lab's tests
using dtl::data::testing::kContext;
using dtl::data::testing::make_batch;

/// A GPT small enough for a test, splittable T ways: 2 heads per rank of 4 channels
/// each, the vocabulary padded up to a multiple of `vocab_multiple` (the padded tokens
/// never occur; See Note [Vocabulary parallel]).
struct GptShape {
  std::int64_t vocab = 0, channels = 0, heads = 0;
  int layers = 2;
};
inline GptShape gpt_shape(int T, std::int64_t vocab_multiple) {
  const auto v = static_cast<std::int64_t>(corpus().vocab.size());
  GptShape s;
  s.vocab = (v + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
  s.heads = 2 * T;
  s.channels = 4 * s.heads;
  return s;
}
inline nn::Model make_model(const GptShape& s, std::uint64_t seed) {
  return nn::make_gpt(s.vocab, kContext, s.channels, s.heads, s.layers, seed);
}

// SGD with momentum: its step is proportional to the gradient, so a gradient off
// by a factor (a sum where an average belongs, a missing term) shows.
inline const nn::SgdOptions kSgd{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.0f};

struct Trained {
  nn::Model model;
  std::vector<double> losses;
};

/// The oracle: one process, the whole model, the whole batch.
inline Trained train_oracle(const GptShape& s, std::uint64_t seed, int steps, std::int64_t global) {
  Trained t{make_model(s, seed), {}};
  const std::vector<nn::Parameter*> params = t.model.parameters();
  const nn::Tensor values = nn::flatten_values(params);
  const nn::Tensor grads = nn::flatten_grads(params);
  nn::Sgd sgd(kSgd, values.numel());
  nn::SoftmaxCrossEntropy ce;
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(ModelKind::kGpt, step, global, 0, global);
    t.model.zero_grad();
    t.losses.push_back(ce.forward(t.model.forward(b.x), b.y));
    t.model.backward(ce.backward());
    sgd.step(values.span<float>(), grads.span<float>());
  }
  return t;
}

/// Tensor-parallel over `tp`; with `data`, replica `replica` of `replicas` trains on its
/// 1/D of the rows and the gradients are averaged over `data` before each step.
/// The loss returned is the replica's own (the mean over its rows).
inline Trained train_parallel(dtl::Communicator& tp, const GptShape& s, std::uint64_t seed, int steps,
                              std::int64_t global, dtl::Communicator* data = nullptr, int replica = 0,
                              int replicas = 1) {
  nn::Model model(nn::DType::kF32);
  {
    nn::Model full = make_model(s, seed);
    model = lab08::make_tensor_parallel_gpt(full, tp);
  }  // the full model is gone: each rank keeps its slices only
  Trained t{std::move(model), {}};
  const nn::Tensor values = t.model.flatten_values();
  const nn::Tensor grads = t.model.flatten_grads();
  nn::Sgd sgd(kSgd, values.numel());
  lab08::VocabParallelCrossEntropy ce(tp, s.vocab);
  const std::int64_t rows = global / replicas;
  for (int step = 0; step < steps; ++step) {
    const Batch b = make_batch(ModelKind::kGpt, step, global, replica * rows, (replica + 1) * rows);
    t.model.zero_grad();
    t.losses.push_back(ce.forward(t.model.forward(b.x), b.y));
    t.model.backward(ce.backward());
    if (data != nullptr) lab08::allreduce_data_parallel_gradients(*data, t.model);
    sgd.step(values.span<float>(), grads.span<float>());
  }
  return t;
}

inline constexpr double kF32Tol = 1e-4;  // with close_to(): 1e-4 (1 + |want|)

/// The parameters used on split tokens with sequence parallelism: every LayerNorm and
/// row-parallel bias (the test's own list, by name).
inline std::vector<nn::Parameter*> sequence_parallel_replicated(const std::vector<nn::Parameter*>& params) {
  std::vector<nn::Parameter*> out;
  for (nn::Parameter* p : params) {
    const std::string& n = p->name;
    if (n.find(".ln.") != std::string::npos || n.find(".proj.bias") != std::string::npos ||
        n.rfind("lnf.", 0) == 0) {
      out.push_back(p);
    }
  }
  return out;
}

/// Step `step`'s batch of `global` windows of `S` tokens of the corpus.
inline Batch sequence_batch(int step, std::int64_t global, std::int64_t S) {
  Batch b;
  b.x = nn::Tensor::zeros({global, S}, nn::DType::kI32, nn::MemoryCategory::kActivations);
  b.y = nn::Tensor::zeros({global, S}, nn::DType::kI32, nn::MemoryCategory::kActivations);
  dtl::data::copy_windows(corpus(), step * global, S, b.x.span<std::int32_t>(), b.y.span<std::int32_t>());
  return b;
}

/// A GPT with context S trained `steps` SGD steps on sequences of S tokens: in one
/// process (tp == nullptr, the oracle) or tensor- and sequence-parallel over `tp`
/// (make_tensor_parallel_gpt(..., true)), the replicated parameters' partial gradients
/// summed with allreduce_sequence_parallel_gradients() before each step.
inline Trained train_sequence_parallel(const GptShape& s, dtl::Communicator* tp, std::int64_t S, int steps,
                                       std::int64_t global) {
  nn::Model full = nn::make_gpt(s.vocab, S, s.channels, s.heads, s.layers, 21);
  Trained t{tp == nullptr ? std::move(full) : lab08::make_tensor_parallel_gpt(full, *tp, true), {}};
  const nn::Tensor values_flat = t.model.flatten_values();
  const nn::Tensor grads_flat = t.model.flatten_grads();
  nn::Sgd sgd(kSgd, values_flat.numel());
  nn::SoftmaxCrossEntropy ce;
  std::unique_ptr<lab08::VocabParallelCrossEntropy> vce;
  if (tp != nullptr) vce = std::make_unique<lab08::VocabParallelCrossEntropy>(*tp, s.vocab);
  const std::vector<nn::Parameter*> shared = sequence_parallel_replicated(t.model.parameters());
  for (int step = 0; step < steps; ++step) {
    const Batch b = sequence_batch(step, global, S);
    t.model.zero_grad();
    if (tp == nullptr) {
      t.losses.push_back(ce.forward(t.model.forward(b.x), b.y));
      t.model.backward(ce.backward());
    } else {
      t.losses.push_back(vce->forward(t.model.forward(b.x), b.y));
      t.model.backward(vce->backward());
      lab08::allreduce_sequence_parallel_gradients(*tp, shared);
    }
    sgd.step(values_flat.span<float>(), grads_flat.span<float>());
  }
  return t;
}


}  // namespace lab08_test
