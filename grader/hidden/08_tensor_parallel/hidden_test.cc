// Lab 08 hidden tests (an example set), at 5 and 6 ranks: every layer, block and
// loss at T = 5 and 6 on other sizes (one feature, one head, one token per rank;
// qkv groups; (B, S, C) inputs), their collectives and refusals; a GPT with a
// vocabulary padded to a multiple of 60; every grid of 5 and 6 ranks; sequence
// parallelism along the sequence (blocks in f64 and f32, other shapes, a GPT,
// activation memory, refusals). Same oracles as the public tests (the unsplit harness layers, one
// process on the whole batch, the closed forms).
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "labs/08_tensor_parallel/tests/gpt_test_util.h"

namespace lab08_test {
namespace {

TEST(HiddenLayers, ColumnAndRowParallel) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  for (int groups : {1, 3}) {
    for (std::int64_t per_rank : {1, 2}) {
      const std::int64_t out = groups * per_rank * T;
      auto full = random_linear(groups == 3 ? "h.qkv" : "h.fc", 3, out, true, 60 + per_rank);
      lab08::ParallelOptions options;
      options.groups = groups;
      lab08::ColumnParallelLinear layer(*full, tp.record, options);
      const nn::Tensor x = random_tensor({2, 3, 3}, 61), dy = random_tensor({2, 3, out}, 62);
      const nn::Tensor y_full = full->forward(x).clone(nn::MemoryCategory::kOther);
      const std::vector<double> dx_full = values(full->backward(dy, {}));
      const std::string what = "column-parallel, out " + std::to_string(out) + ", groups " + std::to_string(groups);
      tp.record.clear();
      EXPECT_TRUE(close_to(grouped_column_slice(y_full, groups, T, r), values(layer.forward(x)), "y of " + what));
      const nn::Tensor dy_mine = tensor_of({2, 3, out / T}, grouped_column_slice(dy, groups, T, r));
      EXPECT_TRUE(close_to(dx_full, values(layer.backward(dy_mine, {})), "dx of " + what));
      EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {18}, what));
      EXPECT_TRUE(grads_match(*full, layer, T, r, what));
    }
  }
  for (std::int64_t in : {static_cast<std::int64_t>(T), static_cast<std::int64_t>(3 * T)}) {
    auto full = random_linear("h.proj", in, 4, true, 70);
    lab08::RowParallelLinear layer(*full, tp.record);
    const nn::Tensor x = random_tensor({5, in}, 71), dy = random_tensor({5, 4}, 72);
    const std::vector<double> y_full = values(full->forward(x));
    const nn::Tensor dx_full = full->backward(dy, {}).clone(nn::MemoryCategory::kOther);
    const std::string what = "row-parallel, in " + std::to_string(in);
    tp.record.clear();
    EXPECT_TRUE(close_to(y_full, values(layer.forward(tensor_of({5, in / T}, column_slice(x, T, r)))), "y of " + what));
    EXPECT_TRUE(close_to(column_slice(dx_full, T, r), values(layer.backward(dy, {})), "dx of " + what));
    EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {20}, what));
    EXPECT_TRUE(grads_match(*full, layer, T, r, what));
  }
}

