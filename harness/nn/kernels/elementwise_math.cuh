// The per-element math of the activations, written once for the GPU and the host.
//
// What this file teaches: a kernel is a loop body plus an index. Write the body
// as a __host__ __device__ function and the kernel (elementwise.cu) is a
// grid-stride loop around it, while the CPU tests (tests/kernels_host_test.cc)
// call the very same function on the host and compare it with the CPU layers
// (dense.cc), a separate implementation. Same idea as lab 03's reduce-copy.
//
// The math is in float, as on the GPU: tanhf and friends exist on both sides.
#pragma once

#ifndef DTL_NN_HD
#if defined(__CUDACC__)
#define DTL_NN_HD __host__ __device__
#else
#define DTL_NN_HD
#endif
#endif

#include <cmath>

namespace dtl::nn::kernels {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

/// @brief max(x, 0).
DTL_NN_HD inline float relu(float x) { return x > 0.0f ? x : 0.0f; }

/// @brief dy where x > 0, else 0 (the subgradient at 0 is 0, as in the CPU layer).
DTL_NN_HD inline float relu_backward(float x, float dy) { return x > 0.0f ? dy : 0.0f; }

/// @brief GELU, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
DTL_NN_HD inline float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
}

/// @brief gelu'(x) dy, with u = sqrt(2/pi) (x + 0.044715 x^3):
/// gelu'(x) = (1 + tanh u) / 2 + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
DTL_NN_HD inline float gelu_backward(float x, float dy) {
  const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return grad * dy;
}

}  // namespace dtl::nn::kernels
