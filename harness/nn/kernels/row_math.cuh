// The per-row math of LayerNorm, softmax and cross-entropy, written once for
// the GPU and the host.
//
// What this file teaches: a row operation (normalize a row, softmax a row) is
// reductions over the row followed by an elementwise pass. On the GPU a group
// of `lanes` threads (a warp of 32, or a block) shares a row: lane l takes the
// elements l, l + lanes, l + 2 lanes, ... (consecutive lanes read consecutive
// addresses: coalesced), reduces its share here, and the group combines the
// lanes' partial results (warp shuffles, shared memory: layernorm.cu,
// softmax_xent.cu, attention.cu). The host tests run these same functions for
// every lane in turn, combine the partials, and compare with the CPU layers
// (tests/kernels_host_test.cc), so the index arithmetic and the formulas are
// checked in CI, where there is no GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "harness/nn/kernels/elementwise_math.cuh"  // DTL_NN_HD

namespace dtl::nn::kernels {

// ---------------------------------------------------------------------------
// Sums of one lane's share of a row
// ---------------------------------------------------------------------------

/// @brief sum of x[j] over j = lane, lane + lanes, ... < count.
DTL_NN_HD inline float lane_sum(const float* x, std::int64_t count, int lane, int lanes) {
  float s = 0.0f;
  for (std::int64_t j = lane; j < count; j += lanes) s += x[j];
  return s;
}

/// @brief sum of (x[j] - mean)^2 over this lane's share: the variance's numerator, in a second pass
/// (one pass of sum and sum of squares loses digits when the mean is large).
DTL_NN_HD inline float lane_sum_sq_dev(const float* x, std::int64_t count, float mean, int lane, int lanes) {
  float s = 0.0f;
  for (std::int64_t j = lane; j < count; j += lanes) s += (x[j] - mean) * (x[j] - mean);
  return s;
}

/// @brief sum of a[j] * b[j] over this lane's share.
DTL_NN_HD inline float lane_dot(const float* a, const float* b, std::int64_t count, int lane, int lanes) {
  float s = 0.0f;
  for (std::int64_t j = lane; j < count; j += lanes) s += a[j] * b[j];
  return s;
}

// ---------------------------------------------------------------------------
// LayerNorm: y = (x - mean) rstd w + b, rstd = 1 / sqrt(var + 1e-5), var biased
// ---------------------------------------------------------------------------

inline constexpr float kLayerNormEps = 1e-5f;

/// @brief 1 / sqrt(var + eps) from the summed squared deviations of a row of c.
DTL_NN_HD inline float layernorm_rstd(float sum_sq_dev, std::int64_t c) {
  return 1.0f / sqrtf(sum_sq_dev / static_cast<float>(c) + kLayerNormEps);
}

/// @brief One output element.
DTL_NN_HD inline float layernorm_element(float x, float mean, float rstd, float w, float b) {
  return (x - mean) * rstd * w + b;
}

/// @brief A lane's share of the two backward sums of a row: sum dnorm and sum dnorm * norm,
/// with norm = (x - mean) rstd and dnorm = dy w.
struct LayerNormSums {
  float dnorm = 0.0f;       ///< sum of dy w
  float dnorm_norm = 0.0f;  ///< sum of dy w norm
};

/// @brief This lane's LayerNormSums of a row of c.
DTL_NN_HD inline LayerNormSums layernorm_lane_sums(const float* dy, const float* x, const float* w, float mean,
                                                   float rstd, std::int64_t c, int lane, int lanes) {
  LayerNormSums s;
  for (std::int64_t j = lane; j < c; j += lanes) {
    const float dnorm = dy[j] * w[j];
    s.dnorm += dnorm;
    s.dnorm_norm += dnorm * (x[j] - mean) * rstd;
  }
  return s;
}

/// @brief dx of one element: rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)).
DTL_NN_HD inline float layernorm_dx(float dy, float x, float w, float mean, float rstd, float dnorm_mean,
                                    float dnorm_norm_mean) {
  const float norm = (x - mean) * rstd;
  return (dy * w - dnorm_mean - norm * dnorm_norm_mean) * rstd;
}

// ---------------------------------------------------------------------------
// Softmax and cross-entropy over a row of V logits
// ---------------------------------------------------------------------------

/// @brief A candidate for the row's maximum and where it is.
struct MaxArg {
  float value;         ///< the largest logit seen
  std::int64_t index;  ///< its index; the first one among equals
};

/// @brief The larger of two candidates; on a tie the smaller index (the CPU's first maximum).
DTL_NN_HD inline MaxArg max_arg_combine(MaxArg a, MaxArg b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

/// @brief This lane's maximum of z over its share (value -inf, index INT64_MAX when the share is empty).
DTL_NN_HD inline MaxArg lane_max_arg(const float* z, std::int64_t count, int lane, int lanes) {
  MaxArg m{-INFINITY, INT64_MAX};
  for (std::int64_t j = lane; j < count; j += lanes) m = max_arg_combine(m, MaxArg{z[j], j});
  return m;
}

/// @brief sum of exp(z[j] - max) over this lane's share, in double (as the CPU loss does).
DTL_NN_HD inline double lane_sum_exp(const float* z, std::int64_t count, float max, int lane, int lanes) {
  double s = 0.0;
  for (std::int64_t j = lane; j < count; j += lanes) s += exp(static_cast<double>(z[j] - max));
  return s;
}

/// @brief One probability, exp(z - max) / sum.
DTL_NN_HD inline float softmax_prob(float z, float max, double sum) {
  return static_cast<float>(exp(static_cast<double>(z - max)) / sum);
}

/// @brief The row's loss -log p[target] = log(sum) - (z[target] - max): exact even where p underflows.
DTL_NN_HD inline double xent_row_loss(double sum, float z_target, float max) {
  return log(sum) - static_cast<double>(z_target - max);
}

/// @brief One element of dlogits: (p - [j is the target]) * scale / N, given s = scale / N.
DTL_NN_HD inline float xent_grad(float p, bool is_target, float s) { return (p - (is_target ? 1.0f : 0.0f)) * s; }

// ---------------------------------------------------------------------------
// The causal softmax of attention, over the first len = t + 1 scores of a row
// ---------------------------------------------------------------------------

/// @brief This lane's maximum of a[0 .. len) (-inf when its share is empty).
DTL_NN_HD inline float lane_max(const float* a, std::int64_t len, int lane, int lanes) {
  float m = -INFINITY;
  for (std::int64_t j = lane; j < len; j += lanes) m = a[j] > m ? a[j] : m;
  return m;
}

/// @brief sum of expf(a[j] - max) over this lane's share, in float (as the CPU attention does).
DTL_NN_HD inline float lane_sum_expf(const float* a, std::int64_t len, float max, int lane, int lanes) {
  float s = 0.0f;
  for (std::int64_t j = lane; j < len; j += lanes) s += expf(a[j] - max);
  return s;
}

/// @brief The softmax's backward for one score: a (datt - sum_k a_k datt_k) * scale.
DTL_NN_HD inline float softmax_backward_element(float a, float datt, float weighted, float scale) {
  return a * (datt - weighted) * scale;
}

}  // namespace dtl::nn::kernels
