// Lab 08, task C: the vocabulary-parallel embedding against nn::Embedding, and the
// vocabulary-parallel cross-entropy against nn::SoftmaxCrossEntropy on the full
// logits (f64; f32 within 1e-5), including targets on the first and last token of
// every rank's slice, logits large enough to overflow exp() without the max, and
// the communication: N maxima gathered and 2N values reduced, never the logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "labs/08_tensor_parallel/tests/tp_test_util.h"

namespace lab08_test {
namespace {

/// Tokens (B, S) that hit every rank's first and last token, then pseudo-random ones.
nn::Tensor tokens(std::int64_t batch, std::int64_t seq, std::int64_t vocab, int T, std::uint64_t seed) {
  nn::Tensor t = nn::Tensor::zeros({batch, seq}, nn::DType::kI32, nn::MemoryCategory::kOther);
  auto s = t.span<std::int32_t>();
  dtl::Rng rng(seed);
  std::size_t i = 0;
  for (int r = 0; r < T && i + 1 < s.size(); ++r) {
    s[i++] = static_cast<std::int32_t>(r * vocab / T);
    s[i++] = static_cast<std::int32_t>((r + 1) * vocab / T - 1);
  }
  for (; i < s.size(); ++i) s[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

TEST(VocabEmbedding, EqualsTheUnsplitEmbedding) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  for (std::int64_t vocab : {static_cast<std::int64_t>(T), static_cast<std::int64_t>(5 * T)}) {
    const std::string what = "V = " + std::to_string(vocab);
    dtl::Rng rng(3);
    nn::Embedding full("wte", vocab, 3, nn::DType::kF64, rng, 0.5);
    lab08::VocabParallelEmbedding layer(full, tp.record);
    EXPECT_EQ(layer.vocab_begin(), r * vocab / T) << what;
    // A forward of other tokens first: the output buffer is reused, and a row this
    // rank does not own must be written as zeros, not left as it was.
    layer.forward(tokens(3, 4, vocab, T, 4));
    const nn::Tensor x = tokens(3, 4, vocab, T, 5);
    const nn::Tensor dy = random_tensor({3, 4, 3}, 6);
    const std::vector<double> y_full = values(full.forward(x));
    full.backward(dy, {});
    tp.record.clear();
    EXPECT_TRUE(close_to(y_full, values(layer.forward(x)), "y (" + what + ")"));
    EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllreduce}, {static_cast<std::size_t>(x.numel() * 3)},
                        "the embedding's forward (one allreduce of N x C)"));
    tp.record.clear();
    layer.backward(dy, {});
    EXPECT_TRUE(ops_are(tp.record, {}, {}, "the embedding's backward (no communication)"));
    EXPECT_TRUE(close_to(row_slice(full.parameters()[0]->grad, 1, T, r), values(layer.parameters()[0]->grad),
                         "this rank's rows of dW (" + what + ")"));
  }
}

void check_loss(nn::DType dtype, std::int64_t rows, std::int64_t vocab, double logit_scale, double tol) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  const std::string what = std::string(dtype_name(dtype)) + ", N = " + std::to_string(rows) +
                           ", V = " + std::to_string(vocab) + ", logits x " + std::to_string(logit_scale);
  std::vector<double> z = random_values(rows * vocab, 17);
  for (double& v : z) v *= logit_scale;
  const nn::Tensor logits = tensor_of({rows, vocab}, z, dtype);
  const nn::Tensor targets = tokens(1, rows, vocab, T, 19).reshape({rows});
  nn::SoftmaxCrossEntropy full;
  const double want = full.forward(logits, targets);
  const std::vector<double> dz_full = values(full.backward(0.5));

  lab08::VocabParallelCrossEntropy loss(tp.record, vocab);
  const nn::Tensor mine = tensor_of({rows, vocab / T}, column_slice(logits, T, r), dtype);
  tp.record.clear();
  const double got = loss.forward(mine, targets);
  EXPECT_NEAR(got, want, tol * (1.0 + std::fabs(want))) << "rank " << r << ": the loss (" << what << ")";
  EXPECT_TRUE(ops_are(tp.record, {CollectiveKind::kAllgather, CollectiveKind::kAllreduce},
                      {static_cast<std::size_t>(rows), static_cast<std::size_t>(2 * rows)},
                      "the loss's forward (all-gather of N maxima, allreduce of 2N sums; never the logits)"));
  EXPECT_EQ(tp.record.bytes(CollectiveKind::kAllgather), static_cast<std::size_t>(T * rows * 8)) << "f64 maxima";
  tp.record.clear();
  const nn::Tensor& dz = loss.backward(0.5);
  EXPECT_TRUE(ops_are(tp.record, {}, {}, "the loss's backward (no communication)"));
  EXPECT_TRUE(close_to(column_slice(tensor_of({rows, vocab}, dz_full), T, r), values(dz),
                       "this rank's columns of dL/dlogits (" + what + ")", tol));
}