TEST(HiddenLayers, BlocksAndVocabulary) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  for (bool attention : {false, true}) {
    dtl::Rng rng(80);
    const std::int64_t C = attention ? 2 * T : T;
    std::unique_ptr<nn::Layer> full =
        attention ? nn::make_attention_block("b", C, T, nn::DType::kF64, rng, 0.3, 0.3)
                  : nn::make_mlp_block("b", C, 4 * C, nn::Activation::kGELU, nn::DType::kF64, rng, 0.3, 0.3);
    randomize(*full, 81);
    auto parallel = attention ? lab08::make_parallel_attention_block(*full, tp.record)
                              : lab08::make_parallel_mlp_block(*full, tp.record);
    const nn::Tensor x = random_tensor({2, 3, C}, 82), dy = random_tensor({2, 3, C}, 83);
    const std::vector<double> y_full = values(full->forward(x));
    const std::vector<double> dx_full = values(full->backward(dy, {}));
    const std::string what = attention ? "attention block, one head per rank" : "MLP block, C = T";
    tp.record.clear();
    EXPECT_TRUE(close_to(y_full, values(parallel->forward(x)), "y of the " + what));
    EXPECT_TRUE(close_to(dx_full, values(parallel->backward(dy, {})), "dx of the " + what));
    const auto nc = static_cast<std::size_t>(x.numel());
    EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce, CollectiveKind::kAllreduce}, {nc, nc}, what));
    EXPECT_TRUE(grads_match(*full, *parallel, T, r, what));
  }
  {
    dtl::Rng rng(84);
    nn::Embedding full("wte", 2 * T, 5, nn::DType::kF64, rng, 0.5);
    lab08::VocabParallelEmbedding layer(full, tp.mpi);
    nn::Tensor x = nn::Tensor::zeros({2, 2 * T}, nn::DType::kI32, nn::MemoryCategory::kOther);
    for (std::int64_t i = 0; i < x.numel(); ++i) x.span<std::int32_t>()[i] = static_cast<std::int32_t>((7 * i) % (2 * T));
    const nn::Tensor dy = random_tensor({2, 2 * T, 5}, 85);
    const std::vector<double> y_full = values(full.forward(x));
    full.backward(dy, {});
    EXPECT_TRUE(close_to(y_full, values(layer.forward(x)), "the embedding's y, two tokens per rank"));
    layer.backward(dy, {});
    EXPECT_TRUE(grads_match(full, layer, T, r, "the embedding"));
  }
  for (std::int64_t vocab : {static_cast<std::int64_t>(T), static_cast<std::int64_t>(7 * T)}) {
    std::vector<double> z = random_values(9 * vocab, 86);
    for (double& v : z) v *= 50.0;
    const nn::Tensor logits = tensor_of({3, 3, vocab}, z);
    nn::Tensor targets = nn::Tensor::zeros({3, 3}, nn::DType::kI32, nn::MemoryCategory::kOther);
    for (std::int64_t i = 0; i < 9; ++i) targets.span<std::int32_t>()[i] = static_cast<std::int32_t>((i * 5 + 3) % vocab);
    nn::SoftmaxCrossEntropy full;
    const double want = full.forward(logits, targets);
    const nn::Tensor dz_full = full.backward(2.0).clone(nn::MemoryCategory::kOther);
    lab08::VocabParallelCrossEntropy loss(tp.record, vocab);
    tp.record.clear();
    const double got = loss.forward(tensor_of({3, 3, vocab / T}, column_slice(logits, T, r)), targets);
    EXPECT_NEAR(got, want, kTol * (1 + want)) << "rank " << r << ": the loss over V = " << vocab;
    EXPECT_TRUE(close_to(column_slice(dz_full, T, r), values(loss.backward(2.0)), "dlogits, V = " + std::to_string(vocab)));
    EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllgather, CollectiveKind::kAllreduce}, {9, 18}, "the loss"));
  }
}

TEST(HiddenLayers, Refusals) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  auto four = random_linear("four", 4, 4, true, 1);  // 4 features over 5 or 6 ranks
  EXPECT_TRUE(refused([&] { lab08::ColumnParallelLinear layer(*four, tp.mpi); }, {"'full'", tp_rank_words(r, T)},
                      "4 outputs"));
  EXPECT_TRUE(refused([&] { lab08::RowParallelLinear layer(*four, tp.mpi); }, {"'full'", tp_rank_words(r, T)},
                      "4 inputs"));
  dtl::Rng rng(2);
  nn::CausalSelfAttention attn("attn", 8, 4, nn::DType::kF64, rng);
  EXPECT_TRUE(refused([&] { lab08::ParallelSelfAttention layer(attn, tp.mpi); }, {"'full'", tp_rank_words(r, T)},
                      "4 heads"));
  EXPECT_TRUE(refused([&] { lab08::VocabParallelCrossEntropy loss(tp.mpi, 4); }, {"'vocab'", tp_rank_words(r, T)},
                      "a vocabulary of 4"));
  auto fine = random_linear("fine", T, T, false, 3);
  lab08::ColumnParallelLinear accepted(*fine, tp.mpi);
  EXPECT_TRUE(close_to(row_slice(fine->weight().value, 1, T, r), values(accepted.local().weight().value),
                       "one row per rank"));
}

