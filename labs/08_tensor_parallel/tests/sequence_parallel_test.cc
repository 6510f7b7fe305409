// Lab 08, task D: sequence parallelism. The MLP and attention blocks with their
// LayerNorm regions split by rows (dimension 0) against the unsplit blocks, row
// by row (f64); the replicated parameters' partial gradients summed over the group
// by allreduce_sequence_parallel_gradients(); every allreduce replaced by an
// all-gather and a reduce-scatter of the same bytes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "labs/08_tensor_parallel/tests/tp_test_util.h"

namespace lab08_test {
namespace {

/// The parameters used on split rows: LayerNorms and row-parallel biases (the test's own list).
std::vector<nn::Parameter*> replicated(nn::Layer& block) {
  std::vector<nn::Parameter*> out;
  for (nn::Parameter* p : block.parameters()) {
    if (p->name.find(".ln.") != std::string::npos || p->name.find(".proj.bias") != std::string::npos) {
      out.push_back(p);
    }
  }
  return out;
}

void check_sp_block(bool attention, const nn::Shape& shape, std::uint64_t seed) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::int64_t C = shape.back();
  dtl::Rng rng(seed);
  std::unique_ptr<nn::Layer> full =
      attention ? nn::make_attention_block("blk", C, T, nn::DType::kF64, rng, 0.3, 0.3)
                : nn::make_mlp_block("blk", C, 4 * C, nn::Activation::kGELU, nn::DType::kF64, rng, 0.3, 0.3);
  randomize(*full, seed + 100);
  std::unique_ptr<nn::Layer> parallel = attention ? lab08::make_parallel_attention_block(*full, tp.record, true)
                                                  : lab08::make_parallel_mlp_block(*full, tp.record, true);
  const std::string what = std::string(attention ? "sequence-parallel attention" : "sequence-parallel MLP") +
                           " block, x " + nn::to_string(shape) + ", this rank's rows";
  const nn::Tensor x = random_tensor(shape, seed + 1);
  const nn::Tensor dy = random_tensor(shape, seed + 2);
  const nn::Tensor y_full = full->forward(x).clone(nn::MemoryCategory::kOther);
  const nn::Tensor dx_full = full->backward(dy, {}).clone(nn::MemoryCategory::kOther);

  const nn::Tensor x_mine = rows_of(x, T, r);
  const auto n = static_cast<std::size_t>(x_mine.numel());  // this rank's rows x C
  tp.record.clear();
  EXPECT_TRUE(close_to(values(rows_of(y_full, T, r)), values(parallel->forward(x_mine)), "y (" + what + ")"));
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllgather, CollectiveKind::kReduceScatter}, {n, n},
                      "the forward of the " + what + " (all-gather entering, reduce-scatter leaving)"));
  EXPECT_EQ(tp.record.bytes(CollectiveKind::kAllgather) + tp.record.bytes(CollectiveKind::kReduceScatter),
            2 * static_cast<std::size_t>(x.numel()) * 8)
      << "the same bytes as one allreduce of N x C (a reduce-scatter and an all-gather)";
  tp.record.clear();
  EXPECT_TRUE(close_to(values(rows_of(dx_full, T, r)), values(parallel->backward(rows_of(dy, T, r), {})),
                       "dx (" + what + ")"));
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllgather, CollectiveKind::kReduceScatter}, {n, n},
                      "the backward of the " + what + " (all-gather of dy, reduce-scatter of dx)"));
  const std::vector<nn::Parameter*> shared = replicated(*parallel);
  lab08::allreduce_sequence_parallel_gradients(tp.mpi, shared);
  EXPECT_TRUE(grads_match(*full, *parallel, T, r, what + ", after allreduce_sequence_parallel_gradients()"));
}

TEST(SequenceParallel, MlpBlockEqualsTheUnsplitBlock) {
  const int T = comm().size();
  check_sp_block(false, {T, 3}, 1);          // one row per rank
  check_sp_block(false, {3 * T, 2 * T}, 2);
  check_sp_block(false, {T, 3, 6}, 3);       // (B, S, C) split by B
}

TEST(SequenceParallel, AttentionBlockEqualsTheUnsplitBlock) {
  const int T = comm().size();
  check_sp_block(true, {T, 4, 2 * T}, 4);
  check_sp_block(true, {2 * T, 3, 3 * T}, 5);
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
  if (T > 1) {
    EXPECT_EQ(tp.record.count(CollectiveKind::kAllreduce), 2) << "one allreduce per parameter";
  }
}

TEST(Errors, SequenceParallelRowsNotDivisibleAreRefused) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  auto full = random_linear("proj", T, 2, true, 1);
  lab08::ParallelOptions sp;
  sp.sequence_parallel = true;
  lab08::RowParallelLinear row(*full, tp.mpi, sp);
  // 2T rows are accepted (the layer runs: every rank reaches the same collective) ...
  EXPECT_EQ(row.forward(random_tensor({2 * T, 1}, 2)).shape(), (nn::Shape{2, 2}));
  if (T == 1) return;  // every row count divides into one part
  // ... T + 1 rows cannot be reduce-scattered into T equal parts: refused before any collective.
  EXPECT_TRUE(refused([&] { row.forward(random_tensor({T + 1, 1}, 2)); }, {"'x'"},
                      std::to_string(T + 1) + " rows over " + std::to_string(T) + " ranks on rank " + std::to_string(r)));
}

}  // namespace
}  // namespace lab08_test
