// Softmax and cross-entropy on the GPU, fused: one read of the logits gives the
// probabilities (kept for backward), the row's loss and whether it was right.
//
// What this file teaches: a block-per-row reduction, and where a training step
// talks to the host. One block of 256 threads owns one row of V logits; each
// thread reduces its share (row_math.cuh), a warp combines 32 partials with
// shuffles (warp.cuh), and shared memory combines the warps. Three passes:
// the maximum (subtracted before exp, so exp never overflows), the sum of
// exponentials (in double, as the CPU layer), then the probabilities.
//
// The loss is a number the host wants. The rows' losses and hits go to a
// scratch buffer, one copy brings them back on the compute stream, and the
// host adds them in row order (the CPU layer's order) and checks the targets.
// That copy waits for the compute stream: the one wait of a training step,
// and it is in SoftmaxCrossEntropy::forward, where the API returns a double.
//
// Left out: online softmax (max and sum in one pass), and a loss that stays on
// the device (what a framework does to avoid the wait).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#include "harness/error.h"
#include "harness/nn/kernels/kernels.h"
#include "harness/nn/kernels/launch.cuh"
#include "harness/nn/kernels/warp.cuh"

namespace dtl::nn::detail {

namespace {

using namespace kernels;

constexpr int kWarps = kThreads / kWarp;

// The maximum (and its first index) over the block, in every thread.
__device__ MaxArg block_max_arg(MaxArg m) {
  __shared__ float values[kWarps];
  __shared__ long long indices[kWarps];
  m = warp_max_arg(m);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  if (threadIdx.x % kWarp == 0) {
    values[warp] = m.value;
    indices[warp] = m.index;
  }
  __syncthreads();
  MaxArg all{values[0], static_cast<std::int64_t>(indices[0])};
  for (int w = 1; w < kWarps; ++w) all = max_arg_combine(all, MaxArg{values[w], static_cast<std::int64_t>(indices[w])});
  __syncthreads();  // the shared arrays are reused by the next reduction
  return all;
}

// The sum over the block, in every thread.
__device__ double block_sum(double v) {
  __shared__ double partial[kWarps];
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = v;
  __syncthreads();
  double all = 0.0;
  for (int w = 0; w < kWarps; ++w) all += partial[w];
  __syncthreads();
  return all;
}

// One block per row of logits z (N, V): probs (N, V), row_loss (N), row_correct (N).
__global__ void softmax_xent_forward_kernel(float* probs, double* row_loss, std::int32_t* row_correct,
                                            const float* logits, const std::int32_t* targets, std::int64_t v) {
  const std::int64_t row = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x);
  const float* z = logits + row * v;
  const MaxArg max = block_max_arg(lane_max_arg(z, v, lane, kThreads));
  const double sum = block_sum(lane_sum_exp(z, v, max.value, lane, kThreads));
  float* p = probs + row * v;
  for (std::int64_t j = lane; j < v; j += kThreads) p[j] = softmax_prob(z[j], max.value, sum);
  if (lane == 0) {
    const std::int32_t y = targets[row];
    const bool valid = y >= 0 && y < v;
    row_loss[row] = valid ? xent_row_loss(sum, z[y], max.value) : NAN;
    row_correct[row] = valid ? (max.index == y ? 1 : 0) : -1;
  }
}

// dlogits (N, V) = (probs - onehot(targets)) * s, elementwise.
__global__ void softmax_xent_backward_kernel(float* d, const float* p, const std::int32_t* targets, float s,
                                             std::int64_t n, std::int64_t v) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * v;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    d[i] = xent_grad(p[i], i % v == targets[i / v], s);
  }
}

}  // namespace

double softmax_xent_forward(OnCuda on, float* probs, const float* logits, const std::int32_t* targets,
                            std::int64_t n, std::int64_t v, std::int64_t* correct) {
  *correct = 0;
  if (n == 0) return 0.0;
  // One scratch block: n doubles (the losses), then n int32 (the hits).
  const std::size_t loss_bytes = static_cast<std::size_t>(n) * sizeof(double);
  const std::size_t bytes = loss_bytes + static_cast<std::size_t>(n) * sizeof(std::int32_t);
  auto* base = static_cast<unsigned char*>(scratch(0, bytes));
  auto* row_loss = reinterpret_cast<double*>(base);
  auto* row_correct = reinterpret_cast<std::int32_t*>(base + loss_bytes);
  softmax_xent_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, on.stream>>>(probs, row_loss, row_correct,
                                                                                   logits, targets, v);
  DTL_CUDA_CHECK_LAUNCH();
  std::vector<unsigned char> host(bytes);
  dtl::cuda::copy(host.data(), base, bytes, on.stream);  // waits for the compute stream (see above)
  double loss = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    double li;
    std::int32_t ci;
    std::memcpy(&li, host.data() + static_cast<std::size_t>(i) * sizeof(double), sizeof li);
    std::memcpy(&ci, host.data() + loss_bytes + static_cast<std::size_t>(i) * sizeof(std::int32_t), sizeof ci);
    DTL_REQUIRE_ARG(ci >= 0, "SoftmaxCrossEntropy::forward", "targets",
                    "holds a class outside [0, " + std::to_string(v) + ") at index " + std::to_string(i));
    loss += li;
    *correct += ci;
  }
  return loss;
}

void softmax_xent_backward(OnCuda on, float* dlogits, const float* probs, const std::int32_t* targets, double scale,
                           std::int64_t n, std::int64_t v) {
  if (n * v == 0) return;
  const auto s = static_cast<float>(scale / static_cast<double>(n));
  softmax_xent_backward_kernel<<<blocks_for(n * v), kThreads, 0, on.stream>>>(dlogits, probs, targets, s, n, v);
  DTL_CUDA_CHECK_LAUNCH();
}

}  // namespace dtl::nn::detail
