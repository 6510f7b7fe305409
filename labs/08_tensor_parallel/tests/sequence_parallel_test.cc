// Lab 08, task D: sequence parallelism along the sequence. Each rank holds tokens
// [r S/T, (r+1) S/T) of every sequence in the LayerNorm and residual regions (the
// test's own slicing, tokens_of()); the MLP and attention blocks on those tokens
// against the unsplit blocks (f64); a GPT whose LayerNorm regions are split, trained
// three steps against one process (f32, losses and every parameter); the activation
// bytes of every layer against the closed form, exactly (the memory tracker), and
// the split regions' bytes at 1/T of plain tensor parallelism's; every allreduce
// replaced by an all-gather and a reduce-scatter of the same bytes; the replicated
// parameters' partial gradients summed over the group, in one collective.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "labs/08_tensor_parallel/tests/gpt_test_util.h"

namespace lab08_test {
namespace {

std::unique_ptr<nn::Layer> full_block(bool attention, std::int64_t C, int heads, std::uint64_t seed) {
  dtl::Rng rng(seed);
  std::unique_ptr<nn::Layer> full =
      attention ? nn::make_attention_block("blk", C, heads, nn::DType::kF64, rng, 0.3, 0.3)
                : nn::make_mlp_block("blk", C, 4 * C, nn::Activation::kGELU, nn::DType::kF64, rng, 0.3, 0.3);
  randomize(*full, seed + 100);
  return full;
}

void check_sp_block(bool attention, const nn::Shape& shape, std::uint64_t seed) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  std::unique_ptr<nn::Layer> full = full_block(attention, shape.back(), T, seed);
  std::unique_ptr<nn::Layer> parallel = attention ? lab08::make_parallel_attention_block(*full, tp.record, true)
                                                  : lab08::make_parallel_mlp_block(*full, tp.record, true);
  const std::string what = std::string(attention ? "sequence-parallel attention" : "sequence-parallel MLP") +
                           " block, x " + nn::to_string(shape) + ", this rank's tokens of every sequence";
  const nn::Tensor x = random_tensor(shape, seed + 1);
  const nn::Tensor dy = random_tensor(shape, seed + 2);
  const nn::Tensor y_full = full->forward(x).clone(nn::MemoryCategory::kOther);
  const nn::Tensor dx_full = full->backward(dy, {}).clone(nn::MemoryCategory::kOther);

  const nn::Tensor x_mine = tokens_of(x, T, r);
  const auto n = static_cast<std::size_t>(x_mine.numel());  // this rank's tokens x C
  tp.record.clear();
  const nn::Tensor& y = parallel->forward(x_mine);
  EXPECT_TRUE(close_to(values(tokens_of(y_full, T, r)), values(y), "y (" + what + ")", kTol, y.shape()));
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllgather, CollectiveKind::kReduceScatter}, {n, n},
                      "the forward of the " + what + " (all-gather entering, reduce-scatter leaving)"));
  EXPECT_EQ(tp.record.bytes(CollectiveKind::kAllgather) + tp.record.bytes(CollectiveKind::kReduceScatter),
            2 * static_cast<std::size_t>(x.numel()) * 8)
      << "the same bytes as one allreduce of N x C (a reduce-scatter and an all-gather)";
  tp.record.clear();
  const nn::Tensor& dx = parallel->backward(tokens_of(dy, T, r), {});
  EXPECT_TRUE(close_to(values(tokens_of(dx_full, T, r)), values(dx), "dx (" + what + ")", kTol, dx.shape()));
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllgather, CollectiveKind::kReduceScatter}, {n, n},
                      "the backward of the " + what + " (all-gather of dy, reduce-scatter of dx)"));
  const std::vector<nn::Parameter*> shared = sequence_parallel_replicated(parallel->parameters());
  lab08::allreduce_sequence_parallel_gradients(tp.mpi, shared);
  EXPECT_TRUE(grads_match(*full, *parallel, T, r, what + ", after allreduce_sequence_parallel_gradients()"));
}

TEST(SequenceParallel, MlpBlockEqualsTheUnsplitBlock) {
  const int T = comm().size();
  check_sp_block(false, {T, 3}, 1);          // one sequence, one token per rank
  check_sp_block(false, {3 * T, 2 * T}, 2);  // one sequence (S, C)
  check_sp_block(false, {3, 2 * T, 6}, 3);   // (B, S, C): B pieces of S/T tokens per rank
  check_sp_block(false, {2, 2, T, 3}, 6);    // (B1, B2, S, C): every dimension before S is a batch
}

// The MLP block works token by token, so it cannot tell rank order from sequence order
// (a gather and a scatter that both skip the reorder undo each other); attention and the
// GPT can: a token attends to the earlier tokens of its own sequence.
TEST(SequenceParallel, AttentionBlockEqualsTheUnsplitBlock) {
  const int T = comm().size();
  check_sp_block(true, {2, T, 2 * T}, 4);      // one token of each sequence per rank
  check_sp_block(true, {3, 2 * T, 3 * T}, 5);  // attention needs every earlier token of its sequence
}

