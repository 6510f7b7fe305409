// Causal self-attention's core on the GPU: strided-batched cuBLAS around two
// small row kernels.
//
// What this file teaches: attention is GEMMs and one softmax. For every batch
// b and head h (B*NH independent problems, one launch each via
// cublasSgemmStridedBatched):
//
//     forward                               backward (dout given)
//     S   = q k^T / sqrt(hs)    (T, T)      datt = dout v^T        (T, T)
//     att = causal softmax(S)   (T, T)      dv   = att^T dout      (T, hs)
//     out = att v               (T, hs)     dS   = softmax'(datt)  (T, T), scale folded in
//                                           dq   = dS k,  dk = dS^T q
//
// Strided batching wants each problem's matrix at a fixed distance from the
// previous one. In qkv (B, T, 3C) the heads are interleaved along C, so the
// first step copies q, k, v into (B, NH, T, hs) (gather_heads), and the last
// copies the result back (scatter_heads), through the index map of
// attention_math.cuh: llm.c's permute and unpermute. They
// cost a pass over B*T*3C floats each and make every GEMM a plain one.
//
// The causal softmax is a warp per row of S: row t keeps scores 0..t and zeroes
// the rest (the GEMM computed them; the mask throws them away). Same math as
// the CPU layer (row_math.cuh); the scratch tensors come from launch.cuh.
//
// Left out: flash attention (never writing the (T, T) matrix to memory), which
// is what makes long contexts affordable.
#include <cmath>

#include "harness/cuda/check.h"
#include "harness/nn/cuda_ops.h"
#include "harness/nn/kernels/attention_math.cuh"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"
#include "harness/nn/kernels/warp.cuh"

namespace dtl::nn::detail {

namespace {

using namespace kernels;

constexpr int kRowsPerBlock = kThreads / kWarp;

// dst (B, NH, T, hs) = the head slices of src (B, T, row) starting at column `first`.
__global__ void gather_heads_kernel(float* dst, const float* src, std::int64_t row, std::int64_t first, HeadDims d) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < d.count();
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[head_source(i, row, first, d)];
  }
}

// The inverse: the head slices of dst (B, T, row) from column `first` = src (B, NH, T, hs).
__global__ void scatter_heads_kernel(float* dst, std::int64_t row, std::int64_t first, const float* src, HeadDims d) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < d.count();
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dst[head_source(i, row, first, d)] = src[i];
  }
}

// att (B*NH*T rows of T): softmax over columns 0..t of row t, zero after. A warp per row.
__global__ void causal_softmax_kernel(float* att, std::int64_t rows, std::int64_t seq) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (r >= rows) return;
  float* a = att + r * seq;
  const std::int64_t len = r % seq + 1;  // row t sees t + 1 positions
  const float max = warp_max(lane_max(a, len, lane, kWarp));
  const float sum = warp_sum(lane_sum_expf(a, len, max, lane, kWarp));
  for (std::int64_t j = lane; j < seq; j += kWarp) a[j] = j < len ? expf(a[j] - max) / sum : 0.0f;
}

// datt (rows of T) becomes dS = att (datt - sum(att datt)) scale on 0..t, 0 after. A warp per row.
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, std::int64_t rows, std::int64_t seq,
                                               float scale) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (r >= rows) return;
  float* g = datt + r * seq;
  const float* a = att + r * seq;
  const std::int64_t len = r % seq + 1;
  const float weighted = warp_sum(lane_dot(a, g, len, lane, kWarp));
  for (std::int64_t j = lane; j < seq; j += kWarp)
    g[j] = j < len ? softmax_backward_element(a[j], g[j], weighted, scale) : 0.0f;
}

void gather(CUstream_st* stream, float* dst, const float* src, std::int64_t row, std::int64_t first,
            const HeadDims& d) {
  gather_heads_kernel<<<blocks_for(d.count()), kThreads, 0, stream>>>(dst, src, row, first, d);
  DTL_CUDA_CHECK_LAUNCH();
}

void scatter(CUstream_st* stream, float* dst, std::int64_t row, std::int64_t first, const float* src,
             const HeadDims& d) {
  scatter_heads_kernel<<<blocks_for(d.count()), kThreads, 0, stream>>>(dst, row, first, src, d);
  DTL_CUDA_CHECK_LAUNCH();
}

