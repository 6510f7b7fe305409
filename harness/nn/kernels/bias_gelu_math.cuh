// The math of the fused bias + GELU kernels (bias_gelu.cu), written once for
// the GPU and the host; tests/kernels_host_test.cc runs it on the host against
// the unfused CPU layers (Linear with its bias, then GELU) and against central
// differences. See Note [Fused bias + GELU] in bias_gelu.cu.
//
// Shapes: y is the Linear's output without its bias, (N, C) row-major; b (C).
#pragma once

#include <cstdint>

#include "harness/nn/kernels/elementwise_math.cuh"

namespace dtl::nn::kernels {

/// @brief gelu(y + b): one element of the forward, the bias added in a register.
DTL_NN_HD inline float bias_gelu(float y, float b) { return gelu(y + b); }

/// @brief One column j of the backward, what one thread of bias_gelu_backward does:
/// for every row i, h = y[i, j] + b[j] (recomputed, never stored), dh[i, j] = gelu'(h) dg[i, j],
/// and db[j] += dh[i, j], rows in order 0, 1, ... (the CPU Linear's order, so db is the
/// CPU's to the last bit when dh is).
/// @param[out] dh (N, C), column j written.
/// @param[in,out] db (C), element j accumulated.
DTL_NN_HD inline void bias_gelu_backward_column(float* dh, float* db, const float* y, const float* b, const float* dg,
                                                std::int64_t rows, std::int64_t cols, std::int64_t j) {
  const float bj = b[j];
  float acc = db[j];
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t at = i * cols + j;
    const float d = gelu_backward(y[at] + bj, dg[at]);
    dh[at] = d;
    acc += d;
  }
  db[j] = acc;
}

}  // namespace dtl::nn::kernels