TEST(SequenceParallel, ReplicatedGradientsAreSummedNotAveraged) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  nn::LayerNorm ln("ln", 3, nn::DType::kF64);
  for (nn::Parameter* p : ln.parameters()) p->grad.copy_from(tensor_of({3}, {r + 1.0, 2.0 * r, -1.0}));
  tp.record.clear();
  const std::vector<nn::Parameter*> params = ln.parameters();
  lab08::allreduce_sequence_parallel_gradients(tp.record, params);
  const double sum = T * (T + 1) / 2.0;
  for (nn::Parameter* p : params) {
    EXPECT_TRUE(close_to({sum, T * (T - 1.0), -1.0 * T}, values(p->grad), "the summed gradient of " + p->name));
  }
}

// Parameters of different sizes and shapes (a LayerNorm of 5, a Linear's 2 x 3 weight and
// bias of 2): each gradient summed over the group in its own place, with one allreduce
// of all their elements (Note [One collective for the small gradients]); none for a group
// of one or an empty list.
TEST(SequenceParallel, SmallGradientsGoInOneCollective) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  dtl::Rng rng(5);
  nn::LayerNorm ln("ln", 5, nn::DType::kF32);
  nn::Linear lin("lin", 3, 2, nn::DType::kF32, rng, 0.1, true);
  std::vector<nn::Parameter*> params = ln.parameters();
  for (nn::Parameter* p : lin.parameters()) params.push_back(p);
  std::vector<std::vector<double>> want;
  std::size_t total = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::int64_t n = params[i]->grad.numel();
    std::vector<double> mine(static_cast<std::size_t>(n)), sum(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) {
      auto value = [&](int rank) { return static_cast<double>(10 * (static_cast<std::int64_t>(i) + 1) + j + rank); };
      mine[static_cast<std::size_t>(j)] = value(r);
      for (int q = 0; q < T; ++q) sum[static_cast<std::size_t>(j)] += value(q);
    }
    params[i]->grad.copy_from(tensor_of(params[i]->grad.shape(), mine, nn::DType::kF32));
    want.push_back(sum);
    total += static_cast<std::size_t>(n);
  }
  tp.record.clear();
  lab08::allreduce_sequence_parallel_gradients(tp.record, params);
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(close_to(want[i], values(params[i]->grad), "the summed gradient of " + params[i]->name + " at T = " +
                                                               std::to_string(T) + ", rank " + std::to_string(r)));
  }
  if (T > 1) {
    EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {total},
                        "one allreduce of the " + std::to_string(total) + " gradient elements"));
  } else {
    EXPECT_EQ(tp.record.ops().size(), 0U) << "a group of one sums nothing";
  }
  tp.record.clear();
  lab08::allreduce_sequence_parallel_gradients(tp.record, std::vector<nn::Parameter*>{});
  EXPECT_EQ(tp.record.ops().size(), 0U) << "rank " << r << ": an empty list needs no collective";
}

TEST(Errors, SequenceParallelGradientsOfMixedDtypesAreRefused) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  nn::LayerNorm single("single", 4, nn::DType::kF32), twice("double", 4, nn::DType::kF64);
  const std::vector<nn::Parameter*> params = {single.parameters()[0], twice.parameters()[0]};
  tp.record.clear();
  EXPECT_TRUE(refused([&] { lab08::allreduce_sequence_parallel_gradients(tp.record, params); },
                      {"'replicated'", tp_rank_words(r, T)}, "f32 and f64 gradients in one call"));
  EXPECT_EQ(tp.record.ops().size(), 0U) << "rank " << r << ": refused before any collective";
}

// ---------------------------------------------------------------------------
// A GPT with its LayerNorm regions split along the sequence, against one process
// ---------------------------------------------------------------------------

TEST(SequenceParallel, GptEqualsOneProcess) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  constexpr int kSteps = 3;
  const GptShape shape = gpt_shape(T, 12);
  const Trained oracle = train_sequence_parallel(shape, nullptr, 12, kSteps, 2);  // S = 12: T = 1, 2, 3, 4 divide it
  Trained mine = train_sequence_parallel(shape, &tp.mpi, 12, kSteps, 2);
  for (int step = 0; step < kSteps; ++step) {
    const double want = oracle.losses[static_cast<std::size_t>(step)];
    EXPECT_NEAR(mine.losses[static_cast<std::size_t>(step)], want, 1e-5 * (1.0 + want))
        << "rank " << r << ": the loss of step " << step << " of the sequence-parallel GPT (T = " << T << ")";
  }
  // The given list of partial-gradient parameters is the test's own (by name).
  std::vector<std::string> given, own;
  for (const nn::Parameter* p : lab08::sequence_parallel_parameters(mine.model)) given.push_back(p->name);
  for (const nn::Parameter* p : sequence_parallel_replicated(mine.model.parameters())) own.push_back(p->name);
  EXPECT_EQ(given, own) << "rank " << r << ": sequence_parallel_parameters()";
  EXPECT_TRUE(params_match(oracle.model.parameters(), mine.model.parameters(), false, T, r,
                           "the sequence-parallel GPT after " + std::to_string(kSteps) + " steps at T = " +
                               std::to_string(T),
                           kF32Tol));
  // The last step's gradients, after allreduce_sequence_parallel_gradients(): every one
  // equal to this rank's slice of one process's.
  EXPECT_TRUE(params_match(oracle.model.parameters(), mine.model.parameters(), true, T, r,
                           "the gradients of the sequence-parallel GPT's step " + std::to_string(kSteps - 1) +
                               " at T = " + std::to_string(T),
                           kF32Tol));
}

