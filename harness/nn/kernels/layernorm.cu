// LayerNorm on the GPU: the row statistics fused into the normalization.
//
// What this file teaches: a row operation on the GPU. One warp (32 threads)
// owns one row of C: it sums the row (mean), sums the squared deviations
// (variance), and writes the normalized row, all in one kernel, reading the
// row from memory once per pass (the second and third pass hit the L1/L2
// cache for the C of a small model). The lanes' partial sums (row_math.cuh)
// are combined by warp shuffles (warp.cuh). mean and rstd are kept for backward.
//
// Backward is two kernels: dx needs two more row sums (a warp per row again),
// while dweight and dbias are sums down the rows (a thread per column, rows in
// order: deterministic, and in the CPU layer's order).
//
// Left out: Welford's one-pass variance, and one block per row for very wide rows.
#include "harness/cuda/check.h"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"
#include "harness/nn/kernels/warp.cuh"

namespace dtl::nn::detail {

namespace {

using namespace kernels;

constexpr int kRowsPerBlock = kThreads / kWarp;

// y, mean, rstd (N, C), (N), (N) from x (N, C), w (C), b (C): a warp per row.
__global__ void layernorm_forward_kernel(float* y, float* mean, float* rstd, const float* x, const float* w,
                                         const float* b, std::int64_t n, std::int64_t c) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= n) return;  // the whole warp leaves together
  const float* xr = x + row * c;
  const float m = warp_sum(lane_sum(xr, c, lane, kWarp)) / static_cast<float>(c);
  const float r = layernorm_rstd(warp_sum(lane_sum_sq_dev(xr, c, m, lane, kWarp)), c);
  float* yr = y + row * c;
  for (std::int64_t j = lane; j < c; j += kWarp) yr[j] = layernorm_element(xr[j], m, r, w[j], b[j]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dx (N, C) from dy, x, w, mean, rstd: a warp per row.
__global__ void layernorm_backward_dx_kernel(float* dx, const float* dy, const float* x, const float* w,
                                             const float* mean, const float* rstd, std::int64_t n, std::int64_t c) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= n) return;
  const float* dyr = dy + row * c;
  const float* xr = x + row * c;
  LayerNormSums s = layernorm_lane_sums(dyr, xr, w, mean[row], rstd[row], c, lane, kWarp);
  const float dnorm_mean = warp_sum(s.dnorm) / static_cast<float>(c);
  const float dnorm_norm_mean = warp_sum(s.dnorm_norm) / static_cast<float>(c);
  for (std::int64_t j = lane; j < c; j += kWarp)
    dx[row * c + j] = layernorm_dx(dyr[j], xr[j], w[j], mean[row], rstd[row], dnorm_mean, dnorm_norm_mean);
}

// dw (C) += sum_n dy norm; db (C) += sum_n dy: a thread per column, rows in order.
__global__ void layernorm_backward_params_kernel(float* dw, float* db, const float* dy, const float* x,
                                                 const float* mean, const float* rstd, std::int64_t n,
                                                 std::int64_t c) {
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < c;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float acc_w = dw[j], acc_b = db[j];
    for (std::int64_t i = 0; i < n; ++i) {
      const float g = dy[i * c + j];
      acc_b += g;
      acc_w += (x[i * c + j] - mean[i]) * rstd[i] * g;
    }
    dw[j] = acc_w;
    db[j] = acc_b;
  }
}

int row_blocks(std::int64_t n) { return static_cast<int>((n + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void layernorm_forward(OnCuda on, float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, std::int64_t n, std::int64_t c) {
  if (n == 0) return;
  layernorm_forward_kernel<<<row_blocks(n), kThreads, 0, on.stream>>>(y, mean, rstd, x, w, b, n, c);
  DTL_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(OnCuda on, float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, std::int64_t n, std::int64_t c) {
  if (n == 0) return;
  layernorm_backward_dx_kernel<<<row_blocks(n), kThreads, 0, on.stream>>>(dx, dy, x, w, mean, rstd, n, c);
  DTL_CUDA_CHECK_LAUNCH();
  layernorm_backward_params_kernel<<<blocks_for(c), kThreads, 0, on.stream>>>(dw, db, dy, x, mean, rstd, n, c);
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace dtl::nn::detail
