// Lab 05, task D: PowerSGD, rank-r gradient compression with error feedback.
//
// What this file teaches: a gradient average that sends (n + m) r numbers per
// n x m matrix instead of n m, and why it still trains: one step of power
// iteration per training step finds the top-r subspace of the mean gradient,
// and error feedback sends later what the rank-r picture left out. See Note
// [PowerSGD] in lab05/powersgd.h for the steps and the invariant.
//
// Shapes, for one compressed matrix (row-major, as the flat gradient holds it):
//     M  n x m    this rank's gradient plus its error      grads + offset
//     P  n x r    M Q, summed over the ranks, orthonormal  packed in `ps`
//     Q  m x r    M^T P, averaged over the ranks           packed in `qs`, then q_[i]
//     e  n x m    M - P Q_w^T, this rank's                 error_[i]
//
// Communication per call: one f32 allreduce of every P, one of every Q, one of
// the uncompressed gradients. That is PyTorch's batching too (its hook packs
// the P's and the Q's of a bucket into one tensor each). With more power
// iterations, one more P and one more Q allreduce per round; in the warm-up and
// at an error reset, one allreduce of the whole gradient, in fp32 or bf16 (Notes
// [Warm-up and power iterations] and [Error reset]).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "harness/error.h"
#include "harness/nn/half.h"
#include "lab05/powersgd.h"