// ---------------------------------------------------------------------------
// Activation memory, exactly (Note [Activation memory with sequence parallelism])
// ---------------------------------------------------------------------------

TEST(SequenceParallel, ActivationMemoryIsTheClosedForm) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  constexpr std::int64_t e = 8;  // f64
  const std::int64_t B = 2, S = 2 * T, C = 12, N = B * S, n = N / T;
  const nn::Tensor x = random_tensor({B, S, C}, 31);
  const nn::Tensor x_mine = tokens_of(x, T, r);
  for (bool attention : {false, true}) {
    std::unique_ptr<nn::Layer> full = full_block(attention, C, T, 32);
    auto sp = attention ? lab08::make_parallel_attention_block(*full, tp.mpi, true)
                        : lab08::make_parallel_mlp_block(*full, tp.mpi, true);
    auto plain = attention ? lab08::make_parallel_attention_block(*full, tp.mpi, false)
                           : lab08::make_parallel_mlp_block(*full, tp.mpi, false);
    const BlockActivations got_sp = measure_activations(*sp, x_mine);
    const BlockActivations got_plain = measure_activations(*plain, x);
    const std::string what = std::string(attention ? "attention" : "MLP") + " block (B, S, C) = (" +
                             std::to_string(B) + ", " + std::to_string(S) + ", " + std::to_string(C) + "), T = " +
                             std::to_string(T) + ", rank " + std::to_string(r) + ": ";
    // The split regions: LayerNorm (y: tokens x C, mean and rstd: one each per token) and
    // the residual sum (tokens x C), on n = N/T tokens with sequence parallelism, N without.
    EXPECT_EQ(got_sp.layer_norm, e * n * (C + 2)) << what << "LayerNorm on this rank's N/T tokens";
    EXPECT_EQ(got_sp.residual, e * n * C) << what << "the residual sum on this rank's N/T tokens";
    EXPECT_EQ(got_plain.split(), e * N * (2 * C + 2)) << what << "the same regions without sequence parallelism";
    EXPECT_EQ(T * got_sp.split(), got_plain.split()) << what << "the split regions hold 1/T of plain TP's bytes";
    // Between the pairs: the column layer keeps the gathered input (N x C) and its output
    // features; the row layer its local product (N x C, summed by the collective) and its
    // output (this rank's n tokens with, N without, sequence parallelism).
    const std::int64_t features = attention ? 3 * C / T : 4 * C / T;  // the column layer's output per token
    const std::int64_t between = attention ? B * 1 * S * S + N * C / T  // one head per rank: (B, 1, S, S), out
                                           : N * 4 * C / T;             // the GELU's output
    EXPECT_EQ(got_sp.inner, e * (N * C + N * features + between + N * C + n * C))
        << what << "the column/row pair with sequence parallelism";
    EXPECT_EQ(got_plain.inner, e * (N * features + between + N * C + N * C))
        << what << "the column/row pair without sequence parallelism";
  }
}

TEST(Errors, SequenceParallelTokensNotDivisibleAreRefused) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  auto full = random_linear("proj", T, 2, true, 1);
  lab08::ParallelOptions sp;
  sp.sequence_parallel = true;
  lab08::RowParallelLinear row(*full, tp.mpi, sp);
  // Sequences of 2T tokens are accepted (the layer runs: every rank reaches the same collective) ...
  EXPECT_EQ(row.forward(random_tensor({3, 2 * T, 1}, 2)).shape(), (nn::Shape{3, 2, 2}));
  if (T == 1) return;  // every sequence divides into one part
  // ... sequences of T + 1 tokens cannot be split into T equal parts: refused before any collective.
  EXPECT_TRUE(refused([&] { row.forward(random_tensor({3, T + 1, 1}, 2)); }, {"'x'", tp_rank_words(r, T)},
                      "sequences of " + std::to_string(T + 1) + " tokens over " + std::to_string(T) +
                          " ranks on rank " + std::to_string(r)));
}

}  // namespace
}  // namespace lab08_test