TEST(VocabCrossEntropy, EqualsTheLossOnTheFullLogits) {
  const int T = comm().size();
  check_loss(nn::DType::kF64, 1, T, 1.0, kTol);        // one row, one token per rank
  check_loss(nn::DType::kF64, 7, 4 * T, 3.0, kTol);
  check_loss(nn::DType::kF32, 7, 4 * T, 3.0, 1e-5);
}

TEST(VocabCrossEntropy, LargeLogitsDoNotOverflow) {
  // exp(1000) overflows: only a common shift by the maximum keeps the sums finite.
  const int T = comm().size();
  check_loss(nn::DType::kF64, 5, 3 * T, 1000.0, kTol);
}

TEST(VocabCrossEntropy, GradientMatchesFiniteDifferences) {
  // An oracle that shares nothing with the harness's loss: central differences of the
  // loss itself, one logit of one rank at a time (every rank runs every forward).
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  constexpr std::int64_t kRows = 3, kPerRank = 2;
  const std::int64_t vocab = kPerRank * T;
  lab08::VocabParallelCrossEntropy loss(tp.mpi, vocab);
  const nn::Tensor targets = tokens(1, kRows, vocab, T, 23).reshape({kRows});
  std::vector<double> z = random_values(kRows * kPerRank, 29 + static_cast<std::uint64_t>(r));
  loss.forward(tensor_of({kRows, kPerRank}, z), targets);
  const std::vector<double> analytic = values(loss.backward());
  constexpr double h = 1e-5;
  for (int owner = 0; owner < T; ++owner) {
    for (std::size_t j = 0; j < z.size(); ++j) {
      std::vector<double> plus = z, minus = z;
      if (r == owner) {
        plus[j] += h;
        minus[j] -= h;
      }
      const double up = loss.forward(tensor_of({kRows, kPerRank}, plus), targets);
      const double down = loss.forward(tensor_of({kRows, kPerRank}, minus), targets);
      if (r == owner) {
        const double numeric = (up - down) / (2 * h);
        EXPECT_NEAR(analytic[j], numeric, 1e-6 * std::max(std::fabs(numeric), std::fabs(analytic[j])) + 1e-8)
            << "rank " << r << ": dL/dlogits[" << j << "] against central differences";
      }
    }
  }
}

TEST(Errors, VocabularyNotDivisibleIsRefused) {
  Group tp(comm());
  const int T = tp.size(), r = tp.rank();
  if (T > 1) {
    dtl::Rng rng(1);
    nn::Embedding full("wte", T + 1, 2, nn::DType::kF64, rng);
    EXPECT_TRUE(refused([&] { lab08::VocabParallelEmbedding layer(full, tp.mpi); },
                        {"VocabParallelEmbedding", "'full'", std::to_string(T + 1), tp_rank_words(r, T)},
                        "an embedding of " + std::to_string(T + 1) + " tokens"));
    EXPECT_TRUE(refused([&] { lab08::VocabParallelCrossEntropy loss(tp.mpi, T + 1); },
                        {"VocabParallelCrossEntropy", "'vocab'", tp_rank_words(r, T)},
                        "a loss over " + std::to_string(T + 1) + " tokens"));
  }
  dtl::Rng rng(2);
  nn::Embedding accepted("wte", 2 * T, 2, nn::DType::kF64, rng);
  lab08::VocabParallelEmbedding layer(accepted, tp.mpi);
  EXPECT_TRUE(close_to(row_slice(accepted.parameters()[0]->value, 1, T, r), values(layer.parameters()[0]->value),
                       "the rows of an accepted vocabulary"));
  lab08::VocabParallelCrossEntropy loss(tp.mpi, 2 * T);
  const nn::Tensor bad = nn::Tensor::zeros({2}, nn::DType::kI32, nn::MemoryCategory::kOther);
  bad.span<std::int32_t>()[1] = 2 * T;  // one past the vocabulary
  EXPECT_TRUE(refused([&] { loss.forward(random_tensor({2, 2}, 1), bad); }, {"'targets'"}, "a target == V"));
  EXPECT_TRUE(refused([&] { loss.forward(random_tensor({2, 3}, 1), bad); }, {"'logits'"}, "logits of 3 columns"));
}

}  // namespace
}  // namespace lab08_test