TEST(HiddenModel, GptAndGrids) {
  const int W = comm().size(), w = comm().rank();
  {
    Group tp(comm());
    const GptShape shape = gpt_shape(W, 60);
    const Trained oracle = train_oracle(shape, 11, 2, 3);
    const Trained mine = train_parallel(tp.mpi, shape, 11, 2, 3);
    EXPECT_TRUE(params_match(oracle.model.parameters(), mine.model.parameters(), false, W, w,
                             "the GPT at T = " + std::to_string(W), kF32Tol));
    EXPECT_NEAR(mine.losses[1], oracle.losses[1], 1e-5 * (1 + oracle.losses[1]));
  }
  for (int T = 1; T <= W; ++T) {
    if (W % T != 0) continue;
    lab08::Grid grid = lab08::make_grid(comm(), T);
    EXPECT_EQ(grid.model_group.rank(), w % T);
    EXPECT_EQ(grid.data_group.rank(), w / T);
    dtl::MpiCommunicator tensor(grid.model_group, dtl::MpiMode::kNonblocking);
    dtl::MpiCommunicator data(grid.data_group, dtl::MpiMode::kNonblocking);
    const GptShape shape = gpt_shape(T, 60);
    const std::int64_t global = 30;  // divisible by D = 1, 2, 3, 5, 6
    const Trained oracle = train_oracle(shape, 7, 2, global);
    const Trained mine = train_parallel(tensor, shape, 7, 2, global, &data, grid.replica, grid.replicas);
    EXPECT_TRUE(params_match(oracle.model.parameters(), mine.model.parameters(), false, T, grid.model_rank,
                             std::to_string(W / T) + " replicas x T = " + std::to_string(T), kF32Tol));
  }
}

// ---------------------------------------------------------------------------
// Sequence parallelism along the sequence, at T = 5 and 6
// ---------------------------------------------------------------------------

// The public tests run sequence parallelism in f64 only: here the MLP block (C = T, one
// token of each of 2 sequences per rank) and the attention block (T heads of two
// channels, 3 sequences of 2T tokens), f32, this rank's tokens against the unsplit
// block; every collective moves 4-byte elements; the replicated gradients summed, in
// one allreduce.
TEST(HiddenSequence, BlocksInF32) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  for (bool attention : {false, true}) {
    const nn::Shape shape = attention ? nn::Shape{3, 2 * T, 2 * T} : nn::Shape{2, T, T};
    const std::int64_t C = shape.back();
    dtl::Rng rng(attention ? 91 : 92);
    std::unique_ptr<nn::Layer> full =
        attention ? nn::make_attention_block("sp", C, T, nn::DType::kF32, rng, 0.3, 0.3)
                  : nn::make_mlp_block("sp", C, 4 * C, nn::Activation::kGELU, nn::DType::kF32, rng, 0.3, 0.3);
    randomize(*full, 93);
    auto parallel = attention ? lab08::make_parallel_attention_block(*full, tp.record, true)
                              : lab08::make_parallel_mlp_block(*full, tp.record, true);
    const std::string what = std::string(attention ? "f32 sequence-parallel attention" : "f32 sequence-parallel MLP") +
                             " block, x " + nn::to_string(shape);
    const nn::Tensor x = random_tensor(shape, 94, nn::DType::kF32), dy = random_tensor(shape, 95, nn::DType::kF32);
    const nn::Tensor y_full = full->forward(x).clone(nn::MemoryCategory::kOther);
    const nn::Tensor dx_full = full->backward(dy, {}).clone(nn::MemoryCategory::kOther);
    tp.record.clear();
    EXPECT_TRUE(close_to(values(tokens_of(y_full, T, r)), values(parallel->forward(tokens_of(x, T, r))),
                         "y of the " + what, kF32Tol));
    EXPECT_TRUE(close_to(values(tokens_of(dx_full, T, r)), values(parallel->backward(tokens_of(dy, T, r), {})),
                         "dx of the " + what, kF32Tol));
    const std::size_t per_rank = static_cast<std::size_t>(x.numel() / T);
    EXPECT_TRUE(ops_are(tp.record,
                        {CollectiveKind::kAllgather, CollectiveKind::kReduceScatter, CollectiveKind::kAllgather,
                         CollectiveKind::kReduceScatter},
                        {per_rank, per_rank, per_rank, per_rank}, what));
    EXPECT_EQ(tp.record.bytes(CollectiveKind::kAllgather) + tp.record.bytes(CollectiveKind::kReduceScatter),
              4 * static_cast<std::size_t>(x.numel()) * 4)
        << "rank " << r << ": " << what << ": four collectives of N x C f32 elements (4 bytes each)";
    const std::vector<nn::Parameter*> shared = sequence_parallel_replicated(parallel->parameters());
    std::size_t elements = 0;
    for (const nn::Parameter* p : shared) elements += static_cast<std::size_t>(p->grad.numel());
    tp.record.clear();
    lab08::allreduce_sequence_parallel_gradients(tp.record, shared);
    EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {elements},
                        what + ": the " + std::to_string(shared.size()) + " replicated gradients in one allreduce"));
    EXPECT_TRUE(grads_match(*full, *parallel, T, r, what, kF32Tol));
  }
}