namespace dtl::lab05 {

void orthonormalize_columns(float* a, std::int64_t rows, std::int64_t cols) {
  DTL_REQUIRE_ARG(rows >= 0, "orthonormalize_columns", "rows", "is " + std::to_string(rows) + ", must be >= 0");
  DTL_REQUIRE_ARG(cols >= 0, "orthonormalize_columns", "cols", "is " + std::to_string(cols) + ", must be >= 0");
  DTL_REQUIRE_ARG(rows * cols == 0 || a != nullptr, "orthonormalize_columns", "a",
                  "is null for a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
  // BEGIN SOLUTION(orthonormalize_columns)
  // | On return the columns of the row-major rows x cols matrix `a` are orthonormal, made
  // | in column order as the header says: column j keeps only its part orthogonal to the
  // | columns before it (as they are on return), scaled to norm 1; a column left with norm
  // | exactly 0 stays 0. fp32 arithmetic in a fixed order, so equal inputs give equal bits
  // | on every rank (handout Task D, Hint 2).
  for (std::int64_t j = 0; j < cols; ++j) {
    // Modified Gram-Schmidt: remove each earlier (already unit) column k from column j.
    for (std::int64_t k = 0; k < j; ++k) {
      float dot = 0.0f;
      for (std::int64_t i = 0; i < rows; ++i) dot += a[i * cols + k] * a[i * cols + j];
      for (std::int64_t i = 0; i < rows; ++i) a[i * cols + j] -= dot * a[i * cols + k];
    }
    float norm2 = 0.0f;
    for (std::int64_t i = 0; i < rows; ++i) norm2 += a[i * cols + j] * a[i * cols + j];
    if (norm2 == 0.0f) continue;  // a zero column stays zero: nothing to send in that direction
    const float inv = 1.0f / std::sqrt(norm2);
    for (std::int64_t i = 0; i < rows; ++i) a[i * cols + j] *= inv;
  }
  // END SOLUTION
}

void PowerSgd::average(Communicator& backend, float* grads, std::size_t count) {
  DTL_REQUIRE_ARG(count == count_, "PowerSgd::average", "count",
                  "is " + std::to_string(count) + "; the layout holds " + std::to_string(count_) +
                      " elements: hand over the whole gradient as one bucket");
  DTL_REQUIRE_ARG(count == 0 || grads != nullptr, "PowerSgd::average", "grads", "is null");
  // BEGIN SOLUTION(PowerSgd::average)
  // | On return every rank's grads holds the same compressed mean of Note [PowerSGD]: each
  // | compressed matrix i (ranks_[i] > 0, at offsets_[i], layout_[i], Q in q_[i], this rank's
  // | error in error_[i]) is replaced by its rank-r picture (P times Q transposed) after error
  // | feedback, options_.power_iterations power-iteration steps from q_[i], each with
  // | orthonormalize_columns() and the Q's averaged; q_[i] and error_[i] updated for the next
  // | call. Every other matrix is averaged exactly. A call with exact_call(step) true (steps_
  // | counts every call) is one exact average of the whole gradient instead, in
  // | options_.exact_dtype: in the warm-up Q and errors untouched, at an error reset the
  // | errors added first and then zeroed. Over `backend`: one f32 allreduce per transfer (a
  // | bf16 sum for bf16 exact calls), bytes_at_step() bytes in all, each waited for before
  // | returning. See Notes [Warm-up and power iterations] and [Error reset], and handout
  // | Task D, Hints 1-3.
  const float world = static_cast<float>(backend.world_size());
  const std::int64_t step = steps_++;

  // 0. The exact calls: the warm-up (Q and the errors wait) and an error reset (M = G + e
  //    averaged whole, then every error is 0). In fp32, or summed in bf16 (Note [Error reset]).
  if (exact_call(step)) {
    if (step >= options_.warmup_steps) {
      for (std::size_t i = 0; i < layout_.size(); ++i) {
        float* mat = grads + offsets_[i];
        for (float& e : error_[i]) *mat++ += std::exchange(e, 0.0f);
      }
    }
    if (count == 0) return;
    if (options_.exact_dtype == DType::kF32) {
      backend.allreduce(grads, count, DType::kF32, ReduceOp::kAvg).wait();
      return;
    }
    std::vector<std::uint16_t> narrow(count);
    for (std::size_t k = 0; k < count; ++k) narrow[k] = nn::float_to_bf16_bits(grads[k]);
    backend.allreduce(narrow.data(), count, DType::kBF16, ReduceOp::kSum).wait();
    for (std::size_t k = 0; k < count; ++k) grads[k] = nn::bf16_bits_to_float(narrow[k]) / world;
    return;
  }

  std::size_t p_total = 0, q_total = 0, plain_total = 0;
  for (std::size_t i = 0; i < layout_.size(); ++i) {
    const MatrixShape s = layout_[i];
    p_total += static_cast<std::size_t>(s.rows * ranks_[i]);
    q_total += static_cast<std::size_t>(s.cols * ranks_[i]);
    if (ranks_[i] == 0) plain_total += static_cast<std::size_t>(s.rows * s.cols);
  }

  // 1. The uncompressed gradients: packed, averaged exactly, unpacked.
  if (plain_total > 0) {
    std::vector<float> plain;
    plain.reserve(plain_total);
    for (std::size_t i = 0; i < layout_.size(); ++i) {
      if (ranks_[i] == 0) plain.insert(plain.end(), grads + offsets_[i], grads + offsets_[i] + layout_[i].rows * layout_[i].cols);
    }
    backend.allreduce(plain.data(), plain.size(), DType::kF32, ReduceOp::kAvg).wait();
    std::size_t at = 0;
    for (std::size_t i = 0; i < layout_.size(); ++i) {
      if (ranks_[i] != 0) continue;
      const auto n = static_cast<std::size_t>(layout_[i].rows * layout_[i].cols);
      std::memcpy(grads + offsets_[i], plain.data() + at, n * sizeof(float));
      at += n;
    }
  }
  if (p_total == 0) return;

  // 2. M = G + e for every compressed matrix (in place: grads holds M from here on).
  for (std::size_t i = 0; i < layout_.size(); ++i) {
    if (ranks_[i] == 0) continue;
    float* mat = grads + offsets_[i];
    for (std::size_t k = 0; k < error_[i].size(); ++k) mat[k] += error_[i][k];
  }

  // 3. The power-iteration rounds, each: P = M Q (packed, summed over the ranks),
  //    orthonormalized (the same bits everywhere: the same input), Q_w = M^T P, Q = the
  //    mean of the Q_w, kept. The last round also keeps e = M - P Q_w^T.
  std::vector<float> ps(p_total), qs(q_total);
  for (int round = 1; round <= options_.power_iterations; ++round) {
    const bool last = round == options_.power_iterations;
    std::fill(ps.begin(), ps.end(), 0.0f);
    std::fill(qs.begin(), qs.end(), 0.0f);
    for (std::size_t i = 0, p_at = 0; i < layout_.size(); ++i) {
      const std::int64_t n = layout_[i].rows, m = layout_[i].cols, r = ranks_[i];
      if (r == 0) continue;
      const float* mat = grads + offsets_[i];
      float* p = ps.data() + p_at;
      const float* q = q_[i].data();
      for (std::int64_t row = 0; row < n; ++row) {
        for (std::int64_t col = 0; col < m; ++col) {
          const float v = mat[row * m + col];
          for (std::int64_t c = 0; c < r; ++c) p[row * r + c] += v * q[col * r + c];
        }
      }
      p_at += static_cast<std::size_t>(n * r);
    }
    // A sum, not a mean: the orthonormalisation that follows removes any scale.
    backend.allreduce(ps.data(), ps.size(), DType::kF32, ReduceOp::kSum).wait();

    for (std::size_t i = 0, p_at = 0, q_at = 0; i < layout_.size(); ++i) {
      const std::int64_t n = layout_[i].rows, m = layout_[i].cols, r = ranks_[i];
      if (r == 0) continue;
      float* p = ps.data() + p_at;
      float* q = qs.data() + q_at;
      orthonormalize_columns(p, n, r);
      const float* mat = grads + offsets_[i];
      for (std::int64_t row = 0; row < n; ++row) {
        for (std::int64_t col = 0; col < m; ++col) {
          const float v = mat[row * m + col];
          for (std::int64_t c = 0; c < r; ++c) q[col * r + c] += v * p[row * r + c];
        }
      }
      if (last) {
        std::vector<float>& e = error_[i];
        for (std::int64_t row = 0; row < n; ++row) {
          for (std::int64_t col = 0; col < m; ++col) {
            float approx = 0.0f;
            for (std::int64_t c = 0; c < r; ++c) approx += p[row * r + c] * q[col * r + c];
            e[static_cast<std::size_t>(row * m + col)] = mat[row * m + col] - approx;
          }
        }
      }
      p_at += static_cast<std::size_t>(n * r);
      q_at += static_cast<std::size_t>(m * r);
    }

    backend.allreduce(qs.data(), qs.size(), DType::kF32, ReduceOp::kSum).wait();
    for (float& v : qs) v /= world;
    for (std::size_t i = 0, q_at = 0; i < layout_.size(); ++i) {
      if (ranks_[i] == 0) continue;
      std::copy(qs.begin() + static_cast<std::ptrdiff_t>(q_at), qs.begin() + static_cast<std::ptrdiff_t>(q_at + q_[i].size()),
                q_[i].begin());
      q_at += q_[i].size();
    }
  }

  // 4. The mean gradient ~ P Q^T, from the last round's P and Q.
  for (std::size_t i = 0, p_at = 0, q_at = 0; i < layout_.size(); ++i) {
    const std::int64_t n = layout_[i].rows, m = layout_[i].cols, r = ranks_[i];
    if (r == 0) continue;
    const float* p = ps.data() + p_at;
    const float* q = qs.data() + q_at;
    float* mat = grads + offsets_[i];
    for (std::int64_t row = 0; row < n; ++row) {
      for (std::int64_t col = 0; col < m; ++col) {
        float v = 0.0f;
        for (std::int64_t c = 0; c < r; ++c) v += p[row * r + c] * q[col * r + c];
        mat[row * m + col] = v;
      }
    }
    p_at += static_cast<std::size_t>(n * r);
    q_at += static_cast<std::size_t>(m * r);
  }
  // END SOLUTION
}

}  // namespace dtl::lab05
