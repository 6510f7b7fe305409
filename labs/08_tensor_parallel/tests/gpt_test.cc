// Lab 08: a GPT made tensor-parallel from your layers (make_tensor_parallel_gpt()),
// T = the test's rank count, against one process: the losses and every slice of
// every parameter after three SGD steps; the bytes of parameters and gradients each
// rank holds, exactly full/T plus what is replicated; the collectives of one step
// against the closed form.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "labs/08_tensor_parallel/tests/gpt_test_util.h"

namespace lab08_test {
namespace {

constexpr int kSteps = 3;
constexpr std::int64_t kBatch = 4;

TEST(Gpt, TensorParallelEqualsOneProcess) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const GptShape shape = gpt_shape(T, 12);
  const Trained oracle = train_oracle(shape, 5, kSteps, kBatch);
  const Trained mine = train_parallel(tp.mpi, shape, 5, kSteps, kBatch);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(mine.losses[static_cast<std::size_t>(step)], oracle.losses[static_cast<std::size_t>(step)],
                1e-5 * (1.0 + oracle.losses[static_cast<std::size_t>(step)]))
        << "rank " << r << ": the loss of step " << step << " (T = " << T << ")";
  }
  EXPECT_TRUE(params_match(oracle.model.parameters(), mine.model.parameters(), false, T, r,
                           "the GPT after " + std::to_string(kSteps) + " steps at T = " + std::to_string(T), kF32Tol));
}

// Bytes of the parameters that every rank holds whole (the test's own list, by name).
std::int64_t replicated_bytes(const nn::Model& full) {
  std::int64_t bytes = 0;
  for (const nn::Parameter* p : full.parameters()) {
    const std::string& n = p->name;
    const bool split = n.find(".qkv.") != std::string::npos || n.find(".fc.") != std::string::npos ||
                       n.find(".proj.weight") != std::string::npos || n == "wte.weight" || n == "lm_head.weight";
    if (!split) bytes += p->value.bytes();
  }
  return bytes;
}

TEST(Gpt, ParameterMemoryIsFullOverTPlusReplicated) {
  Group tp(comm());
  const int T = tp.size();
  const GptShape shape = gpt_shape(T, 12);
  auto& tracker = nn::memory_tracker();
  const std::int64_t p0 = tracker.current(nn::MemoryCategory::kParameters);
  const std::int64_t g0 = tracker.current(nn::MemoryCategory::kGradients);
  std::int64_t full_bytes = 0, replicated = 0;
  nn::Model model(nn::DType::kF32);
  {
    nn::Model full = make_model(shape, 1);
    full_bytes = full.parameter_count() * 4;
    replicated = replicated_bytes(full);
    model = lab08::make_tensor_parallel_gpt(full, tp.mpi);
  }
  const std::int64_t want = (full_bytes - replicated) / T + replicated;
  EXPECT_EQ(tracker.current(nn::MemoryCategory::kParameters) - p0, want)
      << "parameters per rank: (full " << full_bytes << " - replicated " << replicated << ") / " << T
      << " + replicated (LayerNorms, row-parallel biases, positions)";
  EXPECT_EQ(tracker.current(nn::MemoryCategory::kGradients) - g0, want) << "gradients per rank, as the parameters";
  // A training step allocates no parameter memory: the peak stays the same.
  tracker.reset_peak();
  lab08::VocabParallelCrossEntropy ce(tp.mpi, shape.vocab);
  const Batch b = make_batch(ModelKind::kGpt, 0, kBatch, 0, kBatch);
  model.zero_grad();
  ce.forward(model.forward(b.x), b.y);
  model.backward(ce.backward());
  EXPECT_EQ(tracker.peak(nn::MemoryCategory::kParameters) - p0, want) << "peak parameters during a step";
}

TEST(Gpt, CommunicationPerStepMatchesTheClosedForm) {
  Group tp(comm());
  const int T = tp.size();
  const GptShape shape = gpt_shape(T, 12);
  nn::Model full = make_model(shape, 1);
  nn::Model model = lab08::make_tensor_parallel_gpt(full, tp.record);
  lab08::VocabParallelCrossEntropy ce(tp.record, shape.vocab);
  const Batch b = make_batch(ModelKind::kGpt, 0, kBatch, 0, kBatch);
  const auto N = static_cast<std::size_t>(kBatch * kContext), C = static_cast<std::size_t>(shape.channels);
  const auto L = static_cast<std::size_t>(shape.layers);
  tp.record.clear();
  ce.forward(model.forward(b.x), b.y);
  // forward: the embedding, then per block attention and MLP: allreduces of N C; the loss: N maxima, 2N sums.
  std::vector<CollectiveKind> kinds(1 + 2 * L, CollectiveKind::kAllreduce);
  std::vector<std::size_t> counts(1 + 2 * L, N * C);
  kinds.insert(kinds.end(), {CollectiveKind::kAllgather, CollectiveKind::kAllreduce});
  counts.insert(counts.end(), {N, 2 * N});
  EXPECT_TRUE(ops_are(tp.record, kinds, counts, "the GPT's forward and loss"));
  tp.record.clear();
  model.backward(ce.backward());
  // backward: the head's column-parallel dx, then per block MLP and attention; none for the embedding.
  EXPECT_TRUE(ops_are(tp.record, std::vector<CollectiveKind>(1 + 2 * L, CollectiveKind::kAllreduce),
                      std::vector<std::size_t>(1 + 2 * L, N * C), "the GPT's backward"));
  EXPECT_EQ(tp.record.bytes(CollectiveKind::kAllreduce), (1 + 2 * L) * N * C * 4) << "f32 activations";
}

}  // namespace
}  // namespace lab08_test