// One sequence of 2T tokens (2-D input), a ReLU MLP with 3 channels (f64); then
// (B1, B2, S, C) = (2, 3, T, 2): six sequences, one token of each per rank.
TEST(HiddenSequence, MlpBlockOnOtherShapes) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  for (const nn::Shape& shape : {nn::Shape{2 * T, 3}, nn::Shape{2, 3, T, 2}}) {
    dtl::Rng rng(12);
    auto full = nn::make_mlp_block("b", shape.back(), 2 * T, nn::Activation::kReLU, nn::DType::kF64, rng, 0.3, 0.3);
    randomize(*full, 13);
    auto parallel = lab08::make_parallel_mlp_block(*full, tp.record, true);
    const nn::Tensor x = random_tensor(shape, 14), dy = random_tensor(shape, 15);
    const nn::Tensor y_full = full->forward(x).clone(nn::MemoryCategory::kOther);
    const nn::Tensor dx_full = full->backward(dy, {}).clone(nn::MemoryCategory::kOther);
    const std::string what = "the sequence-parallel MLP block, x " + nn::to_string(shape);
    EXPECT_TRUE(close_to(values(tokens_of(y_full, T, r)), values(parallel->forward(tokens_of(x, T, r))), "y of " + what));
    EXPECT_TRUE(close_to(values(tokens_of(dx_full, T, r)), values(parallel->backward(tokens_of(dy, T, r), {})),
                         "dx of " + what));
    lab08::allreduce_sequence_parallel_gradients(tp.mpi, sequence_parallel_replicated(parallel->parameters()));
    EXPECT_TRUE(grads_match(*full, *parallel, T, r, what));
  }
}

// A sequence-parallel GPT with sequences of 30 tokens (T = 5 and 6 divide 30), its
// vocabulary padded to a multiple of 60, two steps against one process.
TEST(HiddenSequence, GptEqualsOneProcess) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const GptShape shape = gpt_shape(T, 60);
  const Trained oracle = train_sequence_parallel(shape, nullptr, 30, 2, 3);
  const Trained mine = train_sequence_parallel(shape, &tp.mpi, 30, 2, 3);
  EXPECT_NEAR(mine.losses[1], oracle.losses[1], 1e-5 * (1 + oracle.losses[1])) << "rank " << r;
  EXPECT_TRUE(params_match(oracle.model.parameters(), mine.model.parameters(), false, T, r,
                           "the sequence-parallel GPT at T = " + std::to_string(T), kF32Tol));
}

// The split regions' activation bytes at T = 5 and 6, exactly: the MLP block on
// (B, S, C) = (3, T, 30), one token of each sequence per rank, f64.
TEST(HiddenSequence, ActivationMemory) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::int64_t B = 3, S = T, C = 30, n = B * S / T;
  dtl::Rng rng(41);
  auto full = nn::make_mlp_block("m", C, 4 * C, nn::Activation::kGELU, nn::DType::kF64, rng, 0.3, 0.3);
  auto sp = lab08::make_parallel_mlp_block(*full, tp.mpi, true);
  const nn::Tensor x = random_tensor({B, S, C}, 42);
  const BlockActivations got = measure_activations(*sp, tokens_of(x, T, r));
  EXPECT_EQ(got.split(), 8 * n * (2 * C + 2)) << "rank " << r << ": LayerNorm and residual on n = N/T tokens";
  EXPECT_EQ(got.inner, 8 * (B * S * C + 2 * (B * S * 4 * C / T) + B * S * C + n * C)) << "rank " << r;
}

// Sequences T does not divide (T + 1 tokens), refused by the row-parallel layer on
// every rank before any collective, naming x and the tensor-parallel rank.
TEST(HiddenSequence, RefusesUnevenSequences) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  auto full = random_linear("proj", T, 2, true, 1);
  lab08::ParallelOptions sp;
  sp.sequence_parallel = true;
  lab08::RowParallelLinear row(*full, tp.mpi, sp);
  EXPECT_TRUE(refused([&] { row.forward(random_tensor({2, T + 1, 1}, 2)); }, {"'x'", tp_rank_words(r, T)},
                      "sequences of T + 1 tokens on rank " + std::to_string(r)));
  EXPECT_EQ(row.forward(random_tensor({2, 3 * T, 1}, 2)).shape(), (nn::Shape{2, 3, 2}));
}

}  // namespace
}  // namespace lab08_test