int row_blocks(std::int64_t rows) { return static_cast<int>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void attention_forward(OnCuda on, float* out, float* att, const float* qkv, std::int64_t batch, std::int64_t seq,
                       std::int64_t c, std::int64_t heads) {
  const HeadDims d{batch, seq, heads, c / heads};
  const std::int64_t n = d.count(), bh = batch * heads, t = seq, hs = d.hs;
  if (n == 0) return;
  float* q = static_cast<float*>(scratch(1, 4 * static_cast<std::size_t>(n) * sizeof(float)));
  float* k = q + n;
  float* v = k + n;
  float* o = v + n;
  gather(on.stream, q, qkv, 3 * c, 0, d);
  gather(on.stream, k, qkv, 3 * c, c, d);
  gather(on.stream, v, qkv, 3 * c, 2 * c, d);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  // S (T, T) = scale q (T, hs) k^T, for each of the B*NH heads.
  cuda::gemm_strided_batched(false, true, t, t, hs, scale, q, hs, t * hs, k, hs, t * hs, 0.0f, att, t, t * t, bh,
                             on.stream);
  causal_softmax_kernel<<<row_blocks(bh * t), kThreads, 0, on.stream>>>(att, bh * t, t);
  DTL_CUDA_CHECK_LAUNCH();
  // o (T, hs) = att (T, T) v (T, hs).
  cuda::gemm_strided_batched(false, false, t, hs, t, 1.0f, att, t, t * t, v, hs, t * hs, 0.0f, o, hs, t * hs, bh,
                             on.stream);
  scatter(on.stream, out, c, 0, o, d);
}

void attention_backward(OnCuda on, float* dqkv, const float* dout, const float* att, const float* qkv,
                        std::int64_t batch, std::int64_t seq, std::int64_t c, std::int64_t heads) {
  const HeadDims d{batch, seq, heads, c / heads};
  const std::int64_t n = d.count(), bh = batch * heads, t = seq, hs = d.hs;
  if (n == 0) return;
  float* q = static_cast<float*>(scratch(1, 7 * static_cast<std::size_t>(n) * sizeof(float)));
  float* k = q + n;
  float* v = k + n;
  float* dout_h = v + n;
  float* dq = dout_h + n;
  float* dk = dq + n;
  float* dv = dk + n;
  float* ds = static_cast<float*>(scratch(2, static_cast<std::size_t>(bh * t * t) * sizeof(float)));
  gather(on.stream, q, qkv, 3 * c, 0, d);
  gather(on.stream, k, qkv, 3 * c, c, d);
  gather(on.stream, v, qkv, 3 * c, 2 * c, d);
  gather(on.stream, dout_h, dout, c, 0, d);
  // datt (T, T) = dout (T, hs) v^T.
  cuda::gemm_strided_batched(false, true, t, t, hs, 1.0f, dout_h, hs, t * hs, v, hs, t * hs, 0.0f, ds, t, t * t, bh,
                             on.stream);
  // dv (T, hs) = att^T (T, T) dout (T, hs).
  cuda::gemm_strided_batched(true, false, t, hs, t, 1.0f, att, t, t * t, dout_h, hs, t * hs, 0.0f, dv, hs, t * hs,
                             bh, on.stream);
  causal_softmax_backward_kernel<<<row_blocks(bh * t), kThreads, 0, on.stream>>>(ds, att, bh * t, t,
                                                                                 1.0f / sqrtf(static_cast<float>(hs)));
  DTL_CUDA_CHECK_LAUNCH();
  // dq (T, hs) = dS (T, T) k (T, hs);  dk (T, hs) = dS^T q.
  cuda::gemm_strided_batched(false, false, t, hs, t, 1.0f, ds, t, t * t, k, hs, t * hs, 0.0f, dq, hs, t * hs, bh,
                             on.stream);
  cuda::gemm_strided_batched(true, false, t, hs, t, 1.0f, ds, t, t * t, q, hs, t * hs, 0.0f, dk, hs, t * hs, bh,
                             on.stream);
  scatter(on.stream, dqkv, 3 * c, 0, dq, d);
  scatter(on.stream, dqkv, 3 * c, c, dk, d);
  scatter(on.stream, dqkv, 3 * c, 2 * c, dv, d);
}

}  // namespace dtl::nn::detail
