// Lab 08, task B: the Megatron MLP block and attention with its heads split,
// against the unsplit blocks of harness/nn (make_mlp_block, make_attention_block,
// CausalSelfAttention), in f64: outputs, input gradients and every parameter's
// gradient (this rank's slice of the unsplit one); one allreduce of N x C in
// each direction; heads that T does not divide, refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "labs/08_tensor_parallel/tests/tp_test_util.h"

namespace lab08_test {
namespace {

void check_block(bool attention, const nn::Shape& shape, std::int64_t heads, nn::Activation act, std::uint64_t seed) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::int64_t C = shape.back();
  dtl::Rng rng(seed);
  std::unique_ptr<nn::Layer> full =
      attention ? nn::make_attention_block("blk", C, heads, nn::DType::kF64, rng, 0.3, 0.3)
                : nn::make_mlp_block("blk", C, 4 * C, act, nn::DType::kF64, rng, 0.3, 0.3);
  randomize(*full, seed + 100);
  std::unique_ptr<nn::Layer> parallel = attention ? lab08::make_parallel_attention_block(*full, tp.record)
                                                  : lab08::make_parallel_mlp_block(*full, tp.record);
  const std::string what = std::string(attention ? "attention" : "MLP") + " block, x " + nn::to_string(shape) +
                           (attention ? ", " + std::to_string(heads) + " heads" : "");
  const nn::Tensor x = random_tensor(shape, seed + 1);
  const nn::Tensor dy = random_tensor(shape, seed + 2);
  const std::vector<double> y_full = values(full->forward(x));
  const std::vector<double> dx_full = values(full->backward(dy, {}));

  tp.record.clear();
  EXPECT_TRUE(close_to(y_full, values(parallel->forward(x)), "y (" + what + ")"));
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {static_cast<std::size_t>(x.numel())},
                      "the forward of the " + what + " (g of proj: one allreduce of N x C)"));
  tp.record.clear();
  EXPECT_TRUE(close_to(dx_full, values(parallel->backward(dy, {})), "dx (" + what + ")"));
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {static_cast<std::size_t>(x.numel())},
                      "the backward of the " + what + " (f of the first layer: one allreduce of N x C)"));
  EXPECT_TRUE(grads_match(*full, *parallel, T, r, what));
}

TEST(MlpBlock, EqualsTheUnsplitBlock) {
  const int T = comm().size();
  check_block(false, {1, T}, 0, nn::Activation::kGELU, 3);        // C = T: hidden 4T, 4 features per rank
  check_block(false, {6, 2 * T}, 0, nn::Activation::kGELU, 4);
  check_block(false, {2, 3, 3}, 0, nn::Activation::kReLU, 5);     // hidden 12, any T <= 4 divides it
}

TEST(Attention, HeadsSplitEqualsTheUnsplitBlock) {
  const int T = comm().size();
  check_block(true, {1, 1, 2 * T}, T, nn::Activation::kGELU, 6);    // one token, one head per rank
  check_block(true, {2, 5, 4 * T}, 2 * T, nn::Activation::kGELU, 7);  // two heads per rank, hs 2
  check_block(true, {3, 4, 3 * T}, T, nn::Activation::kGELU, 8);    // hs 3
}

TEST(Attention, TheLayerAloneWithItsProjections) {
  // ParallelSelfAttention without the block: y, dx and the four gradients.
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  dtl::Rng rng(9);
  nn::CausalSelfAttention full("attn", 2 * T, T, nn::DType::kF64, rng, 0.4, 0.4);
  randomize(full, 90);
  lab08::ParallelSelfAttention layer(full, tp.mpi);
  const nn::Tensor x = random_tensor({2, 3, 2 * T}, 91);
  const nn::Tensor dy = random_tensor({2, 3, 2 * T}, 92);
  const std::vector<double> y_full = values(full.forward(x));
  const std::vector<double> dx_full = values(full.backward(dy, {}));
  EXPECT_TRUE(close_to(y_full, values(layer.forward(x)), "y"));
  EXPECT_TRUE(close_to(dx_full, values(layer.backward(dy, {})), "dx"));
  EXPECT_TRUE(grads_match(full, layer, T, r, "ParallelSelfAttention"));
  EXPECT_EQ(layer.qkv().local().weight().value.shape(), (nn::Shape{6, 2 * T})) << "qkv: 3 x (C/T) rows of C";
}

TEST(Errors, HeadsNotDivisibleAreRefused) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  dtl::Rng rng(1);
  nn::CausalSelfAttention accepted("attn", 2 * T, T, nn::DType::kF64, rng);
  lab08::ParallelSelfAttention one_head_each(accepted, tp.mpi);  // T heads over T ranks: accepted
  EXPECT_EQ(one_head_each.qkv().local().weight().value.shape(), (nn::Shape{6, 2 * T}));
  if (T == 1) return;  // one rank holds every head
  const std::int64_t heads = T + 1;
  nn::CausalSelfAttention full("attn", 2 * heads, heads, nn::DType::kF64, rng);
  EXPECT_TRUE(refused([&] { lab08::ParallelSelfAttention layer(full, tp.mpi); },
                      {"ParallelSelfAttention", "'full'", std::to_string(heads) + " heads", tp_rank_words(r, T)},
                      std::to_string(heads) + " heads over " + std::to_string(T) + " ranks"));
  auto block = nn::make_mlp_block("mlp", 2, 2 * T + 1, nn::Activation::kGELU, nn::DType::kF64, rng);
  EXPECT_TRUE(refused([&] { lab08::make_parallel_mlp_block(*block, tp.mpi); }, {"'full'", tp_rank_words(r, T)},
                      "an MLP of hidden width " + std::to_string(2 * T + 1)));
  nn::Linear not_a_block("fc", 2, 2, nn::DType::kF64, rng);
  EXPECT_TRUE(refused([&] { lab08::make_parallel_mlp_block(not_a_block, tp.mpi); }, {"'full'"}, "a Linear as a block"));
}

}  // namespace
}  // namespace lab08_test
