// Task D: PowerSGD as a communication hook (lab05/powersgd.h).
//
// Oracles, none of them the code under test:
//   - Note [PowerSGD] written again here in double, for every rank at once
//     (every rank's gradients are a known function of rank and step), and
//     Gram-Schmidt in double;
//   - closed forms: a rank-1 mean is recovered exactly at r = 1 with no error
//     left; at r = min(n, m) every mean is recovered exactly; the bytes on the
//     wire are 4 (sum (n + m) r + uncompressed elements), counted by a
//     RecordingCommunicator at the interface;
//   - the error-feedback identity: sum_t mean(G_t) = sum_t out_t + mean(e_T),
//     with the means taken by the vendor MPI_Allreduce;
//   - Note [Warm-up and power iterations]: the warm-up's bytes (fp32's, counted at
//     the interface) and its exact mean; the best rank-2 picture of a mean built
//     from known singular vectors, reached by many power iterations;
//   - Note [Error reset]: which calls are exact (a closed form), their bytes in fp32
//     and bf16 at the interface, every error 0 after one, and sent = computed then;
//   - training: the loss of PowerSGD rank 2 against one fp32 process.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "harness/random.h"
#include "harness/testing/recording_communicator.h"
#include "labs/05_mixed_precision/tests/powersgd_test_util.h"

