// Embedding and PositionalEmbedding on the GPU: gathers forward, sums backward.
//
// What this file teaches: forward is a gather (row tokens[i] of W into row i of
// y), one thread per output element, so consecutive threads copy consecutive
// channels (coalesced). Backward is the scatter the other way: several
// positions may hold the same token, so several rows of dy add into one row of
// dW. The usual GPU answer is atomicAdd, which makes the float sums' order, and
// so their last bits, change from run to run. Here one thread owns one channel
// of dW and walks the tokens in order: no atomics, deterministic, in the CPU
// layer's order, at the price of parallelism C instead of N*C (fine for the
// labs' sizes; a sort-by-token backward is what large vocabularies use).
//
// Token ids are not checked on the GPU (reading them back would wait for the
// stream): an id outside [0, V) gives a row of NaN forward, so the loss is NaN,
// and is skipped backward.
#include <cmath>

#include "harness/cuda/check.h"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"

namespace dtl::nn::detail {

namespace {

using kernels::blocks_for;
using kernels::kThreads;

// y (N, C) = W (V, C) [tokens (N)].
__global__ void embedding_forward_kernel(float* y, const std::int32_t* tokens, const float* w, std::int64_t n,
                                         std::int64_t vocab, std::int64_t c) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * c;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t token = tokens[i / c];
    y[i] = (token >= 0 && token < vocab) ? w[token * c + i % c] : NAN;
  }
}

// dW[tokens[i]] (C) += dy[i] (C), i = 0 .. N-1 in order: one thread per channel j.
__global__ void embedding_backward_kernel(float* dw, const std::int32_t* tokens, const float* dy, std::int64_t n,
                                          std::int64_t vocab, std::int64_t c) {
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < c;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int32_t token = tokens[i];
      if (token >= 0 && token < vocab) dw[token * c + j] += dy[i * c + j];
    }
  }
}

// y (B, T, C) = x + P[t] (C).
__global__ void positional_forward_kernel(float* y, const float* x, const float* p, std::int64_t batch,
                                          std::int64_t seq, std::int64_t c) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < batch * seq * c;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x[i] + p[i % (seq * c)];  // i % (T C) = t C + j
  }
}

// dP[t] (C) += sum_b dy[b, t] (C): one thread per (t, j), b in order.
__global__ void positional_backward_kernel(float* dp, const float* dy, std::int64_t batch, std::int64_t seq,
                                           std::int64_t c) {
  for (std::int64_t tj = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; tj < seq * c;
       tj += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float acc = dp[tj];
    for (std::int64_t b = 0; b < batch; ++b) acc += dy[b * seq * c + tj];
    dp[tj] = acc;
  }
}

}  // namespace

void embedding_forward(OnCuda on, float* y, const std::int32_t* tokens, const float* w, std::int64_t n,
                       std::int64_t vocab, std::int64_t c) {
  if (n == 0) return;
  embedding_forward_kernel<<<blocks_for(n * c), kThreads, 0, on.stream>>>(y, tokens, w, n, vocab, c);
  DTL_CUDA_CHECK_LAUNCH();
}

void embedding_backward(OnCuda on, float* dw, const std::int32_t* tokens, const float* dy, std::int64_t n,
                        std::int64_t vocab, std::int64_t c) {
  if (n == 0) return;
  embedding_backward_kernel<<<blocks_for(c), kThreads, 0, on.stream>>>(dw, tokens, dy, n, vocab, c);
  DTL_CUDA_CHECK_LAUNCH();
}

void positional_forward(OnCuda on, float* y, const float* x, const float* p, std::int64_t batch, std::int64_t seq,
                        std::int64_t c) {
  if (batch * seq * c == 0) return;
  positional_forward_kernel<<<blocks_for(batch * seq * c), kThreads, 0, on.stream>>>(y, x, p, batch, seq, c);
  DTL_CUDA_CHECK_LAUNCH();
}

void positional_backward(OnCuda on, float* dp, const float* dy, std::int64_t batch, std::int64_t seq,
                         std::int64_t c) {
  if (seq * c == 0) return;
  positional_backward_kernel<<<blocks_for(seq * c), kThreads, 0, on.stream>>>(dp, dy, batch, seq, c);
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace dtl::nn::detail