namespace lab05_test {
namespace {

using lab05::MatrixShape;
using lab05::PowerSgdOptions;

// ---------------------------------------------------------------------------
// orthonormalize_columns()
// ---------------------------------------------------------------------------

TEST(Orthonormalize, MatchesGramSchmidtInDouble) {
  for (auto [rows, cols] : {std::pair<int, int>{7, 3}, {4, 4}, {9, 1}, {30, 5}}) {
    dtl::Rng rng(static_cast<std::uint64_t>(rows * 100 + cols));
    std::vector<float> a(static_cast<std::size_t>(rows * cols));
    for (float& v : a) v = static_cast<float>(rng.normal());
    std::vector<double> expected(a.begin(), a.end());
    gram_schmidt(expected, rows, cols);
    lab05::orthonormalize_columns(a.data(), rows, cols);
    EXPECT_LE(max_gap(a, expected), 1e-5) << rows << " x " << cols;
    // P^T P = I, computed here from what came back.
    for (int j = 0; j < cols; ++j) {
      for (int k = 0; k < cols; ++k) {
        double dot = 0.0;
        for (int i = 0; i < rows; ++i) dot += double{a[static_cast<std::size_t>(i * cols + j)]} * a[static_cast<std::size_t>(i * cols + k)];
        EXPECT_NEAR(dot, j == k ? 1.0 : 0.0, 1e-5) << rows << " x " << cols << ", columns " << j << " and " << k;
      }
    }
  }
}

TEST(Orthonormalize, ZeroColumnsStayZeroAndEmptyIsFine) {
  // Column 1 is zero: it stays zero, columns 0 and 2 are made orthonormal around it.
  std::vector<float> a = {3, 0, 1, 4, 0, 1, 0, 0, 1};  // 3 x 3, row-major
  lab05::orthonormalize_columns(a.data(), 3, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a[static_cast<std::size_t>(i * 3 + 1)], 0.0f) << "row " << i;
  EXPECT_NEAR(a[0], 0.6f, 1e-6);  // (3, 4, 0) / 5
  EXPECT_NEAR(a[3], 0.8f, 1e-6);
  // (1, 1, 1) - 1.4 (0.6, 0.8, 0) = (0.16, -0.12, 1), norm sqrt(1.04)
  const float norm = std::sqrt(1.04f);
  EXPECT_NEAR(a[2], 0.16f / norm, 1e-6);
  EXPECT_NEAR(a[5], -0.12f / norm, 1e-6);
  EXPECT_NEAR(a[8], 1.0f / norm, 1e-6);
  EXPECT_NO_THROW(lab05::orthonormalize_columns(nullptr, 0, 3));
  EXPECT_NO_THROW(lab05::orthonormalize_columns(nullptr, 5, 0));
  const std::string message = invalid_argument_message([] { lab05::orthonormalize_columns(nullptr, -1, 2); });
  EXPECT_NE(message.find("rows"), std::string::npos) << message;
  EXPECT_THROW(lab05::orthonormalize_columns(nullptr, 2, 2), dtl::InvalidArgument);
}

// ---------------------------------------------------------------------------
// PowerSgd::average() against the double oracle, at every rank count
// ---------------------------------------------------------------------------

// A 6 x 4 and a 8 x 5 matrix compressed (r = 2), a bias and a 3 x 3 matrix (9 < 10
// elements: tiny) uncompressed; a 2 x 7 at r = 2 = min(n, m): compressed exactly.
const std::vector<MatrixShape> kLayout = {{6, 4}, {5, 1}, {3, 3}, {8, 5}, {2, 7}};
const PowerSgdOptions kOptions{.rank = 2, .min_compress_elements = 10, .seed = 11};

TEST(PowerSgdOracle, EveryStepMatchesTheDoubleOracleOnEveryRank) {
  auto backend_ = backend();
  const int w = comm().size(), me = comm().rank();
  lab05::PowerSgd psgd(kLayout, kOptions);
  Oracle oracle(kLayout, kOptions, w);
  EXPECT_EQ(psgd.rank_of(0), 2);
  EXPECT_EQ(psgd.rank_of(1), 0);
  EXPECT_EQ(psgd.rank_of(2), 0);
  EXPECT_EQ(psgd.rank_of(4), 2);
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<double>> all;
    for (int r = 0; r < w; ++r) all.push_back(gradient(oracle.count, r, step));
    const std::vector<double> expected = oracle.step(all);
    std::vector<float> grads(all[static_cast<std::size_t>(me)].begin(), all[static_cast<std::size_t>(me)].end());
    psgd.average(*backend_, grads.data(), grads.size());
    EXPECT_LE(max_gap(grads, expected), 2e-4) << "step " << step << ": the average";
    for (std::size_t i = 0; i < kLayout.size(); ++i) {
      if (oracle.ranks[i] == 0) continue;
      EXPECT_LE(max_gap(psgd.q(i), oracle.q[i]), 2e-4) << "step " << step << ", Q of matrix " << i;
      EXPECT_LE(max_gap(psgd.error(i), oracle.error[static_cast<std::size_t>(me)][i]), 2e-4)
          << "step " << step << ", this rank's error of matrix " << i;
    }
    EXPECT_TRUE(same_on_every_rank(grads)) << "step " << step << ": the average differs between ranks";
    EXPECT_TRUE(same_on_every_rank(psgd.q(0))) << "step " << step << ": Q differs between ranks";
  }
}

// An empty layout sends nothing; a layout of vectors only is an exact average.
TEST(PowerSgdOracle, EmptyAndUncompressedOnly) {
  auto inner = backend();
  dtl::testing::RecordingCommunicator rec(*inner);
  lab05::PowerSgd empty({}, {});
  empty.average(rec, nullptr, 0);
  EXPECT_EQ(rec.ops().size(), 0u);
  const int w = comm().size(), me = comm().rank();
  lab05::PowerSgd vectors({{3, 1}, {1, 5}, {1, 1}}, {.rank = 4});
  std::vector<float> grads(9);
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(w * (static_cast<int>(i) + me));
  vectors.average(rec, grads.data(), grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    float sum = 0.0f;
    for (int r = 0; r < w; ++r) sum += static_cast<float>(static_cast<int>(i) + r);
    EXPECT_EQ(grads[i], sum) << "element " << i;
  }
  EXPECT_EQ(rec.bytes(dtl::CollectiveKind::kAllreduce), 9 * sizeof(float));
}

// ---------------------------------------------------------------------------
// Closed forms: exact recovery
// ---------------------------------------------------------------------------

// M_w = (w + 1) u v^T: the mean is ((W + 1) / 2) u v^T, rank 1. PowerSGD at r = 1
// recovers it exactly and leaves no error on any rank.
TEST(PowerSgdExact, RankOneMeanAtRankOneIsRecoveredWithNoError) {
  auto backend_ = backend();
  const int w = comm().size(), me = comm().rank();
  const int n = 5, m = 4;
  const std::vector<double> u = {1, 2, -1, 3, 0.5}, v = {2, -1, 1, 0.25};
  lab05::PowerSgd psgd({{n, m}}, {.rank = 1, .min_compress_elements = 0});
  for (int step = 0; step < 2; ++step) {
    std::vector<float> grads(n * m);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < m; ++j) grads[static_cast<std::size_t>(i * m + j)] = static_cast<float>((me + 1) * u[i] * v[j]);
    }
    psgd.average(*backend_, grads.data(), grads.size());
    const double c = (w + 1) / 2.0;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < m; ++j) {
        EXPECT_NEAR(grads[static_cast<std::size_t>(i * m + j)], c * u[i] * v[j], 1e-5 * c * 6)
            << "step " << step << ", element (" << i << ", " << j << ")";
      }
    }
    for (float e : psgd.error(0)) EXPECT_NEAR(e, 0.0f, 1e-5 * (me + 1) * 6) << "step " << step;
  }
}

// r = min(n, m) (asked for, or clamped from more): the mean of full-rank matrices is
// exact, and the errors cancel over the ranks. On one rank the error is zero.
TEST(PowerSgdExact, FullRankIsExactAndClampsLargerRanks) {
  auto backend_ = backend();
  const int w = comm().size(), me = comm().rank();
  const std::vector<MatrixShape> layout = {{5, 3}, {3, 6}};
  for (int asked : {3, 7}) {
    lab05::PowerSgd psgd(layout, {.rank = asked, .min_compress_elements = 0});
    EXPECT_EQ(psgd.rank_of(0), 3) << "rank " << asked << " on 5 x 3";
    EXPECT_EQ(psgd.rank_of(1), 3) << "rank " << asked << " on 3 x 6";
    for (int step = 0; step < 2; ++step) {
      std::vector<double> mean(33, 0.0);
      for (int r = 0; r < w; ++r) {
        const std::vector<double> g = gradient(33, r, step);
        for (std::size_t k = 0; k < mean.size(); ++k) mean[k] += g[k] / w;
      }
      const std::vector<double> mine = gradient(33, me, step);
      std::vector<float> grads(mine.begin(), mine.end());
      psgd.average(*backend_, grads.data(), grads.size());
      EXPECT_LE(max_gap(grads, mean), 1e-4) << "rank " << asked << ", step " << step;
      for (std::size_t i = 0; i < layout.size(); ++i) {
        const std::vector<double> sum = sum_over_ranks(psgd.error(i));
        for (double s : sum) EXPECT_NEAR(s, 0.0, 1e-4) << "rank " << asked << ", matrix " << i;
        if (w == 1) {
          for (float e : psgd.error(i)) EXPECT_NEAR(e, 0.0f, 1e-4) << "matrix " << i;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Error feedback: nothing is lost, only late
// ---------------------------------------------------------------------------

TEST(PowerSgdFeedback, SentPlusErrorIsEverythingComputed) {
  auto backend_ = backend();
  const int me = comm().rank();
  const std::vector<MatrixShape> layout = {{6, 4}, {5, 1}, {7, 5}};
  lab05::PowerSgd psgd(layout, {.rank = 1, .min_compress_elements = 0, .seed = 3});
  const std::size_t count = 6 * 4 + 5 + 7 * 5;
  std::vector<double> computed(count, 0.0), sent(count, 0.0);
  for (int step = 0; step < 6; ++step) {
    const std::vector<double> g = gradient(count, me, step);
    const std::vector<double> mean = sum_over_ranks(std::vector<float>(g.begin(), g.end()));
    for (std::size_t k = 0; k < count; ++k) computed[k] += mean[k] / comm().size();
    std::vector<float> grads(g.begin(), g.end());
    psgd.average(*backend_, grads.data(), count);
    for (std::size_t k = 0; k < count; ++k) sent[k] += grads[k];
  }
  // sum_t mean(G_t) = sum_t out_t + mean_w(e_w,T), matrix by matrix (the vector has no error).
  double left_out = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const std::size_t n = static_cast<std::size_t>(layout[i].rows * layout[i].cols);
    const std::vector<double> e = psgd.error(i).empty() ? std::vector<double>(n, 0.0) : sum_over_ranks(psgd.error(i));
    for (std::size_t k = 0; k < n; ++k) {
      const double mean_e = e[k] / comm().size();
      left_out = std::max(left_out, std::abs(mean_e));
      EXPECT_NEAR(computed[at + k], sent[at + k] + mean_e, 1e-4) << "matrix " << i << ", element " << k;
    }
    at += n;
  }
  EXPECT_GT(left_out, 1e-2) << "rank 1 of a random 6 x 4 leaves something out: the identity would be empty";
}

// ---------------------------------------------------------------------------
// Bytes on the wire, counted at the interface
// ---------------------------------------------------------------------------

TEST(PowerSgdBytes, AreNPlusMTimesRPerMatrix) {
  auto inner = backend();
  dtl::testing::RecordingCommunicator rec(*inner);
  // min_compress_elements 256 (the default): the 3 x 3 and the bias go uncompressed.
  const std::vector<MatrixShape> layout = {{64, 48}, {48, 1}, {10, 48}, {3, 3}};
  const std::size_t fp32 = (64 * 48 + 48 + 10 * 48 + 9) * sizeof(float);
  for (int r : {1, 2, 4, 12}) {
    lab05::PowerSgd psgd(layout, {.rank = r});
    const std::size_t expected = ((64 + 48) * r + (10 + 48) * std::min(r, 10) + 48 + 9) * sizeof(float);
    EXPECT_EQ(psgd.bytes_per_step(), expected) << "rank " << r;
    for (int step = 0; step < 2; ++step) {
      rec.clear();
      const std::vector<double> g = gradient(psgd.count(), comm().rank(), step);
      std::vector<float> grads(g.begin(), g.end());
      psgd.average(rec, grads.data(), grads.size());
      EXPECT_EQ(rec.bytes(dtl::CollectiveKind::kAllreduce), expected) << "rank " << r << ", step " << step;
      EXPECT_EQ(rec.ops().size(), static_cast<std::size_t>(rec.count(dtl::CollectiveKind::kAllreduce)));
      EXPECT_LE(rec.ops().size(), 3u) << "rank " << r;
      for (const auto& op : rec.ops()) EXPECT_EQ(op.dtype, dtl::DType::kF32) << "rank " << r;
    }
    if (r <= 2) {
      EXPECT_LT(expected * 5, fp32) << "rank " << r << " sends less than a fifth of fp32's bytes";
    }
  }
}

// ---------------------------------------------------------------------------
// Bad input: named, with the rank, before any communication
// ---------------------------------------------------------------------------

TEST(PowerSgdErrors, BadRankSizesAndCountsAreNamed) {
  auto backend_ = backend();
  const std::string me = "rank " + std::to_string(comm().rank());
  for (int r : {0, -2}) {
    const std::string m = invalid_argument_message([r] { lab05::PowerSgd({{4, 4}}, {.rank = r}); });
    EXPECT_NE(m.find("options.rank"), std::string::npos) << m;
    EXPECT_NE(m.find(me), std::string::npos) << m;
  }
  std::string m = invalid_argument_message([] { lab05::PowerSgd({{4, 4}}, {.min_compress_elements = -1}); });
  EXPECT_NE(m.find("options.min_compress_elements"), std::string::npos) << m;
  m = invalid_argument_message([] { lab05::PowerSgd({{4, 4}, {0, 3}}, {}); });
  EXPECT_NE(m.find("layout"), std::string::npos) << m;
  EXPECT_NE(m.find("matrix 1"), std::string::npos) << m;
  lab05::PowerSgd psgd({{4, 4}, {4, 1}}, {.rank = 2, .min_compress_elements = 0});
  std::vector<float> grads(20, 1.0f);
  m = invalid_argument_message([&] { psgd.average(*backend_, grads.data(), 19); });
  EXPECT_NE(m.find("count"), std::string::npos) << m;
  EXPECT_NE(m.find(me), std::string::npos) << m;
  // Still usable after the refusal (nothing was sent): every rank averages together.
  psgd.average(*backend_, grads.data(), grads.size());
  for (std::size_t k = 16; k < 20; ++k) EXPECT_EQ(grads[k], 1.0f) << "the bias of all ones averages to 1";
}

// ---------------------------------------------------------------------------
// Note [Warm-up and power iterations]
// ---------------------------------------------------------------------------

// Warm-up 3: calls 0-2 send exactly fp32's bytes (one allreduce of every element)
// and return the exact mean, Q and the errors untouched; calls 3-5 send rank r's
// bytes and are the plain step from its start (the double oracle, warm-up included).
TEST(PowerSgdWarmup, SendsFp32BytesThenRankRBytes) {
  auto inner = backend();
  dtl::testing::RecordingCommunicator rec(*inner);
  const int w = comm().size(), me = comm().rank();
  const std::vector<MatrixShape> layout = {{64, 48}, {48, 1}, {10, 48}, {3, 3}};
  const PowerSgdOptions options{.rank = 2, .warmup_steps = 3};
  const std::size_t count = 64 * 48 + 48 + 10 * 48 + 9;
  const std::size_t fp32 = count * sizeof(float);
  const std::size_t rank_two = ((64 + 48) * 2 + (10 + 48) * 2 + 48 + 9) * sizeof(float);
  lab05::PowerSgd psgd(layout, options);
  Oracle oracle(layout, options, w);
  for (int call = 0; call < 6; ++call) {
    rec.clear();
    std::vector<std::vector<double>> all;
    for (int r = 0; r < w; ++r) all.push_back(gradient(count, r, 20 + call));
    const std::vector<double> expected = oracle.step(all);
    std::vector<float> grads(all[static_cast<std::size_t>(me)].begin(), all[static_cast<std::size_t>(me)].end());
    psgd.average(rec, grads.data(), grads.size());
    EXPECT_EQ(psgd.steps(), call + 1) << "call " << call;
    const std::size_t bytes = rec.bytes(dtl::CollectiveKind::kAllreduce);
    EXPECT_EQ(bytes, call < 3 ? fp32 : rank_two) << "call " << call << " (warm-up: calls 0-2)";
    EXPECT_EQ(psgd.bytes_at_step(call), call < 3 ? fp32 : rank_two) << "call " << call;
    for (const auto& op : rec.ops()) EXPECT_EQ(op.dtype, dtl::DType::kF32) << "call " << call;
    EXPECT_LE(max_gap(grads, expected), 2e-4) << "call " << call;
    if (call < 3) {
      EXPECT_EQ(rec.ops().size(), 1u) << "call " << call << ": the warm-up is one allreduce of the whole gradient";
      // The exact mean, by the vendor MPI in double.
      const std::vector<double> sum = sum_over_ranks(std::vector<float>(all[static_cast<std::size_t>(me)].begin(),
                                                                      all[static_cast<std::size_t>(me)].end()));
      std::vector<double> mean(count);
      for (std::size_t k = 0; k < count; ++k) mean[k] = sum[k] / w;
      EXPECT_LE(max_gap(grads, mean), 1e-6) << "call " << call << ": the warm-up is the exact average";
      for (std::size_t row = 0; row < 48; ++row) {
        for (int c = 0; c < 2; ++c) {
          EXPECT_EQ(psgd.q(0)[row * 2 + c], lab05::initial_q(options.seed, 0, static_cast<std::int64_t>(row), c))
              << "call " << call << ": the warm-up leaves Q as initial_q() made it";
        }
      }
      for (float e : psgd.error(0)) ASSERT_EQ(e, 0.0f) << "call " << call << ": the warm-up leaves the errors at 0";
    } else {
      EXPECT_LE(max_gap(psgd.q(0), oracle.q[0]), 2e-4) << "call " << call;
      EXPECT_LE(max_gap(psgd.error(0), oracle.error[static_cast<std::size_t>(me)][0]), 2e-4) << "call " << call;
    }
    EXPECT_TRUE(same_on_every_rank(grads)) << "call " << call;
  }
  // An empty layout sends nothing, in the warm-up too, and still counts the call.
  rec.clear();
  lab05::PowerSgd empty({}, {.warmup_steps = 2});
  empty.average(rec, nullptr, 0);
  EXPECT_EQ(rec.ops().size(), 0u);
  EXPECT_EQ(empty.steps(), 1);
}

// Bad options are named; warmup_steps = 0 compresses from the first call.
TEST(PowerSgdWarmup, BadOptionsNamedAndNoWarmupCompressesAtOnce) {
  const std::string me = "rank " + std::to_string(comm().rank());
  std::string m = invalid_argument_message([] { lab05::PowerSgd({{4, 4}}, {.warmup_steps = -1}); });
  EXPECT_NE(m.find("options.warmup_steps"), std::string::npos) << m;
  EXPECT_NE(m.find(me), std::string::npos) << m;
  for (int it : {0, -3}) {
    m = invalid_argument_message([it] { lab05::PowerSgd({{4, 4}}, {.power_iterations = it}); });
    EXPECT_NE(m.find("options.power_iterations"), std::string::npos) << m;
    EXPECT_NE(m.find(me), std::string::npos) << m;
  }
  auto inner = backend();
  dtl::testing::RecordingCommunicator rec(*inner);
  lab05::PowerSgd psgd({{4, 4}}, {.rank = 1, .min_compress_elements = 0, .warmup_steps = 0});
  std::vector<float> grads(16, 1.0f);
  psgd.average(rec, grads.data(), grads.size());
  EXPECT_EQ(rec.bytes(dtl::CollectiveKind::kAllreduce), (4 + 4) * 1 * sizeof(float)) << "no warm-up: P and Q at once";
  for (float g : grads) EXPECT_NEAR(g, 1.0f, 1e-5) << "the all-ones mean is rank 1: exact";
  EXPECT_EQ(psgd.steps(), 1);
}

// Three power iterations per call: every call against the double oracle, and
// 3 (n + m) r floats per compressed matrix in at most 1 + 2 * 3 allreduces.
TEST(PowerSgdIterations, EveryStepMatchesTheDoubleOracle) {
  auto inner = backend();
  dtl::testing::RecordingCommunicator rec(*inner);
  const int w = comm().size(), me = comm().rank();
  PowerSgdOptions options = kOptions;
  options.power_iterations = 3;
  lab05::PowerSgd psgd(kLayout, options);
  Oracle oracle(kLayout, options, w);
  const std::size_t expected_bytes = (3 * ((6 + 4) * 2 + (8 + 5) * 2 + (2 + 7) * 2) + 5 + 9) * sizeof(float);
  EXPECT_EQ(psgd.bytes_per_step(), expected_bytes);
  for (int step = 0; step < 3; ++step) {
    rec.clear();
    std::vector<std::vector<double>> all;
    for (int r = 0; r < w; ++r) all.push_back(gradient(oracle.count, r, 40 + step));
    const std::vector<double> expected = oracle.step(all);
    std::vector<float> grads(all[static_cast<std::size_t>(me)].begin(), all[static_cast<std::size_t>(me)].end());
    psgd.average(rec, grads.data(), grads.size());
    EXPECT_LE(max_gap(grads, expected), 2e-4) << "step " << step;
    EXPECT_LE(max_gap(psgd.q(3), oracle.q[3]), 2e-4) << "step " << step << ", Q of matrix 3";
    EXPECT_LE(max_gap(psgd.error(3), oracle.error[static_cast<std::size_t>(me)][3]), 2e-4) << "step " << step;
    EXPECT_EQ(rec.bytes(dtl::CollectiveKind::kAllreduce), expected_bytes) << "step " << step;
    EXPECT_LE(rec.ops().size(), 7u) << "step " << step;
    EXPECT_TRUE(same_on_every_rank(grads)) << "step " << step;
  }
}

// A closed form: the mean is 8 u1 v1^T + 4 u2 v2^T + 2 u3 v3^T + u4 v4^T (orthonormal
// u's and v's: columns of Householder reflections), each rank adding a deviation that
// cancels over the ranks. Many power iterations at r = 2 give its best rank-2
// picture, 8 u1 v1^T + 4 u2 v2^T, at the first call; one iteration from the random
// first Q does not.
TEST(PowerSgdIterations, ManyIterationsGiveTheBestRankRPicture) {
  auto backend_ = backend();
  const int w = comm().size(), me = comm().rank();
  constexpr int n = 6, m = 5;
  auto householder = [](std::vector<double> v) {  // I - 2 v v^T / v^T v, row-major
    const auto k = static_cast<int>(v.size());
    double vv = 0.0;
    for (double x : v) vv += x * x;
    std::vector<double> h(static_cast<std::size_t>(k * k));
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) h[static_cast<std::size_t>(i * k + j)] = (i == j ? 1.0 : 0.0) - 2.0 * v[static_cast<std::size_t>(i)] * v[static_cast<std::size_t>(j)] / vv;
    }
    return h;
  };
  const std::vector<double> u = householder({1, 2, 3, 4, 5, 6}), v = householder({1, -1, 2, 0, 3});
  const double sigma[4] = {8, 4, 2, 1};
  std::vector<double> best(n * m, 0.0), mine(n * m, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < m; ++j) {
      double full = 0.0;
      for (int k = 0; k < 4; ++k) full += sigma[k] * u[static_cast<std::size_t>(i * n + k)] * v[static_cast<std::size_t>(j * m + k)];
      for (int k = 0; k < 2; ++k) best[static_cast<std::size_t>(i * m + j)] += sigma[k] * u[static_cast<std::size_t>(i * n + k)] * v[static_cast<std::size_t>(j * m + k)];
      const double deviation = (me - (w - 1) / 2.0) * 0.25 * std::sin(1.0 + i * m + j);  // sums to 0 over the ranks
      mine[static_cast<std::size_t>(i * m + j)] = full + deviation;
    }
  }
  for (int iterations : {40, 1}) {
    lab05::PowerSgd psgd({{n, m}}, {.rank = 2, .min_compress_elements = 0, .power_iterations = iterations});
    std::vector<float> grads(mine.begin(), mine.end());
    psgd.average(*backend_, grads.data(), grads.size());
    if (iterations > 1) {
      EXPECT_LE(max_gap(grads, best), 1e-4) << iterations << " power iterations";
    } else {
      EXPECT_GT(max_gap(grads, best), 1e-2) << "one iteration from a random Q: the test would be empty";
    }
  }
}

// ---------------------------------------------------------------------------
// Note [Error reset]
// ---------------------------------------------------------------------------

// Warm-up 1, a reset every 3 compressed calls, in fp32: calls 0, 3 and 6 are exact (the
// closed form), send fp32's bytes in one allreduce and leave every error at 0; the
// others are rank r's. Every call against the double oracle, and after each reset
// what was sent is exactly what was computed (the means by the vendor MPI).
TEST(PowerSgdReset, ResetCallsAreExactAndZeroTheErrors) {
  auto inner = backend();
  dtl::testing::RecordingCommunicator rec(*inner);
  const int w = comm().size(), me = comm().rank();
  PowerSgdOptions options = kOptions;
  options.warmup_steps = 1;
  options.error_reset_period = 3;
  lab05::PowerSgd psgd(kLayout, options);
  Oracle oracle(kLayout, options, w);
  const std::size_t fp32 = oracle.count * sizeof(float);
  const std::size_t compressed = (((6 + 4) * 2 + (8 + 5) * 2 + (2 + 7) * 2) + 5 + 9) * sizeof(float);
  std::vector<double> computed(oracle.count, 0.0), sent(oracle.count, 0.0);
  for (int call = 0; call < 8; ++call) {
    const bool exact = call == 0 || call == 3 || call == 6;
    rec.clear();
    std::vector<std::vector<double>> all;
    for (int r = 0; r < w; ++r) all.push_back(gradient(oracle.count, r, 90 + call));
    const std::vector<double> expected = oracle.step(all);
    const std::vector<float> mine(all[static_cast<std::size_t>(me)].begin(), all[static_cast<std::size_t>(me)].end());
    const std::vector<double> sum = sum_over_ranks(mine);
    std::vector<float> grads = mine;
    psgd.average(rec, grads.data(), grads.size());
    EXPECT_EQ(psgd.exact_call(call), exact) << "call " << call;
    EXPECT_EQ(rec.bytes(dtl::CollectiveKind::kAllreduce), exact ? fp32 : compressed) << "call " << call;
    EXPECT_EQ(psgd.bytes_at_step(call), exact ? fp32 : compressed) << "call " << call;
    if (exact) {
      EXPECT_EQ(rec.ops().size(), 1u) << "call " << call << ": one allreduce of the whole gradient";
    }
    for (const auto& op : rec.ops()) EXPECT_EQ(op.dtype, dtl::DType::kF32) << "call " << call;
    EXPECT_LE(max_gap(grads, expected), 2e-4) << "call " << call;
    EXPECT_TRUE(same_on_every_rank(grads)) << "call " << call;
    for (std::size_t k = 0; k < oracle.count; ++k) {
      computed[k] += sum[k] / w;
      sent[k] += grads[k];
    }
    for (std::size_t i : {std::size_t{0}, std::size_t{3}, std::size_t{4}}) {
      EXPECT_LE(max_gap(psgd.error(i), oracle.error[static_cast<std::size_t>(me)][i]), 2e-4) << "call " << call << ", matrix " << i;
      if (exact) {
        for (float e : psgd.error(i)) ASSERT_EQ(e, 0.0f) << "call " << call << ": the errors are 0 after an exact call";
      }
    }
    if (exact) {
      EXPECT_LE(max_gap(sent, computed), 1e-4) << "call " << call << ": after a reset, all that was computed is sent";
    }
  }
  EXPECT_EQ(psgd.steps(), 8);
}

// exact_dtype = kBF16: the warm-up and the resets send half fp32's bytes, in one bf16
// allreduce. Gradients of the form k / 8 (|k| <= 20) have bf16 sums that are exact, so
// a warm-up call is the exact mean to the bit; a reset (the errors are not on that
// grid) is within bf16's rounding of the double oracle. Compressed calls stay fp32.
TEST(PowerSgdReset, Bf16ExactCallsSendHalfTheBytes) {
  auto inner = backend();
  Bf16OracleCommunicator summed(*inner);  // bf16 sums of the vendor MPI: task A's code plays no part
  dtl::testing::RecordingCommunicator rec(summed);
  const int w = comm().size(), me = comm().rank();
  PowerSgdOptions options = kOptions;
  options.warmup_steps = 2;
  options.error_reset_period = 2;
  options.exact_dtype = dtl::DType::kBF16;
  lab05::PowerSgd psgd(kLayout, options);
  Oracle oracle(kLayout, options, w);
  const std::size_t compressed = (((6 + 4) * 2 + (8 + 5) * 2 + (2 + 7) * 2) + 5 + 9) * sizeof(float);
  for (int call = 0; call < 6; ++call) {
    const bool exact = call < 2 || call == 3 || call == 5;
    rec.clear();
    std::vector<std::vector<double>> all;
    for (int r = 0; r < w; ++r) {
      std::vector<double> g = gradient(oracle.count, r, 110 + call);
      for (double& v : g) v = std::round(std::clamp(v * 8.0, -20.0, 20.0)) / 8.0;
      all.push_back(std::move(g));
    }
    const std::vector<double> expected = oracle.step(all);
    std::vector<float> grads(all[static_cast<std::size_t>(me)].begin(), all[static_cast<std::size_t>(me)].end());
    psgd.average(rec, grads.data(), grads.size());
    EXPECT_EQ(psgd.exact_call(call), exact) << "call " << call;
    EXPECT_EQ(rec.bytes(dtl::CollectiveKind::kAllreduce), exact ? oracle.count * 2 : compressed) << "call " << call;
    EXPECT_EQ(psgd.bytes_at_step(call), exact ? oracle.count * 2 : compressed) << "call " << call;
    for (const auto& op : rec.ops()) {
      EXPECT_EQ(op.dtype, exact ? dtl::DType::kBF16 : dtl::DType::kF32) << "call " << call;
    }
    if (call < 2) {
      for (std::size_t k = 0; k < grads.size(); ++k) {
        double sum = 0.0;  // exact: multiples of 1/8 below 2^8 / 8
        for (int r = 0; r < w; ++r) sum += all[static_cast<std::size_t>(r)][k];
        ASSERT_EQ(grads[k], static_cast<float>(sum / w)) << "call " << call << ", element " << k << ": the warm-up's mean";
      }
    } else {
      EXPECT_LE(max_gap(grads, expected), exact ? 1.0 / 64 : 2e-4) << "call " << call;
    }
    if (exact) {
      for (float e : psgd.error(3)) ASSERT_EQ(e, 0.0f) << "call " << call;
    }
    EXPECT_TRUE(same_on_every_rank(grads)) << "call " << call;
  }
}

// Bad options are named, with the rank; the default never resets and sends fp32.
TEST(PowerSgdReset, BadOptionsNamedAndTheDefaultNeverResets) {
  const std::string me = "rank " + std::to_string(comm().rank());
  std::string m = invalid_argument_message([] { lab05::PowerSgd({{4, 4}}, {.error_reset_period = -1}); });
  EXPECT_NE(m.find("options.error_reset_period"), std::string::npos) << m;
  EXPECT_NE(m.find(me), std::string::npos) << m;
  for (dtl::DType bad : {dtl::DType::kF16, dtl::DType::kI32}) {
    m = invalid_argument_message([bad] { lab05::PowerSgd({{4, 4}}, {.exact_dtype = bad}); });
    EXPECT_NE(m.find("options.exact_dtype"), std::string::npos) << m;
    EXPECT_NE(m.find(me), std::string::npos) << m;
  }
  const lab05::PowerSgd plain({{4, 4}}, {.min_compress_elements = 0, .warmup_steps = 1});
  EXPECT_TRUE(plain.exact_call(0));
  for (int call = 1; call < 50; ++call) EXPECT_FALSE(plain.exact_call(call)) << "call " << call;
  EXPECT_EQ(plain.bytes_at_step(0), 16 * sizeof(float));
}

// ---------------------------------------------------------------------------
// Training: the hook in a data-parallel loop
// ---------------------------------------------------------------------------

// The test's own fp32 data-parallel loop (harness/nn only, no trainer of task C, so
// a fault there costs task D nothing), with PowerSgd::hook() as its gradient average:
// the mean loss of the last 10 of 150 steps within 5% of one fp32 process's.
TEST(PowerSgdTraining, RankTwoTrainsLikeOneFp32Process) {
  constexpr int kSteps = 150;
  const std::vector<double> expected = fp32_losses(ModelKind::kMlp, 5, kSteps);
  auto backend_ = backend();
  nn::Model model = make_model(ModelKind::kMlp, 5);  // the same weights on every rank
  lab05::PowerSgd psgd(lab05::matrix_layout(model), {.rank = 2, .min_compress_elements = 0});
  const auto average = psgd.hook();
  const std::vector<nn::Parameter*> params = model.parameters();
  const nn::Tensor values = nn::flatten_values(params), grads = nn::flatten_grads(params);
  nn::AdamW adam(kAdamW, values.numel());
  nn::SoftmaxCrossEntropy ce;
  double last = 0.0, first = 0.0;
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = rank_batch(ModelKind::kMlp, step, kGlobalBatch, comm().rank(), comm().size());
    model.zero_grad();
    double loss = ce.forward(model.forward(b.x), b.y);
    model.backward(ce.backward());
    average(*backend_, grads.raw(), static_cast<std::size_t>(grads.numel()), dtl::DType::kF32,
            lab05::DividePlacement::kPre);
    adam.step(values.span<float>(), grads.span<float>());
    MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, comm());  // equal rows per rank: the global mean
    loss /= comm().size();
    if (step == 0) first = loss;
    if (step >= kSteps - 10) last += loss / 10;
  }
  double uncompressed = 0.0;
  for (int step = kSteps - 10; step < kSteps; ++step) uncompressed += expected[static_cast<std::size_t>(step)] / 10;
  if (comm().rank() == 0) {
    std::printf("[ info ] loss at step 0 %.4f; mean of steps %d-%d: PowerSGD rank 2 %.4f, one fp32 process %.4f\n", first,
                kSteps - 10, kSteps - 1, last, uncompressed);
  }
  EXPECT_LT(last, 0.85 * first) << "PowerSGD did not train";
  EXPECT_LE(std::abs(last - uncompressed), 0.05 * uncompressed)
      << "mean loss of the last 10 steps: PowerSGD rank 2 " << last << ", one fp32 process " << uncompressed;
  EXPECT_TRUE(same_on_every_rank(std::vector<float>(values.data<float>(), values.data<float>() + values.numel())))
      << "the weights differ between ranks";
}

}  // namespace
}  // namespace lab05_test
